import Foundation
import SearchlightWire

/// A free-text query as a person types it (CSUserQuery).
public struct UserQueryRequest: Sendable {
    public var text: String
    public var enableRankedResults = true
    public var maxRankedResultCount = 10
    public var maxResultCount = 100
    public var maxSuggestionCount = 0
    public var filter: SQLFilter?
    public var fetch: [String]?
    /// Semantic search (hybrid ranking): the query's vector and the weight of the vector side.
    /// nil: lexical only. Applies in stores with vectors (`IndexStore.hasVectors`).
    public var semantic: SemanticRequest?
    /// Whether the result carries, per item, its ranks on each side and its fused score.
    public var explain = false
    /// Every word must match (no best-match tail, issue 37): the desktop shells' search, whose
    /// terms narrow (GNOME's subsearch asks the items of the previous terms that have the new one).
    /// A query across indexes (`FederatedQuery`) follows it too, its tail scored over the union.
    public var allWords = false
    /// Whether a word the index holds is corrected when it is far rarer than its nearest word
    /// (`IndexStore.farRarer`). Off by default: only words no index holds are corrected. On the
    /// codespell list over the Debian corpus the rule found 1.4 % more misspellings but also
    /// "corrected" 5 of 501 correctly spelled words, and a query whose words all have hits gets
    /// no correction (issue 31). The benchmark measures it on and off.
    public var rareCorrections = false
    /// The words of `text` as `check(limits:)` parsed them, with the text and term limit they
    /// were parsed under: a store uses them instead of parsing the text a second time (about
    /// 90 000 instructions of an 840 000-instruction call), when the text is unchanged and its
    /// own limit is no lower.
    var checked: (text: String, maxTerms: Int, terms: UserQueryTerms)?

    public init(text: String) { self.text = text }

    /// The words of `text`, checked against `maxTerms`: the ones `check(limits:)` kept when they
    /// still hold, else parsed now.
    func terms(maxTerms: Int) throws(SearchlightError) -> UserQueryTerms {
        if let checked, checked.maxTerms <= maxTerms, checked.text == text { return checked.terms }
        return try UserQueryTerms(text, maxTerms: maxTerms)
    }
}

/// The vector side of a user query.
public struct SemanticRequest: Sendable {
    /// The query embedded (static table or transformer: the same space).
    public var vector: [Float]
    /// 0…1: the weight of the vector side in the fusion (`HybridFusion`).
    public var weight: Double
    /// What embedded `vector`: with the index's share of refined vectors it chooses the fusion's
    /// constants (`tuning(counts:)`).
    public var encoder: QueryEncoder = .staticTable
    /// The constants where the static table's vectors rank (a static query, or an index mostly
    /// unrefined), and where the transformer's do (a transformer query on a mostly refined index).
    public var staticTuning = FusionTuning.staticVectors
    public var refinedTuning = FusionTuning.refinedVectors
    /// Whether exact title or phrase hits rank above every other item (else only above items
    /// that only the vector side found: `HybridFusion.demoteNearMisses`).
    public var exactFirst = false

    public static let defaultMinimumSimilarity = FusionTuning.staticVectors.minimumSimilarity
    /// The share of an index's vectors that the transformer must have made for a transformer
    /// query to use `refinedTuning` there. Below it most of the ranking still comes from static
    /// vectors, whose constants keep every query of the relevance set within 0.1 of lexical.
    public static let refinedShare = 0.9

    /// `minimumSimilarity`, when given, is the floor of both tunings (tests: -1 keeps every hit).
    public init(vector: [Float], weight: Double, encoder: QueryEncoder = .staticTable, minimumSimilarity: Float? = nil) {
        self.vector = vector
        self.weight = weight
        self.encoder = encoder
        if let minimumSimilarity {
            staticTuning.minimumSimilarity = minimumSimilarity
            refinedTuning.minimumSimilarity = minimumSimilarity
        }
    }

    /// The vector and constants to search an index with: the query in the space of the index's
    /// vectors. A transformer query searches a mostly refined index (`refinedShare`) as it is;
    /// elsewhere most documents are still the static table's, and a transformer query compared
    /// with them ranks worse than the table's own query (issue 37: "soup" found no vector hit
    /// and "something warm for a cold evening" nothing at all after `prepare()`), so there the
    /// query is embedded the way the documents were (`staticEmbedding`, nil when the store has
    /// no table: the transformer's vector then) with the static constants. So `prepare()` never
    /// ranks an unrefined index differently from no `prepare()`.
    public func resolved(counts: () -> (vectors: Int, refined: Int), staticEmbedding: () -> [Float]?)
        -> (vector: [Float], tuning: FusionTuning)
    {
        guard encoder == .transformer else { return (vector, staticTuning) }
        let (vectors, refined) = counts()
        if vectors > 0, Double(refined) >= Self.refinedShare * Double(vectors) { return (vector, refinedTuning) }
        return (staticEmbedding() ?? vector, staticTuning)
    }

