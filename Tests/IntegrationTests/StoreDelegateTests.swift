#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightSQLite
import SearchlightStore
import Testing
import TestThreads

/// A delegate that does not index rows named "private" (`attributeSet(for:)` answering nil).
final class PrivateAware: SQLiteSpotlightDelegate, @unchecked Sendable {
    override func attributeSet(for row: SearchlightSQLite.Row) throws -> AttributeSet? {
        row["userSpecifiedName"]?.stringValue == "private" ? nil : try super.attributeSet(for: row)
    }
}

/// The store delegate in this process against the real `searchlightd` on a temp socket: what an
/// app that writes the two lines gets, and changes written by another process (the `sqlite3`
/// shell) while it runs.
@Suite("store delegate with the daemon", .onOwnThreads, .serialized)
struct StoreDelegateTests {
    static let bundle = "com.example.photos"
    /// How long a change may take to reach the index before a test fails. Alone a change takes
    /// milliseconds; in a full run at load 10-25 on 2 cores one history range was seen taking
    /// 5 s to send and 3 s to read (the delegate's tasks, the SDK's replies and the daemon all
    /// wait for a core), and three such waits in one test passed 30 s. The deadline only bounds
    /// a failure; the tests wait on the delegate's own progress, never on the clock.
    static let indexedTimeout = Duration.seconds(120)
    static let model = SpotlightModel {
        Entity("Photo", table: "photos", key: "id", contentType: "public.image") {
            Attribute("userSpecifiedName", as: .displayName)
            Attribute("path", as: .contentURL)
        }
        Entity("Tag", table: "tags", key: "id", contentType: "public.text") {
            Attribute("name", as: .displayName)
        }
    }

    /// A store with DESIGN §10's schema in a temp folder, and the app's own connection to it.
    func makeStore(_ dir: TempDir) throws -> (URL, Database) {
        let path = dir.path + "/photos.sqlite"
        let db = try Database(path: path)
        try db.execute(TagsSample.schema)
        return (URL(fileURLWithPath: path), db)
    }

    func search(_ query: String, _ daemon: DaemonProcess) async throws -> [String: String] {
        let index = daemon.index(Self.bundle)
        defer { Task { await index.close() } }
        var out: [String: String] = [:]
        for try await item in SearchQuery(queryString: query, index: index).results {
            out[item.uniqueIdentifier] = item.attributeSet.displayName ?? ""
        }
        return out
    }

    @Test("the two lines on a fresh database: its rows, then inserts, updates and deletes become searchable")
    func twoLines() async throws {
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("sld")
        let (url, db) = try makeStore(dir)
        try db.run("INSERT INTO photos(userSpecifiedName, path) VALUES ('Sipapu Bridge', '/photos/sipapu.jpg')")

        let delegate = try SQLiteSpotlightDelegate(databaseAt: url, model: Self.model, bundleIdentifier: Self.bundle, socketPath: daemon.socket)
        try await delegate.startSpotlightIndexing()

        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "sipapu*"cd"#, daemon) == ["photo-1": "Sipapu Bridge"])
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('Kachina Bridge')")
        try db.run("INSERT INTO tags(name) VALUES ('Natural Bridges')")
        try db.run("UPDATE photos SET userSpecifiedName = 'Sipapu at dusk' WHERE id = 1")
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "*bridge*"cd"#, daemon) == ["photo-2": "Kachina Bridge", "tag-1": "Natural Bridges"])
        #expect(try await search(#"displayName == "sipapu*"cd"#, daemon) == ["photo-1": "Sipapu at dusk"])
        try db.run("DELETE FROM photos WHERE id = 2")
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "kachina*"cd"#, daemon).isEmpty)
        #expect(try await search(#"contentTypeTree == "public.image""#, daemon).keys.sorted() == ["photo-1"])
        await delegate.stopSpotlightIndexing()
    }

