import Foundation

/// The text of one item as the full-text index holds it: the FTS5 columns in order (`aux` last)
/// and what a segment records beside the words.
struct RankedDocument {
    var rowid: Int64
    /// `Schema.ftsColumns` order; nil for NULL.
    var columns: [String?]
    var boosts: BM25.Boosts
    var expires: Double
    var hasRelated: Bool
}

/// One term's entry of a document: bm25's frequency and the completions' column count.
struct DocumentTerm {
    var term: [UInt8]
    var frequency: UInt32
    var columns: UInt8
}

/// Tokenizes documents with FTS5's tokenizer into per-document term lists: the words, their
/// weighted frequencies, their text-column counts, and the document length, as FTS5 counts them.
struct DocumentTokenizer {
    /// Calls `body` for each distinct term of the document (first appearance order), then returns
    /// the document length. `scratch` is reused between documents.
    static func tokenize(_ columns: [String?], tokenizer: FullTextTokenizer, table: inout TermTable,
                         scratch: inout DocumentScratch) -> UInt32 {
        scratch.reset()
        var length: UInt32 = 0
        for (column, text) in columns.enumerated() {
            guard let text else { continue }
            let weight = UInt32(BM25.columnWeights[column])
            let textBit: UInt8 = column < Schema.ftsColumns.count - 1 ? 1 << UInt8(column) : 0
            tokenizer.tokenize(text) { token in
                length &+= 1
                let t = table.intern(token)
                scratch.add(term: t, weight: weight, columnBit: textBit)
            }
        }
        return length
    }
}

/// The terms of the document being tokenized, by term index: first appearance order.
struct DocumentScratch {
    var terms: [Int32] = []
    var frequencies: [UInt32] = []
    var masks: [UInt8] = []
    /// Per term index: its slot in this document, valid when `stamp` matches.
    private var slot: [Int32] = []
    private var stamp: [UInt32] = []
    private var current: UInt32 = 0

    mutating func reset() {
        terms.removeAll(keepingCapacity: true)
        frequencies.removeAll(keepingCapacity: true)
        masks.removeAll(keepingCapacity: true)
        current &+= 1
        if current == 0 {  // wrapped: forget every stamp
            for i in stamp.indices { stamp[i] = 0 }
            current = 1
        }
    }

    @inline(__always)
    mutating func add(term t: Int32, weight: UInt32, columnBit: UInt8) {
        let i = Int(t)
        if i >= slot.count {
            slot.append(contentsOf: repeatElement(0, count: i + 1 - slot.count + 1024))
            stamp.append(contentsOf: repeatElement(0, count: slot.count - stamp.count))
        }
        if stamp[i] != current {
            stamp[i] = current
            slot[i] = Int32(terms.count)
            terms.append(t)
            frequencies.append(0)
            masks.append(0)
        }
        let s = Int(slot[i])
        frequencies[s] &+= weight
        masks[s] |= columnBit
    }
}

/// Distinct byte strings (terms) numbered in order of first appearance, in one arena.
struct TermTable {
    private(set) var arena: [UInt8] = []
    private(set) var offsets: [Int] = [0]
    private var buckets: [Int32] = Array(repeating: -1, count: 1 << 12)
    private var hashes: [UInt64] = []

    var count: Int { offsets.count - 1 }

    func bytes(_ t: Int) -> ArraySlice<UInt8> { arena[offsets[t]..<offsets[t + 1]] }

    /// The index of `token`, added when new.
    mutating func intern(_ token: UnsafeRawBufferPointer) -> Int32 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in token { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        let mask = buckets.count - 1
        var i = Int(truncatingIfNeeded: h ^ (h >> 29)) & mask
        while true {
            let t = buckets[i]
            if t < 0 { break }
            let ti = Int(t)
            if hashes[ti] == h, offsets[ti + 1] - offsets[ti] == token.count, equal(ti, token) { return t }
            i = (i + 1) & mask
        }
        let t = Int32(count)
        arena.append(contentsOf: token)
        offsets.append(arena.count)
        hashes.append(h)
        buckets[i] = t
        if count * 2 > buckets.count { grow() }
        return t
    }

    private func equal(_ t: Int, _ token: UnsafeRawBufferPointer) -> Bool {
        arena.withUnsafeBytes { a in
            memcmp(a.baseAddress! + offsets[t], token.baseAddress!, token.count) == 0
        }
    }

    private mutating func grow() {
        buckets = Array(repeating: -1, count: buckets.count * 2)
        let mask = buckets.count - 1
        for t in 0..<count {
            let h = hashes[t]
            var i = Int(truncatingIfNeeded: h ^ (h >> 29)) & mask
            while buckets[i] >= 0 { i = (i + 1) & mask }
            buckets[i] = Int32(t)
        }
    }
}

