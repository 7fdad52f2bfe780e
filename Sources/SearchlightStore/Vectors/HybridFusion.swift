import SearchlightSemantic

/// One item of a hybrid ranking: where each side ranked it (1-based) and the fused score.
public struct FusedCandidate: Sendable, Equatable {
    public var rowID: Int64
    public var lexicalRank: Int?
    public var vectorRank: Int?
    /// Cosine similarity of the item's vector to the query's, when the vector side found it.
    public var similarity: Float?
    /// The fused score, higher is better.
    public var score: Double
}

/// Weighted reciprocal rank fusion (Cormack et al. 2009, with a weight per side): an item's
/// score is `(1 − w)/(k + lexicalRank) + w/(k + vectorRank)`, a side that did not rank it adding
/// nothing; k = 60. Ties go to the item the lexical side ranked (better), then to the lower rowid,
/// so at `w` = 0.5 an exact lexical hit is never outranked by a vector hit of the same rank.
///
/// `demoteNearMisses` then keeps the rule that an exact title or phrase hit is never
/// outranked by a semantic near miss (an item only the vector side found), whatever the weight.
public enum HybridFusion {
    public static let k = 60.0

    /// The fused ranking of `lexical` (rowids, best first) and `vector` (best first), at most
    /// `limit` items. `weight` 0 is the lexical ranking alone, 1 the vector ranking alone.
    ///
    /// `folded` (one flag per vector hit, or empty) marks the vector hits that are near-duplicates
    /// of one ranked above them (`VectorIndex.nearDuplicates`); `fold` says how they are demoted
    /// (`VectorFold.Demotion`) before the vector ranks are taken.
    public static func fuse(lexical: [Int64], vector: [VectorMatch], weight: Double, limit: Int, k: Double = HybridFusion.k,
                            folded: [Bool] = [], fold: VectorFold.Demotion? = nil) -> [FusedCandidate]
    {
        let (vector, factors) = demoteFolded(vector, folded: folded, fold)
        let w = min(max(weight, 0), 1)
        var byRow: [Int64: FusedCandidate] = [:]
        byRow.reserveCapacity(lexical.count + vector.count)
        if w < 1 {
            for (i, rowid) in lexical.enumerated() where byRow[rowid] == nil {
                byRow[rowid] = FusedCandidate(rowID: rowid, lexicalRank: i + 1, vectorRank: nil, similarity: nil, score: (1 - w) / (k + Double(i + 1)))
            }
        }
        if w > 0 {
            for (i, m) in vector.enumerated() {
                let part = factors[i] * w / (k + Double(i + 1))
                if var c = byRow[m.rowid] {
                    guard c.vectorRank == nil else { continue }
                    c.vectorRank = i + 1
                    c.similarity = m.similarity
                    c.score += part
                    byRow[m.rowid] = c
                } else {
                    byRow[m.rowid] = FusedCandidate(rowID: m.rowid, lexicalRank: nil, vectorRank: i + 1, similarity: m.similarity, score: part)
                }
            }
        }
        // Where only one side runs, the other side's ranks are still reported (explain), not scored.
        if w == 0 {
            for (i, m) in vector.enumerated() where byRow[m.rowid] != nil && byRow[m.rowid]!.vectorRank == nil {
                byRow[m.rowid]!.vectorRank = i + 1
                byRow[m.rowid]!.similarity = m.similarity
            }
        }
        let ordered = byRow.values.sorted { a, b in
            if a.score != b.score { return a.score > b.score }
            switch (a.lexicalRank, b.lexicalRank) {
            case let (x?, y?) where x != y: return x < y
            case (_?, nil): return true
            case (nil, _?): return false
            default: return a.rowID < b.rowID
            }
        }
        return Array(ordered.prefix(max(limit, 0)))
    }

