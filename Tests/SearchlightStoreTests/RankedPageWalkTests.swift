import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// What `RankedPageTests`' equivalence cannot see: the page walk's exact check drops a document
/// that lacks the driver in its column, so a walk ignoring the postings' column mask would still
/// give FTS5's pages; here the candidates it hands to the check are counted. And a damaged
/// postings blob met in the middle of a page hands the rest of the page to FTS5.
@Suite("The ranked page walk's candidates and hand-over", .serialized, .onOwnThreads)
struct RankedPageWalkTests {
    /// A store whose whole words walk too (`rankedPagesForWholeWords`), with small segments.
    static func fixture(segmentDocs: Int = 65_536) throws -> StoreFixture {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.rankedPagesForWholeWords = true
        options.rankedIndexSegmentDocs = segmentDocs
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        return f
    }

    /// The texts of item `i`: each word of the queries below in the title of some items and only
    /// in the body of others. `quokka` and `quokkas` are rare (their lists merged per segment at
    /// query time); `parser`, `parsing`, `parse` and `zeta`, `zetas` common (the prefix has a
    /// stored union, `PrefixLists`).
    static func texts(_ i: Int) -> (title: String, body: String) {
        switch i % 4 {
        case 0: return ("parser \(i % 40 == 0 ? "zeta" : "tool") \(i % 80 == 0 ? "quokka" : "") \(i)", "notes")
        case 1: return ("other \(i)", "parser parsing \(i % 40 == 1 ? "zetas" : "") \(i % 80 == 1 ? "quokkas" : "") library \(i)")
        case 2: return ("library \(i % 40 == 2 ? "zetas" : "") \(i % 80 == 2 ? "quokkas" : "") \(i)", "parse")
        default: return ("plain \(i)", "library parsing zeta")
        }
    }

    static func donate(_ f: StoreFixture, _ range: Range<Int>, update: Bool = false, _ texts: (Int) -> (title: String, body: String) = RankedPageWalkTests.texts) throws {
        let items = try range.map { i in
            let t = texts(i)
            return try f.item("i\(i)", ["title": .string(t.title), "textContent": .string(t.body)], update: update)
        }
        _ = try f.store.applySync([.items(items)])
    }

    /// Items whose `column` text holds `word` (a prefix when `prefix`), by the same words FTS5 sees.
    static func holding(_ word: String, prefix: Bool, in column: String, _ texts: [Int: (title: String, body: String)]) -> Int {
        texts.values.filter { t in
            (column == "title" ? t.title : t.body).split(separator: " ").contains { prefix ? $0.hasPrefix(word) : $0 == word }
        }.count
    }

