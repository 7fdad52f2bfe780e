#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightStore
import Testing
import TestThreads

/// Queries from their own task while an index migrates: every answer must come without error and
/// complete (the old index answers until the swap, the new one after it).
final class QueryLoad: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    private(set) var queries = 0
    private(set) var errors: [String] = []
    private(set) var incomplete = 0
    private(set) var maxLatency: TimeInterval = 0
    private var task: Task<Void, Never>?

    /// Each round asks for `identifier` (must be found) and a user query (must answer `expected` items).
    init(socket: String, bundle: String, identifier: String, text: String, expected: Int) {
        task = Task.detached { [self] in
            let connection = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: socket)
            while !lock.withLock({ stopped }) {
                let started = Date()
                do {
                    let found = try await connection.call("query.search", ["query": .string("uniqueIdentifier == \"\(identifier)\""), "limit": 5])
                    let user = try await connection.call("query.user", ["text": .string(text), "context": ["maxResultCount": .number(Double(expected))]])
                    let ok = found["items"]?.arrayValue?.count == 1 && user["items"]?.arrayValue?.count == expected
                        && found["incomplete"] == nil && user["incomplete"] == nil
                    let elapsed = Date().timeIntervalSince(started)
                    lock.withLock {
                        queries += 2
                        if !ok { incomplete += 1 }
                        maxLatency = max(maxLatency, elapsed)
                    }
                } catch {
                    lock.withLock {
                        queries += 2
                        errors.append("\(error)")
                    }
                }
            }
            await connection.close()
        }
    }

    func stop() async {
        lock.withLock { stopped = true }
        await task?.value
    }

    /// Queries answered or failed so far, read under the lock while the load runs.
    var answered: Int { lock.withLock { queries } }

    var summary: String { lock.withLock { "queries=\(queries) errors=\(errors.count) incomplete=\(incomplete) max_latency_ms=\(Int(maxLatency * 1000)) \(errors.prefix(3))" } }
}

