import Foundation

/// Top-k retrieval over the ranked index: the `limit` best items of a user query with their
/// exact scores, without scoring every match.
///
/// Per segment, the phrase with the fewest documents drives: its blocks are visited best bound
/// first, and a block is skipped once its bound (the Pareto frontier of (frequency, length) of its
/// documents, the other phrases' largest addend, the largest boost) cannot beat the k-th score
/// found so far. Every document scored is scored exactly, with bm25's own arithmetic (`BM25`)
/// from the same statistics FTS5 reads, so the result is the exhaustive ranking's top k, ties
/// broken by rowid. Items no segment holds in their current version (the delta) are tokenized
/// and scored one by one. The caller runs it inside one read transaction.
struct RankedTopK {
    /// A delta larger than this is answered exhaustively (and the maintainer is asked to build).
    /// Each query reads the whole delta and scores it document by document in Swift (tokenized
    /// once, then cached), where FTS5 ranks a small index's matches in C: at 4 096, queries on a
    /// freshly filled 4 000-item index took up to 1.6-1.8 s in a debug build under a donation
    /// flood (the migration integration tests; the exhaustive SQL: 50-90 ms). The equivalence
    /// test's writes leave about 600 documents in the delta, which this limit keeps served.
    static let deltaLimit = 1024
    /// Relative slack on every bound: a bound and a score are computed in different orders, so
    /// they may differ in the last bits.
    static let boundSlack = 1 + 1e-9

    let db: Database
    let phrases: [QueryPhrase]
    let limit: Int
    let filter: SQLFilter?
    let now: Double
    let store: IndexStore

    /// What the ranked index reads before scoring: the snapshot, the delta, each segment's
    /// sources of each phrase, and this index's statistics (`CorpusStatistics`).
    struct Prepared {
        var snapshot: RankSnapshot
        var delta: [DeltaDocument]
        var sources: [[PhraseSource]]
        var deltaFrequencies: [[UInt32]]
        var statistics: CorpusStatistics
    }

    /// This index's statistics of the phrases, or nil when the ranked index cannot answer (the
    /// exhaustive path then counts them): the first phase of a query across indexes.
    func statistics() throws -> CorpusStatistics? {
        defer { db.unionScratch.reclaim() }
        return try prepare()?.statistics
    }

    /// What the ranked index found, or nil when it cannot answer (no index for this file format,
    /// a phrase it does not serve, a delta too large, a damaged blob): the caller then runs the
    /// exhaustive query. With `statistics` (summed over every index a query searches), the
    /// scores use them instead of this index's own: comparable across the indexes.
    /// `prepared`: what `prepareKept` read earlier in the same read transaction (a query across
    /// indexes reads its statistics and then its candidates from one snapshot, prepared once).
    func run(statistics global: CorpusStatistics? = nil, prepared: Prepared? = nil) throws -> [ScoredCandidate]? {
        // Unions borrow the connection's scratch arrays until the query ends.
        defer { db.unionScratch.reclaim() }
        guard let p = try prepared ?? prepare() else { return nil }
        let statistics = global ?? p.statistics
        guard p.statistics.rows > 0, statistics.rows > 0, statistics.hits.count == phrases.count else { return [] }
        let bm25 = BM25(rows: statistics.rows, tokens: statistics.tokens)
        let idf = statistics.hits.map { BM25.idf(rows: statistics.rows, hits: $0) }

        var scorer = Scorer(limit: limit, idf: idf, bm25: bm25, now: now, check: try RowCheck(db: db, filter: filter, now: now))
        for (segment, row) in zip(p.snapshot.segments, p.sources) where !row.contains(where: { $0.count == 0 }) {
            try scorer.score(segment: segment, sources: row)
        }
        for (doc, f) in zip(p.delta, p.deltaFrequencies) where !f.contains(0) {
            try scorer.scoreDelta(rowid: doc.rowid, frequencies: f, length: doc.document.length)
        }
        return scorer.heap.sorted()
    }

    /// `prepare`, its unions kept on the connection's scratch arrays for a `run(prepared:)` later
    /// in the same read transaction (which gives them back), or nil where the ranked index cannot
    /// answer.
    func prepareKept() throws -> Prepared? { try prepare() }