    /// One page of `query` large enough to hold every match: it equals the FTS5 page, and the walk
    /// handed the check exactly the documents holding the driver in its column.
    static func expectCandidates(_ f: StoreFixture, _ query: String, word: String, prefix: Bool, column: String,
                                 _ texts: [Int: (title: String, body: String)], _ note: String) throws {
        let filter = try QueryFront.filter(query: query, limits: Limits(), now: f.clock.now)
        #expect(filter.driverTerm != nil, "\(query) has a driver")
        let before = f.store.pageWalks.value
        let page = try f.store.search(filter, fetch: ["title"], limit: 5_000, cursor: nil)
        let after = f.store.pageWalks.value
        let slow = try f.store.search(RankedPageTests.exhaustive(filter), fetch: ["title"], limit: 5_000, cursor: nil)
        #expect(page.items == slow.items, "\(note): \(query) equals FTS5's page")
        #expect(after.walked == before.walked + 1, "\(note): \(query) was walked: \(after)")
        let expected = holding(word, prefix: prefix, in: column, texts)
        let anywhere = holding(word, prefix: prefix, in: "title", texts) + holding(word, prefix: prefix, in: "body", texts)
        #expect(page.items.count == expected, "\(note): \(query) finds every item holding it")
        #expect(anywhere > expected, "\(note): \(query): other columns hold the word too, or this test sees nothing")
        #expect(after.candidates - before.candidates == expected,
                "\(note): \(query): \(after.candidates - before.candidates) candidates for \(expected) items holding it in \(column)")
    }

    @Test("the walk hands the exact check only documents with the driver in its column, from the segments and from the delta")
    func columnMask() throws {
        let f = try Self.fixture()
        var texts: [Int: (title: String, body: String)] = [:]
        for i in 0..<800 { texts[i] = Self.texts(i) }
        try Self.donate(f, 0..<800)
        try f.store.buildRankedIndex()
        let queries: [(String, String, Bool, String)] = [
            ("title == \"pars*\"cdw", "pars", true, "title"),
            ("textContent == \"pars*\"cdw", "pars", true, "body"),
            ("title == \"zet*\"cdw", "zet", true, "title"),
            ("textContent == \"zet*\"cdw", "zet", true, "body"),
            ("title == \"quo*\"cdw", "quo", true, "title"),
            ("textContent == \"quo*\"cdw", "quo", true, "body"),
            ("title == \"library\"cdw", "library", false, "title"),
            ("textContent == \"parser\"cdw", "parser", false, "body"),
        ]
        for (query, word, prefix, column) in queries {
            try Self.expectCandidates(f, query, word: word, prefix: prefix, column: column, texts, "built")
        }
        // The delta: items above the coverage, and covered items rewritten with the columns swapped.
        try Self.donate(f, 800..<900)
        for i in 800..<900 { texts[i] = Self.texts(i) }
        let swapped = { (i: Int) -> (title: String, body: String) in let t = Self.texts(i); return (t.body, t.title) }
        try Self.donate(f, 0..<40, update: true, swapped)
        for i in 0..<40 { texts[i] = swapped(i) }
        for (query, word, prefix, column) in queries {
            try Self.expectCandidates(f, query, word: word, prefix: prefix, column: column, texts, "delta")
        }
    }

    @Test("a damaged postings blob in a later segment hands the rest of the page to FTS5, and the pages stay FTS5's")
    func damagedBlobMidPage() throws {
        let f = try Self.fixture(segmentDocs: 512)
        try Self.donate(f, 0..<2_000)
        try f.store.buildRankedIndex()
        let segments = try f.store.read { db in try db.rows("SELECT id FROM rank_segments WHERE active ORDER BY lo").compactMap { $0.int(0) } }
        try #require(segments.count >= 3, "\(segments.count) segments")
        // Every list a page of "pars*" or "library" could read in the second segment: the terms
        // and the prefix's stored union (its key is 0xFF and the prefix). Damaged before any
        // page reads them: a list read and kept first would be served while the segment is
        // active (its rows are never rewritten in place but here).
        let damage = try Database(path: f.dir + "/b/_default.sqlite")
        let changed = try damage.run("""
            UPDATE rank_terms SET postings = x'00' WHERE segment = ?
            AND (substr(term, 1, 4) = ? OR term = ? OR term = ?)
            """, [.integer(segments[1]), .blob(Array("pars".utf8)), .blob(PrefixLists.key(Array("pars".utf8))), .blob(Array("library".utf8))])
        #expect(changed >= 2)
        damage.close()

        for query in ["title == \"pars*\"cdw", "textContent == \"library\"cdw"] {
            let filter = try QueryFront.filter(query: query, limits: Limits(), now: f.clock.now)
            var cursor: String?
            var pages = 0, handedOverMidPage = 0
            repeat {
                let before = f.store.pageWalks.value
                let fast = try f.store.search(filter, fetch: ["title"], limit: 150, cursor: cursor)
                let after = f.store.pageWalks.value
                let slow = try f.store.search(RankedPageTests.exhaustive(filter), fetch: ["title"], limit: 150, cursor: cursor)
                #expect(fast.items == slow.items && fast.cursor == slow.cursor, "\(query), page after \(cursor ?? "-")")
                // Walked in part (the first segment's documents), then handed over.
                if after.takenOver == before.takenOver + 1, after.candidates > before.candidates { handedOverMidPage += 1 }
                cursor = slow.cursor
                pages += 1
            } while cursor != nil
            #expect(pages >= 3, "\(query): \(pages) pages")
            #expect(handedOverMidPage >= 1, "\(query): a page was handed over to FTS5 in its middle: \(f.store.pageWalks.value)")
        }
    }

    @Test("by default a whole word's page walks from its second ask, on the list it then keeps while its segment is active, with FTS5's rows")
    func wholeWordWalksWhenKept() throws {
        // Default options: whole words are not always walked.
        let f = try StoreFixture(rankedBuilds: false)
        try Self.donate(f, 0..<600)
        try f.store.buildRankedIndex()
        let filter = try QueryFront.filter(query: "textContent == \"library\"cdw", limits: Limits(), now: f.clock.now)
        #expect(filter.driverTerm?.prefix == false)
        /// One first page and one later page; whether the first was walked.
        func pages(_ note: String) throws -> Bool {
            let before = f.store.pageWalks.value
            let fast = try f.store.search(filter, fetch: ["title"], limit: 20, cursor: nil)
            let after = f.store.pageWalks.value
            let slow = try f.store.search(RankedPageTests.exhaustive(filter), fetch: ["title"], limit: 20, cursor: nil)
            #expect(fast.items == slow.items && fast.cursor == slow.cursor && fast.items.count == 20, "\(note): FTS5's first page")
            let fastNext = try f.store.search(filter, fetch: ["title"], limit: 50, cursor: slow.cursor)
            let slowNext = try f.store.search(RankedPageTests.exhaustive(filter), fetch: ["title"], limit: 50, cursor: slow.cursor)
            #expect(fastNext.items == slowNext.items && fastNext.cursor == slowNext.cursor, "\(note): FTS5's next page")
            #expect(after.walked + after.fts == before.walked + before.fts + 1)
            return after.walked == before.walked + 1
        }
        #expect(try !pages("first ask"), "the first ask since the build runs FTS5 (reading the list whole may not pay)")
        #expect(try pages("second ask"), "asked again: walked, the list read and kept")
        #expect(try pages("third ask"), "walked on the kept list")
        // A commit that leaves the segment active keeps its list: still walked.
        try Self.donate(f, 600..<610)
        #expect(try pages("after a commit"), "the list kept across the commit is walked")
        // A build that adds a segment for them leaves the first segment, and its list.
        let first = try f.store.read { db in try RankSnapshot.read(db).segments.map(\.id) }
        try f.store.buildRankedIndex()
        let built = try f.store.read { db in try RankSnapshot.read(db).segments.map(\.id) }
        #expect(built.first == first.first && built.count == 2, "\(first) then \(built)")
        #expect(try pages("after a build"), "the first segment's list is still kept")
        // Rewritten items (the rows and the ranked snapshot's rewritten rowids change) are seen.
        let swapped = { (i: Int) -> (title: String, body: String) in let t = Self.texts(i); return (t.body, t.title) }
        try Self.donate(f, 0..<40, update: true, swapped)
        _ = try pages("after a rewrite")
        #expect(try pages("after a rewrite, again"), "walked over the rewritten rows")
    }
}
