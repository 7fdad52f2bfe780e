import Foundation

/// One phrase of a user query as FTS5 parses it: a single token (the word folded and tokenized
/// as FTS5 tokenizes a query string), matched whole or, for the word being typed, as a prefix.
/// Multi-token phrases (the CJK bigram phrases) are not served by the ranked index.
struct QueryPhrase: Equatable {
    var token: [UInt8]
    var prefix: Bool

    /// The phrases of `terms` in query order (a repeated word once, as in `UserQueryTerms.terms`),
    /// or nil when one of them is not a single token.
    static func phrases(_ terms: UserQueryTerms, tokenizer: FullTextTokenizer) -> [QueryPhrase]? {
        var out: [QueryPhrase] = []
        for w in terms.distinctWords {
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

    /// `read`, from the connection's `PostingListCache` when nothing was committed since it was
    /// read there (`PRAGMA data_version`, checked once per read). Only inside a read
    /// transaction, where the version checked and the tables read are one snapshot; outside one,
    /// each statement could see another commit, so it reads.
    static func current(_ db: Database) throws -> RankSnapshot {
        guard db.isInTransaction, let cache = try db.postingCache?.checked(db) else { return try read(db) }
        if let snapshot = cache.snapshot { return snapshot }
        let snapshot = try read(db)
        cache.snapshot = snapshot
        cache.retain(snapshot.segments)
        return snapshot
    }

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
        case .union(let u): u.count
        }
    }

    /// Whether the segment's (old) version of `doc` has the phrase.
    func contains(_ doc: UInt32) -> Bool {
        switch self {
        case .empty: false
        case .list(let l): l.find(doc) != nil
        case .union(let u): u.frequency(of: doc) != nil
        }
    }

    /// Reads the phrase's postings in `segment`: a term's list, a prefix's stored list
    /// (`PrefixLists`), or the lists of the prefix's terms merged. Nil when a blob is malformed.
    static func load(_ phrase: QueryPhrase, segment: RankSnapshot.Segment, db: Database) throws -> PhraseSource? {
        let exact = try db.statement("SELECT postings FROM rank_terms WHERE segment = ? AND term = ?")
        func lookup(_ key: [UInt8]) throws -> [UInt8]? {
            exact.reset()
            try exact.bind(.integer(segment.id), at: 1)
            try exact.bind(.blob(key), at: 2)
            defer { exact.reset() }
            return try exact.step() ? exact.bytes(0) : nil
        }
        // A term's list, or a prefix's stored one: from the connection's cache while its segment
        // is in the index (`PostingListCache`).
        func list(_ key: [UInt8]) throws -> PhraseSource?? {
            let cache = try db.postingCache?.checked(db)
            if let cached = cache?.list(segment: segment, key: key) { return .some(.list(cached)) }
            guard let blob = try lookup(key) else { return nil }
            guard let parsed = PostingList(blob) else { return .some(nil) }
            cache?.store(parsed, segment: segment, key: key)
            return .some(.list(parsed))
        }
        if !phrase.prefix {
            guard let found = try list(phrase.token) else { return .empty }
            return found
        }
        if let stored = try list(PrefixLists.key(phrase.token)) {
            return stored
        }
        var lists: [PostingList] = []
        var malformed = false
        try db.forEachRow("SELECT postings FROM rank_terms WHERE segment = ? AND term >= ? AND term < ?",
            [.integer(segment.id), .blob(phrase.token), .blob(phrase.prefixEnd)]) { s in
            if let list = PostingList(s.bytes(0)) { lists.append(list) } else { malformed = true }
        }
        if malformed { return nil }
        switch lists.count {
        case 0: return .empty
        case 1: return .list(lists[0])
        default: return .union(db.unionScratch.union(lists, span: Int(segment.hi - segment.lo + 1)))
        }
    }
}

/// Several posting lists merged: each document once, its frequencies summed (a prefix phrase's
/// bm25 frequency counts the instances of every term it begins). Held dense, by document number,
/// in scratch arrays of the connection (`UnionScratch`, taken from its pool and given back when
/// the query ends): a lookup is one load, a walk in document order reads the bitmap of documents.
final class UnionPostings {
    let scratch: UnionScratch
    let span: Int
    private(set) var count = 0

