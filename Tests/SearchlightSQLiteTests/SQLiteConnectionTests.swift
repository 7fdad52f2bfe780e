import Foundation
import SearchlightSQLite
import Testing
import TestThreads

/// `SQLiteConnection`, the app's own database access (issue 38: an app copying a `CSQLite`
/// system-library target collided with the package's): it creates the file, writes, reads,
/// rolls back a failed transaction, and its writes are recorded by the delegate's triggers.
@Suite("SQLiteConnection", .timeLimit(.minutes(1)), .onOwnThreads)
struct SQLiteConnectionTests {
    static func temporaryPath() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("slconn-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent("recipes.sqlite").path
    }

    @Test("creates, writes, reads, rolls back a throwing transaction, refuses to create with create: false")
    func roundTrip() throws {
        let path = try Self.temporaryPath()
        #expect(throws: SQLiteError.self) { try SQLiteConnection(path: path, create: false) }
        let db = try SQLiteConnection(path: path)
        #expect(FileManager.default.fileExists(atPath: path))
        try db.execute("PRAGMA journal_mode = WAL; CREATE TABLE recipes(id INTEGER PRIMARY KEY, title TEXT, rating REAL)")
        #expect(try db.run("INSERT INTO recipes(title, rating) VALUES (?, ?)", "Pancakes", 4.5) == 1)
        #expect(db.lastInsertRowID == 1)
        try db.run("INSERT INTO recipes(title, rating) VALUES (?, ?)", .text("Soup"), nil)
        #expect(try db.rows("SELECT id, title, rating FROM recipes ORDER BY id") == [[.integer(1), .text("Pancakes"), .real(4.5)], [.integer(2), .text("Soup"), .null]])
        #expect(try db.scalar("SELECT count(*) FROM recipes") == .integer(2))
        #expect(try db.scalar("SELECT title FROM recipes WHERE id = 99") == nil)
        struct Abort: Error {}
        #expect(throws: Abort.self) {
            try db.transaction {
                try db.run("DELETE FROM recipes")
                throw Abort()
            }
        }
        #expect(try db.scalar("SELECT count(*) FROM recipes") == .integer(2), "the transaction was rolled back")
        let error = #expect(throws: SQLiteError.self) { try db.run("INSERT INTO nowhere VALUES (1)") }
        #expect(error?.sql == "INSERT INTO nowhere VALUES (1)")
        // Another connection (the delegate's, the sqlite3 shell) sees the committed rows.
        let other = try SQLiteConnection(path: path, create: false)
        #expect(try other.scalar("SELECT title FROM recipes WHERE id = 1")?.stringValue == "Pancakes")
    }

    @Test("its writes are recorded in the delegate's history like any writer's")
    func writesAreRecorded() async throws {
        let path = try Self.temporaryPath()
        let db = try SQLiteConnection(path: path)
        try db.execute("CREATE TABLE recipes(id INTEGER PRIMARY KEY, title TEXT)")
        let model = SpotlightModel { Entity("Recipe", table: "recipes", key: "id") { Attribute("title", as: .title) } }
        let delegate = try SQLiteSpotlightDelegate(databaseAt: URL(fileURLWithPath: path), model: model,
            bundleIdentifier: "com.example.recipes", socketPath: path + ".no-daemon")
        try await delegate.startSpotlightIndexing()   // installs the triggers; no daemon needed for that
        await delegate.stopSpotlightIndexing()
        try db.run("INSERT INTO recipes(title) VALUES (?)", "Pancakes")
        try db.run("UPDATE recipes SET title = ? WHERE id = 1", "Crêpes")
        #expect(try db.rows("SELECT entity, key, change FROM searchlight_history ORDER BY token")
                == [["Recipe", .integer(1), "insert"], ["Recipe", .integer(1), "update"]])
    }
}