    /// The vector hits in the order their ranks are taken from, and each one's factor on its
    /// reciprocal-rank contribution: `.behind` moves the folded hits below every other (each
    /// group keeping its order), `.damped(f)` keeps the order and multiplies the folded hits'
    /// contributions by f. Without a fold (or flags) the hits as they are, every factor 1.
    static func demoteFolded(_ vector: [VectorMatch], folded: [Bool], _ fold: VectorFold.Demotion?)
        -> (vector: [VectorMatch], factors: [Double])
    {
        let ones = [Double](repeating: 1, count: vector.count)
        guard let fold, folded.count == vector.count, folded.contains(true) else { return (vector, ones) }
        switch fold {
        case .behind:
            let kept = vector.indices.filter { !folded[$0] }, moved = vector.indices.filter { folded[$0] }
            return ((kept + moved).map { vector[$0] }, ones)
        case .damped(let f):
            let f = min(max(f, 0), 1)
            return (vector, folded.map { $0 ? f : 1 })
        }
    }

    /// `ranking` (best first) with every item that only the vector side found moved below the
    /// last of the `exact` items (exact title or phrase hits): those keep their order, and so do
    /// the others among themselves. Scores are lowered where needed so that they stay ordered
    /// (higher is better) for merging across indexes.
    public static func demoteNearMisses(_ ranking: [FusedCandidate], exact: Set<Int64>, exactFirst: Bool = false) -> [FusedCandidate] {
        guard let last = ranking.lastIndex(where: { exact.contains($0.rowID) }) else { return ranking }
        let head = ranking[...last]
        let nearMiss = { (c: FusedCandidate) in !exact.contains(c.rowID) && (exactFirst || c.lexicalRank == nil) }
        guard head.contains(where: nearMiss) else { return ranking }
        var out = head.filter { !nearMiss($0) } + head.filter(nearMiss) + ranking[(last + 1)...]
        for i in out.indices.dropFirst() where out[i].score > out[i - 1].score {
            out[i].score = out[i - 1].score.nextDown
        }
        return out
    }
}

/// Which encoder embedded a user query (Docs/SemanticSearch.md, "Hybrid ranking").
public enum QueryEncoder: String, Sendable {
    /// The static token table: the queries while the transformer is not loaded.
    case staticTable
    /// The transformer (MiniLM): the queries once `query.prepare` or refinement loaded it.
    case transformer
}

/// Folding near-duplicate vector hits before fusion (Docs/SemanticSearch.md, "Folding
/// near-duplicates"): among the vector side's first `depth` hits, one whose cosine with a hit
/// kept above it is at least `similarity` is demoted.
public struct VectorFold: Sendable, Equatable {
    public enum Demotion: Sendable, Equatable {
        /// Its rank on the vector side is taken after every hit not folded.
        case behind
        /// It keeps its rank, its reciprocal-rank contribution multiplied by this factor (0…1).
        case damped(Double)
    }

    public var similarity: Float
    public var depth: Int
    public var demotion: Demotion

    public init(similarity: Float, depth: Int, demotion: Demotion) {
        self.similarity = similarity
        self.depth = depth
        self.demotion = demotion
    }
}

/// A vector floor relative to the best hit (`FusionTuning.relativeFloor`).
public struct RelativeFloor: Sendable, Equatable {
    public var margin: Float
    public var minimum: Float

    public init(margin: Float, minimum: Float) {
        self.margin = margin
        self.minimum = minimum
    }

    public static let standard = RelativeFloor(margin: 0.08, minimum: 0.20)

    /// The floor for a query whose best hit has `best` similarity, under the absolute `floor`.
    public func floor(best: Float, absolute floor: Float) -> Float {
        min(floor, max(best - margin, minimum))
    }
}