    /// Merges `lists` of a segment whose documents are numbered below `span`.
    init(_ lists: [PostingList], span: Int, scratch: UnionScratch) {
        self.scratch = scratch
        self.span = span
        scratch.prepare(span: span)
        let f = scratch.frequency, l = scratch.lengthAndExtra, bits = scratch.seen
        let limit = UInt64(span)
        var count = 0
        for list in lists {
            list.forEachPosting { doc, frequency, length, extra in
                // A damaged blob must not write out of bounds: documents past the span are dropped.
                guard UInt64(doc) < limit else { return }
                let d = Int(doc)
                if f[d] == 0 {
                    bits[d >> 6] |= 1 << UInt64(d & 63)
                    count += 1
                }
                f[d] &+= frequency
                // The top bit carries `extra` (a document has far fewer than 2^31 tokens).
                l[d] = length & 0x7FFF_FFFF | (extra ? 0x8000_0000 : 0)
            }
        }
        self.count = count
    }

    /// The frequency of `doc`, nil when no term of the prefix is in it.
    @inline(__always)
    func frequency(of doc: UInt32) -> UInt32? {
        guard Int(doc) < span else { return nil }
        let f = scratch.frequency[Int(doc)]
        return f == 0 ? nil : f
    }

    /// Calls `body(doc, frequency, length, extra)` in document order.
    func forEach(_ body: (UInt32, UInt32, UInt32, Bool) throws -> Void) rethrows {
        let f = scratch.frequency, l = scratch.lengthAndExtra, bits = scratch.seen
        for w in 0..<((span + 63) >> 6) where bits[w] != 0 {
            var word = bits[w]
            while word != 0 {
                let d = w << 6 | word.trailingZeroBitCount
                word &= word - 1
                try body(UInt32(d), f[d], l[d] & 0x7FFF_FFFF, l[d] & 0x8000_0000 != 0)
            }
        }
    }

    /// Zeroes what the merge wrote, so the scratch can serve the next union.
    func clear() {
        let f = scratch.frequency, bits = scratch.seen
        for w in 0..<((span + 63) >> 6) where bits[w] != 0 {
            var word = bits[w]
            while word != 0 {
                f[w << 6 | word.trailingZeroBitCount] = 0
                word &= word - 1
            }
            bits[w] = 0
        }
    }
}

/// Arrays for one `UnionPostings`, as large as the largest segment seen, all zero between uses
/// (a union clears the entries it touched). Raw memory: no copy-on-write checks in the merge
/// loop, which runs once per posting.
final class UnionScratch {
    private(set) var frequency = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
    private(set) var lengthAndExtra = UnsafeMutablePointer<UInt32>.allocate(capacity: 1)
    private(set) var seen = UnsafeMutablePointer<UInt64>.allocate(capacity: 1)
    private(set) var capacity = 0

    /// Bytes held: two 32-bit arrays and a bitmap of `capacity` documents.
    var bytes: Int { Self.bytes(capacity: capacity) }
    static func bytes(capacity: Int) -> Int { capacity * 8 + ((capacity + 63) >> 6) * 8 }

    func prepare(span: Int) {
        guard capacity < span else { return }
        release()
        capacity = span
        frequency = .allocate(capacity: span)
        frequency.initialize(repeating: 0, count: span)
        lengthAndExtra = .allocate(capacity: span)
        lengthAndExtra.initialize(repeating: 0, count: span)
        seen = .allocate(capacity: (span + 63) >> 6)
        seen.initialize(repeating: 0, count: (span + 63) >> 6)
    }

    private func release() {
        frequency.deallocate()
        lengthAndExtra.deallocate()
        seen.deallocate()
    }

    deinit { release() }
}

/// A connection's `UnionScratch`es: a query takes one per union and gives them all back at its end.
///
/// A query holds one union per segment and prefix phrase at once (the statistics need them all
/// before scoring), so at 1M items in 319 segments it borrows ~8 MB. The pool used to keep every
/// scratch it ever lent, each grown to the largest segment it served: a reader connection's pool
/// only grew, ~190 KB a query at 1M, 115 MB in the bench's query forms (issue 32). It now lends
/// the smallest free scratch that fits (none is grown for a small segment), and keeps at most
/// `retainedBytes` between queries; the rest goes back to the allocator.
final class UnionScratchPool {
    /// Free scratches, by capacity ascending.
    private var free: [UnionScratch] = []
    private var lent: [UnionPostings] = []
    let retainedBytes: Int

    /// The default budget kept between queries (`SEARCHLIGHT_UNION_SCRATCH_KIB`, KiB; -1 keeps
    /// everything, as before, for comparisons): 1 MiB, the unions of a 64k-item index.
    static let defaultRetainedBytes = retainedBytes(kibibytes: ProcessInfo.processInfo.environment["SEARCHLIGHT_UNION_SCRATCH_KIB"])