/// What one segment holds, ready to be written.
struct SegmentContent {
    struct Term {
        var term: [UInt8]
        var docs: Int
        var columnDocs: Int
        var postings: [UInt8]
    }
    var lo: Int64
    var hi: Int64
    var docs = 0
    var tokens: Int64 = 0
    var safeUntil = Double.infinity
    /// The largest static boost factor and the latest use among the documents (bounds for
    /// phrases that are not read block by block).
    var maxStatic = 1.0
    var latestUse: Double?
    /// Sorted by term bytes.
    var terms: [Term] = []
}

/// Builds a segment from the items of a rowid range, read in rowid order.
struct SegmentBuilder {
    /// Documents expiring before this get `extra` (their expiration is checked on their row), so
    /// that the others expire after `safeUntil` and need no check until then.
    let horizon: Double
    private var content: SegmentContent
    private var table = TermTable()
    private var scratch = DocumentScratch()
    /// Per term: its postings so far as varints (doc, frequency << 4 | columns << 1 | extra, length).
    private var raw: [[UInt8]] = []
    private var docCounts: [Int32] = []
    private var columnDocs: [Int32] = []
    private var boosts: [UInt32: BM25.Boosts] = [:]
    private var maxLocal: UInt32 = 0

    init(lo: Int64, hi: Int64, horizon: Double) {
        self.horizon = horizon
        content = SegmentContent(lo: lo, hi: hi)
    }

    mutating func add(_ doc: RankedDocument, tokenizer: FullTextTokenizer) {
        let local = UInt32(doc.rowid - content.lo)
        maxLocal = max(maxLocal, local)
        let length = DocumentTokenizer.tokenize(doc.columns, tokenizer: tokenizer, table: &table, scratch: &scratch)
        let extra = !doc.boosts.isNone || doc.hasRelated || doc.expires < horizon
        if extra {
            if !doc.boosts.isNone { boosts[local] = doc.boosts }
            content.maxStatic = max(content.maxStatic, doc.boosts.staticFactor)
            if let l = doc.boosts.lastUsed { content.latestUse = max(content.latestUse ?? l, l) }
        } else {
            content.safeUntil = min(content.safeUntil, doc.expires)
        }
        content.docs += 1
        content.tokens += Int64(length)
        while raw.count < table.count {
            raw.append([])
            docCounts.append(0)
            columnDocs.append(0)
        }
        for (k, t) in scratch.terms.enumerated() {
            let i = Int(t)
            let mask = scratch.masks[k]
            let columns = UInt8(mask.nonzeroBitCount)
            Varint.append(UInt64(local), to: &raw[i])
            Varint.append(UInt64(scratch.frequencies[k]) << 8 | UInt64(mask & 0x7F) << 1 | (extra ? 1 : 0), to: &raw[i])
            Varint.append(UInt64(length), to: &raw[i])
            docCounts[i] += 1
            columnDocs[i] += Int32(columns)
        }
    }

    /// The segment, its terms sorted and encoded, then the prefix lists (`PrefixLists`).
    mutating func finish() -> SegmentContent {
        // Sorting 150 000 terms takes tens of milliseconds: it yields to queries too (`QueryYield`).
        var sortPoint = QueryYield.Point(every: 1024)
        var order = Array(0..<table.count)
        order.sort {
            sortPoint.check()
            return table.bytes($0).lexicographicallyPrecedes(table.bytes($1))
        }
        var yieldPoint = QueryYield.Point(every: 16)
        let sortedTerms = order.map { Array(table.bytes($0)) }
        let prefixes = PrefixLists.choose(sortedTerms, docs: order.map { Int(docCounts[$0]) }, segmentDocs: content.docs)
        var unions = PrefixUnions(prefixes: prefixes, span: Int(maxLocal) + 1, documents: content.docs)
        var out = content
        out.terms.reserveCapacity(order.count + prefixes.count)
        var postings: [Posting] = []
        for (k, t) in order.enumerated() {
            yieldPoint.check()
            postings.removeAll(keepingCapacity: true)
            raw[t].withUnsafeBufferPointer { b in
                var pos = 0
                while pos < b.count {
                    let doc = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                    let packed = Varint.read(b, &pos)
                    let length = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                    postings.append(Posting(doc: doc, frequency: UInt32(truncatingIfNeeded: packed >> 8),
                        mask: UInt8(truncatingIfNeeded: packed >> 1) & 0x7F, extra: packed & 1 == 1, length: length))
                }
            }
            raw[t] = []
            for finished in unions.advance(to: k, termPostings: postings) { out.terms.append(encodeUnion(finished)) }
            let encoded = PostingListFormat.encode(postings) { boosts[$0] ?? .none }
            out.terms.append(.init(term: sortedTerms[k], docs: Int(docCounts[t]), columnDocs: Int(columnDocs[t]), postings: encoded))
        }
        for finished in unions.finishAll() { out.terms.append(encodeUnion(finished)) }
        // The best completions of prefixes of many terms (`PrefixLists.topCompletions`).
        for (prefix, range) in prefixes where range.count >= PrefixLists.minTerms {
            yieldPoint.check()
            let best = range.map { k in (term: sortedTerms[k], columnDocs: Int(columnDocs[order[k]])) }
                .filter { $0.columnDocs > 0 }
                .sorted { $0.columnDocs != $1.columnDocs ? $0.columnDocs > $1.columnDocs : $0.term.lexicographicallyPrecedes($1.term) }
                .prefix(PrefixLists.topCompletions)
            out.terms.append(.init(term: PrefixLists.completionsKey(prefix), docs: best.count, columnDocs: 0,
                postings: PrefixLists.encodeCompletions(Array(best))))
        }
        return out
    }