/// Migration (DESIGN §6 Triggers) against the real daemon: a file of the older store format, an
/// IndexVersion change and `simulate migration`; with an extension (reindex-all into a shadow,
/// swap on acknowledgement) and without one (local copy); queries never fail meanwhile; a
/// SIGKILL in the middle resumes.
@Suite("Migration", .onOwnThreads)
struct MigrationTests {
    static func status(_ bench: ExtensionBench, _ bundle: String) async throws -> JSONValue? {
        let s = try await bench.admin(Method.adminStatus, ["bundle": .string(bundle)])
        return s["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
    }

    static func status(_ daemon: DaemonProcess, _ bundle: String) async throws -> JSONValue? {
        let admin = daemon.admin()
        let s = try await admin.call(Method.adminStatus, ["bundle": .string(bundle)])
        await admin.close()
        return s["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
    }

    static func items(_ n: Int, prefix: String = "doc") -> [SearchableItem] {
        (0..<n).map { i in
            var a = AttributeSet(contentType: "public.plain-text")
            a.title = "Document \(i)"
            a.textContent = "stored document number \(i) about parsing"
            return SearchableItem(uniqueIdentifier: "\(prefix)-\(i)", domainIdentifier: "docs", attributeSet: a)
        }
    }

    @Test("an index file of store format 1 is relabelled, not rebuilt: its tables are the current format's")
    func format1Relabelled() async throws {
        let bundle = "org.example.migrate.relabel"
        let daemon = try await blocking { try DaemonProcess() }
        let index = daemon.index(bundle)
        try await index.indexSearchableItems(Self.items(500))
        await index.close()
        let file = daemon.stateDir + "/indexes/\(bundle)/_default.sqlite"
        try await blocking { daemon.stop(signal: SIGTERM) }
        try rewriteFormat(file, to: 1)
        try await blocking { try daemon.start() }
        let s = try #require(try await Self.status(daemon, bundle))
        #expect(s["formatVersion"]?.intValue == Schema.formatVersion)
        #expect(s["items"]?.intValue == 500)
        #expect(s["state"]?.stringValue == "ready")
        #expect(!daemon.log.contains { $0.contains("migration started") }, "\(daemon.log.suffix(20))")
        let found = try await SearchQuery(queryString: #"title == "document 4*"c"#, index: daemon.index(bundle)).allItems()
        #expect(found.count == 111)
    }

    @Test("an index file of store format 2 is migrated locally at start; it answers and becomes the current format")
    func olderFormatMigratedLocally() async throws {
        let format = 2
        let bundle = "org.example.migrate.local"
        let daemon = try await blocking { try DaemonProcess() }
        let index = daemon.index(bundle)
        for chunk in stride(from: 0, to: 3000, by: 1000) { try await index.indexSearchableItems(Array(Self.items(3000)[chunk..<chunk + 1000])) }
        await index.close()
        let file = daemon.stateDir + "/indexes/\(bundle)/_default.sqlite"
        try await blocking { daemon.stop(signal: SIGTERM) }
        try rewriteFormat(file, to: format)
        try await blocking { try daemon.start() }
        _ = try await blocking { try daemon.waitForLog("migration finished", timeout: 60) }
        let s = try #require(try await Self.status(daemon, bundle))
        #expect(s["formatVersion"]?.intValue == Schema.formatVersion)
        #expect(s["items"]?.intValue == 3000)
        #expect(s["state"]?.stringValue == "ready")
        #expect(daemon.log.contains { $0.contains("migration started") && $0.contains("path=local") && $0.contains("store format \(format) -> \(Schema.formatVersion)") })
        // The prefix term goes through the new full-text index.
        let app = SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: daemon.socket)
        let found = try await app.call("query.user", ["text": "pars", "context": ["maxResultCount": 5000]])
        await app.close()
        #expect(found["items"]?.arrayValue?.count == 3000)
    }

    @Test("an index file of store format 2 served by an extension is rebuilt by its reindex-all at start, answering completely until the swap")
    func olderFormatMigratedByExtension() async throws {
        let (bench, unit) = try await Self.floodBench("org.example.test.format", "org.example.migrate.format")
        let file = bench.daemon.stateDir + "/indexes/\(unit.bundle)/_default.sqlite"
        try await blocking { bench.daemon.stop(signal: SIGTERM) }
        try rewriteFormat(file, to: 2)
        let mark = bench.mark
        try await blocking { try bench.daemon.start() }
        let started = try await bench.waitForLog("migration started", "bundle=\(unit.bundle)", after: mark)
        #expect(started[0].contains("path=extension") && started[0].contains("store format 2 -> \(Schema.formatVersion)"), "\(started)")
        // The old file answers every query while the extension holds halfway through its reindex-all.
        let load = QueryLoad(socket: bench.socket, bundle: unit.bundle, identifier: "item-2042", text: "numbered 204", expected: 10)
        try await Self.waitForHold(bench, unit.label)
        let during = try #require(try await Self.status(bench, unit.bundle))
        #expect(during["state"] == "migrating", "\(during)")
        #expect(during["formatVersion"]?.intValue == 2, "\(during)")
        #expect(during["items"]?.intValue == 4000, "\(during)")
        Self.release(bench, unit.label)
        try await bench.waitForLog("migration finished", "bundle=\(unit.bundle)", after: mark, timeout: 60)
        await load.stop()
        #expect(load.errors.isEmpty, "\(load.summary)")
        #expect(load.incomplete == 0, "\(load.summary)")
        #expect(load.queries > 0)
        print("format 2 -> \(Schema.formatVersion) by the extension (4 000 items): \(load.summary)")
        let after = try #require(try await Self.status(bench, unit.bundle))
        #expect(after["state"] == "ready")
        #expect(after["formatVersion"]?.intValue == Schema.formatVersion)
        #expect(after["items"]?.intValue == 4000, "\(after)")
        let db = try Database(path: file, readOnly: true)
        let sql = try db.rows("SELECT sql FROM sqlite_schema WHERE name = 'fts'").first?.string(0) ?? ""
        db.close()
        #expect(sql.contains("fts5(") && !sql.contains("prefix="), "the full-text table of the current format: \(sql)")
    }

    @Test("a local migration keeps queries answering (0 errors) and keeps donations made meanwhile")
    func localMigrationUnderLoad() async throws {
        let bundle = "org.example.migrate.load"
        let daemon = try await blocking { try DaemonProcess() }
        let index = daemon.index(bundle)
        let all = Self.items(6000)
        for chunk in stride(from: 0, to: all.count, by: 1000) { try await index.indexSearchableItems(Array(all[chunk..<chunk + 1000])) }
        let load = QueryLoad(socket: daemon.socket, bundle: bundle, identifier: "doc-4242", text: "document 42", expected: 10)
        let admin = daemon.admin()
        let answer = try await admin.call(Method.adminSimulate, ["event": "migration", "bundle": .string(bundle)])
        await admin.close()
        #expect(answer["started"]?.arrayValue?.first?["path"] == "local")
        // Donations while it runs: before, during and after the copy; all must be there after the swap.
        var extra = 0
        while !daemon.log.contains(where: { $0.contains("migration finished") }) && extra < 200 {
            try await index.indexSearchableItems(Self.items(1, prefix: "late-\(extra)"))
            extra += 1
        }
        _ = try await blocking { try daemon.waitForLog("migration finished", timeout: 60) }
        try await index.indexSearchableItems(Self.items(1, prefix: "after"))
        await load.stop()
        await index.close()
        #expect(load.errors.isEmpty, "\(load.summary)")
        #expect(load.incomplete == 0, "\(load.summary)")
        #expect(load.queries > 0)
        let pause = daemon.log.first { $0.contains("index file replaced") }.flatMap { ExtensionBench.field("pause_ms", in: $0) } ?? "?"
        print("local migration of 6 000 items: \(load.summary) donations_during=\(extra) swap_pause_ms=\(pause)")
        let s = try #require(try await Self.status(daemon, bundle))
        #expect(s["items"]?.intValue == 6000 + extra + 1, "\(s)")
        let late = try await SearchQuery(queryString: #"uniqueIdentifier == "late-*""#, index: daemon.index(bundle)).allItems()
        #expect(late.count == extra)
    }

    /// A unit whose reindex-all donates 4 000 items: the initial one at once, the next one (the
    /// migration's) in `hold` mode, holding halfway (at 2 000) until the test creates `release`.
    static func floodBench(_ label: String, _ bundle: String, arguments: [String] = []) async throws -> (ExtensionBench, TestUnit) {
        var unit = TestUnit(label, bundle: bundle)
        unit.environment["TEST_EXTENSION_ITEMS"] = "4000"
        let bench = try await ExtensionBench.start([unit], arguments: arguments)
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode("hold")
        return (bench, unit)
    }

    static func waitForHold(_ bench: ExtensionBench, _ label: String) async throws {
        try await bench.until("the extension holding halfway through the migration's reindex-all", timeout: 60) {
            bench.control(label).received.contains { $0.kind == "flood-holding" }
        }
    }

    static func release(_ bench: ExtensionBench, _ label: String) {
        _ = FileManager.default.createFile(atPath: bench.control(label).path + "/release", contents: nil)
    }

    @Test("a migration by the extension fills a shadow while the old index answers completely; donations reach both; the shadow replaces it on acknowledgement")
    func extensionMigrationUnderLoad() async throws {
        let (bench, unit) = try await Self.floodBench("org.example.test.migrate", "org.example.migrate.ext")
        let load = QueryLoad(socket: bench.socket, bundle: unit.bundle, identifier: "item-2042", text: "numbered 204", expected: 10)
        let answer = try await bench.admin(Method.adminSimulate, ["event": "migration", "bundle": .string(unit.bundle)])
        #expect(answer["started"]?.arrayValue?.first?["path"] == "extension")
        try await Self.waitForHold(bench, unit.label)

        let during = try #require(try await Self.status(bench, unit.bundle))
        #expect(during["state"] == "migrating", "\(during)")
        #expect(during["reason"] == "simulated")
        #expect(during["requestID"]?.intValue != nil)
        #expect(during["items"]?.intValue == 4000, "the old index kept its items (the extension's deleteAll went to the shadow only): \(during)")
        let app = bench.daemon.index(unit.bundle)
        try await app.indexSearchableItems(Self.items(1, prefix: "from-app"))
        await app.close()

        Self.release(bench, unit.label)
        try await bench.waitForLog("migration finished", "bundle=\(unit.bundle)", timeout: 60)
        await load.stop()
        #expect(load.errors.isEmpty, "\(load.summary)")
        #expect(load.incomplete == 0, "\(load.summary)")
        let pause = bench.lines("index file replaced", "bundle=\(unit.bundle)").first.flatMap { ExtensionBench.field("pause_ms", in: $0) } ?? "?"
        print("extension migration (4 000 items): \(load.summary) swap_pause_ms=\(pause)")
        let after = try #require(try await Self.status(bench, unit.bundle))
        #expect(after["state"] == "ready")
        #expect(after["formatVersion"]?.intValue == Schema.formatVersion)
        #expect(after["items"]?.intValue == 4001, "the extension's items and the app's donation: \(after)")
        let shadow = bench.daemon.stateDir + "/indexes/\(unit.bundle)/_default.sqlite.shadow"
        #expect(!FileManager.default.fileExists(atPath: shadow))
    }

    @Test("a daemon killed in the middle of a migration resumes it after restart and completes it")
    func resumeAfterKill() async throws {
        let (bench, unit) = try await Self.floodBench("org.example.test.resume", "org.example.migrate.resume")
        _ = try await bench.admin(Method.adminSimulate, ["event": "migration", "bundle": .string(unit.bundle)])
        try await Self.waitForHold(bench, unit.label)
        let shadow = bench.daemon.stateDir + "/indexes/\(unit.bundle)/_default.sqlite.shadow"
        #expect(FileManager.default.fileExists(atPath: shadow))
        try await blocking { bench.daemon.stop(signal: SIGKILL) }
        Self.release(bench, unit.label)
        let mark = bench.mark
        try await blocking { try bench.daemon.start() }
        try await bench.waitForLog("migration resumed", "bundle=\(unit.bundle)", after: mark)
        try await bench.waitForLog("migration finished", "bundle=\(unit.bundle)", after: mark, timeout: 60)
        let after = try #require(try await Self.status(bench, unit.bundle))
        #expect(after["state"] == "ready")
        #expect(after["items"]?.intValue == 4000, "\(after)")
        #expect(!FileManager.default.fileExists(atPath: shadow))
    }

    @Test("a unit whose IndexVersion changed is migrated after admin.units, once")
    func indexVersionBump() async throws {
        var unit = TestUnit("org.example.test.version", bundle: "org.example.migrate.version")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        unit.indexVersion = 2
        try bench.write(unit)
        _ = try await bench.admin(Method.adminUnits)
        let started = try await bench.waitForLog("migration started", "bundle=\(unit.bundle)")
        #expect(started[0].contains("IndexVersion 1 -> 2"), "\(started)")
        try await bench.waitForLog("migration finished", "bundle=\(unit.bundle)", timeout: 60)
        #expect(bench.control(unit.label).received.map(\.kind) == ["all", "all"])
        _ = try await bench.admin(Method.adminUnits)
        let mark = bench.mark
        _ = try await bench.admin(Method.adminStatus)
        #expect(bench.lines("migration started", "bundle=\(unit.bundle)").count == 1, "the new version was recorded")
        #expect(bench.lines("migration started", after: mark).isEmpty)
    }

    @Test("a migration whose reindex-all fails for good leaves the old index in service and status says why")
    func failedMigration() async throws {
        let unit = TestUnit("org.example.test.failing", bundle: "org.example.migrate.fail")
        let bench = try await ExtensionBench.start([unit], arguments: ["--max-request-attempts", "1"])
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode("nack")
        _ = try await bench.admin(Method.adminSimulate, ["event": "migration", "bundle": .string(unit.bundle)])
        try await bench.waitForLog("migration failed; the old index stays in service", "bundle=\(unit.bundle)", timeout: 60)
        let s = try #require(try await Self.status(bench, unit.bundle))
        #expect(s["state"] == "ready")
        #expect(s["items"]?.intValue == 100)
        #expect(s["migrationError"]?.stringValue?.contains("told to fail") == true, "\(s)")
        let shadow = bench.daemon.stateDir + "/indexes/\(unit.bundle)/_default.sqlite.shadow"
        #expect(!FileManager.default.fileExists(atPath: shadow))
    }
}

/// Makes the index file at `path` (closed) a file of an older store `format`, as that build made it.
func rewriteFormat(_ path: String, to format: Int) throws {
    let db = try Database(path: path)
    try db.execute(Schema.rewrite(toFormat: format))
    db.close()
}