    private func prepare() throws -> Prepared? {
        let snapshot = try RankSnapshot.current(db)
        guard let delta = try Self.deltaDocuments(snapshot, db: db, store: store) else {
            store.rankMaintainer.request()
            return nil
        }
        if delta.count >= RankMaintainer.deltaBuildThreshold || snapshot.segments.contains(where: { $0.needsRebuild(now: now) }) {
            store.rankMaintainer.request()
        }
        guard let totals = try Self.totals(db), totals.rows > 0 else {
            return Prepared(snapshot: snapshot, delta: [], sources: [], deltaFrequencies: [],
                statistics: CorpusStatistics(hits: [Int64](repeating: 0, count: phrases.count)))
        }

        // The statistics first: nHit of each phrase over every row of the full-text index.
        var sources: [[PhraseSource]] = []
        var hits = [Int64](repeating: 0, count: phrases.count)
        for segment in snapshot.segments {
            var row: [PhraseSource] = []
            for (i, phrase) in phrases.enumerated() {
                guard let source = try PhraseSource.load(phrase, segment: segment, db: db) else { return nil }
                var n = Int64(source.count)
                for d in segment.dirty where source.contains(d) { n -= 1 }
                hits[i] += n
                row.append(source)
            }
            sources.append(row)
        }
        var deltaFrequencies: [[UInt32]] = []
        for doc in delta {
            let f = phrases.map { doc.document.frequency(of: $0) }
            for i in f.indices where f[i] > 0 { hits[i] += 1 }
            deltaFrequencies.append(f)
        }
        return Prepared(snapshot: snapshot, delta: delta, sources: sources, deltaFrequencies: deltaFrequencies,
            statistics: CorpusStatistics(rows: totals.rows, tokens: totals.tokens, hits: hits))
    }

    /// The rows of the full-text index and their tokens, as bm25 reads them (nil: no row).
    static func totals(_ db: Database) throws -> (rows: Int64, tokens: Int64)? {
        guard let text = try db.scalar("SELECT sl_fts_totals(fts) FROM fts LIMIT 1").flatMap({
            if case .text(let t) = $0 { t } else { nil }
        }) else { return nil }
        let parts = text.split(separator: " ").compactMap { Int64($0) }
        return parts.count == 2 ? (parts[0], parts[1]) : nil
    }

    struct DeltaDocument {
        var rowid: Int64
        var document: TokenizedDocument
    }

    /// The items no segment holds in their current version, tokenized (from the cache when their
    /// row is unchanged); nil when there are more than `deltaLimit`.
    static func deltaDocuments(_ snapshot: RankSnapshot, db: Database, store: IndexStore) throws -> [DeltaDocument]? {
        var versions: [(Int64, Int64)] = []
        let above = try db.rows("SELECT rowid, checksum FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?",
            [.integer(snapshot.covered), .integer(Int64(Self.deltaLimit + 1))])
        guard above.count + snapshot.dirty.count <= Self.deltaLimit else { return nil }
        for r in above { versions.append((r.int(0) ?? 0, r.int(1) ?? 0)) }
        for d in snapshot.dirty where d <= snapshot.covered {
            if let c = try db.scalar("SELECT checksum FROM items WHERE rowid = ?", [.integer(d)]), case .integer(let checksum) = c {
                versions.append((d, checksum))
            }
        }
        guard !versions.isEmpty else { return [] }
        let tokenizer = try db.fullTextTokenizer()
        var out: [DeltaDocument] = []
        out.reserveCapacity(versions.count)
        for (rowid, checksum) in versions {
            if let cached = store.deltaCache.document(rowid, checksum: checksum) {
                out.append(DeltaDocument(rowid: rowid, document: cached))
                continue
            }
            guard let row = try db.rows("SELECT \(IndexStore.ftsColumnList) FROM items WHERE rowid = ?", [.integer(rowid)]).first else { continue }
            let doc = TokenizedDocument(checksum: checksum, columns: (0..<Schema.ftsColumns.count).map { row.string($0) }, tokenizer: tokenizer)
            store.deltaCache.store(rowid, doc)
            out.append(DeltaDocument(rowid: rowid, document: doc))
        }
        store.deltaCache.retain(only: Set(versions.map(\.0)))
        return out
    }
}

/// What a candidate's row says: its boosts, and whether it is visible and passes the filter.
final class RowCheck {
    private let statement: Statement
    private let prefix: [SQLValue]
    let hasFilter: Bool

    init(db: Database, filter: SQLFilter?, now: Double) throws {
        let condition = filter.map { "(\($0.sql))" } ?? "1"
        statement = try db.statement("""
            SELECT items.ranking_hint, items.last_used, items.engagement,
              CASE WHEN \(IndexStore.visible) AND \(condition) THEN 1 ELSE 0 END
            FROM items WHERE items.rowid = ?
            """)
        prefix = [.double(now), .double(now)] + (filter?.bindings ?? [])
        hasFilter = filter != nil
    }

