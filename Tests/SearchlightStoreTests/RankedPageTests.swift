import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// `query.search` pages whose driver is one term (`title == "pars*"cdw`) walk the ranked index's
/// postings (`RankedPageWalk`); they must be FTS5's pages exactly: same items, same order, same
/// cursors, through builds, writes above and below the coverage, deletes and expirations.
/// `SEARCHLIGHT_RANKED_ITEMS=63666 SEARCHLIGHT_RANKED_QUERIES=5000` for the full corpus.
@Suite("Ranked pages equal the FTS5 pages", .serialized, .onOwnThreads)
struct RankedPageTests {
    static let items = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_ITEMS"] ?? "") ?? 3000
    static let queriesPerPhase = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_QUERIES"] ?? "") ?? 600

    /// The same filter with FTS5 as its driver: today's SQL path.
    static func exhaustive(_ f: SQLFilter) -> SQLFilter {
        var copy = f
        copy.driverTerm = nil
        return copy
    }

    @Test("a one-word query gets a driver term, with its column; other forms do not")
    func driverTerms() throws {
        func term(_ q: String, _ filters: [String] = []) throws -> FullTextTerm? {
            try QueryFront.filter(query: q, filterQueries: filters, limits: Limits(), now: Date()).driverTerm
        }
        #expect(try term("title == \"pars*\"cdw") == FullTextTerm(column: "title", word: "pars", prefix: true))
        #expect(try term("textContent == \"Library\"c") == FullTextTerm(column: "textContent", word: "Library", prefix: false))
        #expect(try term("keywords == \"libs\"", ["rankingHint > 5"]) == FullTextTerm(column: "keywords", word: "libs", prefix: false))
        #expect(try term("title == \"json pars*\"cdw") == nil, "two words")
        #expect(try term("title == \"pars*\"cdt") == nil, "tokenized")
        #expect(try term("title == \"*pars*\"cd") == nil, "infix")
        #expect(try term("* == \"pars*\"cd") == nil, "every attribute")
        #expect(try term("title == \"数据*\"cd") == nil, "CJK")
        #expect(try term("title == \"pars*\"cd || title == \"json\"") == nil, "or")
        #expect(try term("title == \"pars*\"cd", ["keywords == \"libs\""]) == nil, "two drivers")
    }

    @Test("past the delta limit the walk hands over to FTS5 from the last rowid it looked at, and every page stays FTS5's")
    func largeDeltaHandsOver() throws {
        let f = try StoreFixture(rankedBuilds: false)
        func items(_ range: Range<Int>) throws -> [SearchableItem] {
            // Rare above the coverage: a page looks at more than the limit of delta items.
            try range.map { i in try f.item("i\(i)", ["title": .string(i % (i < 200 ? 4 : 600) == 0 ? "parser \(i)" : "other \(i)")]) }
        }
        _ = try f.store.applySync([.items(try items(0..<200))])
        try f.store.buildRankedIndex()
        _ = try f.store.applySync([.items(try items(200..<(400 + RankedTopK.deltaLimit)))])
        let filter = try QueryFront.filter(query: "title == \"pars*\"cd", limits: Limits(), now: f.clock.now)
        var cursor: String?
        var seen = 0
        repeat {
            let fast = try f.store.search(filter, fetch: ["title"], limit: 40, cursor: cursor)
            let slow = try f.store.search(Self.exhaustive(filter), fetch: ["title"], limit: 40, cursor: cursor)
            #expect(fast.items == slow.items && fast.cursor == slow.cursor, "page after \(cursor ?? "-")")
            seen += fast.items.count
            cursor = slow.cursor
        } while cursor != nil
        #expect(seen == 50 + (200..<(400 + RankedTopK.deltaLimit)).filter { $0 % 600 == 0 }.count)
        #expect(f.store.pageWalks.value.takenOver > 0, "\(f.store.pageWalks.value)")
    }

    @Test("random term and prefix pages with column filters, modifiers, cursors, writes, deletes and expiry equal the FTS5 pages",
          .enabled(if: StoreCorpus.path != nil), .timeLimit(.minutes(20)))
    func corpusEquivalence() throws {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.rankedIndexSegmentDocs = max(512, Self.items / 4)
        // Whole words walk too, so that the walk's answers for them are checked as well.
        options.rankedPagesForWholeWords = true
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)

        var random = SeededRandom(state: 0x9A6E_5EED)
        let corpus = try StoreCorpus.load(limit: Self.items)
        let now = f.clock.now
        var donated: [SearchableItem] = []
        for (i, var item) in corpus.enumerated() {
            if i % 97 == 13 { item.expirationDate = now.addingTimeInterval(2 * 86_400) }
            if i % 89 == 7, i > 0 { item.attributeSet.relatedUniqueIdentifier = corpus[i - 1].uniqueIdentifier }
            // Accents and capitals, so `c` and `d` matter.
            if i % 31 == 4 { item.attributeSet.title = (item.attributeSet.title ?? "") + " Pârsér Ĺibrary" }
            donated.append(item)
        }
        for start in stride(from: 0, to: donated.count, by: 500) {
            _ = try f.store.applySync([.items(Array(donated[start..<min(donated.count, start + 500)]))])
        }
        try f.store.buildRankedIndex()
        let words = try Self.words(f.store)
        var mismatches: [String] = []
        var pages = 0

        try run(phase: "built", f, words, &random, &mismatches, &pages)
        let built = f.store.pageWalks.value
        #expect(built.walked > 0 && built.fts == 0, "\(built)")

