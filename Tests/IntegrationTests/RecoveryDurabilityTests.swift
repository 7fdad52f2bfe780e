#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightStore
import Testing
import TestThreads

/// Corruption recovery across kills (issue 13, items 8 and 12): a salvage is journaled before the
/// damaged file moves and resumed at the next start, its quarantined file is kept until its rows
/// are restored, and quarantined files have short names whatever the bundle.
@Suite("Recovery durability", .onOwnThreads, .serialized)
struct RecoveryDurabilityTests {
    static func donate(_ daemon: DaemonProcess, _ bundle: String, count: Int) throws {
        let c = try RawClient(path: daemon.socket)
        try c.initialize(bundle: bundle)
        for start in stride(from: 0, to: count, by: 250) {
            let items = JSONValue.array((start..<min(start + 250, count)).map { n in
                ["uniqueIdentifier": .string("\(bundle.suffix(8))-\(n)"),
                 "attributeSet": ["title": .string("salvaged item \(n)"), "textContent": .string(String(repeating: "filler text \(n) ", count: 8))]]
            })
            #expect(try c.call(1, "index.items", ["items": items])?["result"]?["indexed"] == .number(Double(min(250, count - start))))
        }
    }

    /// Every identifier of the bundle, as an admin sees it, and whether the answer is marked incomplete.
    static func identifiers(_ daemon: DaemonProcess, _ bundle: String) throws -> (ids: Set<String>, incomplete: Bool) {
        let admin = try RawClient(path: daemon.socket)
        admin.socket.setReceiveTimeout(seconds: 30)
        #expect(try admin.call(1, "initialize", ["protocolVersion": 1, "role": "admin"])?["result"] != nil)
        let answer = try admin.call(2, "query.search", ["bundle": .string(bundle), "query": #"uniqueIdentifier == "*""#, "limit": 10_000,
            "fetchAttributes": []])
        let ids = (answer?["result"]?["items"]?.arrayValue ?? []).compactMap { $0["uniqueIdentifier"]?.stringValue }
        return (Set(ids), answer?["result"]?["incomplete"]?.boolValue ?? false)
    }

    static func admin(_ daemon: DaemonProcess, _ method: String, _ params: JSONValue) throws -> JSONValue? {
        let admin = try RawClient(path: daemon.socket)
        admin.socket.setReceiveTimeout(seconds: 30)
        #expect(try admin.call(1, "initialize", ["protocolVersion": 1, "role": "admin"])?["result"] != nil)
        return try admin.call(2, method, params)
    }

