import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// A query across apps (`FederatedUserQuery`) ranks the items of several indexes as one index
/// holding all of them would (Docs/Architecture.md, "Queries").
@Suite("One ranking across indexes", .onOwnThreads)
struct FederatedQueryTests {
    /// Items of varied length and word frequencies; a word's frequency differs between the two
    /// halves, so each half's own statistics would score it differently from the union's.
    static func items(_ f: StoreFixture, count: Int = 120, hints: Bool = false) throws -> [SearchableItem] {
        let words = ["bridge", "natural", "park", "stone", "river", "arch", "canyon", "trail", "desert", "water",
                     "photo", "editor", "image", "music", "player", "audio", "mail", "server", "chess", "board"]
        var out: [SearchableItem] = []
        var seed: UInt64 = 12345
        func next() -> Int {
            seed = seed &* 6364136223846793005 &+ 1442695040888963407
            return Int(seed >> 33)
        }
        for i in 0..<count {
            // The first half leans to the first ten words, the second half to the others.
            let lean = i < count / 2 ? 0 : 10
            let n = 2 + next() % 12
            let text = (0..<n).map { _ in words[next() % 3 == 0 ? next() % 20 : lean + next() % 10] }.joined(separator: " ")
            let title = (0..<(1 + next() % 3)).map { _ in words[next() % 20] }.joined(separator: " ")
            var attributes: [String: JSONValue] = ["title": .string(title), "textContent": .string(text)]
            // Boosts up to 2×: the vector side orders its checked hits by similarity × boost.
            if hints { attributes["rankingHint"] = .number(Double(next() % 101)) }
            out.append(try f.item("item\(i)", attributes))
        }
        return out
    }

    /// Three stores: the first half of the items, the second half, and all of them.
    struct Split {
        let a: StoreFixture, b: StoreFixture, union: StoreFixture
        init(vectors: Bool = false, rankedBuilds: Bool = true, count: Int = 120, hints: Bool = false) throws {
            a = try StoreFixture(rankedBuilds: rankedBuilds, vectors: vectors)
            b = try StoreFixture(rankedBuilds: rankedBuilds, vectors: vectors)
            union = try StoreFixture(rankedBuilds: rankedBuilds, vectors: vectors)
            let all = try FederatedQueryTests.items(a, count: count, hints: hints)
            _ = try a.store.applySync([.items(Array(all[..<(count / 2)]))])
            _ = try b.store.applySync([.items(Array(all[(count / 2)...]))])
            _ = try union.store.applySync([.items(all)])
        }
    }

    /// The federated answer over `stores`: (identifier, score) best first. As the daemon asks
    /// (`BundleCalls.federatedUserQuery`): each index read in one snapshot (`IndexSnapshot`),
    /// or, `snapshots` false, each phase in a read of its own (the daemon past its held indexes,
    /// and every index before issue 31's fix). `betweenPhases` runs after every index's
    /// statistics and before any candidates.
    static func federated(_ request: UserQueryRequest, _ stores: [IndexStore], snapshots useSnapshots: Bool = true,
                          betweenPhases: () throws -> Void = {}) throws -> [(String, Double)] {
        let snapshots = try stores.map { useSnapshots ? try $0.openSnapshot(semantic: request.semantic != nil) : nil }
        defer { for s in snapshots { s?.close() } }
        var statistics = CorpusStatistics()
        for (s, snapshot) in zip(stores, snapshots) { statistics.add(try s.corpusStatistics(request, snapshot: snapshot)) }
        try betweenPhases()
        let tuning = FederatedUserQuery.tuning(request.semantic, statistics: statistics)
        // Asked in order, as the daemon asks them (completions while wanted, the vector cut so far).
        var shards: [ShardCandidates] = []
        for (s, snapshot) in zip(stores, snapshots) {
            shards.append(try s.userQueryCandidates(request, statistics: statistics, tuning: tuning,
                completions: FederatedUserQuery.wantsCompletions(shards, request: request),
                vectorCut: FederatedUserQuery.vectorCut(shards, request: request), snapshot: snapshot))
        }
        if FederatedUserQuery.needsTail(shards, request: request) {
            for i in stores.indices {
                shards[i].tail = try stores[i].userQueryTail(request, statistics: statistics, after: shards[i].lexical, snapshot: snapshots[i])
            }
        }
        let hits = try FederatedUserQuery.rank(shards, semantic: request.semantic, tuning: tuning, limit: request.maxResultCount) {
            (shard, rowids) throws(SearchlightError) -> Set<Int64> in try stores[shard].exactHits(request, among: rowids, snapshot: snapshots[shard])
        }
        for s in snapshots { s?.close() }
        return try hits.map { h in
            let id = try stores[h.shard].read { db in
                try db.rows("SELECT uid FROM items WHERE rowid = ?", [.integer(h.candidate.rowID)]).first?.string(0)
            }
            return (id ?? "?", h.candidate.score)
        }
    }