    /// Nil when the row is gone.
    func check(_ rowid: Int64) throws -> (boosts: BM25.Boosts, passes: Bool)? {
        statement.reset()
        try statement.bind(prefix)
        try statement.bind(.integer(rowid), at: Int32(prefix.count + 1))
        defer { statement.reset() }
        guard try statement.step() else { return nil }
        let row = statement.row()
        return (BM25.Boosts(rankingHint: row.double(0), lastUsed: row.double(1), engagement: row.double(2) ?? 0), row.int(3) == 1)
    }
}

/// The scoring loop of `RankedTopK`.
struct Scorer {
    var heap: TopKHeap
    let idf: [Double]
    let bm25: BM25
    let now: Double
    let check: RowCheck

    init(limit: Int, idf: [Double], bm25: BM25, now: Double, check: RowCheck) {
        heap = TopKHeap(capacity: limit)
        self.idf = idf
        self.bm25 = bm25
        self.now = now
        self.check = check
    }

    /// bm25's value for a document (negative), phrases summed in query order.
    @inline(__always)
    func bm25Score(_ frequencies: [UInt32], length: UInt32) -> Double {
        let norm = bm25.lengthNorm(length)
        var score = 0.0
        for i in idf.indices { score += BM25.addend(idf: idf[i], frequency: Double(frequencies[i]), norm: norm) }
        return -1.0 * score
    }

    /// Whether a score at best `best` (negative) could still enter.
    @inline(__always)
    func mayEnter(best: Double) -> Bool { !heap.isFull || best * RankedTopK.boundSlack <= heap.threshold }

    /// Offers a document with bm25 value `bm`. `extra` documents have their row read for the
    /// boosts; the others have none and are visible unless the segment is past `safeUntil`.
    mutating func offer(rowid: Int64, bm: Double, extra: Bool, safe: Bool, boostBound: Double) throws {
        if !extra {
            // No boost: the SQL's factors are all exactly 1.0.
            guard heap.accepts(score: bm, rowid: rowid) else { return }
            if check.hasFilter || !safe {
                guard let row = try check.check(rowid), row.passes else { return }
            }
            heap.insert(score: bm, rowid: rowid)
            return
        }
        guard mayEnter(best: bm * boostBound) else { return }
        guard let row = try check.check(rowid), row.passes else { return }
        heap.insert(score: row.boosts.apply(bm, now: now), rowid: rowid)
    }

    mutating func scoreDelta(rowid: Int64, frequencies: [UInt32], length: UInt32) throws {
        let bm = bm25Score(frequencies, length: length)
        guard mayEnter(best: bm * 6.0) else { return }  // 2 × 1.5 × 2: the largest boost there is
        guard let row = try check.check(rowid), row.passes else { return }
        heap.insert(score: row.boosts.apply(bm, now: now), rowid: rowid)
    }

    /// The largest addend a phrase with `idf` can have in the segment.
    static func maxAddend(idf: Double, _ source: PhraseSource, _ bm25: BM25) -> Double {
        switch source {
        case .empty: return 0
        case .list(let list):
            if list.hasBounds {
                return list.blocks.indices.reduce(0.0) { max($0, list.addendBound(block: $1, idf: idf, bm25)) }
            }
            var block: [Posting] = []
            list.decode(block: 0, into: &block)
            return block.reduce(0.0) { max($0, BM25.addend(idf: idf, frequency: Double($1.frequency), norm: bm25.lengthNorm($1.length))) }
        case .union(let u):
            guard u.count <= 4096 else { return idf * (BM25.k1 + 1.0) }
            var best = 0.0
            u.forEach { _, f, length, _ in
                best = max(best, BM25.addend(idf: idf, frequency: Double(f), norm: bm25.lengthNorm(length)))
            }
            return best
        }
    }

