import Foundation

/// The documents FTS5 matches for a one-term driver (`title : "pars" *`, `textContent : "library"`),
/// in rowid order, from the ranked index: a `query.search` page walks them and checks each with
/// the exact condition until the page is full, so a prefix costs the documents the page looks at,
/// not a merge of every doclist the prefix begins (FTS5 materializes those, with positions, before
/// its first row). The set is FTS5's own, exactly:
///
/// - Segment documents from the postings of the term (or of every term the prefix begins, or the
///   prefix's stored union) whose column mask (`Posting.mask`) has the driver's column; the
///   segment's rewritten documents (`rank_dirty`) are skipped there.
/// - Rewritten documents at or below the coverage, and items above it (the delta), tokenized with
///   FTS5's tokenizer (`TokenizedDocument`, cached in `DeltaCache`) and matched the same way.
///
/// Runs inside the caller's read transaction. Where it cannot go on (a damaged blob, more delta
/// documents than `RankedTopK.deltaLimit` looked at) it says from which rowid the SQL must take over
/// (`sqlFrom`): every document at or below it has been considered, so the page stays exact.
struct RankedPageWalk {
    enum Step: Equatable {
        case candidate(Int64)
        case end
        /// The FTS5 walk answers the rest: rows after this rowid.
        case sqlFrom(Int64)
    }

    private let db: Database
    private let store: IndexStore
    private let token: [UInt8]
    private let prefix: Bool
    private let columnBit: UInt8
    private let snapshot: RankSnapshot
    private let tokenizer: FullTextTokenizer
    /// The largest rowid handed out (or the cursor): everything at or below it has been considered.
    private var last: Int64
    private var segments: SegmentCursor
    private var pendingSegment: Int64?
    private var segmentsDone = false
    /// Rewritten rowids at or below the coverage, after the cursor, in order.
    private let dirty: [Int64]
    private var dirtyPosition = 0
    /// Items above the coverage, read in batches.
    private var above: [(rowid: Int64, checksum: Int64)] = []
    private var abovePosition = 0
    private var aboveExhausted = false
    private var aboveExamined = 0
    private var cachedNew = false

    /// Nil when the ranked index cannot answer this driver: no index built yet, a word that is not
    /// one token, too many rewritten documents (the caller runs FTS5 and a build is asked for).
    /// Whole words are not walked by default (`IndexStore.pageRows`): FTS5 walks one doclist
    /// lazily, where a list here is read whole (measured slower).
    init?(db: Database, store: IndexStore, term: FullTextTerm, after: Int64) throws {
        guard let column = Schema.ftsColumns.firstIndex(of: term.column), column < Schema.ftsColumns.count - 1 else { return nil }
        let tokenizer = try db.fullTextTokenizer()
        let tokens = tokenizer.tokens(term.word, query: true)
        guard tokens.count == 1 else { return nil }
        let snapshot = try RankSnapshot.current(db)
        let dirty = snapshot.dirty.filter { $0 <= snapshot.covered }
        guard snapshot.covered > 0, dirty.count <= RankedTopK.deltaLimit else {
            store.rankMaintainer.request()
            return nil
        }
        // A whole word walks only where its list is (or is about to be) kept (`walksWholeWord`).
        if !term.prefix, !store.options.rankedPagesForWholeWords, let segment = snapshot.segments.first(where: { $0.hi > after }) {
            guard let cache = try db.postingCache?.checked(db), cache.walksWholeWord(segment: segment.id, key: tokens[0]) else {
                return nil
            }
        }
        self.db = db
        self.store = store
        self.tokenizer = tokenizer
        token = tokens[0]
        prefix = term.prefix
        columnBit = 1 << UInt8(column)
        self.snapshot = snapshot
        last = after
        self.dirty = dirty.filter { $0 > after }
        segments = SegmentCursor(segments: snapshot.segments.filter { $0.hi > after }, after: after)
    }