    /// The constants for an index whose `counts` are its vectors and how many of them the
    /// transformer made: the refined ones only for a transformer query where at least
    /// `refinedShare` of the vectors are refined (a static query ranks by static similarities
    /// whatever the documents' vectors are; Docs/SemanticSearch.md, "Tuning the fusion").
    /// `counts` is asked only for a transformer query (it takes the vector index's lock).
    public func tuning(counts: () -> (vectors: Int, refined: Int)) -> FusionTuning {
        guard encoder == .transformer else { return staticTuning }
        let (vectors, refined) = counts()
        guard vectors > 0, Double(refined) >= Self.refinedShare * Double(vectors) else { return staticTuning }
        return refinedTuning
    }
}

/// A suggested query: a completion of the word being typed, or a correction of a misspelt one.
/// `highlight` ranges are UTF-16 offsets and lengths into `text` (as NSRange would be).
public struct Suggestion: Sendable, Equatable {
    public var text: String
    public var highlight: [[Int]]
    public var kind: String

    public var json: JSONValue {
        ["text": .string(text), "highlight": .array(highlight.map { .array($0.map { .number(Double($0)) }) }), "kind": .string(kind)]
    }
}

public struct UserQueryResult: Sendable {
    public var items: [JSONValue]
    /// The ranking score of each item (lower is better), for merging results of several indexes.
    public var scores: [Double]
    public var rankedItems: [JSONValue]
    public var suggestions: [Suggestion]
    /// With `explain`, one per item of `items`: where each side ranked it and its score (the
    /// fused score in a hybrid query, else the lexical score).
    public var explanations: [FusedCandidate]?
}

extension UserQueryRequest {
    /// Checks the text against the limits before any index is read: at most
    /// `Limits.maxQueryTerms` different words (a word repeated counts once).
    public static func check(_ text: String, limits: Limits) throws(SearchlightError) {
        _ = try UserQueryTerms(text, maxTerms: limits.maxQueryTerms)
    }

    /// `check` of this request's text, keeping the words parsed for the stores it is sent to.
    public mutating func check(limits: Limits) throws(SearchlightError) {
        checked = (text, limits.maxQueryTerms, try UserQueryTerms(text, maxTerms: limits.maxQueryTerms))
    }
}

/// The words of a user query, parsed once. A word repeated is searched once: "lib lib … lib"
/// (800 times) was an FTS5 AND of 800 phrases, 5 s of work, and a 60 KB text ran for minutes.
struct UserQueryTerms {
    struct Word {
        var text: String
        var folded: String
        var range: Range<String.Index>
        var isCJK: Bool
        var isPrefix: Bool
        /// The word as looked up for a correction: folded, `*` after it while it is being typed.
        var key: String { folded + (isPrefix ? "*" : "") }
    }
    /// Every word as typed, in order (suggestions rebuild the text from them).
    var words: [Word]
    /// The full-text terms of the different words, in order of first appearance.
    let terms: [String]

    /// Throws invalidQuery, at the byte offset of the first word past the limit, when the text has
    /// more than `maxTerms` different words.
    init(_ text: String, maxTerms: Int = .max) throws(SearchlightError) {
        let parts = TextAnalysis.words(text)
        let typing = !(text.last.map { $0.isWhitespace || $0.isPunctuation } ?? true)
        words = parts.enumerated().map { i, w in
            let aux = w.unicodeScalars.first.map(TextAnalysis.isCJK) ?? false
            return Word(text: String(w), folded: TextAnalysis.fold(String(w)), range: w.startIndex..<w.endIndex,
                isCJK: aux, isPrefix: !aux && typing && i == parts.count - 1)
        }
        var seen: Set<String> = []
        var terms: [String] = []
        var distinct: [Word] = []
        for w in words {
            let term = Self.ftsTerm(w)
            guard seen.insert(term).inserted else { continue }
            guard terms.count < maxTerms else {
                let offset = text.utf8.distance(from: text.startIndex, to: w.range.lowerBound)
                throw SearchlightError(.invalidQuery,
                    "the text has more than \(maxTerms) different words (the word at byte \(offset) is one too many); "
                        + "search for fewer words", data: ["offset": .number(Double(offset)), "limit": .number(Double(maxTerms))])
            }
            terms.append(term)
            distinct.append(w)
        }
        self.terms = terms
        self.distinctWords = distinct
    }

