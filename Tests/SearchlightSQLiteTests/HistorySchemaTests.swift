import Foundation
@testable import SearchlightSQLite
import Testing
import TestThreads

/// The objects the delegate puts in the app's database: what they are, what they record, and
/// that installing them is idempotent, versioned, and never touches the app's tables.
@Suite("history triggers", .timeLimit(.minutes(1)), .onOwnThreads)
struct HistorySchemaTests {
    func appSchema(_ store: TagsFixture) throws -> [[DatabaseValue]] {
        try store.app.rows("SELECT type, name, sql FROM sqlite_master WHERE name NOT GLOB '*searchlight*' ORDER BY name")
    }

    @Test("installing adds only searchlight_* objects: the history, the meta table and three triggers per tracked table")
    func installOwnsOnlyItsObjects() throws {
        let store = try TagsFixture()
        let before = try appSchema(store)
        let installation = try HistorySchema.install(TagsFixture.model, store.app)
        #expect(installation.changed)
        #expect(try appSchema(store) == before, "the app's tables are untouched")
        let triggers = ["photos", "tags", "photo_tags"].flatMap { t in ["insert", "update", "delete"].map { "searchlight_\(t)_\($0)" } }
        #expect(try store.searchlightObjects() == (["searchlight_history", "searchlight_meta"] + triggers).sorted())
        let columns = try store.app.rows("SELECT name FROM pragma_table_info('searchlight_history')").compactMap { $0[0].stringValue }
        #expect(columns == ["token", "entity", "key", "change"])
        #expect(try HistorySchema.meta("triggerVersion", store.app)?.int64Value == Int64(HistorySchema.version))
        #expect(UUID(uuidString: installation.storeIdentifier) != nil)
    }

    @Test("installing again is a read: no write, the same store identifier")
    func installIsIdempotent() throws {
        let store = try TagsFixture()
        let first = try HistorySchema.install(TagsFixture.model, store.app)
        let observer = try SQLiteDatabase(path: store.path)
        let version = try observer.scalar("PRAGMA data_version")
        let other = try SQLiteDatabase(path: store.path)
        let second = try HistorySchema.install(TagsFixture.model, other)
        #expect(!second.changed)
        #expect(second.storeIdentifier == first.storeIdentifier)
        #expect(try observer.scalar("PRAGMA data_version") == version, "a second install committed something")
    }

    @Test("the triggers record inserts, updates, deletes, key changes and related rows, in commit order")
    func triggersRecord() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        let photo = try store.addPhoto("Arch")
        try store.tag(photo, "Utah")
        try store.sql("UPDATE photos SET userSpecifiedName = 'Delicate Arch' WHERE id = ?", [.integer(photo)])
        try store.sql("UPDATE photos SET id = 40 WHERE id = ?", [.integer(photo)])
        try store.sql("DELETE FROM photo_tags")
        try store.sql("DELETE FROM photos WHERE id = 40")
        let history = try store.app.rows("SELECT token, entity, key, change FROM searchlight_history ORDER BY token")
        let rows = history.map { "\($0[1].stringValue!) \($0[2]) \($0[3].stringValue!)" }
        #expect(rows == [
            "Photo 1 insert",
            "Tag 1 insert", "Photo 1 update",  // tagging: the tag, and the photo through photo_tags
            "Photo 1 update",  // renamed
            "Photo 1 update", "Photo 40 update",  // a key change names both keys
            "Photo 1 update",  // the photo_tags row still names 1: its delete touches photo 1
            "Photo 40 delete",
        ], "\(rows)")
        let tokens = history.compactMap { $0[0].int64Value }
        #expect(tokens == tokens.sorted() && Set(tokens).count == tokens.count)
    }

    @Test("a changed model replaces the triggers and asks for one rebuild")
    func modelChange() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.sql("DELETE FROM searchlight_meta WHERE key = 'rebuildNeeded'")
        let photosOnly = SpotlightModel { Entity("Photo", table: "photos", key: "id") { Attribute("userSpecifiedName", as: .displayName) } }
        let changed = try HistorySchema.install(photosOnly, store.app)
        #expect(changed.changed)
        #expect(try store.searchlightObjects().filter { $0.hasSuffix("_insert") } == ["searchlight_photos_insert"])
        #expect(try HistorySchema.meta("rebuildNeeded", store.app) != nil)
    }

    @Test("a dropped and re-created table gets its triggers back, with a rebuild")
    func recreatedTable() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.sql("DELETE FROM searchlight_meta WHERE key = 'rebuildNeeded'")
        try store.app.execute("DROP TABLE tags; CREATE TABLE tags(id INTEGER PRIMARY KEY, name TEXT UNIQUE)")
        #expect(try HistorySchema.install(TagsFixture.model, store.app).changed)
        #expect(try store.searchlightObjects().contains("searchlight_tags_insert"))
    }

    @Test("triggers of a newer version are refused with a message saying what to do")
    func newerVersionRefused() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.sql("UPDATE searchlight_meta SET value = 99 WHERE key = 'triggerVersion'")
        #expect { try HistorySchema.install(TagsFixture.model, store.app) } throws: { error in
            "\(error)".contains("version 99") && "\(error)".contains("update the app")
        }
    }

    @Test("a modelled column that is gone is an error naming the entity, the table and the column; a new column is fine")
    func schemaChange() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.app.execute("ALTER TABLE photos ADD COLUMN rating INTEGER")
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.app.execute("ALTER TABLE photos DROP COLUMN path")
        #expect { try HistorySchema.install(TagsFixture.model, store.app) } throws: { error in
            guard let error = error as? SpotlightModelError else { return false }
            return error.kind == .missingColumn(entity: "Photo", table: "photos", column: "path")
                && error.description.contains("entity Photo") && error.description.contains("\"path\"")
        }
    }

    @Test("a table the model names but the database lacks is an error naming both")
    func missingTable() throws {
        let store = try TagsFixture()
        let model = SpotlightModel { Entity("Album", table: "albums", key: "id") { Attribute("title", as: .title) } }
        #expect { try HistorySchema.install(model, store.app) } throws: { error in
            (error as? SpotlightModelError)?.kind == .missingTable(entity: "Album", table: "albums")
        }
        #expect(try store.searchlightObjects().isEmpty, "nothing is installed for a model that does not fit")
    }

    @Test("uninstalling removes every searchlight_* object and keeps every app row")
    func uninstall() throws {
        let store = try TagsFixture()
        _ = try HistorySchema.install(TagsFixture.model, store.app)
        try store.tag(try store.addPhoto("Arch"), "Utah")
        try HistorySchema.uninstall(store.app)
        #expect(try store.searchlightObjects().isEmpty)
        #expect(try store.int("SELECT count(*) FROM photos") == 1)
        #expect(try store.int("SELECT count(*) FROM photo_tags") == 1)
        try store.sql("INSERT INTO photos(userSpecifiedName) VALUES ('after')")  // no trigger left to fail
    }

    @Test("a model without entities, or with two entities on one table, is refused when the delegate is made")
    func invalidModel() throws {
        #expect(throws: SpotlightModelError.self) {
            try SQLiteSpotlightDelegate(databaseAt: URL(fileURLWithPath: "/nonexistent"), model: SpotlightModel(entities: []),
                bundleIdentifier: "x")
        }
        let twice = SpotlightModel {
            Entity("A", table: "t", key: "id")
            Entity("B", table: "t", key: "id")
        }
        #expect(throws: SpotlightModelError.self) {
            try SQLiteSpotlightDelegate(databaseAt: URL(fileURLWithPath: "/nonexistent"), model: twice, bundleIdentifier: "x")
        }
    }
}