    /// One index's answer: (identifier, score) best first; the whole best-match ranking (items
    /// with every word, then the tail), or every word alone when the request says `allWords`.
    static func single(_ request: UserQueryRequest, _ store: IndexStore) throws -> [(String, Double)] {
        let r = try store.userQuery(request)
        return zip(r.items.compactMap { $0["uniqueIdentifier"]?.stringValue }, r.scores).map { ($0, $1) }
    }

    /// Equal scores in the same order, and the same items at each score (ties go to the lower
    /// rowid, which differs between the split and the union).
    static func expectSameRanking(_ x: [(String, Double)], _ y: [(String, Double)], _ query: String) {
        #expect(x.map(\.1) == y.map(\.1), "\(query): scores \(x.prefix(5)) vs \(y.prefix(5))")
        let group = { (l: [(String, Double)]) in Dictionary(grouping: l, by: \.1).mapValues { Set($0.map(\.0)) } }
        #expect(group(x) == group(y), "\(query)")
    }

    static let queries = ["bridge", "natural bridge", "stone arch", "photo editor", "music player server", "chess", "canyon trail water", "riv"]

    @Test("lexical: the ranking over A and B is the one index holding A∪B gives, score for score (ranked index)")
    func lexicalRankedIndex() throws {
        let s = try Split()
        for store in [s.a.store, s.b.store, s.union.store] { try store.buildRankedIndex() }
        for q in Self.queries {
            let r = UserQueryRequest(text: q)
            Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), try Self.single(r, s.union.store), q)
        }
    }

    @Test("best-match: the items with some of the words follow those with all of them, scored over the union")
    func bestMatchTail() throws {
        let s = try Split()
        for store in [s.a.store, s.b.store, s.union.store] { try store.buildRankedIndex() }
        // Words that few items hold together: the tail is most of the answer.
        for q in ["natural chess", "the stone and the mail", "photo music server", "arch board"] {
            var r = UserQueryRequest(text: q)
            r.maxResultCount = 30
            let whole = try Self.single(r, s.union.store)
            r.allWords = true
            let strict = try Self.single(r, s.union.store)
            #expect(whole.count > strict.count, "\(q): no tail (\(whole.count) items, \(strict.count) with every word)")
            r.allWords = false
            Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), whole, q)
        }
    }

    @Test("all words (the desktop's search): no tail across indexes either")
    func allWordsAcrossIndexes() throws {
        let s = try Split()
        for store in [s.a.store, s.b.store, s.union.store] { try store.buildRankedIndex() }
        var r = UserQueryRequest(text: "natural chess")
        r.allWords = true
        let strict = try Self.single(r, s.union.store)
        Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), strict, r.text)
        r.allWords = false
        #expect(try Self.federated(r, [s.a.store, s.b.store]).count > strict.count)
    }

    /// The suggestions of a query across `stores`, as the daemon makes them.
    static func suggestions(_ text: String, _ stores: [IndexStore], rare: Bool = false) throws -> [Suggestion] {
        var r = UserQueryRequest(text: text)
        r.maxSuggestionCount = 3
        r.rareCorrections = rare
        var statistics = CorpusStatistics()
        for s in stores { statistics.add(try s.corpusStatistics(r)) }
        return FederatedUserQuery.suggestions(try stores.map { try $0.userQueryCandidates(r, statistics: statistics, tuning: nil) }, request: r)
    }

    @Test("completions: an index after those that gave enough computes none, and the suggestions are the same")
    func completionsOnlyWhileWanted() throws {
        let s = try Split()
        for store in [s.a.store, s.b.store] { try store.buildRankedIndex() }
        var skipped: [String] = []
        for text in ["p", "b", "ch", "natural b", "stone ri", "zz", "wat"] {
            var r = UserQueryRequest(text: text)
            r.maxSuggestionCount = 3
            var statistics = CorpusStatistics()
            for st in [s.a.store, s.b.store] { statistics.add(try st.corpusStatistics(r)) }
            let every = try [s.a.store, s.b.store].map { try $0.userQueryCandidates(r, statistics: statistics, tuning: nil) }
            var asked: [ShardCandidates] = []
            for st in [s.a.store, s.b.store] {
                let wanted = FederatedUserQuery.wantsCompletions(asked, request: r)
                asked.append(try st.userQueryCandidates(r, statistics: statistics, tuning: nil, completions: wanted))
                if !wanted {
                    skipped.append(text)
                    #expect(asked.last!.completions.isEmpty)
                }
            }
            #expect(FederatedUserQuery.suggestions(asked, request: r) == FederatedUserQuery.suggestions(every, request: r), "\(text)")
        }
        // The first index alone completes "p" three ways (park, photo, player): the second is spared.
        #expect(skipped == ["p"], "\(skipped)")
    }

    @Test("vectors: an index of a union one index would prefilter rescores its share of the union's candidates")
    func vectorShareOfUnion() throws {
        let vectors = StoreVectors()
        #expect(vectors.mode(k: 64, unionCount: 64_000) == .automatic, "not loaded")
        var index = VectorIndex(dimension: 8)
        for i in 0..<10_600 { try index.set(Int64(i + 1), QuantizedVector((0..<8).map { Float(($0 * 7 + i) % 5) - 1.5 })) }
        vectors.install(index)
        // A union one index of which is searched exactly (at most `exactLimit`): as alone.
        #expect(vectors.mode(k: 64, unionCount: 20_000) == .automatic)
        // One index of 63 600 rescores 2 000: this sixth of it, a sixth of them (333.3, rounded up).
        #expect(vectors.mode(k: 64, unionCount: 63_600) == .prefiltered(candidates: 334))
        // At least k, the widened search's too.
        #expect(vectors.mode(k: 1024, unionCount: 63_600) == .prefiltered(candidates: 1024))
        // A union of 2 000 000 rescores 4 000 (0.2 %): this index's share 21.2, k at least.
        #expect(vectors.mode(k: 64, unionCount: 2_000_000) == .prefiltered(candidates: 64))
        #expect(vectors.mode(k: 16, unionCount: 2_000_000) == .prefiltered(candidates: 22))
        // No fewer candidates than items: exact.
        #expect(vectors.mode(k: 16_000, unionCount: 63_600) == .exact)
    }

    @Test("the vector cut: the k-th best similarity the indexes asked so far found, none with a filter or too few")
    func vectorCutOfIndexesAsked() throws {
        var r = UserQueryRequest(text: "bridge")
        r.maxResultCount = 20
        var a = ShardCandidates(), b = ShardCandidates()
        a.vectorSearched = (0..<40).map { 0.9 - Float($0) * 0.01 }
        b.vectorSearched = (0..<30).map { 0.895 - Float($0) * 0.01 }
        #expect(FederatedUserQuery.vectorCut([a, b], request: r) == nil, "lexical: no cut")
        r.semantic = SemanticRequest(vector: [1, 0], weight: 0.5)
        #expect(FederatedUserQuery.vectorCut([a], request: r) == nil, "40 found, 64 checked")
        // 70 found: the 64th best of both lists.
        let both = (a.vectorSearched + b.vectorSearched).sorted(by: >)
        #expect(FederatedUserQuery.vectorCut([a, b], request: r) == both[63])
        r.maxResultCount = 40
        #expect(FederatedUserQuery.vectorCut([a, b], request: r) == nil, "80 checked for 40 items")
        r.maxResultCount = 20
        r.filter = SQLFilter.all
        #expect(FederatedUserQuery.vectorCut([a, b], request: r) == nil, "a filter: one index would widen")
    }

    @Test("a word rare over every index is corrected when far rarer than its correction there, the counts summed over the indexes")
    func farRarerAcrossIndexes() throws {
        let a = try StoreFixture(), b = try StoreFixture()
        _ = try a.store.applySync([.items(try (0..<100).map { try a.item("r\($0)", ["title": .string("receive mail \($0)")]) })])
        // In B only, 1 text: the correction's 100 texts are all in A.
        try b.donate(try b.item("typo", ["title": "recieve mail"]))
        let one = try Self.suggestions("recieve ", [a.store, b.store], rare: true)
        #expect(one.contains { $0.kind == "correction" && $0.text == "receive " }, "\(one)")
        // Two texts in each index: 4 over both, no longer rare (each index alone would have corrected it).
        try b.donate(try b.item("typo2", ["title": "recieve"]))
        try a.donate(try a.item("typo3", ["title": "recieve"]), try a.item("typo4", ["title": "recieve"]))
        let four = try Self.suggestions("recieve ", [a.store, b.store], rare: true)
        #expect(!four.contains { $0.kind == "correction" }, "\(four)")
        // A word held in one index with no near word there still counts ("natural" vs "nature").
        let c = try StoreFixture(), d = try StoreFixture()
        try c.donate(try c.item("park", ["title": "natural bridges"]))
        try d.donate(try d.item("n", ["title": "nature"]))
        #expect(try Self.suggestions("natural ", [d.store, c.store], rare: true).isEmpty)
    }

    @Test("lexical: the same from the unbuilt delta and from FTS5's exhaustive scoring with the summed statistics")
    func lexicalDeltaAndExhaustive() throws {
        let s = try Split(rankedBuilds: false)
        for q in Self.queries {
            let r = UserQueryRequest(text: q)
            Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), try Self.single(r, s.union.store), q)
            // sl_bm25 with the union's statistics is bm25 of the union.
            let terms = try UserQueryTerms(q)
            let now = s.a.clock.now.timeIntervalSince1970
            var statistics = CorpusStatistics()
            for st in [s.a.store, s.b.store] { statistics.add(try st.corpusStatistics(r)) }
            var split: [(Double)] = []
            for st in [s.a.store, s.b.store] {
                split += try st.read { db in
                    try IndexStore.exhaustiveCandidates(db, terms: terms, limit: 100, filter: nil, now: now, statistics: statistics).map(\.score)
                }
            }
            let whole = try s.union.store.read { db in
                try IndexStore.exhaustiveCandidates(db, terms: terms, limit: 200, filter: nil, now: now).map(\.score)
            }
            #expect(split.sorted() == whole.sorted(), "\(q)")
        }
    }

    @Test("hybrid: the ranking over A and B is the one index holding A∪B gives")
    func hybrid() throws {
        let s = try Split(vectors: true)
        for store in [s.a.store, s.b.store, s.union.store] { try store.buildRankedIndex() }
        for q in Self.queries {
            var r = UserQueryRequest(text: q)
            r.semantic = SemanticRequest(vector: staticEncoder.embed(q), weight: 0.5)
            Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), try Self.single(r, s.union.store), q)
        }
    }

    @Test("hybrid, more vector hits than one index checks: the second index checks only those above the first's cut, same ranking")
    func hybridWithVectorCut() throws {
        // The background lanes on: 400 items pass the fresh lane's 256, and its segments and
        // merges land while the queries run (each index is read in one snapshot: the next test).
        // The union's fresh lane and the `buildRankedIndex()` below plan the same items: one of
        // them gives way at its switch (RankedFreshSegmentTests' `sameItemsBuiltTwice`); before
        // that, both switched in about 1 run in 8 and the union scored every item twice.
        let s = try Split(vectors: true, count: 400, hints: true)
        for store in [s.a.store, s.b.store, s.union.store] { try store.buildRankedIndex() }
        var cuts = 0
        for q in Self.queries {
            var r = UserQueryRequest(text: q)
            r.maxResultCount = 10
            r.semantic = SemanticRequest(vector: staticEncoder.embed(q), weight: 0.5, minimumSimilarity: -1)
            var statistics = CorpusStatistics()
            for st in [s.a.store, s.b.store] { statistics.add(try st.corpusStatistics(r)) }
            let first = try s.a.store.userQueryCandidates(r, statistics: statistics, tuning: FederatedUserQuery.tuning(r.semantic, statistics: statistics))
            if FederatedUserQuery.vectorCut([first], request: r) != nil { cuts += 1 }
            Self.expectSameRanking(try Self.federated(r, [s.a.store, s.b.store]), try Self.single(r, s.union.store), q)
        }
        #expect(cuts == Self.queries.count, "200 items each, 64 checked: every query cuts")
    }

    @Test("a write and a ranked-index step landing between the statistics and the candidates: the answer is the one snapshot's, score for score")
    func stepBetweenPhases() throws {
        // Nothing built in A and B: their items are the ranked index's delta until the step
        // between the phases builds them (what the fresh lane, a merge or settling does, here at
        // the moment the race needs), after an item that matches the query best is donated to A.
        // Read in one snapshot, each index answers as it was when its statistics were read: the
        // union without that item. Read a phase at a time (before issue 31's fix), A's
        // candidates held the late item, scored with statistics that never counted it (this
        // test then fails: 3 issues).
        try stepBetweenPhases(semantic: false, snapshots: true)
    }

    @Test("hybrid: a write and a ranked-index step landing between the statistics and the candidates: the answer is the one snapshot's, score for score")
    func stepBetweenPhasesHybrid() throws {
        // As `stepBetweenPhases`, semantic on: the late item, donated to A between the phases,
        // has the vector closest to the query (its text is the query's words), so A's vector
        // search (the vectors in memory, which the write updated) finds it first. Read in one
        // snapshot its rowid is not there when the vector hits are checked, and the union's
        // statistics (rows, vector counts: the fusion's tuning) are those without it.
        try stepBetweenPhases(semantic: true, snapshots: true)
    }

    /// The write-between-phases check, lexical or hybrid; `snapshots` false reads a phase at a
    /// time (the daemon past its held indexes, every index before issue 31's fix), which must
    /// fail it (`twoReadsFailHybrid`).
    func stepBetweenPhases(semantic: Bool, snapshots: Bool) throws {
        var late = 0
        for q in Self.queries {
            let s = try Split(vectors: semantic, rankedBuilds: false, count: 400, hints: true)
            try s.union.store.buildRankedIndex()
            var r = UserQueryRequest(text: q)
            r.maxResultCount = 10
            if semantic { r.semantic = SemanticRequest(vector: staticEncoder.embed(q), weight: 0.5, minimumSimilarity: -1) }
            let across = try Self.federated(r, [s.a.store, s.b.store], snapshots: snapshots) { () throws -> Void in
                let words = q.split(separator: " ").map { String($0.hasPrefix("riv") ? "river" : $0) }.joined(separator: " ")
                _ = try s.a.store.applySync([.items([try s.a.item("late", ["title": .string(words), "textContent": .string(words)])])])
                for store in [s.a.store, s.b.store] {
                    let steps = try store.buildRankedIndex()
                    #expect(steps > 0, "a step lands")
                }
            }
            if across.contains(where: { $0.0 == "late" }) { late += 1 }
            Self.expectSameRanking(across, try Self.single(r, s.union.store), q)
        }
        #expect(late == 0, "the late item was in \(late) answers")
    }

    @Test("the hybrid check can fail: read a phase at a time, the late item is in the answers")
    func twoReadsFailHybrid() async throws {
        // Known to fail: recorded as such, so the check above is shown to catch the race.
        await withKnownIssue("a read per phase sees the write between them") {
            try stepBetweenPhases(semantic: true, snapshots: false)
        }
    }

    @Test("an exact title hit in one index ranks above a vector-only near miss in another (\"natural bridges\")")
    func exactHitAcrossIndexes() throws {
        let tags = try StoreFixture(vectors: true), packages = try StoreFixture(vectors: true)
        try tags.donate(try tags.item("park", ["displayName": "Natural Bridges State Park", "title": "Natural Bridges State Park"]))
        try packages.donate(
            try packages.item("bridge-lib", ["title": "libatk-bridge2.0-0", "contentDescription": "AT-SPI 2 toolkit bridge - shared library"]),
            try packages.item("bridges", ["title": "bridge-utils", "contentDescription": "Utilities for configuring the Linux Ethernet bridge"]),
            try packages.item("nature", ["title": "nature-sounds", "contentDescription": "natural landscapes and bridges wallpaper"]))
        var r = UserQueryRequest(text: "natural bridges")
        r.semantic = SemanticRequest(vector: staticEncoder.embed("natural bridges"), weight: 1, minimumSimilarity: -1)
        let ranked = try Self.federated(r, [packages.store, tags.store]).map(\.0)
        // Weight 1: the vector side alone would decide; the exact title hit still comes first.
        #expect(ranked.first == "park", "\(ranked)")
    }
}