    /// The query of `words` alone (the earlier words of a suggestion), repeated words searched once.
    init(words: [Word]) {
        self.words = words
        var seen: Set<String> = []
        distinctWords = words.filter { seen.insert(Self.ftsTerm($0)).inserted }
        terms = distinctWords.map(Self.ftsTerm)
    }

    /// The words of `terms`, one per different term, in the same order (what the ranked index scores).
    let distinctWords: [Word]

    /// The different earlier words as full-text terms (the last word's own term among them only
    /// when it came earlier too).
    var earlierTerms: [String] { UserQueryTerms(words: Array(words.dropLast())).terms }

    static func ftsTerm(_ w: Word) -> String {
        if w.isCJK { return TextAnalysis.cjkFTSPhrase(w.text) }
        return TextAnalysis.ftsQuoted(w.folded) + (w.isPrefix ? " *" : "")
    }

    var ftsQuery: String { terms.joined(separator: " AND ") }
}

/// Which ranking a user query uses.
public enum RankingPath: Sendable {
    /// The ranked index (top-k without scoring every match) where it can answer, else exhaustive.
    case automatic
    /// FTS5 scores every match in SQL: the definition the ranked index must equal (tests).
    case exhaustive
}

/// The lexical top-k of a user query, best first: the step that hybrid ranking fuses with others.
public struct LexicalCandidates: Sendable {
    public var candidates: [ScoredCandidate]
    /// True when the ranked index answered, false when the query ran exhaustively.
    public var usedRankedIndex: Bool
}

extension IndexStore {
    /// BM25 weights of the FTS columns: title, displayName, alternateNames, contentDescription,
    /// textContent, keywords, authorNames, aux.
    static let bm25Weights = BM25.sqlWeights

    /// Runs a user query: ranked items, then suggestions, from one snapshot of the index. With a
    /// `budget`, it stops (`cancelled`) at its deadline or when its client is gone.
    public func userQuery(_ request: UserQueryRequest, path: RankingPath = .automatic, budget: QueryBudget? = nil)
        throws(SearchlightError) -> UserQueryResult
    {
        let fetch = request.fetch.map(Set.init)
        let columns = ItemRecord.selectColumns(fetch: fetch)
        var items: [JSONValue] = []
        let (found, suggestions) = try rankedUserQuery(request, path: path, budget: budget) { db, c in
            guard let row = try db.rows("SELECT \(columns) FROM items WHERE items.rowid = ?", [.integer(c.rowID)]).first else { return false }
            items.append(ItemRecord(row: row, fetch: fetch).wireItem(fetch: fetch))
            return true
        }
        let ranked = request.enableRankedResults ? Array(items.prefix(request.maxRankedResultCount)) : []
        return UserQueryResult(items: items, scores: found.map(\.score), rankedItems: ranked, suggestions: suggestions,
            explanations: request.explain ? found : nil)
    }

    /// `userQuery` with its items written as JSON straight from their rows (`WireItemWriter`),
    /// appended to `items`: what the daemon answers. The same items in the same order; the
    /// result's `items` and `rankedItems` are left empty (`rankedItems` is a prefix of the items).
    public func userQuery(_ request: UserQueryRequest, path: RankingPath = .automatic, budget: QueryBudget? = nil,
                          into items: inout EncodedItems) throws(SearchlightError) -> UserQueryResult
    {
        let fetch = request.fetch.map(Set.init)
        let sql = "SELECT \(ItemRecord.selectColumns(fetch: fetch)) FROM items WHERE items.rowid = ?"
        let writer = WireItemWriter(fetch: fetch)
        // One statement for every item, looked up once (its cache is keyed by the SQL's text).
        var statement: Statement?
        let (found, suggestions) = try rankedUserQuery(request, path: path, budget: budget) { db, c in
            let s = try statement ?? db.statement(sql)
            statement = s
            s.reset()
            defer { s.reset() }
            try s.bind(.integer(c.rowID), at: 1)
            guard try s.step() else { return false }
            items.append { writer.write(s, offset: 0, to: &$0) }
            return true
        }
        return UserQueryResult(items: [], scores: found.map(\.score), rankedItems: [], suggestions: suggestions,
            explanations: request.explain ? found : nil)
    }