    private func encodeUnion(_ union: (prefix: [UInt8], postings: [Posting])) -> SegmentContent.Term {
        .init(term: PrefixLists.key(union.prefix), docs: union.postings.count, columnDocs: 0,
            postings: PostingListFormat.encode(union.postings) { boosts[$0] ?? .none })
    }
}

/// Prefix lists: for a prefix that begins many terms, the segment also stores the merged posting
/// list of all its terms (each document once, frequencies summed: what bm25 reads for the prefix
/// phrase), under the key 0xFF + prefix, which no term has (UTF-8 never holds 0xFF). A query for
/// the word being typed then reads one list, with block bounds, instead of thousands of rows
/// ("lib" begins 9 503 terms of the corpus). Prefixes of fewer terms are merged at query time:
/// with few rows that costs about as much as reading one list.
///
/// Measured on the corpus (64k items, one segment; `git show 8eae301:Docs/Performance.md`):
/// every prefix of two or more terms would add 12.7M postings to the terms' 3.2M; those of at
/// least 64 terms 4.95M, 128 terms 3.78M (298 prefixes), 256 terms 2.97M.
enum PrefixLists {
    /// A prefix gets a list when it begins at least this many terms…
    static let minTerms = 128
    /// …or two or more whose postings are at least the segment's documents over this. 16, not 8:
    /// "pars" (66 terms, 4 990 postings in a segment of 65 536) was merged from 66 rows in every
    /// segment of every query typing it, 6.1 M of the 17.5 M instructions of `json pars` at 1M;
    /// measured on a 65 536-document segment of the corpus, 16 stores 710 prefixes where 8 stored
    /// 438 (`git show 8eae301:Docs/Performance.md`, "The 1M top k").
    static let postingsShare = 16
    /// Prefixes longer than this many bytes are merged at query time.
    static let maxLength = 12

    static func key(_ prefix: [UInt8]) -> [UInt8] { [0xFF] + prefix }

    /// Completions kept per prefix of at least `minTerms` terms: its words of the text columns
    /// with the most `column_docs`, best first (ties by the word), under 0xFE + prefix. A query
    /// completing "lib" reads them instead of 9 503 rows, when they are enough to prove its
    /// answer (`RankedVocabulary.completions`).
    static let topCompletions = 64

    static func completionsKey(_ prefix: [UInt8]) -> [UInt8] { [0xFE] + prefix }

    static func encodeCompletions(_ entries: [(term: [UInt8], columnDocs: Int)]) -> [UInt8] {
        var out: [UInt8] = []
        Varint.append(UInt64(entries.count), to: &out)
        for e in entries {
            Varint.append(UInt64(e.term.count), to: &out)
            out += e.term
            Varint.append(UInt64(e.columnDocs), to: &out)
        }
        return out
    }

    /// Nil when malformed.
    static func decodeCompletions(_ bytes: [UInt8]) -> [(term: [UInt8], columnDocs: Int)]? {
        bytes.withUnsafeBufferPointer { b -> [(term: [UInt8], columnDocs: Int)]? in
            var pos = 0
            let n = Int(Varint.read(b, &pos))
            guard n <= topCompletions else { return nil }
            var out: [(term: [UInt8], columnDocs: Int)] = []
            for _ in 0..<n {
                let length = Int(Varint.read(b, &pos))
                guard length >= 0, pos + length <= b.count else { return nil }
                let term = Array(b[pos..<(pos + length)])
                pos += length
                out.append((term, Int(Varint.read(b, &pos))))
            }
            return pos == b.count ? out : nil
        }
    }