    /// The next document of the driver, in rowid order.
    mutating func next() throws -> Step {
        if pendingSegment == nil, !segmentsDone {
            switch try segments.next(db: db, token: token, prefix: prefix, columnBit: columnBit) {
            case .some(.some(let rowid)): pendingSegment = rowid
            case .some(.none): segmentsDone = true
            case .none: return finish(.sqlFrom(last))  // a damaged blob
            }
        }
        while dirtyPosition < dirty.count, pendingSegment.map({ dirty[dirtyPosition] < $0 }) ?? true {
            let rowid = dirty[dirtyPosition]
            dirtyPosition += 1
            if try deltaMatches(rowid, checksum: nil) { return emit(rowid) }
        }
        if let rowid = pendingSegment {
            pendingSegment = nil
            return emit(rowid)
        }
        while true {
            if abovePosition == above.count {
                if aboveExhausted { return finish(.end) }
                try readAbove()
                if above.isEmpty { return finish(.end) }
            }
            let (rowid, checksum) = above[abovePosition]
            abovePosition += 1
            guard aboveExamined < RankedTopK.deltaLimit else {
                // A large delta: FTS5 answers faster than tokenizing it here, and a build is due.
                store.rankMaintainer.request()
                return finish(.sqlFrom(last))
            }
            aboveExamined += 1
            if try deltaMatches(rowid, checksum: checksum) { return emit(rowid) }
            last = rowid
        }
    }

    /// Forgets cached delta documents a segment now holds, if this walk cached new ones.
    func finish(_ step: Step) -> Step {
        if cachedNew { store.deltaCache.retain(above: snapshot.covered, dirty: snapshot.dirty) }
        return step
    }

    private mutating func emit(_ rowid: Int64) -> Step {
        last = rowid
        return .candidate(rowid)
    }

    /// The next batch of items above the coverage and the cursor.
    private mutating func readAbove() throws {
        let batch = 32
        let s = try db.statement("SELECT rowid, checksum FROM items WHERE rowid > ? ORDER BY rowid LIMIT ?")
        s.reset()
        defer { s.reset() }
        try s.bind(.integer(max(last, snapshot.covered)), at: 1)
        try s.bind(.integer(Int64(batch)), at: 2)
        above.removeAll(keepingCapacity: true)
        abovePosition = 0
        while try s.step() { above.append((s.int64(0), s.int64(1))) }
        aboveExhausted = above.count < batch
    }

    /// Whether the current version of `rowid` has the driver (false when the row is gone).
    private mutating func deltaMatches(_ rowid: Int64, checksum known: Int64?) throws -> Bool {
        var checksum = known
        if checksum == nil {
            let s = try db.statement("SELECT checksum FROM items WHERE rowid = ?")
            s.reset()
            defer { s.reset() }
            try s.bind(.integer(rowid), at: 1)
            guard try s.step() else { return false }
            checksum = s.int64(0)
        }
        let document: TokenizedDocument
        if let cached = store.deltaCache.document(rowid, checksum: checksum!) {
            document = cached
        } else {
            let s = try db.statement("SELECT \(IndexStore.ftsColumnList) FROM items WHERE rowid = ?")
            s.reset()
            defer { s.reset() }
            try s.bind(.integer(rowid), at: 1)
            guard try s.step() else { return false }
            document = TokenizedDocument(checksum: checksum!, columns: (0..<Int32(Schema.ftsColumns.count)).map { s.string($0) }, tokenizer: tokenizer)
            store.deltaCache.store(rowid, document)
            cachedNew = true
        }
        return document.matches(token, prefix: prefix, columns: columnBit)
    }
}

/// The segments' documents of a term in rowid order, skipping their rewritten documents. A term,
/// or a prefix with a stored union, is one list read block by block as the page needs it; a
/// prefix's several lists are merged once per segment (their documents in the column, sorted).
struct SegmentCursor {
    private let segments: [RankSnapshot.Segment]
    private let after: Int64
    private var index = -1
    /// The segment's single list, walked lazily.
    private var list: PostingList?
    private var block = PostingList.DecodedBlock()
    private var blockIndex = 0
    private var position = 0
    /// Or its merged documents.
    private var merged: [UInt32] = []
    private var mergedPosition = 0
    private var first: UInt32 = 0

    init(segments: [RankSnapshot.Segment], after: Int64) {
        self.segments = segments
        self.after = after
    }

    /// The next rowid; `.some(nil)` at the end; nil when a blob is damaged.
    mutating func next(db: Database, token: [UInt8], prefix: Bool, columnBit: UInt8) throws -> Int64?? {
        while true {
            if index >= 0 {
                let segment = segments[index]
                if let list {
                    while true {
                        while position < block.docs.count {
                            let i = position
                            position += 1
                            let doc = block.docs[i]
                            guard doc >= first, PostingListFormat.mask(list.fields(block, i).packed) & columnBit != 0,
                                  !segment.isDirty(doc) else { continue }
                            return .some(segment.lo + Int64(doc))
                        }
                        blockIndex += 1
                        guard blockIndex < list.blocks.count else { break }
                        list.decodeDocs(block: blockIndex, into: &block)
                        position = 0
                        if block.docs.isEmpty { return nil }
                    }
                } else {
                    while mergedPosition < merged.count {
                        let doc = merged[mergedPosition]
                        mergedPosition += 1
                        if !segment.isDirty(doc) { return .some(segment.lo + Int64(doc)) }
                    }
                }
            }
            index += 1
            guard index < segments.count else { return .some(nil) }
            guard try load(segments[index], db: db, token: token, prefix: prefix, columnBit: columnBit) else { return nil }
        }
    }

