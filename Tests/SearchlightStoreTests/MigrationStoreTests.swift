import Foundation
import Testing
@testable import SearchlightStore
import SearchlightWire

/// Turns a file of the current format into a format-1 file, the way the format-1 build made it:
/// the full-text table without prefix indexes, user_version 1.
func downgradeToFormat1(_ path: String) throws {
    let db = try Database(path: path)
    try db.execute("""
        DROP TABLE fts_vocab; DROP TABLE fts_vocab_col; DROP TABLE fts;
        \(Schema.createFormat1)
        INSERT INTO fts(fts) VALUES ('rebuild');
        PRAGMA user_version=1;
        """)
    db.close()
}

@Suite("Store format 2 and migration")
struct MigrationStoreTests {
    @Test("a new file has format 2 with the prefix indexes")
    func newFormat() throws {
        let f = try StoreFixture()
        #expect(f.store.formatVersion == 2)
        #expect(try f.store.summary().formatVersion == 2)
        let sql = try f.store.read { db in try db.rows("SELECT sql FROM sqlite_schema WHERE name = 'fts'").first?.string(0) }
        #expect(sql?.contains("prefix='\(Schema.prefixIndexes)'") == true, "\(sql ?? "no fts table")")
    }

    @Test("a format-1 file opens, answers and takes writes until it is migrated")
    func format1Serves() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "parsing json"]), try f.item("b", ["title": "other"]))
        f.store.close()
        try downgradeToFormat1(f.dir + "/b/_default.sqlite")
        try f.reopen()
        #expect(f.store.formatVersion == 1)
        #expect(try f.store.summary().formatVersion == 1)
        #expect(try f.user("pars").items.count == 1)
        try f.donate(try f.item("c", ["title": "parser generator"]))
        #expect(try f.user("pars").items.count == 2)
        #expect(try f.store.check(repair: false).ok)
    }

    @Test("a shadow imports the items, client state and engagement of a format-1 file and builds its full-text index")
    func importFromFormat1() throws {
        let f = try StoreFixture()
        let items = try (0..<500).map { try f.item("i\($0)", domain: "d.\($0 % 3)", ["title": .string("title number \($0) parsing")]) }
        _ = try f.store.applySync([.items(items)], newClientState: [1, 2, 3])
        try f.store.recordEngagement(identifier: "i7", suggestion: nil, weight: 1)
        f.store.close()
        try downgradeToFormat1(f.dir + "/b/_default.sqlite")
        try f.reopen()
        let shadow = try IndexStore(path: f.dir + "/b/_default.sqlite.shadow", options: f.store.options)
        defer { shadow.close() }
        try shadow.attachSource(f.dir + "/b/_default.sqlite")
        // A donation that reached the shadow before the copy is newer than the old file's copy.
        _ = try shadow.applySync([.items([try f.item("i1", ["title": "newer title"])])])
        #expect(try shadow.importSource() == 499)
        #expect(shadow.count == 500)
        #expect(shadow.formatVersion == 2)
        #expect(try shadow.clientState() == [1, 2, 3])
        #expect(try shadow.items(withIdentifiers: ["i1"]).first?["attributeSet"]?["title"] == "newer title")
        var request = UserQueryRequest(text: "parsing")
        request.maxResultCount = 1000
        #expect(try shadow.userQuery(request).items.count == 499)
        #expect(try shadow.check(repair: false).ok)
        let engaged = try shadow.read { db in try db.intScalar("SELECT count(*) FROM items WHERE engagement > 0") }
        #expect(engaged == 1)
    }
}
