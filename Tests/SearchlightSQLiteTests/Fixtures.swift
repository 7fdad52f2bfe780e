import Foundation
@testable import SearchlightSQLite

/// The photo-tagging app's store (DESIGN §10's schema) in a temp folder, written through a
/// connection of its own (the app's), never the delegate's.
final class TagsFixture: @unchecked Sendable {
    let directory: String
    let path: String
    let app: SQLiteDatabase

    static let schema = """
        PRAGMA journal_mode = WAL;
        CREATE TABLE photos(id INTEGER PRIMARY KEY, userSpecifiedName TEXT, path TEXT);
        CREATE TABLE tags(id INTEGER PRIMARY KEY, name TEXT UNIQUE);
        CREATE TABLE photo_tags(photo_id INTEGER, tag_id INTEGER, PRIMARY KEY (photo_id, tag_id));
        """

    static let model = SpotlightModel {
        Entity("Photo", table: "photos", key: "id", contentType: "public.image") {
            Attribute("userSpecifiedName", as: .displayName, .title)
            Attribute("path", as: .contentURL)
            RelatedTable("photo_tags", foreignKey: "photo_id")
        }
        Entity("Tag", table: "tags", key: "id", contentType: "public.text") {
            Attribute("name", as: .displayName)
            Dependents("Photo", query: "SELECT photo_id FROM photo_tags WHERE tag_id = ?")
        }
    }

    init(schema: String = TagsFixture.schema) throws {
        directory = NSTemporaryDirectory() + "sl-tags-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/tags.sqlite"
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        app = try SQLiteDatabase(path: path)
        try app.execute(schema)
    }

    deinit {
        app.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    var url: URL { URL(fileURLWithPath: path) }

    @discardableResult
    func addPhoto(_ name: String, path: String = "/photos/x.jpg") throws -> Int64 {
        try app.run("INSERT INTO photos(userSpecifiedName, path) VALUES (?, ?)", [.text(name), .text(path)])
        return try app.scalar("SELECT last_insert_rowid()")!.int64Value!
    }

    func tag(_ photo: Int64, _ tag: String) throws {
        try app.write {
            try app.run("INSERT OR IGNORE INTO tags(name) VALUES (?)", [.text(tag)])
            try app.run("INSERT OR IGNORE INTO photo_tags(photo_id, tag_id) SELECT ?, id FROM tags WHERE name = ?", [.integer(photo), .text(tag)])
        }
    }

    func sql(_ text: String, _ bindings: [DatabaseValue] = []) throws { try app.run(text, bindings) }

    func int(_ text: String) throws -> Int64 { try app.scalar(text)?.int64Value ?? 0 }

    /// The names of the `searchlight_*` objects in the database.
    func searchlightObjects() throws -> [String] {
        try app.rows("SELECT name FROM sqlite_master WHERE name GLOB 'searchlight*' ORDER BY name").compactMap { $0[0].stringValue }
    }
}

/// The Tags app's delegate: a photo's keywords are its tags' names (a relationship read on the
/// row's snapshot); a photo named "private" is not indexed; one named "bad…" gets a rankingHint
/// the daemon refuses (an override's bug).
final class TagsTestDelegate: SQLiteSpotlightDelegate, @unchecked Sendable {
    override func attributeSet(for row: Row) throws -> AttributeSet? {
        guard var attributes = try super.attributeSet(for: row) else { return nil }
        if row.entity.name == "Photo" {
            if row["userSpecifiedName"]?.stringValue == "private" { return nil }
            if row["userSpecifiedName"]?.stringValue?.hasPrefix("bad") == true { attributes.rankingHint = 500 }
            let tags = try row.strings("""
                SELECT t.name FROM tags t JOIN photo_tags pt ON pt.tag_id = t.id WHERE pt.photo_id = ? ORDER BY t.name
                """, row.key)
            attributes.keywords = tags.isEmpty ? nil : tags
        }
        return attributes
    }
}

extension TagsFixture {
    /// A started delegate on this store against `daemon`, seeing other connections' commits by
    /// inotify alone (no timer: the fallback interval is an hour).
    func delegate(_ daemon: FakeIndexDaemon, bundle: String = "org.example.tags") async throws -> TagsTestDelegate {
        let delegate = try TagsTestDelegate(databaseAt: url, model: Self.model, bundleIdentifier: bundle, socketPath: daemon.path)
        delegate.fallbackCheckInterval = .seconds(3600)
        try await delegate.startSpotlightIndexing()
        return delegate
    }
}

extension FakeIndexDaemon.Index {
    func title(_ id: String) -> String? { items[id]?.attributeSet.displayName }
    func keywords(_ id: String) -> [String] { items[id]?.attributeSet.keywords ?? [] }
    var token: Int64? { BatchSender.token(state) }
}

extension Array where Element == FakeIndexDaemon.Transition {
    /// Checks that the committed ranges chain: each starts where the previous ended (a rebuild
    /// may start from anything the index held), so no history range was applied twice or skipped.
    func chainProblems() -> [String] {
        var problems: [String] = []
        var previous: Int64?
        for (i, t) in enumerated() {
            let from = BatchSender.token(t.from), to = BatchSender.token(t.to)
            guard let to else { problems.append("transition \(i) stores a non-token state"); continue }
            if !t.deletedAll {
                if from != previous { problems.append("transition \(i) starts at \(from.map(String.init) ?? "none"), the previous ended at \(previous.map(String.init) ?? "none")") }
                if let from, to <= from { problems.append("transition \(i) goes from \(from) back to \(to)") }
            }
            previous = to
        }
        return problems
    }
}
