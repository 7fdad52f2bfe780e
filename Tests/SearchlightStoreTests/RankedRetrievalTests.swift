import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The shared Debian corpus (DESIGN §9) as validated items, for the store's own tests.
enum StoreCorpus {
    static let path: String? = {
        [ProcessInfo.processInfo.environment["SEARCHLIGHT_CORPUS"], "../shared/corpus/debian-packages.jsonl.gz"]
            .compactMap { $0 }.first { FileManager.default.fileExists(atPath: $0) }
    }()

    /// The first `limit` lines of the corpus, as JSON text (none when the corpus is absent).
    static func lines(limit: Int) throws -> [Data] {
        guard let path else { return [] }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "gzip -dc \"$0\" | head -n \"$1\"", path, String(limit)]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return data.split(separator: 0x0A)
    }

    static func load(limit: Int) throws -> [SearchableItem] {
        var items: [SearchableItem] = []
        let validator = ItemValidator()
        for line in try lines(limit: limit) where items.count < limit {
            let o = try JSONValue.parse(Array(line))
            guard let id = o["id"]?.stringValue else { continue }
            var a: [String: JSONValue] = ["contentType": "org.debian.deb-archive"]
            for key in ["title", "contentDescription", "textContent", "keywords"] { a[key] = o[key] }
            var item: [String: JSONValue] = ["uniqueIdentifier": .string(id), "attributeSet": .object(a)]
            if let d = o["domain"]?.stringValue { item["domainIdentifier"] = .string(d.replacingOccurrences(of: "/", with: ".")) }
            items.append(try validator.validate(item: .object(item)))
        }
        return items
    }
}

@Suite("Ranked retrieval", .onOwnThreads)
struct RankedRetrievalTests {
    static func fixture() throws -> StoreFixture {
        try StoreFixture(rankedBuilds: false)
    }

    func ids(_ f: StoreFixture, _ c: [ScoredCandidate]) throws -> [String] {
        try f.store.read { db in
            try c.map { try db.rows("SELECT uid FROM items WHERE rowid = ?", [.integer($0.rowID)]).first?.string(0) ?? "?" }
        }
    }

    @Test("the ranked index answers with the exhaustive ranking's scores and order")
    func smallEquivalence() throws {
        let f = try Self.fixture()
        try f.donate(
            try f.item("a", ["title": "json parser", "textContent": "a fast json parser for the shell"]),
            try f.item("b", ["title": "yaml parser", "textContent": "parses yaml and json documents"]),
            try f.item("c", ["title": "json", "keywords": ["devel", "json"], "rankingHint": 50]),
            try f.item("d", ["title": "parsnip soup", "textContent": "not about json at all, json json"]))
        try f.store.buildRankedIndex()
        for text in ["json", "json pa", "pars", "json parser", "j", "soup", "nothing"] {
            let ranked = try f.store.lexicalCandidates(text, limit: 10)
            let exhaustive = try f.store.lexicalCandidates(text, limit: 10, path: .exhaustive)
            #expect(ranked.usedRankedIndex, "\(text)")
            let described = "\(text): \(try ids(f, ranked.candidates)) vs \(try ids(f, exhaustive.candidates))"
            #expect(ranked.candidates == exhaustive.candidates, "\(described)")
        }
    }
}

/// The writer asks for a build itself: a large import is indexed without waiting for a query.
@Suite("Ranked index builds", .onOwnThreads)
struct RankedBuildTests {
    // Two stores on one file. The first counts the writes as never stopping (idle one hour), so
    // "nothing built before the writes stop" and "the writer asked" are read without a race: with
    // one store at 50 ms, a test thread descheduled for 50 ms could find the build done already.
    // The second stops counting 50 ms after the last write, and the test waits for its build.
    @Test("enough donated items start a ranked build once the writes stop, with no query asking for it")
    func writerAsksForBuild() async throws {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: true)
        options.rankedIndexIdleSeconds = 3600
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        let items = try (0..<RankMaintainer.deltaBuildThreshold).map { try f.item("i\($0)", ["title": .string("item number \($0)")]) }
        _ = try f.store.applySync([.items(items)])
        // The writer asks before it answers the call.
        #expect(f.store.rankMaintainer.buildRequest == (asked: true, byQuery: false))
        #expect(try f.store.summary().rankedIndex?.pending == items.count, "nothing built before the writes stop")