        // Writes: new items above the coverage (the delta), deletes, updates of covered items
        // (rank_dirty), and time passing (expired items and their related ones vanish).
        let extra = try StoreCorpus.load(limit: Self.items + 200).dropFirst(Self.items).map { item -> SearchableItem in
            var copy = item
            copy.uniqueIdentifier = "new-" + item.uniqueIdentifier
            return copy
        }
        _ = try f.store.applySync([.items(Array(extra))])
        _ = try f.store.applySync([.deleteIdentifiers(stride(from: 2, to: corpus.count, by: 23).map { corpus[$0].uniqueIdentifier })])
        var updates: [SearchableItem] = []
        for i in stride(from: 4, to: corpus.count, by: 29) {
            updates.append(try f.item(corpus[i].uniqueIdentifier,
                ["title": .string("parsing library \(i)"), "textContent": .string("rewritten text about json parsers and the library of \(i)")],
                update: true))
        }
        _ = try f.store.applySync([.items(updates)])
        f.clock.advance(3 * 86_400)
        let pending = try f.store.summary().rankedIndex?.pending ?? 0
        #expect(pending > 100)
        try run(phase: "written", f, words, &random, &mismatches, &pages)

        try f.store.buildRankedIndex()
        try run(phase: "rebuilt", f, words, &random, &mismatches, &pages)

        let tally = f.store.pageWalks.value
        print("ranked pages (\(Self.items) items): \(pages) pages compared; by the walk \(tally.walked), handed over to FTS5 \(tally.takenOver), FTS5 alone \(tally.fts)")
        #expect(mismatches.isEmpty, "\(mismatches.count) mismatches:\n\(mismatches.prefix(10).joined(separator: "\n"))")
        #expect(tally.walked > pages / 2, "most pages are walked: \(tally)")
    }

    /// Words of the text columns, from the ranked index's dictionary.
    static func words(_ store: IndexStore) throws -> [String] {
        try store.read { db in
            try db.rows("SELECT DISTINCT term FROM rank_terms WHERE docs >= 2 AND length(term) >= 3").compactMap { r in
                guard let b = r.blob(0), b.first != 0xFF, b.first != 0xFE, let s = String(validating: b, as: UTF8.self),
                      !s.unicodeScalars.contains(where: TextAnalysis.isCJK) else { return nil }
                return s
            }
        }
    }

    func makeQuery(_ words: [String], _ r: inout SeededRandom) -> (query: String, filters: [String]) {
        let column = ["title", "title", "textContent", "contentDescription", "keywords"].randomElement(using: &r)!
        var word = words.randomElement(using: &r)!
        let prefix = Bool.random(using: &r)
        if prefix { word = String(word.prefix(Int.random(in: 1...min(6, word.count), using: &r))) }
        switch Int.random(in: 0..<4, using: &r) {
        case 0: word = word.uppercased()
        case 1: word = word.replacingOccurrences(of: "a", with: "â").replacingOccurrences(of: "e", with: "é")
        default: break
        }
        let modifiers = ["", "c", "cd", "cdw", "w", "dw", "cw"].randomElement(using: &r)!
        let query = "\(column) == \"\(word)\(prefix ? "*" : "")\"\(modifiers)"
        let filters = [[], [], [], ["rankingHint > 50"], ["contentType == \"org.debian.deb-archive\""], ["title != \"lib*\"cd"], ["keywords == \"libs\""]]
            .randomElement(using: &r)!
        return (query, filters)
    }

    func run(phase: String, _ f: StoreFixture, _ words: [String], _ r: inout SeededRandom, _ mismatches: inout [String], _ pages: inout Int) throws {
        let maxRowID = try f.store.read { db in try db.intScalar("SELECT max(rowid) FROM items") }
        for _ in 0..<Self.queriesPerPhase {
            let (query, filters) = makeQuery(words, &r)
            let filter = try QueryFront.filter(query: query, filterQueries: filters, limits: Limits(), now: f.clock.now)
            let limit = [1, 2, 5, 20, 20, 100].randomElement(using: &r)!
            // From the start, or from any rowid (a cursor is a rowid).
            var cursor: String? = Int.random(in: 0..<4, using: &r) == 0 ? String(Int.random(in: 0...maxRowID, using: &r)) : nil
            for page in 0..<3 {
                let fetch = ["title"]
                let fast = try f.store.search(filter, fetch: fetch, limit: limit, cursor: cursor)
                let slow = try f.store.search(Self.exhaustive(filter), fetch: fetch, limit: limit, cursor: cursor)
                pages += 1
                if fast.items != slow.items || fast.cursor != slow.cursor {
                    mismatches.append("\(phase) \(query) \(filters) limit \(limit) cursor \(cursor ?? "-") page \(page): "
                        + "\(fast.items.count) items, cursor \(fast.cursor ?? "-") vs \(slow.items.count), \(slow.cursor ?? "-")")
                    break
                }
                var encoded = EncodedItems()
                let next = try f.store.search(filter, fetch: fetch, limit: limit, cursor: cursor, into: &encoded)
                if next != slow.cursor || encoded.count != slow.items.count {
                    mismatches.append("\(phase) \(query) encoded page \(page): \(encoded.count), \(next ?? "-") vs \(slow.items.count), \(slow.cursor ?? "-")")
                }
                guard let c = slow.cursor else { break }
                cursor = c
            }
        }
    }
}