/// The hybrid ranking's constants for one kind of vectors, tuned on the debtags relevance set
/// (Docs/SemanticSearch.md, "Tuning the fusion"; `searchlight-semantic tune`).
public struct FusionTuning: Sendable, Equatable {
    /// Vector hits less similar than this (cosine) are left out: the vector side always has a
    /// nearest item, and without a floor every query would list unrelated items.
    public var minimumSimilarity: Float
    /// The k of reciprocal rank fusion (`HybridFusion.fuse`).
    public var rrfK: Double
    /// Lexical confidence: when the lexical side found at least `confidentHits` items (or filled
    /// the result count, when that is smaller), the vector side's weight is multiplied by
    /// `confidentFactor` (nil: no such rule). Many lexical hits mean the words themselves answer;
    /// the vector side then adds what they miss without reordering them much.
    public var confidentHits: Int?
    public var confidentFactor: Double
    /// Near-duplicate vector hits demoted before fusion (nil: none).
    public var fold: VectorFold?
    /// The floor relative to the query's best hit (issue 37): a hit within `margin` of the best
    /// one is kept below `minimumSimilarity`, down to `minimum`. A query whose nearest items are
    /// all below the absolute floor ("something warm for a cold evening" among recipes) still
    /// gets its nearest few; a query that matches nothing in particular (every hit far below
    /// the floor) keeps none. nil: the absolute floor alone.
    public var relativeFloor: RelativeFloor? = .standard

    public init(minimumSimilarity: Float, rrfK: Double = HybridFusion.k, confidentHits: Int?, confidentFactor: Double, fold: VectorFold? = nil) {
        self.minimumSimilarity = minimumSimilarity
        self.rrfK = rrfK
        self.confidentHits = confidentHits
        self.confidentFactor = confidentFactor
        self.fold = fold
    }

    /// Static vectors (or a static query): 0.35 separates related from unrelated texts on the
    /// examples measured; 10 hits × 0.15 leave no query of the set more than 0.1 nDCG@10 below
    /// the lexical ranking.
    public static let staticVectors = FusionTuning(minimumSimilarity: 0.35, confidentHits: 10, confidentFactor: 0.15)
    /// The transformer's query on its own vectors: similarity floor 0.30 (the transformer's
    /// cosines of related texts run lower than the static table's), the lexical side confident
    /// from 5 hits and the vector weight then × 0.10. Of the settings that leave no debtags query
    /// more than 0.1 below lexical on both populations measured, the best on the whole corpus
    /// (Docs/SemanticSearch.md, "Tuning the fusion"): the whole corpus refined, lexical + 0.042
    /// (the static constants: + 0.040), and the transformer-embedded quarter, + 0.054 (the static
    /// constants there let 3 queries through). Chosen on the same 65 queries it is measured on.
    ///
    /// The fold (26 November 2026, chosen on the tuning half only): among the vector side's top
    /// 5, a hit whose cosine with one kept above it is 0.80 or more adds nothing to the fusion (a
    /// library's -dev/-doc siblings no longer fill the vector side's top together). Tuning
    /// + 0.042 → + 0.046, held-out + 0.057 → + 0.057 (0.2434 → 0.2442), all 130 + 0.049 → + 0.052,
    /// none worse by 0.1. The static tier has no fold: its own tuning choice (the same rule) lost
    /// 0.004 on the held-out half (Docs/SemanticSearch.md, "Folding near-duplicates").
    public static let refinedVectors = FusionTuning(minimumSimilarity: 0.30, confidentHits: 5, confidentFactor: 0.10,
        fold: VectorFold(similarity: 0.80, depth: 5, demotion: .damped(0)))

    /// The vector side's weight for a query whose lexical side found `lexicalHits` items of at
    /// most `limit`: `weight`, times `confidentFactor` when the lexical side is confident. Weight 1
    /// stays the vector ranking alone.
    public func weight(_ weight: Double, lexicalHits: Int, limit: Int) -> Double {
        guard let hits = confidentHits, weight < 1, lexicalHits >= min(hits, limit) else { return weight }
        return weight * confidentFactor
    }
}