    /// The ranking of a user query and its suggestions; `item` reads each ranked item (false:
    /// it is gone), in order, inside the same read transaction. Answers the candidates found.
    private func rankedUserQuery(_ request: UserQueryRequest, path: RankingPath, budget: QueryBudget?,
                                 item: (Database, FusedCandidate) throws -> Bool) throws(SearchlightError)
        -> (found: [FusedCandidate], suggestions: [Suggestion])
    {
        let terms = try request.terms(maxTerms: options.limits.maxQueryTerms)
        let now = options.clock().timeIntervalSince1970
        let semantic = hasVectors ? request.semantic : nil
        if semantic != nil { try QueryBudget.phase(budget, "load") { () throws(SearchlightError) in try loadVectors() } }
        let answer = try read(budget: budget) { db in
            try db.transaction("DEFERRED") {
                var found: [FusedCandidate] = []
                var ranking: [FusedCandidate] = []
                if request.maxResultCount > 0 {
                    let strict = terms.words.isEmpty ? [] : try QueryBudget.phase(budget, "lexical") {
                        try lexicalCandidates(db, terms: terms, limit: request.maxResultCount, filter: request.filter, now: now, path: path).candidates
                    }
                    // Best-match: the items with every word first, then those with some of them.
                    let lexical = strict.count >= request.maxResultCount || request.allWords ? strict
                        : strict + (try QueryBudget.phase(budget, "tail") {
                            try bestMatchTail(db, terms: terms, after: strict, limit: request.maxResultCount - strict.count,
                                filter: request.filter, now: now)
                        })
                    if let semantic {
                        let (query, tuning) = QueryBudget.phase(budget, "encode") {
                            semantic.resolved(counts: { vectors.counts ?? (0, 0) }, staticEmbedding: { options.vectorEncoder?.embed(request.text) })
                        }
                        let nearest = try QueryBudget.phase(budget, "vector") {
                            try vectorCandidates(db, query: query, limit: request.maxResultCount, filter: request.filter,
                                now: now, minimumSimilarity: tuning.minimumSimilarity, relativeFloor: tuning.relativeFloor, budget: budget)
                        }
                        // Confidence counts the items with every word: a tail of items with one
                        // word of several says the words alone do not answer.
                        let weight = tuning.weight(semantic.weight, lexicalHits: strict.count, limit: request.maxResultCount)
                        // Near-duplicate vector hits (a library's -dev and -doc siblings) demoted before fusion.
                        let folded = QueryBudget.phase(budget, "fold") {
                            tuning.fold.map { vectors.nearDuplicates(nearest.map(\.rowid), threshold: $0.similarity, depth: $0.depth) } ?? []
                        }
                        let fusionStarted = budget?.phases != nil ? QueryBudget.threadCPUTime() : 0
                        let fusionWall = budget?.phases != nil ? QueryBudget.now() : 0
                        let fused = HybridFusion.fuse(lexical: lexical.map(\.rowID), vector: nearest, weight: weight,
                            limit: .max, k: tuning.rrfK, folded: folded, fold: tuning.fold?.demotion)
                        // Only a lexical hit ranked below a near miss can be moved: the others need no check.
                        // An exact hit has every word: the best-match tail holds none (and checking
                        // its items one phrase lookup each cost seconds a query on the debtags set).
                        let firstNearMiss = fused.firstIndex { $0.lexicalRank == nil } ?? fused.endIndex
                        let exact = try exactHits(db, terms: terms,
                            among: fused[firstNearMiss...].filter { ($0.lexicalRank ?? .max) <= strict.count }.map(\.rowID))
                        // A lower score is better across indexes (the lexical convention): the fused score negated.
                        ranking = HybridFusion.demoteNearMisses(fused, exact: exact, exactFirst: semantic.exactFirst).prefix(request.maxResultCount)
                            .map { var c = $0; c.score = -c.score; return c }
                        budget?.add("fusion", cpuSince: fusionStarted, wallSince: fusionWall)
                    } else {
                        ranking = lexical.enumerated().map {
                            FusedCandidate(rowID: $1.rowID, lexicalRank: $0 + 1, vectorRank: nil, similarity: nil, score: $1.score)
                        }
                    }
                    found.reserveCapacity(ranking.count)
                    try QueryBudget.phase(budget, "items") {
                        for c in ranking {
                            try budget?.check()
                            if try item(db, c) { found.append(c) }
                        }
                    }
                }
                var suggestions: [Suggestion] = []
                if request.maxSuggestionCount > 0 {
                    suggestions = try QueryBudget.phase(budget, "suggestions") {
                        try self.suggestions(for: request.text, terms: terms, limit: request.maxSuggestionCount, db: db,
                            path: path, budget: budget, rare: request.rareCorrections)
                    }
                }
                return (found, suggestions)
            }
        }
        // What the user is shown is refined first (`RefinementOrder`).
        noteQueryHits(answer.0.map(\.rowID))
        return answer
    }