    static func indexStatus(_ daemon: DaemonProcess, _ bundle: String) throws -> JSONValue? {
        try admin(daemon, "admin.status", ["bundle": .string(bundle)])?["result"]?["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
    }

    static func quarantined(_ daemon: DaemonProcess) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: daemon.stateDir + "/quarantine")) ?? []).filter { $0.hasSuffix(".sqlite") }.sorted()
    }

    static func expected(_ bundle: String, _ count: Int) -> Set<String> { Set((0..<count).map { "\(bundle.suffix(8))-\($0)" }) }

    @Test("a daemon killed with SIGKILL in the middle of a salvage resumes it at start: every acknowledged item is back")
    func killedMidSalvage() async throws {
        let dir = TempDir("slk")
        let bundle = "org.example.killsalvage"
        // The seam pauses every salvage once its first window of rows (rowids 0..<256) is committed.
        let paused = try await DaemonProcess(arguments: ["--test-pause-salvage-after", "100"], dir: dir)
        try Self.donate(paused, bundle, count: 600)
        let started = try #require(try Self.admin(paused, "admin.simulate", ["event": "corruption", "bundle": .string(bundle)]))
        let file = try #require(started["result"]?["indexes"]?.arrayValue?.first?["quarantined"]?.stringValue, "\(started)")
        let line = try await paused.waitForLog("salvage paused (test seam)")
        let copied = Int(ExtensionBench.field("copied", in: line) ?? "") ?? -1
        #expect(copied >= 100 && copied < 600, "\(line)")
        let during = try Self.identifiers(paused, bundle)
        #expect(during.incomplete && during.ids.count == copied, "partly salvaged: \(during.ids.count)")
        #expect(try Self.indexStatus(paused, bundle)?["state"] == "recovering")
        await paused.stop(signal: SIGKILL)

        let restarted = try await DaemonProcess(dir: dir)
        let resumed = try await restarted.waitForLog("index recovery resumed")
        #expect(resumed.contains("bundle=\(bundle)") && resumed.contains("method=salvage") && resumed.contains("quarantined=\(file)"), "\(resumed)")
        try await restarted.waitForLog("index recovered")
        let after = try Self.identifiers(restarted, bundle)
        #expect(after.ids == Self.expected(bundle, 600), "missing \(Self.expected(bundle, 600).subtracting(after.ids).count) acknowledged items")
        #expect(!after.incomplete)
        let status = try #require(try Self.indexStatus(restarted, bundle))
        #expect(status["state"] == "ready" && status["items"] == 600, "\(status)")
        let check = try Self.admin(restarted, "admin.check", ["bundle": .string(bundle)])
        #expect(check?["result"]?["ok"] == true)
        let quarantine = try Self.admin(restarted, "admin.status", [:])?["result"]?["quarantine"]?.arrayValue ?? []
        #expect(quarantine.first?["file"]?.stringValue == file && quarantine.first?["pinned"] == false, "\(quarantine)")
    }

    @Test("a quarantined file whose rows were not restored survives rotation past --quarantine-limit; once restored it rotates")
    func pinnedSurvivesRotation() async throws {
        let dir = TempDir("slp")
        let first = "org.example.pinned", others = ["org.example.later1", "org.example.later2"]
        let paused = try await DaemonProcess(arguments: ["--test-pause-salvage-after", "100", "--quarantine-limit", "1"], dir: dir)
        try Self.donate(paused, first, count: 600)
        for b in others { try Self.donate(paused, b, count: 3) }
        let pinned = try #require(try Self.admin(paused, "admin.simulate", ["event": "corruption", "bundle": .string(first)])?["result"]?["indexes"]?
            .arrayValue?.first?["quarantined"]?.stringValue)
        try await paused.waitForLog("salvage paused (test seam)")
        // Two more quarantines with a limit of one: the first file's rows are not restored, so it stays.
        for b in others {
            #expect(try Self.admin(paused, "admin.simulate", ["event": "corruption", "bundle": .string(b)])?["result"] != nil)
        }
        let files = Self.quarantined(paused)
        #expect(files.contains(pinned) && files.count == 3, "\(files)")
        let shown = try Self.admin(paused, "admin.status", [:])?["result"]?["quarantine"]?.arrayValue ?? []
        #expect(shown.filter { $0["pinned"] == true }.count == 3, "every salvage is still to do: \(shown)")
        #expect(shown.contains { $0["file"]?.stringValue == pinned && $0["bundle"]?.stringValue == first }, "\(shown)")
        await paused.stop(signal: SIGKILL)

        let restarted = try await DaemonProcess(arguments: ["--quarantine-limit", "1"], dir: dir)
        for b in [first] + others {
            try await restarted.waitForLog("index salvaged bundle=\(b) ")
        }
        #expect(try Self.identifiers(restarted, first).ids == Self.expected(first, 600))
        for b in others { #expect(try Self.identifiers(restarted, b).ids == Self.expected(b, 3)) }
        // Restored: the files rotate as usual, down to the limit.
        #expect(Self.quarantined(restarted).count == 1, "\(Self.quarantined(restarted))")
        #expect(!Self.quarantined(restarted).contains(pinned))
    }

    @Test("a bundle with the longest valid identifier (255 bytes) is quarantined, recovered, and written again")
    func longestBundle() async throws {
        let bundle = "com.example." + String(repeating: "a", count: 255 - "com.example.".utf8.count)
        #expect(bundle.utf8.count == 255)
        let daemon = try await DaemonProcess()
        try Self.donate(daemon, bundle, count: 40)
        let started = try #require(try Self.admin(daemon, "admin.simulate", ["event": "corruption", "bundle": .string(bundle)]))
        let file = try #require(started["result"]?["indexes"]?.arrayValue?.first?["quarantined"]?.stringValue, "\(started)")
        #expect(file.utf8.count < 64, "\(file)")
        try await daemon.waitForLog("index recovered")
        #expect(try Self.identifiers(daemon, bundle).ids == Self.expected(bundle, 40))
        // The sidecar and status say whose file it is.
        let sidecar = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: daemon.stateDir + "/quarantine/" + file + ".json"))))
        #expect(sidecar["bundle"]?.stringValue == bundle && sidecar["index"] == "")
        let shown = try Self.admin(daemon, "admin.status", [:])?["result"]?["quarantine"]?.arrayValue ?? []
        #expect(shown.first?["bundle"]?.stringValue == bundle, "\(shown)")
        let cli = try await runCLI(["status"], socket: daemon.socket)
        #expect(cli.stdout.contains(file) && cli.stdout.contains(String(bundle.prefix(40))), "\(cli.stdout)")
        // Writes work at once (they failed with indexUnavailable once the quarantine could not be named).
        let c = try RawClient(path: daemon.socket)
        try c.initialize(bundle: bundle)
        #expect(try c.call(1, "index.items", ["items": [["uniqueIdentifier": "after-recovery"]]])?["result"] != nil)

        // Damaged for real, while stopped: set aside on open, and a fresh index answers writes.
        await daemon.stop()
        let path = daemon.stateDir + "/indexes/\(bundle)/_default.sqlite"
        let db = try Database(path: path)
        try db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.write(contentsOf: Data("this is no longer a database".utf8))
        try handle.close()
        try await daemon.start()
        let again = try RawClient(path: daemon.socket)
        try again.initialize(bundle: bundle)
        #expect(try again.call(1, "index.items", ["items": [["uniqueIdentifier": "after-damage"]]])?["result"] != nil)
        try await daemon.waitForLog("index damaged on open")
        #expect(Self.quarantined(daemon).count == 2)
        try HostileClientTests.expectHealthy(daemon)
    }
}
