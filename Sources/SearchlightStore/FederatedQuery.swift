import Foundation
import SearchlightSemantic
import SearchlightWire

/// The statistics bm25 reads from a full-text index (its rows, their tokens, and how many rows
/// match each phrase of the query alone), summable over several indexes: a query across apps
/// scores every index's items with the sum (Elasticsearch's `dfs_query_then_fetch`), so that
/// its scores are those of one index holding every app's items, and comparable.
public struct CorpusStatistics: Sendable, Equatable {
    public var rows: Int64 = 0
    public var tokens: Int64 = 0
    /// One per different word of the query (`UserQueryTerms.terms`), in order.
    public var hits: [Int64] = []
    /// The vectors of the indexes and how many of them the transformer made: the fusion's
    /// constants are chosen from the sum (`SemanticRequest.tuning`).
    public var vectors = 0
    public var refined = 0

    public init(rows: Int64 = 0, tokens: Int64 = 0, hits: [Int64] = [], vectors: Int = 0, refined: Int = 0) {
        self.rows = rows
        self.tokens = tokens
        self.hits = hits
        self.vectors = vectors
        self.refined = refined
    }

    /// Adds another index's statistics of the same query.
    public mutating func add(_ other: CorpusStatistics) {
        rows += other.rows
        tokens += other.tokens
        if hits.isEmpty { hits = [Int64](repeating: 0, count: other.hits.count) }
        if hits.count == other.hits.count { for i in hits.indices { hits[i] += other.hits[i] } }
        vectors += other.vectors
        refined += other.refined
    }
}

/// One index's candidates for a user query across apps: its lexical top-k (every word, then
/// the best-match tail) scored with the summed statistics, its vector top-k, which of its
/// lexical hits are exact, and its suggestions.
/// `FederatedUserQuery.rank` fuses them all at once.
public struct ShardCandidates: Sendable {
    /// The items with every word, best first (all of them when fewer than the limit).
    public var lexical: [ScoredCandidate] = []
    /// The best-match tail (`IndexStore.userQueryTail`): items with some of the words, none of
    /// `lexical`, best first by bm25 over the words searched; set only when
    /// `FederatedUserQuery.needsTail`.
    public var tail: [ScoredCandidate] = []
    public var vector: [VectorMatch] = []
    /// Each vector hit's similarity times its boost, the order of `vector` (merged by it).
    public var vectorScores: [Float] = []
    /// The similarities the vector search found (`FederatedUserQuery.vectorCut` of the next index).
    public var vectorSearched: [Float] = []
    /// Near-duplicate flags of the vector hits (`VectorIndex.nearDuplicates`), or empty.
    public var folded: [Bool] = []
    /// Completions of the word being typed.
    public var completions: [Suggestion] = []
    /// For each word no index searched holds (`UserQueryTerms.Word.key`), its nearest word here.
    public var nearest: [String: NearTerm] = [:]

    public init() {}
}

/// What the first phase of a query across indexes read of the ranked index, for the second.
enum KeptPreparation {
    case prepared(RankedTopK.Prepared)
    /// The ranked index cannot answer (the exhaustive SQL does).
    case unavailable

    var prepared: RankedTopK.Prepared? { if case .prepared(let p) = self { p } else { nil } }
    var isUnavailable: Bool { if case .unavailable = self { true } else { false } }
}

/// One index's part of one user query across indexes (Docs/Architecture.md, "Queries"): a
/// reader of the index held with one read transaction open, from its statistics to its items,
/// so that every phase reads one snapshot (a ranked-index step or a write committed meanwhile
/// is seen by none of them: the statistics summed and the candidates scored with them are of
/// the same rows), and the ranked index is prepared once. `IndexStore.openSnapshot`; `close()`
/// (or deinit) ends the transaction and gives the reader back. One thread at a time.
public final class IndexSnapshot {
    public let store: IndexStore
    /// The query's time, one for every phase.
    let now: Double
    private var db: Database?
    private let background: Bool
    var kept: KeptPreparation?

