import Foundation

/// One phrase of a user query as FTS5 parses it: a single token (the word folded and tokenized
/// as FTS5 tokenizes a query string), matched whole or, for the word being typed, as a prefix.
/// Multi-token phrases (the CJK bigram phrases) are not served by the ranked index.
struct QueryPhrase: Equatable {
    var token: [UInt8]
    var prefix: Bool

    /// The phrases of `terms` in query order, or nil when one of them is not a single token.
    static func phrases(_ terms: UserQueryTerms, tokenizer: FullTextTokenizer) -> [QueryPhrase]? {
        var out: [QueryPhrase] = []
        for w in terms.words {
            let text: String, prefix: Bool
            if w.isCJK {
                // `cjkFTSPhrase`: two or more characters are a phrase of bigrams; one is a prefix.
                guard w.text.unicodeScalars.count == 1 else { return nil }
                (text, prefix) = (w.text, true)
            } else {
                (text, prefix) = (w.folded, w.isPrefix)
            }
            let tokens = tokenizer.tokens(text, query: true)
            guard tokens.count == 1 else { return nil }
            out.append(QueryPhrase(token: tokens[0], prefix: prefix))
        }
        return out
    }

    /// The exclusive upper end of the terms a prefix matches: no UTF-8 byte is 0xFF.
    var prefixEnd: [UInt8] { token + [0xFF] }
}

/// The ranked index as one read transaction sees it.
struct RankSnapshot {
    struct Segment {
        var id: Int64
        var lo: Int64
        var hi: Int64
        var docs: Int
        var tokens: Int64
        var safeUntil: Double
        var maxStatic: Double
        var latestUse: Double?
        /// Rowids of the segment written since it was built, as local document numbers, sorted.
        var dirty: [UInt32] = []

        func isDirty(_ doc: UInt32) -> Bool {
            guard !dirty.isEmpty else { return false }
            var low = 0, high = dirty.count
            while low < high {
                let mid = (low + high) / 2
                if dirty[mid] < doc { low = mid + 1 } else { high = mid }
            }
            return low < dirty.count && dirty[low] == doc
        }

        func boostBound(now: Double) -> Double {
            maxStatic * BM25.recencyBound(latestUse: latestUse, now: now)
        }
    }

    var covered: Int64
    var segments: [Segment]
    /// Every rowid of `rank_dirty` (some may lie above `covered`, in a range being built).
    var dirty: [Int64]

    static func read(_ db: Database) throws -> RankSnapshot {
        let covered: Int64 = try db.scalar("SELECT value FROM meta WHERE key = 'rank_covered'").flatMap { (v: SQLValue) -> Int64? in
            if case .integer(let n) = v { n } else { nil }
        } ?? 0
        var segments = try db.rows("""
            SELECT id, lo, hi, docs, tokens, safe_until, max_static, latest_use FROM rank_segments
            WHERE active = 1 ORDER BY lo
            """).map { r in
            Segment(id: r.int(0) ?? 0, lo: r.int(1) ?? 0, hi: r.int(2) ?? 0, docs: Int(r.int(3) ?? 0), tokens: r.int(4) ?? 0,
                safeUntil: r.double(5) ?? 0, maxStatic: r.double(6) ?? 1, latestUse: r.double(7))
        }
        let dirty = try db.rows("SELECT rowid FROM rank_dirty ORDER BY rowid").compactMap { $0.int(0) }
        var k = 0
        for d in dirty where d <= covered {
            while k < segments.count, segments[k].hi < d { k += 1 }
            guard k < segments.count else { break }
            if d >= segments[k].lo { segments[k].dirty.append(UInt32(d - segments[k].lo)) }
        }
        return RankSnapshot(covered: covered, segments: segments, dirty: dirty)
    }
}

/// A phrase's documents in one segment.
enum PhraseSource {
    /// No document of the segment has it.
    case empty
    /// One term: its posting list, read block by block.
    case list(PostingList)
    /// A prefix over several terms: their postings merged, frequencies summed per document.
    case union(UnionPostings)

    var count: Int {
        switch self {
        case .empty: 0
        case .list(let l): l.count
        case .union(let u): u.docs.count
        }
    }

    /// Whether the segment's (old) version of `doc` has the phrase.
    func contains(_ doc: UInt32) -> Bool {
        switch self {
        case .empty: false
        case .list(let l): l.find(doc) != nil
        case .union(let u): u.index(of: doc) != nil
        }
    }

    /// Reads the phrase's postings in `segment`.
    static func load(_ phrase: QueryPhrase, segment: RankSnapshot.Segment, db: Database) throws -> PhraseSource? {
        if !phrase.prefix {
            guard let row = try db.rows("SELECT postings FROM rank_terms WHERE segment = ? AND term = ?",
                [.integer(segment.id), .blob(phrase.token)]).first, let blob = row.blob(0) else { return .empty }
            return PostingList(blob).map(PhraseSource.list)
        }
        let rows = try db.rows("SELECT postings FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?",
            [.integer(segment.id), .blob(phrase.token), .blob(phrase.prefixEnd)])
        var lists: [PostingList] = []
        for row in rows {
            guard let blob = row.blob(0), let list = PostingList(blob) else { return nil }
            lists.append(list)
        }
        switch lists.count {
        case 0: return .empty
        case 1: return .list(lists[0])
        default: return .union(UnionPostings(lists, span: Int(segment.hi - segment.lo + 1)))
        }
    }
}

/// Several posting lists merged: each document once, its frequencies summed (a prefix phrase's
/// bm25 frequency counts the instances of every term it begins). Sorted by document.
struct UnionPostings {
    var docs: [UInt32] = []
    var frequencies: [UInt32] = []
    var lengths: [UInt32] = []
    var extra: [Bool] = []

    init(_ lists: [PostingList], span: Int) {
        let total = lists.reduce(0) { $0 + $1.count }
        var block: [Posting] = []
        if span <= total * 8 {
            // Dense: accumulate by document number, then collect in order.
            var frequency = [UInt32](repeating: 0, count: span)
            var length = [UInt32](repeating: 0, count: span)
            var flags = [Bool](repeating: false, count: span)
            for list in lists {
                for b in list.blocks.indices {
                    list.decode(block: b, into: &block)
                    for p in block where Int(p.doc) < span {
                        frequency[Int(p.doc)] += p.frequency
                        length[Int(p.doc)] = p.length
                        flags[Int(p.doc)] = p.extra
                    }
                }
            }
            docs.reserveCapacity(min(total, span))
            for d in 0..<span where frequency[d] > 0 {
                docs.append(UInt32(d))
                frequencies.append(frequency[d])
                lengths.append(length[d])
                extra.append(flags[d])
            }
        } else {
            var all: [Posting] = []
            all.reserveCapacity(total)
            for list in lists {
                for b in list.blocks.indices {
                    list.decode(block: b, into: &block)
                    all += block
                }
            }
            all.sort { $0.doc < $1.doc }
            for p in all {
                if let last = docs.last, last == p.doc {
                    frequencies[frequencies.count - 1] += p.frequency
                } else {
                    docs.append(p.doc)
                    frequencies.append(p.frequency)
                    lengths.append(p.length)
                    extra.append(p.extra)
                }
            }
        }
    }

    func index(of doc: UInt32) -> Int? {
        var low = 0, high = docs.count
        while low < high {
            let mid = (low + high) / 2
            if docs[mid] < doc { low = mid + 1 } else { high = mid }
        }
        return low < docs.count && docs[low] == doc ? low : nil
    }
}