    /// The budget `SEARCHLIGHT_UNION_SCRATCH_KIB` says: 1 MiB when unset or not a number, no
    /// bound for a negative value or one too large to count in bytes (it overflowed, and the
    /// daemon trapped at its first query).
    static func retainedBytes(kibibytes text: String?) -> Int {
        guard let text, let k = Int(text) else { return 1 << 20 }
        let (bytes, overflow) = k.multipliedReportingOverflow(by: 1024)
        return k < 0 || overflow ? Int.max : bytes
    }

    init(retainedBytes: Int = UnionScratchPool.defaultRetainedBytes) { self.retainedBytes = retainedBytes }

    /// Bytes held by the free scratches (between queries: all the pool holds).
    var freeBytes: Int { free.reduce(0) { $0 + $1.bytes } }
    var freeCount: Int { free.count }

    func union(_ lists: [PostingList], span: Int) -> UnionPostings {
        let scratch: UnionScratch
        if let i = free.firstIndex(where: { $0.capacity >= span }) {
            scratch = free.remove(at: i)
        } else {
            scratch = free.popLast() ?? UnionScratch()  // the largest, grown
        }
        let u = UnionPostings(lists, span: span, scratch: scratch)
        lent.append(u)
        return u
    }

    /// Takes back every union's scratch, zeroed, keeping the smallest within `retainedBytes`.
    func reclaim() {
        guard !lent.isEmpty else { return }
        for u in lent {
            u.clear()
            free.append(u.scratch)
        }
        lent.removeAll()
        free.sort { $0.capacity < $1.capacity }
        var kept = 0, total = 0
        for s in free {
            total += s.bytes
            if total > retainedBytes { break }
            kept += 1
        }
        if kept < free.count { free.removeSubrange(kept...) }
    }
}

/// Parsed posting lists of one reader connection, kept across its reads: a query reading a long
/// list (`library`'s 130 KB at 64k) copied it out of SQLite and parsed its directory on every
/// call, 300 000 of its 1 000 000 instructions. A segment's rows never change while it is active
/// (its terms are written before it is switched in, deleted after it is retired) and its id is
/// never given again within a file (`meta.rank_next_segment`), so a list stays right for as long
/// as its segment is in the index, whatever else was committed: settling's merge commits a batch
/// of terms every few milliseconds, and each commit emptied every reader's lists, so the queries
/// right after a donation re-read every list they touched (issue 32). What a commit can change
/// is re-read once per read after one (`needsCheck`, set by `IndexStore.read`, against `PRAGMA
/// data_version`, which inside a query's read transaction is that snapshot's): the segments and
/// rewritten rows (`snapshot`), whose reading then drops the lists of segments no longer active
/// or no longer the same. The connection is `query_only`, so no change of its own goes unseen.
/// Bounded by the blobs' bytes: past `maxBytes` it starts over.
final class PostingListCache {
    static let maxBytes = 1 << 20

    struct Key: Hashable {
        let segment: Int64
        let term: [UInt8]
    }

    var needsCheck = true
    private var version = -1
    private var lists: [Key: PostingList] = [:]
    private(set) var bytes = 0
    /// The ranked index's segments and rewritten rows as of `version` (`RankSnapshot.current`):
    /// reading them was 20 k instructions of every prefix page.
    var snapshot: RankSnapshot?

    /// The cache, its snapshot and asks forgotten first if something was committed since.
    func checked(_ db: Database) throws -> PostingListCache {
        guard needsCheck else { return self }
        needsCheck = false
        let now = try db.scalar("PRAGMA data_version").flatMap { if case .integer(let v) = $0 { Int(v) } else { nil } } ?? -2
        if now != version || now == -2 {
            if !Self.keptAcrossCommits {
                lists.removeAll(keepingCapacity: true)
                bytes = 0
            }
            snapshot = nil
            asked.removeAll(keepingCapacity: true)
            version = now
        }
        return self
    }

    /// `SEARCHLIGHT_POSTING_CACHE_PER_COMMIT=1` empties the lists at every commit, as before
    /// (for comparisons).
    static let keptAcrossCommits = ProcessInfo.processInfo.environment["SEARCHLIGHT_POSTING_CACHE_PER_COMMIT"] != "1"