    init(store: IndexStore) throws(SearchlightError) {
        self.store = store
        now = store.options.clock().timeIntervalSince1970
        background = BackgroundPriority.isCurrentThreadBackground
        let db = try store.checkoutReader(background: background)
        db.postingCache?.needsCheck = true
        do {
            // DEFERRED: the snapshot is taken at the first read (the statistics).
            _ = try db.run("BEGIN DEFERRED")
        } catch {
            store.checkin(db, background: background)
            throw SearchlightError(.indexUnavailable, "could not begin a read of index \(store.path): \(error)")
        }
        self.db = db
    }

    /// Runs `body` on the held reader, inside the transaction, with the budget.
    func run<T>(budget: QueryBudget?, _ body: (Database) throws -> T) throws(SearchlightError) -> T {
        guard let db else { throw SearchlightError(.internalError, "index snapshot used after close") }
        return try store.run(on: db, budget: budget, body)
    }

    /// Ends the read transaction and gives the reader back. Idempotent.
    public func close() {
        guard let db else { return }
        self.db = nil
        kept = nil
        db.unionScratch.reclaim()
        if db.isInTransaction { _ = try? db.run("COMMIT") }
        if db.isInTransaction { _ = try? db.run("ROLLBACK") }
        store.checkin(db, background: background)
    }

    deinit { close() }
}

extension IndexStore {
    /// A read of this index held for one query across indexes (`IndexSnapshot`). Vectors are
    /// loaded first, never while the snapshot is held (loading them waits for the writer).
    public func openSnapshot(semantic: Bool) throws(SearchlightError) -> IndexSnapshot {
        if semantic, hasVectors { try loadVectors() }
        return try IndexSnapshot(store: self)
    }

    /// `body` in `snapshot`'s transaction, else in a read transaction of its own.
    func queryRead<T>(_ snapshot: IndexSnapshot?, budget: QueryBudget?, _ body: (Database) throws -> T) throws(SearchlightError) -> T {
        if let snapshot { return try snapshot.run(budget: budget, body) }
        return try read(budget: budget) { db in try db.transaction("DEFERRED") { try body(db) } }
    }
}

extension IndexStore {
    /// The first phase of a query across indexes: this index's `CorpusStatistics` for the query,
    /// the same numbers bm25 would read here.
    /// With `snapshot` (of this index), read in its transaction, and what the ranked index
    /// prepared is kept there for `userQueryCandidates`.
    public func corpusStatistics(_ request: UserQueryRequest, budget: QueryBudget? = nil, snapshot: IndexSnapshot? = nil)
        throws(SearchlightError) -> CorpusStatistics
    {
        let terms = try request.terms(maxTerms: options.limits.maxQueryTerms)
        let now = snapshot?.now ?? options.clock().timeIntervalSince1970
        var counts = (vectors: 0, refined: 0)
        if hasVectors, request.semantic != nil {
            // An open snapshot loaded them before its transaction began.
            if snapshot == nil { try loadVectors() }
            counts = vectors.counts ?? (0, 0)
        }
        var statistics = try queryRead(snapshot, budget: budget) { db throws -> CorpusStatistics in
            do {
                guard !terms.words.isEmpty else { return CorpusStatistics() }
                if formatVersion >= RankWriter.firstFormat,
                    let phrases = QueryPhrase.phrases(terms, tokenizer: try db.fullTextTokenizer())
                {
                    let topK = RankedTopK(db: db, phrases: phrases, limit: 1, filter: nil, now: now, store: self)
                    if let snapshot {
                        if let p = try topK.prepareKept() {
                            snapshot.kept = .prepared(p)
                            return p.statistics
                        }
                        snapshot.kept = .unavailable
                    } else if let s = try topK.statistics() {
                        return s
                    }
                }
                // FTS5's own: the table's totals and, per phrase, the rows it matches alone.
                guard let totals = try RankedTopK.totals(db) else { return CorpusStatistics(hits: terms.terms.map { _ in 0 }) }
                var hits: [Int64] = []
                for term in terms.terms {
                    try budget?.check()
                    hits.append(try db.scalar("SELECT count(*) FROM fts WHERE fts MATCH ?", [.text(term)]).flatMap {
                        if case .integer(let n) = $0 { n } else { nil }
                    } ?? 0)
                }
                return CorpusStatistics(rows: totals.rows, tokens: totals.tokens, hits: hits)
            }
        }
        statistics.vectors = counts.vectors
        statistics.refined = counts.refined
        return statistics
    }