    /// The items of `candidates` that are exact hits of the query: the title or the displayName is the query's words
    /// (folded, in order), or, for two words or more, the words stand together as a phrase in a
    /// full-text column. One word found somewhere in a text is a plain lexical hit, fused as usual.
    func exactHits(_ db: Database, terms: UserQueryTerms, among candidates: [Int64]) throws -> Set<Int64> {
        guard !candidates.isEmpty, !terms.words.isEmpty else { return [] }
        let ids = "[" + candidates.map(String.init).joined(separator: ",") + "]"
        let words = terms.words.map(\.folded)
        var exact: Set<Int64> = []
        for row in try db.rows("SELECT rowid, title, displayName FROM items WHERE rowid IN (SELECT value FROM json_each(?))", [.text(ids)]) {
            guard let rowid = row.int(0) else { continue }
            for name in [row.string(1), row.string(2)] {
                if let name, TextAnalysis.words(name).map({ TextAnalysis.fold(String($0)) }) == words { exact.insert(rowid) }
            }
        }
        if words.count >= 2, !terms.words.contains(where: \.isCJK) {
            // One lookup per item: FTS5 seeks each rowid in the phrase's doclists, where a single
            // query over all matches would walk every position of a frequent pair of words.
            let phrase = TextAnalysis.ftsQuoted(words.joined(separator: " "))
            for rowid in candidates where !exact.contains(rowid) {
                if try !db.rows("SELECT 1 FROM fts WHERE fts MATCH ? AND rowid = ?", [.text(phrase), .integer(rowid)]).isEmpty {
                    exact.insert(rowid)
                }
            }
        }
        return exact
    }

    /// Words too common to find anything by themselves: the best-match tail (`bestMatchTail`)
    /// leaves them out, or "water sports by the ocean" would list every item with "the".
    static let stopWords: Set<String> = [
        "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "how", "i", "in", "is", "it",
        "me", "my", "of", "on", "or", "some", "something", "that", "the", "this", "to", "want", "was", "what", "when",
        "where", "which", "with", "you", "your",
    ]

    /// The best-match side of a user query of several words (issue 37): items with some of the
    /// words but not all, at most `limit`, best first by bm25 over the words they have (so more
    /// words, and rarer ones, rank higher), none of `after` (the items with every word). Words of
    /// `stopWords` are not searched for; a query of one word (or one besides them) has no tail.
    /// The CSSearchQuery language keeps its exact semantics: this is the ranked user query only.
    /// `statistics`: the collection statistics of every index a query across apps searches
    /// (`CorpusStatistics`, one count per different word), so that the tail's scores are those of
    /// one index holding every app's items; nil: this index's own.
    func bestMatchTail(_ db: Database, terms: UserQueryTerms, after strict: [ScoredCandidate], limit: Int, filter: SQLFilter?, now: Double,
                       statistics: CorpusStatistics? = nil) throws -> [ScoredCandidate]
    {
        guard limit > 0, terms.terms.count >= 2 else { return [] }
        let kept = terms.distinctWords.indices.filter { terms.distinctWords[$0].isCJK || !Self.stopWords.contains(terms.distinctWords[$0].folded) }
        // One informative word alone with stop words: its items are the tail ("the soup": every soup).
        guard !kept.isEmpty, kept.count < terms.terms.count || kept.count >= 2 else { return [] }
        let match = kept.map { UserQueryTerms.ftsTerm(terms.distinctWords[$0]) }.joined(separator: " OR ")
        // bm25 of the OR query: one phrase per word kept, each with its count over the union.
        var phraseStatistics: CorpusStatistics?
        if var s = statistics, s.hits.count == terms.terms.count {
            s.hits = kept.map { s.hits[$0] }
            phraseStatistics = s
        }
        let have = Set(strict.map(\.rowID))
        return try Self.exhaustiveCandidates(db, terms: terms, limit: limit + strict.count, filter: filter, now: now,
            match: (match, kept.count), statistics: phraseStatistics)
            .filter { !have.contains($0.rowID) }.prefix(limit).map { $0 }
    }

    /// The best `limit` items for the user query `text` (all its words, the last one a prefix while
    /// it is being typed), with their scores (lower is better), best first; ties go to the lower
    /// rowid. Every item is visible and passes `filter`. This is the ranking of `userQuery`,
    /// reusable by callers that fuse it with other rankings.
    public func lexicalCandidates(_ text: String, limit: Int, filter: SQLFilter? = nil, path: RankingPath = .automatic)
        throws(SearchlightError) -> LexicalCandidates
    {
        let terms = try UserQueryTerms(text, maxTerms: options.limits.maxQueryTerms)
        let now = options.clock().timeIntervalSince1970
        guard !terms.words.isEmpty, limit > 0 else { return LexicalCandidates(candidates: [], usedRankedIndex: false) }
        return try read { db in
            try db.transaction("DEFERRED") { try lexicalCandidates(db, terms: terms, limit: limit, filter: filter, now: now, path: path) }
        }
    }