    mutating func score(segment: RankSnapshot.Segment, sources: [PhraseSource]) throws {
        let driver = sources.indices.min { sources[$0].count < sources[$1].count }!
        let others = sources.indices.filter { $0 != driver }
        let segmentBoost = segment.boostBound(now: now)
        var scan = SegmentScan(readers: sources.map(SourceReader.init), frequencies: [UInt32](repeating: 0, count: sources.count),
            driver: driver, others: others, segment: segment, safe: now < segment.safeUntil)

        switch sources[driver] {
        case .empty: return
        case .union(let u):
            try u.forEach { doc, f, length, extra in
                try scan.visit(&self, doc: doc, frequency: f, length: length, extra: extra, boost: segmentBoost)
            }
        case .list(let list):
            // Alone, blocks go best bound first, so the threshold rises early and later blocks are
            // skipped. With other phrases, in document order, so their readers only move forward.
            // An other phrase read block by block bounds a driver block by its own blocks that
            // overlap the driver block's documents (block-max): at 1M, where 16 segments hold
            // near-copies and the k-th score is high after the first, the whole segment's largest
            // addend let almost every block of "web" through for "server".
            // A plain loop: a `var` captured by a closure is boxed, and cost a single phrase
            // (`lib` at 1M: 3 700 blocks a query) about 60 instructions a block.
            // `other`: the other phrases' largest addends over the block's documents, which bounds
            // each document before its lookups (`SegmentScan.visit`).
            var order: [(block: Int, bound: Double, boost: Double, other: Double)] = []
            order.reserveCapacity(list.blocks.count)
            if !list.hasBounds {
                for b in list.blocks.indices { order.append((b, .infinity, segmentBoost, .infinity)) }
            } else if others.isEmpty {
                for b in list.blocks.indices {
                    let boost = list.boostBound(block: b, now: now)
                    order.append((b, list.addendBound(block: b, idf: idf[driver], bm25) * boost, boost, .infinity))
                }
            } else {
                var otherBlocks = OtherBlockBounds(others.map { (sources[$0], idf[$0]) }, bm25: bm25)
                for b in list.blocks.indices {
                    let boost = list.boostBound(block: b, now: now)
                    let first = b == 0 ? 0 : list.blocks[b - 1].lastDoc &+ 1
                    let other = otherBlocks.bound(from: first, through: list.blocks[b].lastDoc)
                    order.append((b, (list.addendBound(block: b, idf: idf[driver], bm25) + other) * boost, boost, other))
                }
            }
            // Alone, the blocks are taken best bound first from a heap: the loop usually stops
            // after a few, where sorting every block (`library `: 227) was 76 000 instructions.
            var queue = others.isEmpty && order.count > 1 ? BoundQueue(order.map(\.bound)) : nil
            var next = 0
            var block: [Posting] = []
            block.reserveCapacity(PostingListFormat.blockSize)
            while true {
                let entry: (block: Int, bound: Double, boost: Double, other: Double)
                if queue != nil {
                    guard let i = queue!.pop() else { break }
                    entry = order[i]
                } else {
                    guard next < order.count else { break }
                    entry = order[next]
                    next += 1
                }
                if !mayEnter(best: -entry.bound) {
                    if others.isEmpty { break } else { continue }
                }
                list.decode(block: entry.block, into: &block)
                scan.otherBound = entry.other
                for p in block {
                    try scan.visit(&self, doc: p.doc, frequency: p.frequency, length: p.length, extra: p.extra, boost: entry.boost)
                }
            }
        }
    }
}

/// Indices of bounds, largest bound first (ties: the lower index first), popped as needed: a
/// binary max-heap, built in linear time.
struct BoundQueue {
    private var heap: [(bound: Double, index: Int)]

    init(_ bounds: [Double]) {
        heap = bounds.enumerated().map { ($0.element, $0.offset) }
        var i = heap.count / 2
        while i > 0 {
            i -= 1
            siftDown(i)
        }
    }

    @inline(__always)
    private func above(_ a: Int, _ b: Int) -> Bool {
        heap[a].bound > heap[b].bound || (heap[a].bound == heap[b].bound && heap[a].index < heap[b].index)
    }

    private mutating func siftDown(_ start: Int) {
        var i = start
        while true {
            let l = 2 * i + 1, r = l + 1
            var top = i
            if l < heap.count, above(l, top) { top = l }
            if r < heap.count, above(r, top) { top = r }
            if top == i { return }
            heap.swapAt(i, top)
            i = top
        }
    }

    mutating func pop() -> Int? {
        guard let first = heap.first else { return nil }
        let last = heap.removeLast()
        if !heap.isEmpty {
            heap[0] = last
            siftDown(0)
        }
        return first.index
    }
}

/// The other phrases' largest addends over a range of documents, for driver blocks asked in
/// document order: per phrase read block by block, the largest bound of its blocks overlapping the
/// range; per other phrase, its largest addend in the segment. Always at least the true sum of
/// the largest addends of the range's documents, so a block skipped by it holds no document that
/// could enter.
struct OtherBlockBounds {
    private struct Blocked {
        var lastDocs: [UInt32]
        var bounds: [Double]
        var next = 0
    }
    private var blocked: [Blocked] = []
    /// The phrases without block bounds (unions, one-block lists): their segment-wide largest addend.
    private var fixed = 0.0