    /// The second phase: this index's candidates, lexical ones scored with `statistics` (the sum
    /// over every index searched), vector ones floored by `tuning`. `completions`: whether the
    /// answer still needs completions from this index (`FederatedUserQuery.wantsCompletions` of
    /// the indexes asked before it): the answer takes them in index order, so once the earlier
    /// indexes gave enough, this one's would be left out anyway. `vectorCut`: its vector hits
    /// below it are not checked (`FederatedUserQuery.vectorCut` of the indexes asked before).
    /// With `snapshot`: in its transaction, from what `corpusStatistics` prepared there.
    public func userQueryCandidates(_ request: UserQueryRequest, statistics: CorpusStatistics, tuning: FusionTuning?,
                                    budget: QueryBudget? = nil, completions: Bool = true, vectorCut: Float? = nil,
                                    snapshot: IndexSnapshot? = nil)
        throws(SearchlightError) -> ShardCandidates
    {
        let terms = try request.terms(maxTerms: options.limits.maxQueryTerms)
        let now = snapshot?.now ?? options.clock().timeIntervalSince1970
        let semantic = hasVectors ? request.semantic : nil
        if semantic != nil, snapshot == nil { try loadVectors() }
        return try queryRead(snapshot, budget: budget) { db throws -> ShardCandidates in
            do {
                var out = ShardCandidates()
                // What the statistics prepared serves once: its unions go back to the connection below.
                let kept = snapshot?.kept
                snapshot?.kept = nil
                if request.maxResultCount > 0 {
                    if !terms.words.isEmpty {
                        out.lexical = try lexicalCandidates(db, terms: terms, limit: request.maxResultCount, filter: request.filter, now: now,
                            path: .automatic, statistics: statistics, kept: kept).candidates
                    }
                }
                if kept?.prepared != nil { db.unionScratch.reclaim() }
                if request.maxResultCount > 0 {
                    if let semantic, let tuning {
                        var scores: [Int64: Float] = [:]
                        out.vector = try vectorCandidates(db, query: semantic.vector, limit: request.maxResultCount, filter: request.filter,
                            now: now, minimumSimilarity: tuning.minimumSimilarity, budget: budget, unionVectors: statistics.vectors,
                            cut: request.filter == nil ? vectorCut : nil, searched: { out.vectorSearched = $0 }) { scores[$0] = $1 }
                        out.vectorScores = out.vector.map { scores[$0.rowid] ?? $0.similarity }
                        out.folded = tuning.fold.map { vectors.nearDuplicates(out.vector.map(\.rowid), threshold: $0.similarity, depth: $0.depth) } ?? []
                    }
                }
                if request.maxSuggestionCount > 0 {
                    // A word another app has is no misspelling unless it is rare over all of them:
                    // corrections for words no index searched holds, or far rarer than the correction.
                    var present: [String: Int64] = [:]
                    if statistics.hits.count == terms.distinctWords.count {
                        for (w, n) in zip(terms.distinctWords, statistics.hits) where n > 0 { present[w.key] = n }
                    }
                    (out.completions, out.nearest) = try federatedSuggestions(for: request.text, terms: terms,
                        limit: request.maxSuggestionCount, db: db, budget: budget, present: present, rare: request.rareCorrections,
                        completions: completions)
                }
                return out
            }
        }
    }

