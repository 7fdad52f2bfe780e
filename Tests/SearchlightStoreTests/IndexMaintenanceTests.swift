import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The store's half of idle maintenance: the bounded scrub, the refresh query, optimize, checkpoint.
@Suite("Index maintenance", .onOwnThreads)
struct IndexMaintenanceTests {
    @Test("the scrub goes through the items in slices from its cursor and starts over at the end")
    func scrubSlices() throws {
        let f = try StoreFixture()
        for i in 0..<5 { try f.donate(try f.item("i\(i)", ["title": .string("item \(i)")])) }
        var cursor = ScrubCursor()
        var seen = 0
        var tables: [String] = []
        var fullTextChecks = 0
        // Slices of two slots until the table cursor starts over: the FTS5 check, then every table.
        var run = 0
        while run < 3 || (cursor.table != 0 && run < 40) {
            defer { run += 1 }
            let r = try f.store.scrub(from: cursor, rows: 2, tables: 2)
            #expect(r.fileProblems.isEmpty && r.checksumFailures.isEmpty && r.fullTextProblem == nil, "\(r)")
            if run < 3 { seen += r.rowsScrubbed }
            if run == 2 { #expect(r.cursor.itemRowID == 0, "a short slice means the end: the next starts over") }
            tables += r.tablesChecked
            if r.fullTextChecked { fullTextChecks += 1 }
            cursor = r.cursor
        }
        #expect(seen == 5)
        #expect(fullTextChecks == 1)
        #expect(tables == ["engagement", "fts_config", "fts_data", "fts_docsize", "fts_idx", "item_vectors", "items", "meta",
                           "rank_dirty", "rank_segments", "rank_terms"], "\(tables)")
        #expect(cursor.table == 0)
    }

    @Test("an item whose stored content no longer matches its checksum is reported by the scrub")
    func checksumFailure() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("good", ["title": "fine"]), try f.item("bad", ["title": "fine too", "rankingHint": 3]))
        let raw = try Database(path: f.dir + "/b/_default.sqlite")
        // Not a full-text column: only the checksum can notice.
        try raw.execute(#"UPDATE items SET attrs = '{"rankingHint":99}' WHERE uid = 'bad'"#)
        let r = try f.store.scrub(from: ScrubCursor(), rows: 100, tables: 1)
        #expect(r.checksumFailures == ["bad"])
        #expect(r.fullTextProblem == nil)
        #expect(f.store.detectedDamage == nil)
    }

    @Test("a damaged full-text index is found by the scrub and rebuilt from the items")
    func fullTextRebuilt() throws {
        let f = try StoreFixture()
        for i in 0..<50 { try f.donate(try f.item("i\(i)", ["title": .string("word\(i) common")])) }
        let raw = try Database(path: f.dir + "/b/_default.sqlite")
        try raw.execute("DELETE FROM fts_data WHERE id > 10")
        let r = try f.store.scrub(from: ScrubCursor(), rows: 100, tables: 10)
        #expect(r.fileProblems.isEmpty, "\(r.fileProblems)")
        #expect(r.fullTextProblem != nil)
        #expect(try f.store.rebuildFullText() == nil)
        #expect(try f.user("common").items.count == 50)
    }

    @Test("items expiring within the window are listed soonest first, expired ones are not")
    func expiring() throws {
        let f = try StoreFixture()
        let now = f.clock.now
        func at(_ s: TimeInterval) -> JSONValue { .string(ISO8601.format(now.addingTimeInterval(s))) }
        for (id, s) in [("gone", -10.0), ("soon", 3600), ("sooner", 60), ("later", 3 * 86400)] {
            let item = try ItemValidator().validate(item: ["uniqueIdentifier": .string(id), "attributeSet": [:], "expirationDate": at(s)])
            try f.donate(item)
        }
        let ids = try f.store.identifiersExpiring(from: now, to: now.addingTimeInterval(86400), limit: 10)
        #expect(ids == ["sooner", "soon"])
        #expect(try f.store.identifiersExpiring(from: now, to: now.addingTimeInterval(86400), limit: 1) == ["sooner"])
    }

    @Test("optimize and a truncating checkpoint leave the index whole and the log empty")
    func optimizeAndCheckpoint() throws {
        let f = try StoreFixture()
        for i in 0..<20 { try f.donate(try f.item("i\(i)", ["title": .string("alpha \(i)")])) }
        try f.store.optimizeFullText()
        #expect(try f.store.checkpoint())
        var st = stat()
        #expect(stat(f.store.path + "-wal", &st) == 0 && st.st_size == 0)
        #expect(try f.user("alpha").items.count == 20)
        #expect(try f.store.check(repair: false).ok)
    }
}
