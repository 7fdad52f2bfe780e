import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// Makes the index file at `path` (closed) a file of an older store `format`, as that build made it.
func rewriteFormat(_ path: String, to format: Int) throws {
    let db = try Database(path: path)
    try db.execute(Schema.rewrite(toFormat: format))
    db.close()
}

@Suite("Store formats and migration", .onOwnThreads)
struct MigrationStoreTests {
    @Test("a new file has the current format: format 6, whose full-text table has no prefix indexes, with the ranked index's tables and the vector table")
    func newFormat() throws {
        let f = try StoreFixture()
        #expect(Schema.formatVersion == 6)
        #expect(f.store.formatVersion == 6)
        #expect(try f.store.summary().formatVersion == 6)
        #expect(try f.store.read { db in try db.scalar("SELECT 1 FROM sqlite_schema WHERE name = 'item_vectors'") } != nil)
        let tables = try f.store.read { db in try db.rows("SELECT name FROM sqlite_schema WHERE name LIKE 'rank%' ORDER BY name").compactMap { $0.string(0) } }
        #expect(tables == ["rank_dirty", "rank_segments", "rank_terms", "rank_terms_key"])
        let sql = try f.store.read { db in try db.rows("SELECT sql FROM sqlite_schema WHERE name = 'fts'").first?.string(0) }
        #expect(sql?.contains("fts5(") == true && sql?.contains("prefix=") == false, "\(sql ?? "no fts table")")
    }

    @Test("each older format's full-text table is the one its build made", arguments: [1, 2])
    func olderFormatSchema(format: Int) throws {
        let f = try StoreFixture()
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: format)
        let db = try Database(path: f.dir + "/b/_default.sqlite", readOnly: true)
        defer { db.close() }
        #expect(try db.intScalar("PRAGMA user_version") == format)
        let sql = try db.rows("SELECT sql FROM sqlite_schema WHERE name = 'fts'").first?.string(0) ?? ""
        #expect(sql.contains("prefix='2 3 4'") == (format == 2), "\(sql)")
    }

    @Test("only format 2 needs a rebuild: format 1's schema is the current one but for tables added since")
    func needsRebuild() {
        #expect(Schema.create(format: 1) == Schema.create(format: 3))
        #expect(Schema.create(format: 1) + Schema.rankTables + Schema.vectorTables == Schema.create)
        #expect(!Schema.needsRebuild(from: 1))
        #expect(!Schema.needsRebuild(from: 3))
        #expect(Schema.needsRebuild(from: 2))
        #expect(!Schema.needsRebuild(from: Schema.formatVersion))
    }

    @Test("a format-1 file is relabelled the current format when opened, its items and full-text index untouched")
    func format1Relabelled() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "parsing json"]), try f.item("b", ["title": "other"]))
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: 1)
        try f.reopen()
        #expect(f.store.formatVersion == Schema.formatVersion)
        #expect(try f.store.read { db in try db.intScalar("PRAGMA user_version") } == Schema.formatVersion)
        #expect(try f.user("pars").items.count == 1)
        #expect(try f.store.check(repair: false).ok)
    }

    /// Format 4 and 5 postings kept the number of text columns where format 6 keeps which ones:
    /// opening such a file drops its ranked index (derived data), FTS5 answers the pages until the
    /// background build has made it again, and then the walk does, with the same pages.
    @Test("a format-4 or 5 file drops its ranked index when opened, answers from FTS5, and rebuilds it", arguments: [4, 5])
    func rankedPostingsMigrated(format: Int) throws {
        let f = try StoreFixture(rankedBuilds: false)
        let items = try (0..<300).map { i in
            try f.item("i\(i)", ["title": .string(i % 3 == 0 ? "parser number \(i)" : "other \(i)"),
                "textContent": .string(i % 5 == 0 ? "parsing text \(i)" : "text \(i)")])
        }
        _ = try f.store.applySync([.items(items)])
        try f.store.buildRankedIndex()
        let filter = try QueryFront.filter(query: "title == \"pars*\"cdw", limits: Limits(), now: f.clock.now)
        let expected = try f.store.search(RankedPageTests.exhaustive(filter), fetch: ["title"], limit: 20)
        #expect(try f.store.search(filter, fetch: ["title"], limit: 20).items == expected.items)
        #expect(f.store.pageWalks.value.walked == 1)
        f.store.close()
        // The file as the format-4/5 build left it: its ranked tables full, its version older.
        let db = try Database(path: f.dir + "/b/_default.sqlite")
        if format == 4 { try db.execute("DROP TABLE item_vectors") }
        try db.execute("PRAGMA user_version=\(format)")
        #expect(try db.intScalar("SELECT count(*) FROM rank_terms") > 0)
        db.close()

        try f.reopen()
        #expect(f.store.formatVersion == Schema.formatVersion)
        #expect(try f.store.read { db in try db.intScalar("SELECT count(*) FROM rank_terms") } == 0)
        let ranked = try f.store.summary().rankedIndex
        #expect(ranked?.segments == 0 && ranked?.pending == items.count, "\(String(describing: ranked))")
        let page = try f.store.search(filter, fetch: ["title"], limit: 20)
        #expect(page.items == expected.items && page.cursor == expected.cursor)
        #expect(f.store.pageWalks.value.walked == 0 && f.store.pageWalks.value.fts == 1, "FTS5 answers before the build")

        try f.store.buildRankedIndex()
        #expect(try f.store.summary().rankedIndex?.pending == 0)
        let rebuilt = try f.store.search(filter, fetch: ["title"], limit: 20)
        #expect(rebuilt.items == expected.items && rebuilt.cursor == expected.cursor)
        #expect(f.store.pageWalks.value.walked == 1, "the walk answers after it")
        #expect(try f.store.check(repair: false).ok)
    }

    @Test("a file of an older format opens, answers and takes writes until it is migrated")
    func olderFormatServes() throws {
        let format = 2
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "parsing json"]), try f.item("b", ["title": "other"]))
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: format)
        try f.reopen()
        #expect(f.store.formatVersion == format)
        #expect(try f.store.summary().formatVersion == format)
        #expect(try f.user("pars").items.count == 1)
        try f.donate(try f.item("c", ["title": "parser generator"]))
        #expect(try f.user("pars").items.count == 2)
        #expect(try f.store.check(repair: false).ok)
    }

    @Test("a shadow imports the items, client state and engagement of an older file and builds its full-text index")
    func importFromOlderFormat() throws {
        let format = 2
        let f = try StoreFixture()
        let items = try (0..<500).map { try f.item("i\($0)", domain: "d.\($0 % 3)", ["title": .string("title number \($0) parsing")]) }
        _ = try f.store.applySync([.items(items)], newClientState: [1, 2, 3])
        try f.store.recordEngagement(identifier: "i7", suggestion: nil, weight: 1)
        f.store.close()
        try rewriteFormat(f.dir + "/b/_default.sqlite", to: format)
        try f.reopen()
        #expect(f.store.formatVersion == format)
        let shadow = try IndexStore(path: f.dir + "/b/_default.sqlite.shadow", options: f.store.options)
        defer { shadow.close() }
        try shadow.attachSource(f.dir + "/b/_default.sqlite")
        // A donation that reached the shadow before the copy is newer than the old file's copy.
        _ = try shadow.applySync([.items([try f.item("i1", ["title": "newer title"])])])
        #expect(try shadow.importSource() == 499)
        #expect(shadow.count == 500)
        #expect(shadow.formatVersion == Schema.formatVersion)
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