    /// `statistics`: the collection statistics to score with (`CorpusStatistics`, summed over
    /// every index a query across apps searches), else this index's own.
    func lexicalCandidates(_ db: Database, terms: UserQueryTerms, limit: Int, filter: SQLFilter?, now: Double, path: RankingPath,
                           statistics: CorpusStatistics? = nil, kept: KeptPreparation? = nil) throws -> LexicalCandidates
    {
        if path == .automatic, formatVersion >= RankWriter.firstFormat, !(kept?.isUnavailable ?? false),
            let phrases = QueryPhrase.phrases(terms, tokenizer: try db.fullTextTokenizer()),
            let ranked = try RankedTopK(db: db, phrases: phrases, limit: limit, filter: filter, now: now, store: self)
                .run(statistics: statistics, prepared: kept?.prepared)
        {
            return LexicalCandidates(candidates: ranked, usedRankedIndex: true)
        }
        return LexicalCandidates(candidates: try Self.exhaustiveCandidates(db, terms: terms, limit: limit, filter: filter, now: now,
            statistics: statistics), usedRankedIndex: false)
    }

    /// The definition of the ranking: FTS5 scores every match with bm25 (`BM25` documents its
    /// arithmetic), times the boosts; ties go to the lower rowid. A filter query restricts the
    /// results and never changes a score (its full-text driver only narrows the walk, in a
    /// subquery of its own, so its phrases are not part of bm25's sum).
    /// `match`, when given, is the FTS5 query instead of every word of `terms`, and the number of
    /// its phrases. With `statistics` (one count per phrase), bm25's avgdl and idf come from them
    /// (`sl_bm25`, the same arithmetic).
    static func exhaustiveCandidates(_ db: Database, terms: UserQueryTerms, limit: Int, filter: SQLFilter?, now: Double,
                                     match: (query: String, phrases: Int)? = nil, statistics: CorpusStatistics? = nil) throws -> [ScoredCandidate]
    {
        let filter = filter ?? .all
        let driver = filter.ftsMatch.map { _ in " AND items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?)" } ?? ""
        var rank = "bm25(fts, \(Self.bm25Weights))"
        var rankBindings: [SQLValue] = []
        if let statistics, statistics.rows > 0, statistics.hits.count == (match?.phrases ?? terms.terms.count) {
            rankBindings = [.double(Double(statistics.tokens) / Double(statistics.rows))]
                + statistics.hits.map { .double(BM25.idf(rows: statistics.rows, hits: $0)) }
            rank = "sl_bm25(fts, " + Array(repeating: "?", count: rankBindings.count).joined(separator: ", ") + ", \(Self.bm25Weights))"
        }
        // bm25 is negative (lower is better); boosts multiply it further from zero.
        let sql = """
            SELECT items.rowid,
              \(rank)
              * (1.0 + coalesce(items.ranking_hint, 0) / 100.0)
              * (1.0 + CASE WHEN items.last_used IS NULL THEN 0
                       ELSE 0.5 / (1.0 + max(0, ? - items.last_used) / 604800.0) END)
              * (1.0 + items.engagement / (items.engagement + 5.0)) AS score
            FROM fts JOIN items ON items.rowid = fts.rowid
            WHERE fts MATCH ? AND \(Self.visible) AND (\(filter.sql))\(driver)
            ORDER BY score, items.rowid LIMIT ?
            """
        let bindings: [SQLValue] = rankBindings + [.double(now), .text(match?.query ?? terms.ftsQuery), .double(now), .double(now)] + filter.bindings
            + (filter.ftsMatch.map { [.text($0)] } ?? []) + [.integer(Int64(limit))]
        return try db.rows(sql, bindings).map { ScoredCandidate(rowID: $0.int(0) ?? 0, score: $0.double(1) ?? 0) }
    }

    // MARK: - Suggestions

    /// Different words of one text looked up for a correction, at most: each lookup scans the
    /// vocabulary near the word, and a text of many misspelt words would scan it again and again.
    /// Words without a match past the first `maxCorrectedWords` stay as typed.
    static let maxCorrectedWords = 8

    /// Suggestions from the ranked index's dictionary where it can answer, else (and on the
    /// exhaustive path) from FTS5's vocabulary: the same words either way.
    func suggestions(for text: String, terms: UserQueryTerms, limit: Int, db: Database, path: RankingPath, budget: QueryBudget? = nil,
                     rare: Bool = true) throws -> [Suggestion]
    {
        if path == .automatic, let vocabulary = try rankedVocabulary(db, terms: terms, budget: budget) {
            defer { db.unionScratch.reclaim() }
            return try Self.suggestions(for: text, terms: terms, limit: limit, vocabulary: vocabulary, budget: budget, rareCorrections: rare)
        }
        return try Self.suggestions(for: text, terms: terms, limit: limit,
            vocabulary: FullTextVocabulary(db: db, earlier: terms.earlierTerms, budget: budget), budget: budget, rareCorrections: rare)
    }