    /// Between the second phase and the last, when `FederatedUserQuery.needsTail` says so: this
    /// index's best-match tail (`bestMatchTail`), scored with `statistics`, none of `after` (this
    /// index's items with every word, all of them: the union's are fewer than the limit).
    /// Asked only then, because an index with fewer than the limit is common where the union
    /// has enough, and the tail (FTS5's bm25 over an OR of the words) is the costly part.
    public func userQueryTail(_ request: UserQueryRequest, statistics: CorpusStatistics, after: [ScoredCandidate],
                              budget: QueryBudget? = nil, snapshot: IndexSnapshot? = nil) throws(SearchlightError) -> [ScoredCandidate]
    {
        let terms = try request.terms(maxTerms: options.limits.maxQueryTerms)
        let now = snapshot?.now ?? options.clock().timeIntervalSince1970
        return try queryRead(snapshot, budget: budget) { db in
            try bestMatchTail(db, terms: terms, after: after, limit: request.maxResultCount, filter: request.filter, now: now,
                statistics: statistics)
        }
    }

    /// Which of `rowids` are exact hits of the request's words (`exactHits`: the title or
    /// displayName is the words, or they stand together as a phrase), asked by
    /// `FederatedUserQuery.rank` for the lexical hits that a near miss passed in the fusion only.
    public func exactHits(_ request: UserQueryRequest, among rowids: [Int64], budget: QueryBudget? = nil,
                          snapshot: IndexSnapshot? = nil) throws(SearchlightError) -> Set<Int64> {
        let terms = try request.terms(maxTerms: options.limits.maxQueryTerms)
        return try queryRead(snapshot, budget: budget) { db in try exactHits(db, terms: terms, among: rowids) }
    }

    /// The last phase: the items of `rowids`, in order, written as `userQuery` writes them;
    /// answers, per rowid, whether it was still there.
    public func writeUserQueryItems(_ rowids: [Int64], fetch: [String]?, budget: QueryBudget? = nil,
                                    into items: inout EncodedItems, snapshot: IndexSnapshot? = nil) throws(SearchlightError) -> [Bool]
    {
        let fetch = fetch.map(Set.init)
        let sql = "SELECT \(ItemRecord.selectColumns(fetch: fetch)) FROM items WHERE items.rowid = ?"
        let writer = WireItemWriter(fetch: fetch)
        let found = try queryRead(snapshot, budget: budget) { db throws -> [Bool] in
            do {
                let s = try db.statement(sql)
                var found: [Bool] = []
                for rowid in rowids {
                    try budget?.check()
                    s.reset()
                    defer { s.reset() }
                    try s.bind(.integer(rowid), at: 1)
                    guard try s.step() else {
                        found.append(false)
                        continue
                    }
                    items.append { writer.write(s, offset: 0, to: &$0) }
                    found.append(true)
                }
                return found
            }
        }
        // What the user is shown is refined first (`RefinementOrder`).
        noteQueryHits(zip(rowids, found).filter(\.1).map(\.0))
        return found
    }
}

/// One ranking over the candidates of several indexes (Docs/Architecture.md, "Queries"): the
/// lexical lists merged by their scores (comparable: `CorpusStatistics`), the vector lists by
/// boosted similarity, one `HybridFusion.fuse` over the union keyed by (index, rowid), one
/// `demoteNearMisses`: the ranking one index holding every app's items would give.
public enum FederatedUserQuery {
    /// One item of the answer: the index it is in (position in the shards given) and its
    /// candidate (its rowid in that index; ranks and score over the union; lower is better, as in
    /// `UserQueryResult.scores`).
    public struct Hit: Sendable {
        public var shard: Int
        public var candidate: FusedCandidate
    }