        f.store.close()
        options.rankedIndexIdleSeconds = 0.05
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        _ = try f.store.applySync([.items(items)])
        // No query from here on: only the writer's request can start the build. The build runs on
        // the fresh lane every store of this test process shares (at the normal priority), so the
        // wait is for the other tests' builds too.
        let deadline = Date().addingTimeInterval(60)
        while try f.store.summary().rankedIndex?.pending != 0, Date() < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        let ranked = try f.store.summary().rankedIndex
        #expect(ranked?.pending == 0 && ranked?.items == items.count,
                "\(String(describing: ranked)); lanes: \(f.store.rankMaintainer.laneState), \(f.store.secondsSinceClientWrite) s since the last write")
    }
}

/// Result pages select only the attributes a query fetches (`ItemRecord.selectColumns(fetch:)`):
/// what they return must be exactly the full record's attributes, cut to those asked for.
@Suite("Fetched attributes", .onOwnThreads)
struct FetchedAttributeTests {
    @Test("a page fetching some attributes returns the full record's values of exactly those, by search and by user query")
    func partialFetch() throws {
        let f = try StoreFixture(rankedBuilds: false)
        try f.donate(
            try f.item("a", ["title": "json parser", "textContent": "a fast json parser", "keywords": ["devel", "json"], "rankingHint": 50]),
            try f.item("b", ["title": "yaml", "contentDescription": "json and yaml", "authorNames": ["Ann"], "contentType": "public.text"]),
            try f.item("c", ["displayName": "Jsön", "textContent": "json json", "lastUsedDate": "2026-01-02T03:04:05Z"]))
        func cut(_ items: [JSONValue], _ fetch: [String]) -> [JSONValue] {
            items.map { item in
                var o = item.objectValue ?? [:]
                let attributes = o["attributeSet"]?.objectValue ?? [:]
                o["attributeSet"] = .object(attributes.filter { fetch.contains($0.key) })
                return .object(o)
            }
        }
        let full = try f.store.search(.all).items
        var query = UserQueryRequest(text: "json")
        let fullRanked = try f.store.userQuery(query).items
        #expect(full.count == 3 && fullRanked.count == 3)
        for fetch in [["title"], ["title", "rankingHint"], ["textContent", "keywords", "contentType"], ["lastUsedDate"], ["authorNames", "displayName"], []] {
            #expect(try f.store.search(.all, fetch: fetch).items == cut(full, fetch), "search, fetch \(fetch)")
            query.fetch = fetch
            #expect(try f.store.userQuery(query).items == cut(fullRanked, fetch), "user query, fetch \(fetch)")
        }
    }
}

/// A seeded generator (SplitMix64): the same queries run after run.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The equivalence of the ranked index and the exhaustive ranking over random queries on the
/// shared corpus, through the index's whole life: built, then written (new items above the
/// coverage, deletes, updates, engagement, expirations), then rebuilt. Sizes for `make test`;
/// `SEARCHLIGHT_RANKED_ITEMS=63666 SEARCHLIGHT_RANKED_QUERIES=5000` for the full corpus.
@Suite("Ranked retrieval equals the exhaustive ranking", .serialized, .onOwnThreads)
struct RankedEquivalenceTests {
    static let items = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_ITEMS"] ?? "") ?? 4000
    static let queriesPerPhase = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_RANKED_QUERIES"] ?? "") ?? 700

    /// A query of the test: its class (for the tallies), text, filter queries and limit.
    struct Query {
        var kind: String
        var text: String
        var filters: [String] = []
        var limit: Int
    }