    /// What the rows of a segment were when its lists were kept.
    private struct Stamp: Equatable {
        let lo: Int64, hi: Int64, docs: Int, tokens: Int64
        init(_ s: RankSnapshot.Segment) { (lo, hi, docs, tokens) = (s.lo, s.hi, s.docs, s.tokens) }
    }
    private var stamps: [Int64: Stamp] = [:]
    /// Lists read from SQLite and kept (tests: whether a read was served from here).
    private(set) var listsRead = 0
    /// The segments whose lists are kept.
    var segmentsHeld: Set<Int64> { Set(lists.keys.map(\.segment)) }

    /// Keeps the lists of `segments` (a snapshot just read in a transaction) only, and only where
    /// the segment has the bounds they were read with: a retired segment's lists go. That ids are
    /// never given twice (`rank_next_segment`) is what keeps lists right; the bounds only catch
    /// an id seen again with other rows *and* other bounds, not one with the same.
    func retain(_ segments: [RankSnapshot.Segment]) {
        guard !stamps.isEmpty else { return }
        var live: [Int64: Stamp] = [:]
        for s in segments { live[s.id] = Stamp(s) }
        let gone = stamps.filter { live[$0.key] != $0.value }
        guard !gone.isEmpty else { return }
        for id in gone.keys { stamps[id] = nil }
        lists = lists.filter { stamps[$0.key.segment] != nil }
        bytes = lists.reduce(0) { $0 + Self.size($1.value, key: $1.key.term) }
    }

    private static func size(_ list: PostingList, key: [UInt8]) -> Int { list.bytes.count + key.count + 64 }

    /// Whole words a page asked for (`walksWholeWord`), since the last commit or start-over: true
    /// once its list was found too large to keep.
    private var asked: [Key: Bool] = [:]

    /// Whether a `query.search` page driven by the whole word `key` walks segment `segment`'s
    /// list (`RankedPageWalk`) rather than FTS5's doclist. FTS5 reads the doclist lazily; the walk
    /// reads the list whole, which pays only when it is kept: so the walk runs when the list is
    /// here, or when the word was asked for already since the last commit (the walk then reads and
    /// keeps it), never for a list too large to keep. A kept list is walked after commits too,
    /// while its segment is active.
    /// A word longer than `maxAskedTermBytes` is never recorded (its key is the attacker's text,
    /// up to 32 KiB a term: 1 024 asks would hold 32 MiB a reader): it stays on FTS5 unless kept.
    func walksWholeWord(segment: Int64, key: [UInt8]) -> Bool {
        let k = Key(segment: segment, term: key)
        if lists[k] != nil { return true }
        guard key.count <= Self.maxAskedTermBytes else { return false }
        if let tooLarge = asked[k] { return !tooLarge }
        if asked.count >= 1024 { asked.removeAll(keepingCapacity: true) }
        asked[k] = false
        return false
    }

    func list(segment: RankSnapshot.Segment, key: [UInt8]) -> PostingList? {
        guard let list = lists[Key(segment: segment.id, term: key)] else { return nil }
        return stamps[segment.id] == Stamp(segment) ? list : nil
    }

    /// The longest whole word `walksWholeWord` records (a frequent word is short).
    static let maxAskedTermBytes = 64

    /// A list's size counts its key too (a few-byte list under a 32 KiB term is 32 KiB held).
    func store(_ list: PostingList, segment s: RankSnapshot.Segment, key: [UInt8]) {
        let segment = s.id
        let size = Self.size(list, key: key)
        guard size <= Self.maxBytes / 4 else {
            if asked[Key(segment: segment, term: key)] != nil { asked[Key(segment: segment, term: key)] = true }
            return
        }
        if bytes + size > Self.maxBytes {
            // Starting over forgets the asks too: a word whose list was pushed out is asked for
            // twice again before a page reads it whole (queries whose lists do not fit together,
            // as at 1M, would otherwise make every such page read its list).
            lists.removeAll(keepingCapacity: true)
            stamps.removeAll(keepingCapacity: true)
            asked.removeAll(keepingCapacity: true)
            bytes = 0
        }
        if let kept = stamps[segment], kept != Stamp(s) {
            // Another segment under a known id: its lists go first.
            lists = lists.filter { $0.key.segment != segment }
            bytes = lists.reduce(0) { $0 + Self.size($1.value, key: $1.key.term) }
        }
        stamps[segment] = Stamp(s)
        listsRead += 1
        if let old = lists.updateValue(list, forKey: Key(segment: segment, term: key)) { bytes -= Self.size(old, key: key) }
        bytes += size
    }
}