    /// The suggestions of a query across apps: the indexes' completions (each once, in index
    /// order), then one correction where a word no index holds, or one far rarer over all of
    /// them than its correction (`IndexStore.farRarer`, counts summed), has a near word in some
    /// index: the nearest, then the one with the most documents over all the indexes.
    public static func suggestions(_ shards: [ShardCandidates], request: UserQueryRequest) -> [Suggestion] {
        var out: [Suggestion] = []
        for shard in shards {
            for c in shard.completions where out.count < request.maxSuggestionCount && !out.contains(where: { $0.text == c.text }) { out.append(c) }
        }
        guard out.count < request.maxSuggestionCount, let terms = try? request.terms(maxTerms: .max) else { return out }
        var documents: [String: [String: Int]] = [:]
        var distance: [String: [String: Int]] = [:]
        var typed: [String: Int] = [:]
        for shard in shards {
            for (key, near) in shard.nearest {
                typed[key, default: 0] += near.typedDocuments
                // An empty term: the index holds the word and has no word near it (its count above).
                guard !near.term.isEmpty else { continue }
                documents[key, default: [:]][near.term, default: 0] += near.documents
                distance[key, default: [:]][near.term] = near.distance
            }
        }
        var replacements: [String: String] = [:]
        for (key, candidates) in distance {
            let best = candidates.keys.min { a, b in
                let (da, db) = (candidates[a]!, candidates[b]!)
                if da != db { return da < db }
                let (na, nb) = (documents[key]![a]!, documents[key]![b]!)
                return na != nb ? na > nb : a < b
            }
            if let best, IndexStore.farRarer(typed: typed[key] ?? 0, documents: documents[key]![best]!) { replacements[key] = best }
        }
        if let c = IndexStore.correction(text: request.text, terms: terms, replacements: replacements) { out.append(c) }
        return out
    }

    /// Whether the index after `shards` (those asked so far, in index order) still has to
    /// compute its completions: `suggestions` takes the completions of the indexes in order,
    /// each once, and stops at `maxSuggestionCount`; past that a later index's are never shown.
    public static func wantsCompletions(_ shards: [ShardCandidates], request: UserQueryRequest) -> Bool {
        guard request.maxSuggestionCount > 0 else { return false }
        var texts: Set<String> = []
        for shard in shards { for c in shard.completions { texts.insert(c.text) } }
        return texts.count < request.maxSuggestionCount
    }

    /// The similarity below which the next index's vector hits need no check: the
    /// `IndexStore.vectorChecks`-th best that the indexes asked so far found. One index holding
    /// them all would check its that many best hits, and any hit below this is not among them
    /// (more items only raise that bound). Nil with a filter (one index would widen its search
    /// when too few hits pass it) or when fewer were found. Six indexes checked 384 hits in SQL
    /// a query where one index of their items checks 64.
    public static func vectorCut(_ shards: [ShardCandidates], request: UserQueryRequest) -> Float? {
        guard request.semantic != nil, request.filter == nil else { return nil }
        let k = IndexStore.vectorChecks(limit: request.maxResultCount)
        var found = shards.flatMap(\.vectorSearched)
        guard found.count >= k else { return nil }
        found.sort(by: >)
        return found[k - 1]
    }

    /// Whether the answer has a best-match tail (`IndexStore.userQueryTail` of each index): the
    /// items with every word over all the indexes are fewer than the limit, and the request
    /// does not keep every word (the desktop role).
    public static func needsTail(_ shards: [ShardCandidates], request: UserQueryRequest) -> Bool {
        !request.allWords && request.maxResultCount > 0 && shards.reduce(0) { $0 + $1.lexical.count } < request.maxResultCount
    }

    /// The fusion's constants for the indexes whose statistics were summed into `statistics`.
    public static func tuning(_ semantic: SemanticRequest?, statistics: CorpusStatistics) -> FusionTuning? {
        semantic?.tuning { (statistics.vectors, statistics.refined) }
    }