    @Test("rewrites spread thinly over many segments still get rebuilt, so queries stay on the ranked index")
    func spreadRewritesAreRebuilt() throws {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.rankedIndexSegmentDocs = 1000
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
        func text(_ i: Int) -> JSONValue { .string("\(words[i % 8]) \(words[(i / 8) % 8]) report number \(i)") }
        for start in stride(from: 0, to: 12_000, by: 500) {
            let batch = try (start..<(start + 500)).map { try f.item("i\($0)", ["title": text($0), "textContent": text($0 * 7)]) }
            _ = try f.store.applySync([.items(batch)])
        }
        try f.store.buildRankedIndex()
        #expect(try f.store.lexicalCandidates("alpha report", limit: 20, filter: nil).usedRankedIndex)
        // 100 rewrites in each of the twelve 1 000-document segments: under a segment's own
        // threshold (an eighth of it), 1 200 in all, past the 1 024 a query scores one by one.
        let rewritten = try stride(from: 5, to: 12_000, by: 10).map {
            try f.item("i\($0)", ["textContent": .string("bravo rewritten \($0)")], update: true)
        }
        _ = try f.store.applySync([.items(rewritten)])
        try f.store.buildRankedIndex()
        for text in ["alpha report", "bravo", "rewritten", "charlie delta"] {
            let ranked = try f.store.lexicalCandidates(text, limit: 20, filter: nil)
            let exhaustive = try f.store.lexicalCandidates(text, limit: 20, filter: nil, path: .exhaustive)
            #expect(ranked.usedRankedIndex, "\(text): answered by the exhaustive SQL")
            #expect(ranked.candidates.map(\.rowID) == exhaustive.candidates.map(\.rowID), "\(text)")
        }
    }

    final class Tally {
        var total: [String: Int] = [:]
        var ranked: [String: Int] = [:]
        /// Queries of a phase whose delta is past the ranked index's limit (not expected on it).
        var exempt: [String: Int] = [:]
        var mismatches: [String] = []
        var suggestionQueries = 0
        var suggestionsOffered = 0
    }

    @Test("random queries of every class give the exhaustive ranking's top k, scores and ties included",
          .enabled(if: StoreCorpus.path != nil), .timeLimit(.minutes(20)))
    func corpusEquivalence() throws {
        let f = try StoreFixture(rankedBuilds: false)
        // Small segments, so the corpus makes several and the trailing ones are merged.
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.rankedIndexSegmentDocs = max(512, Self.items / 5)
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)

        var random = SeededRandom(state: 0x5EA_2C41_1234)
        let corpus = try StoreCorpus.load(limit: Self.items)
        let now = f.clock.now
        var donated: [SearchableItem] = []
        for (i, var item) in corpus.enumerated() {
            // Boosts on some, a soon expiration on a few, relations between others.
            if i % 7 == 3 { item.attributeSet.rankingHint = Double(Int.random(in: 0...100, using: &random)) }
            if i % 11 == 5 { item.attributeSet.lastUsedDate = now.addingTimeInterval(-Double.random(in: -86_400...2_000_000, using: &random)) }
            if i % 97 == 13 { item.expirationDate = now.addingTimeInterval(2 * 86_400) }
            if i % 89 == 7, i > 0 { item.attributeSet.relatedUniqueIdentifier = corpus[i - 1].uniqueIdentifier }
            donated.append(item)
        }
        let cjk = ["星球大战", "星際大戰 前傳", "東京タワー", "검색엔진 최적화", "数据库 管理 工具", "数据 分析", "日本語 入力"]
        for (i, text) in cjk.enumerated() {
            donated.append(try f.item("cjk-\(i)", ["title": .string(text), "textContent": .string("\(text) package \(cjk[(i + 1) % cjk.count])")]))
        }
        for start in stride(from: 0, to: donated.count, by: 500) {
            _ = try f.store.applySync([.items(Array(donated[start..<min(donated.count, start + 500)]))])
        }
        for i in stride(from: 1, to: corpus.count, by: 53) {
            try f.store.recordEngagement(identifier: corpus[i].uniqueIdentifier, suggestion: nil, weight: Double(i % 5 + 1))
        }
        // Suggestions people chose: their weight counts in completions.
        for word in ["library", "libraries", "python3", "parser", "server", "game"] {
            try f.store.recordEngagement(identifier: nil, suggestion: word, weight: 3)
        }
        try f.store.buildRankedIndex()
        let vocabulary = try Self.vocabulary(f.store)
        let tally = Tally()

        try run(phase: "built", f, vocabulary, &random, tally)

