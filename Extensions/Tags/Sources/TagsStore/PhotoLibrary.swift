import CTagsSQLite
import Foundation

/// The app's own data: photos, tags, and which photo has which tag, in a SQLite file. Nothing
/// here knows about Searchlight; the delegate watches these tables through its triggers.
public final class PhotoLibrary {
    public static let schema = """
        CREATE TABLE IF NOT EXISTS photos(id INTEGER PRIMARY KEY, userSpecifiedName TEXT, path TEXT);
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT UNIQUE);
        CREATE TABLE IF NOT EXISTS photo_tags(photo_id INTEGER NOT NULL, tag_id INTEGER NOT NULL, PRIMARY KEY (photo_id, tag_id));
        """

    /// What went wrong, said for the person at the terminal.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    public let url: URL
    private let handle: OpaquePointer

    /// Opens the store, creating its folder, file and tables when they are missing.
    public init(url: URL) throws {
        self.url = url
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(url.path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil)
        guard rc == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close_v2(db)
            throw Failure("cannot open the store \(url.path): \(message)")
        }
        handle = db
        sqlite3_busy_timeout(db, 5_000)
        try execute("PRAGMA journal_mode = WAL")
        try execute(Self.schema)
    }

    deinit { sqlite3_close_v2(handle) }

    /// Adds a photo; its id.
    public func addPhoto(path: String, name: String) throws -> Int64 {
        try run("INSERT INTO photos(userSpecifiedName, path) VALUES (?, ?)", [name, path])
        return sqlite3_last_insert_rowid(handle)
    }

    /// Puts `tag` on the photo (creating the tag).
    public func tag(photo: Int64, _ tag: String) throws {
        try transaction {
            try requirePhoto(photo)
            try run("INSERT OR IGNORE INTO tags(name) VALUES (?)", [tag])
            try run("INSERT OR IGNORE INTO photo_tags(photo_id, tag_id) SELECT ?, id FROM tags WHERE name = ?", [photo, tag])
        }
    }

    /// Takes `tag` off the photo; a tag on no photo any more is deleted.
    public func untag(photo: Int64, _ tag: String) throws {
        try transaction {
            try requirePhoto(photo)
            guard try run("DELETE FROM photo_tags WHERE photo_id = ? AND tag_id = (SELECT id FROM tags WHERE name = ?)", [photo, tag]) > 0 else {
                throw Failure("photo \(photo) has no tag \"\(tag)\"")
            }
            try run("DELETE FROM tags WHERE name = ? AND id NOT IN (SELECT tag_id FROM photo_tags)", [tag])
        }
    }

    public func renameTag(_ old: String, to new: String) throws {
        try transaction {
            guard try rows("SELECT id FROM tags WHERE name = ?", [new]).isEmpty else {
                throw Failure("a tag \"\(new)\" exists already; untag it first or choose another name")
            }
            guard try run("UPDATE tags SET name = ? WHERE name = ?", [new, old]) > 0 else {
                throw Failure("there is no tag \"\(old)\" (tags list shows them)")
            }
        }
    }

    /// Deletes the photo and its taggings (not the file); tags left on no photo are deleted.
    public func deletePhoto(_ photo: Int64) throws {
        try transaction {
            try requirePhoto(photo)
            try run("DELETE FROM photo_tags WHERE photo_id = ?", [photo])
            try run("DELETE FROM photos WHERE id = ?", [photo])
            try run("DELETE FROM tags WHERE id NOT IN (SELECT tag_id FROM photo_tags)")
        }
    }

    /// Every photo with its tags, by id.
    public func photos() throws -> [(id: Int64, name: String, path: String, tags: [String])] {
        try rows("""
            SELECT photos.id, photos.userSpecifiedName, photos.path, group_concat(tags.name, char(31))
            FROM photos LEFT JOIN photo_tags ON photo_tags.photo_id = photos.id LEFT JOIN tags ON tags.id = photo_tags.tag_id
            GROUP BY photos.id ORDER BY photos.id
            """).map { row in
            (Int64(row[0]) ?? 0, row[1], row[2], row[3].isEmpty ? [] : row[3].split(separator: "\u{1F}").map(String.init).sorted())
        }
    }

    private func requirePhoto(_ photo: Int64) throws {
        guard try !rows("SELECT 1 FROM photos WHERE id = ?", [photo]).isEmpty else {
            throw Failure("there is no photo \(photo) (tags list shows them)")
        }
    }

    // MARK: - SQLite

    private func execute(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(handle, sql, nil, nil, &message) == SQLITE_OK else {
            defer { sqlite3_free(message) }
            throw Failure("the store \(url.path): \(message.map { String(cString: $0) } ?? "error") (in: \(sql.prefix(80)))")
        }
    }

    private func transaction(_ body: () throws -> Void) throws {
        try execute("BEGIN IMMEDIATE")
        do {
            try body()
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// Runs a statement; the rows it changed.
    @discardableResult
    private func run(_ sql: String, _ arguments: [Any] = []) throws -> Int {
        _ = try rows(sql, arguments)
        return Int(sqlite3_changes(handle))
    }

    /// The rows of a query, each column as text ("" for NULL).
    private func rows(_ sql: String, _ arguments: [Any] = []) throws -> [[String]] {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw Failure("the store \(url.path): \(String(cString: sqlite3_errmsg(handle))) (in: \(sql.prefix(80)))")
        }
        defer { sqlite3_finalize(statement) }
        for (i, argument) in arguments.enumerated() {
            switch argument {
            case let n as Int64: sqlite3_bind_int64(statement, Int32(i + 1), n)
            case let s as String: sqlite3_bind_text(statement, Int32(i + 1), s, -1, ctags_transient())
            default: sqlite3_bind_null(statement, Int32(i + 1))
            }
        }
        var out: [[String]] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { return out }
            guard rc == SQLITE_ROW else {
                throw Failure("the store \(url.path): \(String(cString: sqlite3_errmsg(handle))) (in: \(sql.prefix(80)))")
            }
            out.append((0..<sqlite3_column_count(statement)).map { c in
                sqlite3_column_text(statement, c).map { String(cString: $0) } ?? ""
            })
        }
    }
}