    /// The best `limit` items of `shards`, best first. `exact(shard, rowids)`: which of those
    /// lexical hits of that shard are exact (`IndexStore.exactHits`); asked, as in one index,
    /// only for the items with every word that a near miss passed in the fusion.
    public static func rank(_ shards: [ShardCandidates], semantic: SemanticRequest?, tuning: FusionTuning?, limit: Int,
                            exact exactHits: (Int, [Int64]) throws(SearchlightError) -> Set<Int64>) throws(SearchlightError) -> [Hit] {
        // Keys over the union: lexical hits first, in merged order, so that ties go to the
        // better lexical hit as they do inside one index.
        var keys: [(shard: Int, rowid: Int64)] = []
        var keyOf: [Int: [Int64: Int64]] = [:]
        func key(_ shard: Int, _ rowid: Int64) -> Int64 {
            if let k = keyOf[shard]?[rowid] { return k }
            keys.append((shard, rowid))
            keyOf[shard, default: [:]][rowid] = Int64(keys.count - 1)
            return Int64(keys.count - 1)
        }
        typealias Lexical = (score: Double, shard: Int, rowid: Int64)
        var strict: [Lexical] = [], tail: [Lexical] = []
        var vector: [(score: Float, similarity: Float, folded: Bool, shard: Int, rank: Int, rowid: Int64)] = []
        for (s, shard) in shards.enumerated() {
            for c in shard.lexical { strict.append((c.score, s, c.rowID)) }
            for c in shard.tail { tail.append((c.score, s, c.rowID)) }
            for (i, m) in shard.vector.enumerated() {
                vector.append((i < shard.vectorScores.count ? shard.vectorScores[i] : m.similarity, m.similarity,
                    i < shard.folded.count && shard.folded[i], s, i, m.rowid))
            }
        }
        let byScore = { (a: Lexical, b: Lexical) in a.score != b.score ? a.score < b.score : (a.shard, a.rowid) < (b.shard, b.rowid) }
        strict.sort(by: byScore)
        tail.sort(by: byScore)
        vector.sort { a, b in a.score != b.score ? a.score > b.score : (a.shard, a.rank) < (b.shard, b.rank) }
        // Best-match: the items with every word first, then the tail (its scores are over fewer
        // words: merged among themselves only), as one index ranks them.
        let strictCount = min(strict.count, limit)
        let lexical = strict.prefix(limit) + tail.prefix(limit - strictCount)
        let lexicalKeys = lexical.map { key($0.shard, $0.rowid) }
        let vectorMatches = vector.prefix(limit).map { VectorMatch(rowid: key($0.shard, $0.rowid), similarity: $0.similarity) }
        let folded = vector.prefix(limit).map(\.folded)
        var ranking: [FusedCandidate]
        if let semantic, let tuning {
            // Confidence counts the items with every word, as in one index.
            let weight = tuning.weight(semantic.weight, lexicalHits: strictCount, limit: limit)
            let fused = HybridFusion.fuse(lexical: lexicalKeys, vector: vectorMatches, weight: weight, limit: .max, k: tuning.rrfK,
                folded: folded, fold: tuning.fold?.demotion)
            // Only a hit with every word ranked below a near miss can be moved: the others need no check.
            let firstNearMiss = fused.firstIndex { $0.lexicalRank == nil } ?? fused.endIndex
            var asked: [Int: [Int64]] = [:]
            for c in fused[firstNearMiss...] where (c.lexicalRank ?? .max) <= strictCount {
                let (shard, rowid) = keys[Int(c.rowID)]
                asked[shard, default: []].append(rowid)
            }
            var exact: Set<Int64> = []
            for (shard, rowids) in asked.sorted(by: { $0.key < $1.key }) {
                for rowid in try exactHits(shard, rowids) { if let k = keyOf[shard]?[rowid] { exact.insert(k) } }
            }
            // Lower is better, as in one index's answer: the fused score negated.
            ranking = HybridFusion.demoteNearMisses(fused, exact: exact, exactFirst: semantic.exactFirst).prefix(limit)
                .map { var c = $0; c.score = -c.score; return c }
        } else {
            ranking = lexical.enumerated().map { i, l in
                FusedCandidate(rowID: lexicalKeys[i], lexicalRank: i + 1, vectorRank: nil, similarity: nil, score: l.score)
            }
        }
        return ranking.map { c in
            var c = c
            let (shard, rowid) = keys[Int(c.rowID)]
            c.rowID = rowid
            return Hit(shard: shard, candidate: c)
        }
    }
}