        // Writes after the build: new items above the coverage, deletes, updates and engagement
        // of covered items (rank_dirty), and time passing (expired items vanish).
        let extra = try StoreCorpus.load(limit: Self.items + 300).dropFirst(Self.items).map { item -> SearchableItem in
            var copy = item
            copy.uniqueIdentifier = "new-" + item.uniqueIdentifier
            return copy
        }
        _ = try f.store.applySync([.items(Array(extra))])
        _ = try f.store.applySync([.deleteIdentifiers(stride(from: 2, to: corpus.count, by: 41).map { corpus[$0].uniqueIdentifier })])
        var updates: [SearchableItem] = []
        for i in stride(from: 4, to: corpus.count, by: 37) {
            updates.append(try f.item(corpus[i].uniqueIdentifier, ["textContent": .string("rewritten text about json parsers and the library of \(i)")], update: true))
        }
        _ = try f.store.applySync([.items(updates)])
        for i in stride(from: 6, to: corpus.count, by: 59) {
            try f.store.recordEngagement(identifier: corpus[i].uniqueIdentifier, suggestion: nil, weight: 1)
        }
        f.clock.advance(3 * 86_400)
        // Before a build the rewrites are scored one by one, up to `RankedTopK.deltaLimit`; past
        // it (the full corpus: about 4 650) the queries take the exhaustive SQL by design, and
        // are still compared.
        let pending = try f.store.summary().rankedIndex?.pending ?? 0
        try run(phase: "written", f, vocabulary, &random, tally, expectRanked: pending <= RankedTopK.deltaLimit)

        try f.store.buildRankedIndex()
        try run(phase: "rebuilt", f, vocabulary, &random, tally)