    /// The suggestions of one index of a query across apps: its completions, and for each word
    /// that no index searched holds, or that is rare over all of them (`present`: the words some
    /// index holds, with their matching rows over every index), its nearest word here;
    /// `FederatedUserQuery.suggestions` makes the one correction from every index's.
    /// `completions` false: none are computed (the earlier indexes gave enough).
    func federatedSuggestions(for text: String, terms: UserQueryTerms, limit: Int, db: Database, budget: QueryBudget?,
                              present: [String: Int64], rare: Bool, completions: Bool = true)
        throws -> (completions: [Suggestion], nearest: [String: NearTerm])
    {
        if let vocabulary = try rankedVocabulary(db, terms: terms, budget: budget) {
            defer { db.unionScratch.reclaim() }
            return (completions ? try Self.suggestions(for: text, terms: terms, limit: limit, vocabulary: vocabulary, budget: budget, corrections: false) : [],
                    try Self.nearestTerms(terms: terms, vocabulary: vocabulary, budget: budget, present: present, rare: rare))
        }
        let vocabulary = FullTextVocabulary(db: db, earlier: terms.earlierTerms, budget: budget)
        return (completions ? try Self.suggestions(for: text, terms: terms, limit: limit, vocabulary: vocabulary, budget: budget, corrections: false) : [],
                try Self.nearestTerms(terms: terms, vocabulary: vocabulary, budget: budget, present: present, rare: rare))
    }

    static func suggestions(for text: String, terms: UserQueryTerms, limit: Int, vocabulary: some SuggestionVocabulary,
        budget: QueryBudget? = nil, corrections: Bool = true, rareCorrections: Bool = true) throws -> [Suggestion]
    {
        guard let last = terms.words.last else { return [] }
        var out: [Suggestion] = []
        // Completions of the word being typed that still find something with the earlier words.
        if last.isPrefix, !last.folded.isEmpty {
            for term in try vocabulary.completions(of: last.folded, count: limit * 8) {
                try budget?.check()
                // A completion adds something: the typed word itself (even with other accents) is no suggestion.
                guard out.count < limit, term != last.folded else { continue }
                guard try vocabulary.stillFinds(term) else { continue }
                let prefix = String(text[..<last.range.lowerBound])
                let start = prefix.utf16.count
                out.append(Suggestion(text: prefix + term, highlight: [[start, last.text.utf16.count]], kind: "completion"))
            }
        }
        // Corrections: a word with no match offers the nearest indexed word.
        if corrections, out.count < limit {
            let near = try nearestTerms(terms: terms, vocabulary: vocabulary, budget: budget, rare: rareCorrections)
            if let c = correction(text: text, terms: terms, replacements: near.mapValues(\.term)) { out.append(c) }
        }
        return out
    }

    /// A word the index holds is still corrected when it is in at most `rareWordDocuments`
    /// documents and its nearest word in at least `rarerRatio` times as many: a misspelling
    /// that made it into a few texts ("teh", "recieve"). A rare word near a merely commoner one
    /// (a plural, another name) stays as typed.
    static let rareWordDocuments = 3
    static let rarerRatio = 100

    /// Whether a word in `typed` documents (0: absent) is corrected to one in `documents`.
    public static func farRarer(typed: Int, documents: Int) -> Bool {
        typed == 0 || (typed <= rareWordDocuments && documents >= rarerRatio * typed)
    }