    init(_ others: [(source: PhraseSource, idf: Double)], bm25: BM25) {
        for (source, idf) in others {
            if case .list(let list) = source, list.hasBounds {
                blocked.append(Blocked(lastDocs: list.blocks.map(\.lastDoc),
                    bounds: list.blocks.indices.map { list.addendBound(block: $0, idf: idf, bm25) }))
            } else {
                fixed += Scorer.maxAddend(idf: idf, source, bm25)
            }
        }
    }

    /// The bound for documents `first...last`. Ranges must come in increasing order.
    mutating func bound(from first: UInt32, through last: UInt32) -> Double {
        var total = fixed
        for k in blocked.indices {
            // Blocks entirely before the range are never needed again.
            while blocked[k].next < blocked[k].lastDocs.count, blocked[k].lastDocs[blocked[k].next] < first { blocked[k].next += 1 }
            var best = 0.0
            var j = blocked[k].next
            while j < blocked[k].lastDocs.count {
                best = max(best, blocked[k].bounds[j])
                if blocked[k].lastDocs[j] >= last { break }
                j += 1
            }
            total += best
        }
        return total
    }
}

/// One segment's scan: the driver's documents go through `visit`, which finds the other phrases.
struct SegmentScan {
    var readers: [SourceReader]
    var frequencies: [UInt32]
    let driver: Int
    let others: [Int]
    let segment: RankSnapshot.Segment
    let safe: Bool
    /// The other phrases' largest addends over the documents being visited (infinity: unknown).
    /// With the driver's exact addend it bounds a document's score before the other phrases are
    /// looked up: most of a two-word query's driver documents (`web server `: 3 669 for "web",
    /// 850 with "server") lack the other word or score too low once the heap is full, and the
    /// lookups were most of the query's work.
    var otherBound = Double.infinity

    @inline(__always)
    mutating func visit(_ scorer: inout Scorer, doc: UInt32, frequency: UInt32, length: UInt32, extra: Bool, boost: Double) throws {
        if otherBound < .infinity, scorer.heap.isFull {
            let own = BM25.addend(idf: scorer.idf[driver], frequency: Double(frequency), norm: scorer.bm25.lengthNorm(length))
            // Without a boost a document's score is its bm25 value (the SQL's factors are 1.0).
            guard scorer.mayEnter(best: -(own + otherBound) * (extra ? boost : 1.0)) else { return }
        }
        if segment.isDirty(doc) { return }
        frequencies[driver] = frequency
        for o in others {
            guard let f = readers[o].frequency(of: doc) else { return }
            frequencies[o] = f
        }
        let bm = scorer.bm25Score(frequencies, length: length)
        if !extra, !scorer.heap.accepts(score: bm, rowid: segment.lo + Int64(doc)) { return }
        try scorer.offer(rowid: segment.lo + Int64(doc), bm: bm, extra: extra, safe: safe, boostBound: boost)
    }
}

/// Looks documents up in a phrase's postings, for documents asked in increasing order (a lookup
/// of an earlier document still works, by binary search). The list or union is held directly, not
/// in the enum: taking it out of an enum case copies (and retains) its arrays at every lookup.
struct SourceReader {
    private let list: PostingList?
    private let union: UnionPostings?
    private var cached = -1
    private var block = PostingList.DecodedBlock()
    private var position = 0

    init(source: PhraseSource) {
        switch source {
        case .empty: (list, union) = (nil, nil)
        case .list(let l): (list, union) = (l, nil)
        case .union(let u): (list, union) = (nil, u)
        }
    }

    /// The phrase's frequency in `doc`, nil when the document lacks it.
    mutating func frequency(of doc: UInt32) -> UInt32? {
        if let union { return union.frequency(of: doc) }
        guard list != nil else { return nil }
        if cached < 0 || block.docs.isEmpty || doc > block.docs[block.docs.count - 1] || doc < block.docs[0] {
            guard let b = list!.blockIndex(containing: doc) else { return nil }
            if b != cached {
                list!.decodeDocs(block: b, into: &block)
                cached = b
                guard !block.docs.isEmpty else {
                    cached = -1
                    return nil
                }
            }
            position = 0
        }
        // Forward from the last lookup; back to the block's start only for an earlier document.
        if position > 0, block.docs[position - 1] >= doc { position = 0 }
        while position < block.docs.count, block.docs[position] < doc { position += 1 }
        guard position < block.docs.count, block.docs[position] == doc else { return nil }
        return PostingListFormat.frequency(list!.fields(block, position).packed)
    }
}