    /// The prefixes (whole UTF-8 characters) to store, sorted by where their terms begin in
    /// `sorted` (then shortest first), with that range.
    static func choose(_ sorted: [[UInt8]], docs: [Int], segmentDocs: Int) -> [(prefix: [UInt8], range: Range<Int>)] {
        var chosen: [(prefix: [UInt8], range: Range<Int>)] = []
        let postingsFloor = max(2, segmentDocs / postingsShare)
        for length in 1...maxLength {
            var start = 0
            while start < sorted.count {
                let term = sorted[start]
                // Terms shorter than the prefix, or cut inside a character, begin no prefix of this length.
                guard term.count >= length, term.count == length || term[length] & 0xC0 != 0x80 else {
                    start += 1
                    continue
                }
                let prefix = term[0..<length]
                var end = start + 1
                var postings = docs[start]
                while end < sorted.count, sorted[end].starts(with: prefix) {
                    postings += docs[end]
                    end += 1
                }
                if end - start >= minTerms || (end - start >= 2 && postings >= postingsFloor) {
                    chosen.append((Array(prefix), start..<end))
                }
                start = end
            }
        }
        chosen.sort { $0.range.lowerBound != $1.range.lowerBound ? $0.range.lowerBound < $1.range.lowerBound : $0.prefix.count < $1.prefix.count }
        return chosen
    }
}

/// Merges the terms of the chosen prefixes as the sorted terms go by: a prefix's terms are
/// contiguous, and the prefixes open at one term form a chain.
struct PrefixUnions {
    private let prefixes: [(prefix: [UInt8], range: Range<Int>)]
    private var next = 0
    private var open: [(prefix: [UInt8], end: Int, accumulator: UnionAccumulator)] = []
    private let span: Int
    private let dense: Bool
    private var yieldPoint = QueryYield.Point(every: 4)

    init(prefixes: [(prefix: [UInt8], range: Range<Int>)], span: Int, documents: Int) {
        self.prefixes = prefixes
        self.span = max(1, span)
        dense = span <= 4 * max(documents, 1)
    }

    /// Takes term `k`'s postings; returns the prefixes that ended before it.
    mutating func advance(to k: Int, termPostings: [Posting]) -> [(prefix: [UInt8], postings: [Posting])] {
        var done: [(prefix: [UInt8], postings: [Posting])] = []
        while let last = open.last, last.end <= k {
            done.append((last.prefix, open.removeLast().accumulator.postings()))
        }
        while next < prefixes.count, prefixes[next].range.lowerBound == k {
            open.append((prefixes[next].prefix, prefixes[next].range.upperBound, UnionAccumulator(span: span, dense: dense)))
            next += 1
        }
        for i in open.indices {
            yieldPoint.check()  // a frequent word goes into every open prefix's union
            open[i].accumulator.add(termPostings)
        }
        return done
    }

    mutating func finishAll() -> [(prefix: [UInt8], postings: [Posting])] {
        var done: [(prefix: [UInt8], postings: [Posting])] = []
        while let last = open.popLast() { done.append((last.prefix, last.accumulator.postings())) }
        return done
    }
}

/// One document per entry, frequencies summed, column masks joined (a prefix's stored list
/// answers a column filter like its terms' lists).
struct UnionAccumulator {
    private var frequency: [UInt32] = []
    private var length: [UInt32] = []
    private var extra: [Bool] = []
    private var mask: [UInt8] = []
    private var sparse: [Posting] = []
    private let dense: Bool

    init(span: Int, dense: Bool) {
        self.dense = dense
        if dense {
            frequency = Array(repeating: 0, count: span)
            length = Array(repeating: 0, count: span)
            extra = Array(repeating: false, count: span)
            mask = Array(repeating: 0, count: span)
        }
    }

    mutating func add(_ postings: [Posting]) {
        guard dense else {
            sparse += postings
            return
        }
        for p in postings {
            let d = Int(p.doc)
            frequency[d] += p.frequency
            length[d] = p.length
            extra[d] = p.extra
            mask[d] |= p.mask
        }
    }

    func postings() -> [Posting] {
        if dense {
            var out: [Posting] = []
            for d in frequency.indices where frequency[d] > 0 {
                out.append(Posting(doc: UInt32(d), frequency: frequency[d], mask: mask[d], extra: extra[d], length: length[d]))
            }
            return out
        }
        var out: [Posting] = []
        for p in sparse.sorted(by: { $0.doc < $1.doc }) {
            if out.last?.doc == p.doc {
                out[out.count - 1].frequency += p.frequency
                out[out.count - 1].mask |= p.mask
            } else {
                out.append(p)
            }
        }
        return out
    }
}
