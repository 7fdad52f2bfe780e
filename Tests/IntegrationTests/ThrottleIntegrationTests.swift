#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Load throttling against the real daemon, with a fake `--proc-root` whose pressure files the
/// test rewrites: background work waits while the machine is busy, nothing else does.
@Suite("Load throttling", .onOwnThreads)
struct ThrottleIntegrationTests {
    static func writePSI(_ root: String, cpu: Double) throws {
        try FileManager.default.createDirectory(atPath: root + "/pressure", withIntermediateDirectories: true)
        for (name, v) in [("cpu", cpu), ("io", 0.0), ("memory", 0.0)] {
            try "some avg10=\(v) avg60=0.00 avg300=0.00 total=1\n".write(toFile: root + "/pressure/" + name, atomically: true, encoding: .utf8)
        }
    }

    @Test("paused: a background reindex waits while manual requests, donations and queries go through; it is sent once the load falls")
    func pauseAndResume() async throws {
        let proc = TempDir("slproc")
        try Self.writePSI(proc.path, cpu: 0)
        let unit = TestUnit("org.example.test.throttle", bundle: "org.example.throttle")
        let bench = try await ExtensionBench.start([unit],
            arguments: ["--proc-root", proc.path, "--load-interval", "0.2", "--resume-after", "0.5"])
        try await bench.waitForAcknowledgement(unit.label)
        // The load was last sampled while the initial reindex ran: past one interval, the next
        // background request is certainly preceded by a fresh sample.
        let acknowledged = Date()
        try await bench.until("one load interval") { Date().timeIntervalSince(acknowledged) > 0.5 }

        try Self.writePSI(proc.path, cpu: 70)
        let control = bench.control(unit.label)
        let queued = try await bench.cli(["reindex", unit.bundle, "--identifiers", "bg-1", "--background", "--no-wait"])
        #expect(queued.status == 0, "\(queued.stderr)")
        let paused = try await bench.waitForLog("load throttle changed", "to=paused", "cpu=70.0")[0]
        #expect(paused.contains("from=normal"), "\(paused)")
        try await bench.until("didThrottle") { control.received.contains { $0.kind == "didThrottle" } }

        // Never held: a manual request, an app's donation and a query.
        let before = bench.mark
        let manual = try await bench.cli(["reindex", unit.bundle, "--identifiers", "manual-1"])
        #expect(manual.status == 0, "\(manual.stderr)")
        let index = bench.daemon.index(unit.bundle)
        try await index.indexSearchableItems([item("app-1", title: "donated while paused")])
        let found = try await SearchQuery(queryString: #"title == "donated while paused""#, index: index).allItems()
        #expect(found.count == 1)
        #expect(control.received.contains { $0.identifiers == ["manual-1"] })
        #expect(!control.received.contains { $0.identifiers.contains("bg-1") })
        let status = try await bench.admin("admin.status")
        #expect(status["throttle"]?["state"]?.stringValue == "paused")
        #expect(status["throttle"]?["source"]?.stringValue == "psi")
        #expect(status["throttle"]?["cpu"]?.doubleValue == 70)

        try Self.writePSI(proc.path, cpu: 0)
        try await bench.waitForLog("load throttle changed", "from=paused", "to=throttled", after: before)
        try await bench.waitForLog("reindex request acknowledged", "label=\(unit.label) ", count: 2, after: before)
        #expect(control.received.contains { $0.identifiers == ["bg-1"] })
        try await bench.waitForLog("load throttle changed", "from=throttled", "to=normal", after: before)
        try await bench.until("didFinishThrottle") { control.received.contains { $0.kind == "didFinishThrottle" } }
    }

    @Test("throttled: the index calls of an extension serving a background request are paced; manual requests and apps are not")
    func donationPacing() async throws {
        let proc = TempDir("slproc")
        try Self.writePSI(proc.path, cpu: 30)
        let unit = TestUnit("org.example.test.pacing", bundle: "org.example.pacing")
        let bench = try await ExtensionBench.start([unit], arguments: ["--proc-root", proc.path, "--load-interval", "0.2"])
        // The initial reindex-all is background work, sent while throttled (one at a time).
        try await bench.waitForAcknowledgement(unit.label)
        #expect(!bench.lines("load throttle changed", "to=throttled").isEmpty)
        let paced = try #require(try await bench.extensionStatus(unit.label)?["pacedCalls"]?.intValue)
        #expect(paced >= 2, "deleteAll and one batch of 100 items, each paced")

        let mark = bench.mark
        let manual = try await bench.cli(["reindex", unit.bundle, "--identifiers", "manual-1"])
        #expect(manual.status == 0, "\(manual.stderr)")
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        try await bench.daemon.index(unit.bundle).indexSearchableItems([item("app-1", title: "an app donates while throttled")])
        #expect(try await bench.extensionStatus(unit.label)?["pacedCalls"]?.intValue == paced)
    }
}
