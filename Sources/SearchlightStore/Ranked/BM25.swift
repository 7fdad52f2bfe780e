import Foundation

/// The ranking arithmetic of `query.user`, operation for operation as SQLite computes it, so that
/// the ranked index and the exhaustive SQL give bit-identical scores:
///
/// - FTS5's `bm25()` (ext/fts5/fts5_aux.c, `fts5Bm25Function`): for each phrase i of the query,
///   in query order, `score += idf[i] * ((f[i] * (k1 + 1.0)) / (f[i] + k1 * (1 - b + b * D / avgdl)))`,
///   returned as `-1.0 * score`; `f[i]` is the sum of the column weights of the phrase's
///   instances in the row, `D` the row's token count (all columns), `avgdl` the table's token
///   total over its row count, and `idf[i] = log((N - nHit + 0.5) / (nHit + 0.5))`, at least 1e-6,
///   with `nHit` the rows that match phrase i alone (`xQueryPhrase`).
/// - The boosts of `IndexStore.userQuery`'s SQL, multiplied in from the left.
///
/// Floating-point addition and multiplication are commutative but not associative: the order of
/// every sum and product below is the order of the C and SQL expressions, and must stay so.
struct BM25 {
    static let k1 = 1.2
    static let b = 0.75

    /// The column weights of `bm25(fts, …)`: title, displayName, alternateNames,
    /// contentDescription, textContent, keywords, authorNames, aux. Integers, so that a phrase's
    /// frequency (a sum of them) is an exact integer: the ranked index stores it as one.
    static let columnWeights = [10, 10, 6, 3, 1, 6, 3, 4]

    /// The weights as `bm25()` arguments.
    static let sqlWeights = columnWeights.map { "\($0).0" }.joined(separator: ", ")

    let avgdl: Double

    /// `avgdl` as fts5Bm25GetData computes it.
    init(rows: Int64, tokens: Int64) {
        avgdl = Double(tokens) / Double(rows)
    }

    /// `k1 * (1 - b + b * D / avgdl)`: the same for every phrase of a row, computed once.
    @inline(__always)
    func lengthNorm(_ documentLength: UInt32) -> Double {
        let D = Double(documentLength)
        return Self.k1 * (1 - Self.b + Self.b * D / avgdl)
    }

    /// One phrase's addend.
    @inline(__always)
    static func addend(idf: Double, frequency f: Double, norm: Double) -> Double {
        idf * ((f * (k1 + 1.0)) / (f + norm))
    }

    /// IDF of a phrase matched by `hits` of `rows` rows.
    static func idf(rows: Int64, hits: Int64) -> Double {
        let idf = log((Double(rows - hits) + 0.5) / (Double(hits) + 0.5))
        return idf <= 0.0 ? 1e-6 : idf
    }

    /// The boost factors of one item, as the SQL of `userQuery` multiplies them in.
    struct Boosts: Equatable {
        var rankingHint: Double?
        var lastUsed: Double?
        var engagement: Double = 0

        static let none = Boosts()
        var isNone: Bool { rankingHint == nil && lastUsed == nil && engagement == 0 }

        /// `(1.0 + coalesce(ranking_hint, 0) / 100.0)`
        var hintFactor: Double { 1.0 + (rankingHint ?? 0) / 100.0 }
        /// `(1.0 + CASE WHEN last_used IS NULL THEN 0 ELSE 0.5 / (1.0 + max(0, now - last_used) / 604800.0) END)`
        func recencyFactor(now: Double) -> Double {
            guard let lastUsed else { return 1.0 }
            let age = now - lastUsed
            // SQLite's max(0, age) is the integer 0 when age < 0: divided by 604800.0, 0.0 either way.
            return 1.0 + 0.5 / (1.0 + (age < 0 ? 0.0 : age) / 604800.0)
        }
        /// `(1.0 + engagement / (engagement + 5.0))`
        var engagementFactor: Double { 1.0 + engagement / (engagement + 5.0) }

        /// The final score from bm25's value (negative: lower is better).
        func apply(_ bm25: Double, now: Double) -> Double {
            bm25 * hintFactor * recencyFactor(now: now) * engagementFactor
        }

        /// The hint and engagement factors together: an upper bound of `apply`'s multiplier with
        /// `recencyBound`, for the ranked index's block bounds.
        var staticFactor: Double { hintFactor * engagementFactor }
    }

    /// The largest recency factor of an item last used at or before `lastUsed`, at `now`.
    static func recencyBound(latestUse lastUsed: Double?, now: Double) -> Double {
        Boosts(lastUsed: lastUsed).recencyFactor(now: now)
    }
}
