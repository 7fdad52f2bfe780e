#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Runs SQL on an index file behind the daemon's back (the daemon is stopped), as a torn write,
/// a bad disk or a bug would change it.
func tamper(_ path: String, _ sql: String) throws {
    var db: OpaquePointer?
    guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK, let db else {
        throw HarnessError("cannot open \(path)")
    }
    defer { sqlite3_close_v2(db) }
    var message: UnsafeMutablePointer<CChar>?
    guard sqlite3_exec(db, sql, nil, nil, &message) == SQLITE_OK else {
        defer { sqlite3_free(message) }
        throw HarnessError("\(sql): \(message.map { String(cString: $0) } ?? "error")")
    }
}

/// Idle maintenance against the real daemon: `simulate idle` does each of its jobs for real, and
/// the idle trigger runs it by itself once the (fake) machine is quiet, at most once per interval.
@Suite("Idle maintenance", .onOwnThreads)
struct MaintenanceIntegrationTests {
    static func indexFile(_ daemon: DaemonProcess, _ bundle: String) -> String {
        daemon.stateDir + "/indexes/\(bundle)/_default.sqlite"
    }

    @Test("simulate idle purges expired items, asks the extension to refresh items expiring within a day, and replaces an item whose checksum failed")
    func simulateIdle() async throws {
        let unit = TestUnit("org.example.test.maint", bundle: "org.example.maint")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        // A stored item changed behind the daemon's back (not a full-text column: only its checksum tells).
        try await blocking { bench.daemon.stop() }
        try tamper(Self.indexFile(bench.daemon, unit.bundle), #"UPDATE items SET attrs = '{"tampered":true}' WHERE uid = 'item-7'"#)
        try await blocking { try bench.daemon.start() }

        let index = bench.daemon.index(unit.bundle)
        var soon = item("expiring-soon", title: "expires within the hour")
        soon.expirationDate = Date().addingTimeInterval(3600)
        var gone = item("expired", title: "expired a minute ago")
        gone.expirationDate = Date().addingTimeInterval(-60)
        try await index.indexSearchableItems([soon, gone])

        let mark = bench.mark
        let summary = try await bench.admin("admin.simulate", ["event": "idle"])
        #expect(summary["trigger"]?.stringValue == "simulate")
        #expect(summary["purged"]?.intValue == 1, "\(summary)")
        #expect(summary["refreshRequested"]?.intValue == 1, "\(summary)")
        #expect(summary["checksumFailures"]?.intValue == 1, "\(summary)")
        #expect(summary["corruptionRequested"]?.intValue == 1, "\(summary)")
        #expect(summary["rowsScrubbed"]?.intValue ?? 0 >= 100, "\(summary)")
        #expect(summary["damaged"]?.intValue == 0 && summary["ftsRebuilt"]?.intValue == 0, "\(summary)")
        #expect(summary["optimized"]?.intValue == 1 && summary["checkpointed"]?.intValue == 1, "\(summary)")
        #expect(!bench.lines("reindex request queued", "reason=idle", after: mark).isEmpty)
        #expect(!bench.lines("reindex request queued", "reason=corruption", after: mark).isEmpty)

        // Both are background reindex-identifiers requests; once acknowledged, item-7 is back, whole.
        let control = bench.control(unit.label)
        try await bench.until("the refresh and the re-request reach the extension") {
            let asked = control.received.filter { $0.kind == "identifiers" }.flatMap(\.identifiers)
            return asked.contains("expiring-soon") && asked.contains("item-7")
        }
        try await bench.until("the journal is empty") { try await bench.requests(bundle: unit.bundle).isEmpty }
        let back = try await SearchQuery(queryString: #"title == "Test item item-7""#, index: index).allItems()
        #expect(back.count == 1)
        let check = try await bench.cli(["check", unit.bundle])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")

        // The human form of the summary, and the status lines that report the run.
        let again = try await bench.cli(["simulate", "idle", unit.bundle])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stdout.contains("maintenance (simulate): 1 indexes"), "\(again.stdout)")
        #expect(again.stdout.contains("purged 0 expired items") && again.stdout.contains("0 checksum failures"), "\(again.stdout)")
        let status = try await bench.admin("admin.status")
        #expect(status["maintenance"]?["lastSummary"]?["checksumFailures"]?.intValue == 1, "a run over one bundle is not the periodic one")
        let statusText = try await bench.cli(["status"])
        #expect(statusText.stdout.contains("maintenance last "), "\(statusText.stdout)")
        let unknown = try await bench.cli(["simulate", "idle", "org.example.nothing"])
        #expect(unknown.status != 0 && unknown.stderr.contains("has no index"), "\(unknown.stderr)")
    }

    @Test("simulate idle rebuilds a damaged full-text index locally, and the items are found again")
    func fullTextRebuilt() async throws {
        let daemon = try await blocking { try DaemonProcess() }
        let bundle = "org.example.maint.fts"
        let index = daemon.index(bundle)
        try await index.indexSearchableItems((0..<60).map { item("n\($0)", title: "note \($0) about gardening") })
        try await blocking { daemon.stop() }
        try tamper(Self.indexFile(daemon, bundle), "DELETE FROM fts_data WHERE id > 10")
        try await blocking { try daemon.start() }

        let connection = daemon.admin()
        let summary = try await connection.call("admin.simulate", ["event": "idle", "bundle": .string(bundle)])
        await connection.close()
        #expect(summary["ftsRebuilt"]?.intValue == 1, "\(summary)")
        #expect(summary["damaged"]?.intValue == 0 && summary["checksumFailures"]?.intValue == 0, "\(summary)")
        let found = try await UserQuery(userQueryString: "gardening", index: index).run()
        #expect(Set((found.items + found.rankedItems).map(\.uniqueIdentifier)).count == 60, "\(found.items.count)")
    }

    @Test("the idle trigger runs maintenance by itself once the machine is quiet, and not again before the interval")
    func idleTrigger() async throws {
        let proc = TempDir("slproc")
        // Busy (above the cpu throttle mark) when maintenance first falls due.
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 30)
        let bench = try await ExtensionBench.start([], arguments: ["--proc-root", proc.path, "--load-interval", "0.1",
            "--resume-after", "0.3", "--idle-after", "0.5", "--maintenance-interval", "2"])
        try await bench.daemon.index("org.example.maint.idle").indexSearchableItems([item("a", title: "one item")])
        // The load is read only once maintenance is due: the throttle line proves it is watched.
        try await bench.waitForLog("load throttle changed", "to=throttled")
        #expect(bench.lines("maintenance started").isEmpty, "never while the machine is busy")
        // Taken before the write: the daemon may read the new file before the write returns.
        let quiet = Date()
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 0)
        let first = try await bench.waitForLog("maintenance finished", "trigger=idle")[0]
        let firstStart = try #require(bench.lines("maintenance started", "trigger=idle").first.flatMap(ExtensionBench.time))
        // Not to the millisecond: the daemon stamps a sample with the time its pass began, which
        // under load may be a little before it read the file.
        #expect(firstStart.timeIntervalSince(quiet) >= 0.4, "idle for --idle-after (0.5 s) first")
        #expect(first.contains("indexes=1"), "\(first)")
        let second = try await bench.waitForLog("maintenance started", "trigger=idle", count: 2)[1]
        let gap = try #require(ExtensionBench.time(of: second)).timeIntervalSince(try #require(ExtensionBench.time(of: first)))
        #expect(gap >= 1.99, "at most once per --maintenance-interval (2 s); the gap was \(gap) s")
        let status = try await bench.admin("admin.status")
        #expect(status["maintenance"]?["lastSummary"]?["trigger"]?.stringValue == "idle")
    }
}