    @Test("stop leaves the triggers and the history; start indexes what changed meanwhile; a row attributeSet(for:) refuses is not indexed")
    func stopStart() async throws {
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("slo")
        let (url, db) = try makeStore(dir)
        let delegate = try PrivateAware(databaseAt: url, model: Self.model, bundleIdentifier: Self.bundle, socketPath: daemon.socket)
        try await delegate.startSpotlightIndexing()
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('first'), ('private')")
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "*"cd"#, daemon) == ["photo-1": "first"])
        await delegate.stopSpotlightIndexing()
        #expect(!delegate.isIndexingEnabled)
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('while stopped')")
        try db.run("UPDATE photos SET userSpecifiedName = 'private' WHERE id = 1")
        #expect(try db.intScalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name GLOB 'searchlight_*'") == 6)
        #expect(try await search(#"displayName == "*"cd"#, daemon) == ["photo-1": "first"], "nothing indexed while stopped")
        try await delegate.startSpotlightIndexing()
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "*"cd"#, daemon) == ["photo-3": "while stopped"])
        await delegate.stopSpotlightIndexing()
    }

    @Test("changes written by the sqlite3 shell while the app runs are indexed (noticed without a timer)")
    func sqliteShell() async throws {
        let shell = "/usr/bin/sqlite3"
        guard FileManager.default.isExecutableFile(atPath: shell) else {
            throw HarnessError("\(shell) is missing: `make test` installs it (apt-get install sqlite3)")
        }
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("sls")
        let (url, _) = try makeStore(dir)
        let delegate = try SQLiteSpotlightDelegate(databaseAt: url, model: Self.model, bundleIdentifier: Self.bundle, socketPath: daemon.socket)
        delegate.fallbackCheckInterval = .seconds(3600)  // inotify alone must see the shell's commits
        try await delegate.startSpotlightIndexing()
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)

        func shellRun(_ sql: String) async throws {
            let r = try await runCLI([url.path, sql], socket: nil, executable: shell)
            if r.status != 0 { throw HarnessError("sqlite3 failed (\(r.status)): \(r.stderr)") }
        }
        /// Polls the index (no call into the delegate, which would wake it) until `check` holds.
        func until(_ what: String, _ check: () async throws -> Bool) async throws {
            let deadline = Date().addingTimeInterval(TimeInterval(Self.indexedTimeout.components.seconds))
            while try await !check() {
                if Date() > deadline { throw HarnessError("timed out waiting for \(what)") }
                try await Task.sleep(for: .milliseconds(25))
            }
        }
        try await shellRun("INSERT INTO photos(userSpecifiedName) VALUES ('Owachomo Bridge'); INSERT INTO tags(name) VALUES ('stars');")
        try await until("the shell's inserts") { try await search(#"displayName == "*"cd"#, daemon).count == 2 }
        try await shellRun("UPDATE photos SET userSpecifiedName = 'Owachomo at night'")
        try await until("the shell's update") { try await search(#"displayName == "owachomo at*"cd"#, daemon).count == 1 }
        try await shellRun("DELETE FROM tags")
        try await until("the shell's delete") { try await search(#"displayName == "*"cd"#, daemon).keys.sorted() == ["photo-1"] }
        await delegate.stopSpotlightIndexing()
    }

    @Test("a dropped modelled column stops indexing with an error naming the entity and the column; a new column is fine")
    func schemaChange() async throws {
        let daemon = try await blocking { try DaemonProcess() }
        let dir = TempDir("slm")
        let (url, db) = try makeStore(dir)
        let delegate = try SQLiteSpotlightDelegate(databaseAt: url, model: Self.model, bundleIdentifier: Self.bundle, socketPath: daemon.socket)
        try await delegate.startSpotlightIndexing()
        try db.execute("ALTER TABLE photos ADD COLUMN rating INTEGER")
        try db.run("INSERT INTO photos(userSpecifiedName, rating) VALUES ('with a rating', 5)")
        try await delegate.waitUntilIndexed(timeout: Self.indexedTimeout)
        #expect(try await search(#"displayName == "with a rating"cd"#, daemon).count == 1)

        let updates = delegate.indexDidUpdate
        try db.execute("ALTER TABLE photos DROP COLUMN path")
        try db.run("INSERT INTO photos(userSpecifiedName) VALUES ('after')")
        var failure: (any Error)?
        do { for try await _ in updates {} } catch { failure = error }
        let error = try #require(failure as? SpotlightModelError)
        #expect(error.kind == .missingColumn(entity: "Photo", table: "photos", column: "path"))
        #expect(error.description.contains("entity Photo") && error.description.contains("\"path\""), "\(error)")
        #expect(!delegate.isIndexingEnabled)
    }
}