        var lines: [String] = []
        for kind in tally.total.keys.sorted() {
            lines.append("\(kind): \(tally.total[kind]!) queries, \(tally.ranked[kind] ?? 0) by the ranked index")
        }
        lines.append("suggestions compared for \(tally.suggestionQueries) queries (\(tally.suggestionsOffered) suggestions)")
        print("ranked equivalence (\(Self.items) items):\n  " + lines.joined(separator: "\n  "))
        let mismatches = tally.mismatches.count
        #expect(mismatches == 0, "\(tally.mismatches.prefix(10).joined(separator: "\n"))")
        // Every class but the multi-character CJK phrases is served by the ranked index.
        for (kind, total) in tally.total where kind != "cjk" {
            let expected = total - (tally.exempt[kind] ?? 0)
            #expect(tally.ranked[kind] ?? 0 >= expected, "\(kind): \(tally.ranked[kind] ?? 0) of \(expected) by the ranked index")
        }
    }

    struct Vocabulary {
        var frequent: [String]
        var middle: [String]
        var rare: [String]
        var documents: [[String]]
    }

    static func vocabulary(_ store: IndexStore) throws -> Vocabulary {
        try store.read { db in
            let rows = try db.rows("SELECT term, sum(docs) AS n FROM rank_terms GROUP BY term")
            // Words of the text columns; CJK bigrams are the CJK class's.
            var terms: [(String, Int)] = rows.compactMap { r in
                guard let b = r.blob(0), let n = r.int(1), let s = String(validating: b, as: UTF8.self),
                      !s.unicodeScalars.contains(where: TextAnalysis.isCJK) else { return nil }
                return (s, Int(n))
            }
            terms.sort { $0.1 > $1.1 }
            let frequent = terms.prefix(60).map(\.0)
            let middle = terms.filter { (20...800).contains($0.1) }.map(\.0)
            let rare = terms.filter { $0.1 <= 3 }.map(\.0)
            let documents = try db.rows("SELECT title || ' ' || coalesce(contentDescription, '') FROM items ORDER BY rowid LIMIT 3000")
                .compactMap { $0.string(0) }.map { TextAnalysis.words($0).map(String.init) }.filter { $0.count >= 2 }
            return Vocabulary(frequent: frequent, middle: middle, rare: rare, documents: documents)
        }
    }

    func makeQuery(_ v: Vocabulary, _ r: inout SeededRandom) -> Query {
        let limit = [1, 5, 10, 20, 20, 50, 100].randomElement(using: &r)!
        func typed(_ word: String) -> String {
            let n = Int.random(in: 1...max(1, min(6, word.count)), using: &r)
            return String(word.prefix(n))
        }
        switch Int.random(in: 0..<11, using: &r) {
        case 10:
            // A misspelt word: a letter dropped or two swapped (corrections).
            var w = Array(v.middle.randomElement(using: &r)!)
            if w.count > 4, Bool.random(using: &r) { w.swapAt(1, 2) } else if w.count > 3 { w.remove(at: w.count / 2) }
            return Query(kind: "misspelt", text: String(w) + (Bool.random(using: &r) ? " " : ""), limit: limit)
        case 0: return Query(kind: "frequent term", text: v.frequent.randomElement(using: &r)! + " ", limit: limit)
        case 1: return Query(kind: "rare term", text: v.rare.randomElement(using: &r)! + " ", limit: limit)
        case 2: return Query(kind: "middle term", text: v.middle.randomElement(using: &r)!.uppercased() + " ", limit: limit)
        case 3: return Query(kind: "prefix", text: typed((v.frequent + v.middle).randomElement(using: &r)!), limit: limit)
        case 4, 5:
            let words = v.documents.randomElement(using: &r)!
            let k = Int.random(in: 2...min(3, words.count), using: &r)
            let start = Int.random(in: 0...(words.count - k), using: &r)
            var text = words[start..<(start + k)].joined(separator: " ")
            if Bool.random(using: &r) { text = String(text.dropLast(Int.random(in: 0..<min(3, words[start + k - 1].count), using: &r))) } else { text += " " }
            return Query(kind: "several words", text: text, limit: limit)
        case 6:
            let a = v.frequent.randomElement(using: &r)!, b = v.middle.randomElement(using: &r)!
            return Query(kind: "frequent and middle", text: "\(a) \(typed(b))", limit: limit)
        case 7:
            let texts = ["星球", "球大", "大战", "星", "東京", "タワー", "검색", "엔진", "数据", "数据库", "数", "package 数据", "日本語", "前傳 星際"]
            return Query(kind: "cjk", text: texts.randomElement(using: &r)!, limit: limit)
        default:
            let filters = [
                "keywords == \"games\"", "keywords == \"libs\"", "title == \"lib*\"cd", "contentType == \"org.debian.deb-archive\"",
                "textContent == \"json*\"cdw", "rankingHint > 50", "title != \"python*\"", "keywords == \"role::program\"",
            ]
            let text = Bool.random(using: &r) ? v.frequent.randomElement(using: &r)! + " " : typed(v.middle.randomElement(using: &r)!)
            return Query(kind: "filtered", text: text, filters: [filters.randomElement(using: &r)!], limit: limit)
        }
    }

    func run(phase: String, _ f: StoreFixture, _ v: Vocabulary, _ r: inout SeededRandom, _ tally: Tally, expectRanked: Bool = true) throws {
        for _ in 0..<Self.queriesPerPhase {
            let q = makeQuery(v, &r)
            let filter = q.filters.isEmpty ? nil
                : try QueryFront.filter(query: nil, filterQueries: q.filters, limits: Limits(), now: f.clock.now)
            let ranked = try f.store.lexicalCandidates(q.text, limit: q.limit, filter: filter)
            let exhaustive = try f.store.lexicalCandidates(q.text, limit: q.limit, filter: filter, path: .exhaustive)
            tally.total[q.kind, default: 0] += 1
            if ranked.usedRankedIndex { tally.ranked[q.kind, default: 0] += 1 }
            if !expectRanked { tally.exempt[q.kind, default: 0] += 1 }
            if ["prefix", "several words", "frequent and middle", "misspelt", "cjk"].contains(q.kind) {
                var request = UserQueryRequest(text: q.text)
                request.maxResultCount = 0
                request.maxSuggestionCount = 5
                let fast = try f.store.userQuery(request).suggestions
                let slow = try f.store.userQuery(request, path: .exhaustive).suggestions
                tally.suggestionQueries += 1
                tally.suggestionsOffered += slow.count
                if fast != slow { tally.mismatches.append("\(phase) suggestions for \"\(q.text)\": \(fast) vs \(slow)") }
            }
            if ranked.candidates != exhaustive.candidates {
                let firstDifference = (0..<min(ranked.candidates.count, exhaustive.candidates.count))
                    .first { ranked.candidates[$0] != exhaustive.candidates[$0] } ?? min(ranked.candidates.count, exhaustive.candidates.count)
                tally.mismatches.append("\(phase) \(q.kind) \"\(q.text)\" \(q.filters) limit \(q.limit): \(ranked.candidates.count) vs \(exhaustive.candidates.count), first difference at \(firstDifference): \(ranked.candidates.dropFirst(firstDifference).first.map { "\($0)" } ?? "-") vs \(exhaustive.candidates.dropFirst(firstDifference).first.map { "\($0)" } ?? "-")")
            }
        }
    }
}