    /// The nearest indexed word of each different word of `terms` that the index lacks, or holds
    /// in few documents (`farRarer`; not for a word being typed), keyed by
    /// `UserQueryTerms.Word.key`; at most `maxCorrectedWords` are looked up. Across apps,
    /// `present` names the words some index holds, with their matching rows over every index:
    /// only those rare there are looked up (as held words, whatever this index has), and the
    /// caller decides (`FederatedUserQuery.suggestions`). `rare`: false, held words stay as typed.
    static func nearestTerms(terms: UserQueryTerms, vocabulary: some SuggestionVocabulary, budget: QueryBudget?,
                             present: [String: Int64]? = nil, rare: Bool = true) throws -> [String: NearTerm] {
        var near: [String: NearTerm] = [:]
        var lookedUp: Set<String> = []
        var nearestLookups = 0
        for w in terms.words where !w.isCJK && w.folded.count >= 3 {
            let key = w.key
            guard lookedUp.insert(key).inserted, nearestLookups < maxCorrectedWords else { continue }
            try budget?.check()
            var typed = 0
            if let hits = present?[key] {
                guard rare, !w.isPrefix, hits <= Int64(rareWordDocuments) else { continue }
                typed = try vocabulary.documents(of: w.folded)
            } else if try vocabulary.hasTerm(w.folded, prefix: w.isPrefix) {
                guard rare, !w.isPrefix else { continue }
                typed = try vocabulary.documents(of: w.folded)
                // Only in the auxiliary column, or common: no correction.
                guard typed > 0, typed <= rareWordDocuments else { continue }
            }
            nearestLookups += 1
            guard var n = try vocabulary.nearestTerm(to: w.folded) else {
                // Across apps the word's own documents count in the sum even without a near word here.
                if present != nil, typed > 0 { near[key] = NearTerm(term: "", distance: .max, documents: 0, typedDocuments: typed) }
                continue
            }
            n.typedDocuments = typed
            // One index decides here; across apps the counts are summed first.
            if present == nil, !farRarer(typed: typed, documents: n.documents) { continue }
            near[key] = n
        }
        return near
    }

    /// The text with each word that has a replacement (by `UserQueryTerms.Word.key`) replaced,
    /// the replacements highlighted; nil when nothing is replaced.
    static func correction(text: String, terms: UserQueryTerms, replacements: [String: String]) -> Suggestion? {
        guard !replacements.isEmpty else { return nil }
        var corrected = ""
        var highlight: [[Int]] = []
        var cursor = text.startIndex
        for w in terms.words {
            corrected += text[cursor..<w.range.lowerBound]
            cursor = w.range.upperBound
            if !w.isCJK, w.folded.count >= 3, let near = replacements[w.key] {
                highlight.append([corrected.utf16.count, near.utf16.count])
                corrected += near
            } else {
                corrected += w.text
            }
        }
        corrected += text[cursor...]
        return highlight.isEmpty ? nil : Suggestion(text: corrected, highlight: highlight, kind: "correction")
    }

    static func hasTerm(_ term: String, prefix: Bool, db: Database) throws -> Bool {
        if prefix {
            return try db.scalar("SELECT 1 FROM fts_vocab WHERE term >= ? AND term < ? LIMIT 1",
                [.text(term), .text(term + "\u{10FFFF}")]) != nil
        }
        return try db.scalar("SELECT 1 FROM fts_vocab WHERE term = ?", [.text(term)]) != nil
    }

    /// The indexed word (from the text columns) nearest to `word` (Damerau–Levenshtein, at most 1 edit for short words and
    /// 2 for longer ones), preferring the most frequent. Looks only at words with the same first
    /// letter and a similar length, which bounds the scan.
    static func nearestTerm(to word: String, db: Database, budget: QueryBudget? = nil) throws -> NearTerm? {
        guard let first = word.unicodeScalars.first else { return nil }
        let maxDistance = word.count <= 4 ? 1 : 2
        let low = String(first)
        let high = String(Character(Unicode.Scalar(first.value + 1) ?? first))
        let rows = try db.rows("""
            SELECT term, sum(doc) FROM fts_vocab_col WHERE term >= ? AND term < ? AND col != 'aux'
            AND length(term) BETWEEN ? AND ? GROUP BY term LIMIT 50000
            """, [.text(low), .text(high), .integer(Int64(word.count - maxDistance)), .integer(Int64(word.count + maxDistance))])
        var best: (term: String, distance: Int, doc: Int64)?
        let target = Array(word.unicodeScalars)
        for (n, row) in rows.enumerated() {
            if n & 255 == 255 { try budget?.check() }
            guard let term = row.string(0) else { continue }
            let d = editDistance(target, Array(term.unicodeScalars), limit: maxDistance)
            guard d <= maxDistance, d > 0 else { continue }
            let doc = row.int(1) ?? 0
            if best == nil || d < best!.distance || (d == best!.distance && doc > best!.doc) {
                best = (term, d, doc)
            }
        }
        return best.map { NearTerm(term: $0.term, distance: $0.distance, documents: Int($0.doc)) }
    }

    /// Optimal-string-alignment distance, giving up early past `limit`.
    static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar], limit: Int) -> Int {
        if abs(a.count - b.count) > limit { return limit + 1 }
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var prev2 = [Int](repeating: 0, count: b.count + 1)
        var prev = Array(0...b.count)
        var cur = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            cur[0] = i
            var rowMin = cur[0]
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                var v = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { v = min(v, prev2[j - 2] + 1) }
                cur[j] = v
                rowMin = min(rowMin, v)
            }
            if rowMin > limit { return limit + 1 }
            (prev2, prev, cur) = (prev, cur, prev2)
        }
        return prev[b.count]
    }
}