    /// Reads segment `s`'s postings of the term; false when a blob is damaged.
    private mutating func load(_ s: RankSnapshot.Segment, db: Database, token: [UInt8], prefix: Bool, columnBit: UInt8) throws -> Bool {
        first = after >= s.lo ? UInt32(truncatingIfNeeded: after - s.lo + 1) : 0
        list = nil
        merged.removeAll(keepingCapacity: true)
        mergedPosition = 0
        let exact = try db.statement("SELECT postings FROM rank_terms WHERE segment = ? AND term = ?")
        func lookup(_ key: [UInt8]) throws -> [UInt8]? {
            exact.reset()
            defer { exact.reset() }
            try exact.bind(.integer(s.id), at: 1)
            try exact.bind(.blob(key), at: 2)
            return try exact.step() ? exact.bytes(0) : nil
        }
        // A term's list, or a prefix's stored one: from the connection's cache while its segment
        // is in the index (`PostingListCache`, as `PhraseSource.load`): the blob was copied out of
        // SQLite and parsed at every page (a third of a prefix page's walk).
        let cache = try db.postingCache?.checked(db)
        let key = prefix ? PrefixLists.key(token) : token
        if let cached = cache?.list(segment: s, key: key) { return start(cached) }
        if let single = try lookup(key) {
            guard let l = PostingList(single) else { return false }
            cache?.store(l, segment: s, key: key)
            return start(l)
        }
        if !prefix { return true }
        var lists: [PostingList] = []
        var damaged = false
        try db.forEachRow("SELECT postings FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?",
            [.integer(s.id), .blob(token), .blob(token + [0xFF])]) { row in
            if let l = PostingList(row.bytes(0)) { lists.append(l) } else { damaged = true }
        }
        if damaged { return false }
        if lists.count == 1 { return start(lists[0]) }
        for l in lists {
            guard l.forEachDocument(from: first, columns: columnBit, { merged.append($0) }) else { return false }
        }
        merged.sort()
        // A document holding several of the prefix's terms in the column came once per term.
        var unique = 0
        for d in merged where unique == 0 || merged[unique - 1] != d {
            merged[unique] = d
            unique += 1
        }
        merged.removeSubrange(unique...)
        return true
    }

    /// Starts walking `l` at the block holding the first document wanted.
    private mutating func start(_ l: PostingList) -> Bool {
        guard let b = l.blockIndex(containing: first) else { return true }
        l.decodeDocs(block: b, into: &block)
        if block.docs.isEmpty { return false }
        list = l
        blockIndex = b
        position = 0
        return true
    }
}

extension PostingList {
    /// Calls `body` with every document from `first` on whose posting has a column of `columns`,
    /// in document order. False when a block is damaged. No allocation: a block's documents are
    /// decoded into stack memory (a prefix merges tens of lists per page).
    func forEachDocument(from first: UInt32, columns: UInt8, _ body: (UInt32) -> Void) -> Bool {
        guard let start = blockIndex(containing: first) else { return true }
        return forEachBlock(from: start) { docs, n, base, packedAt, packedWidth, _ in
            for i in 0..<n where docs[i] >= first {
                let packed = PostingListFormat.readFixed(base, packedAt + i * packedWidth, width: packedWidth)
                if PostingListFormat.mask(packed) & columns != 0 { body(docs[i]) }
            }
        }
    }
}

/// Pages answered by `RankedPageWalk` (wholly, or until the FTS5 walk took over) and by FTS5 alone,
/// and the candidates the walks handed to the exact check: a walk that let through documents
/// without the driver in its column (the postings' column mask ignored) would still give exact
/// pages, the check dropping them, so tests look at this count.
final class PageWalkTally: @unchecked Sendable {
    private let lock = NSLock()
    private var counts = (walked: 0, takenOver: 0, fts: 0, candidates: 0)

    func record(walked: Bool, takenOver: Bool, candidates: Int = 0) {
        lock.withLock {
            if !walked { counts.fts += 1 } else if takenOver { counts.takenOver += 1 } else { counts.walked += 1 }
            counts.candidates += candidates
        }
    }

    var value: (walked: Int, takenOver: Int, fts: Int, candidates: Int) { lock.withLock { counts } }
}
