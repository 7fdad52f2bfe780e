#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Regressions found in review of the extension host and scheduler, each with the real daemon and
/// the fake extension.
@Suite("Index extension regressions", .onOwnThreads)
struct ExtensionRegressionTests {
    @Test("a handler that fails inside a batch does not leave it open: the retry's donations commit")
    func abandonedBatchIsDiscarded() async throws {
        let unit = TestUnit("org.example.test.batch", bundle: "org.example.batch")
        let bench = try await ExtensionBench.start([unit], arguments: ["--backoff", "0.2"])
        try await bench.waitForAcknowledgement(unit.label)
        // Empty the index first, so that only the retry's donations can fill it again.
        let index = bench.daemon.index(unit.bundle)
        try await index.deleteAllSearchableItems()
        #expect(try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems().isEmpty)
        let control = bench.control(unit.label)
        try control.setMode("batch-nack")
        let mark = bench.mark

        let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        #expect(r.status == 1, "\(r.stderr)")
        try await bench.waitForLog("extension left a batch open; discarded it", "label=\(unit.label)", after: mark)
        try control.setMode("ok")
        try await bench.waitForAcknowledgement(unit.label, after: mark)

        let items = try await SearchQuery(queryString: #"uniqueIdentifier == "*""#, index: index).allItems()
        #expect(items.count == 100)
        #expect(!items.contains { $0.uniqueIdentifier == "in-abandoned-batch" })
    }

    @Test("concurrent calls to an idle extension launch it once")
    func oneLaunchForConcurrentCalls() async throws {
        var unit = TestUnit("org.example.test.once", bundle: "org.example.once")
        unit.timeOut = 0.5
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        try await bench.waitForLog("extension exited", "label=\(unit.label)")
        let mark = bench.mark

        let socket = bench.daemon.socket
        let bundle = unit.bundle
        try await withThrowingTaskGroup(of: Data.self) { group in
            for n in 0..<6 {
                group.addTask {
                    let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
                    defer { Task { await index.close() } }
                    return try await index.fetchData(forItemIdentifier: "item-\(n)", contentType: "public.plain-text")
                }
            }
            var answers = 0
            for try await data in group {
                #expect(String(decoding: data, as: UTF8.self).hasPrefix("data of item-"))
                answers += 1
            }
            #expect(answers == 6)
        }
        // Launched once for the calls that overlapped. With a 0.5 s idle timeout a slow machine
        // may let the extension exit between two calls, and a later call then rightly launches it
        // again: what must never happen is a second launch while the first is still up.
        let events = bench.lines(["label=\(unit.label)"], after: mark)
            .filter { $0.contains("extension launched") || $0.contains("extension exited") }
        let launches = events.filter { $0.contains("extension launched") }.count
        #expect(launches >= 1)
        for (a, b) in zip(events, events.dropFirst()) {
            #expect(!(a.contains("extension launched") && b.contains("extension launched")),
                    "launched again while running: \(events)")
        }
    }

    @Test("identifiers that all crash the extension are not each reported as poison: the request fails after its attempts")
    func everythingCrashingFails() async throws {
        let unit = TestUnit("org.example.test.allcrash", bundle: "org.example.allcrash")
        let bench = try await ExtensionBench.start([unit], arguments: ["--backoff", "0.05", "--max-request-attempts", "3"])
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode("crash")
        let mark = bench.mark

        let r = try await bench.cli(["reindex", unit.label, "--identifiers", "a", "b", "c", "d", "--no-wait"])
        #expect(r.status == 0, "\(r.stderr)")
        try await bench.waitForLog("reindex request failed for good", "label=\(unit.label)", after: mark, timeout: 120)
        let journal = try await bench.admin(Method.adminRequests)
        #expect(journal["poisoned"]?.arrayValue?.isEmpty == true, "\(journal)")
        #expect(journal["requests"]?.arrayValue?.first?["state"]?.stringValue == "failed")
    }
}
