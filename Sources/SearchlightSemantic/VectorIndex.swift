import CSemanticKernels
import Glibc

/// One hit of a vector search: the item's rowid and its cosine similarity to the query.
public struct VectorMatch: Sendable, Equatable {
    public var rowid: Int64
    public var similarity: Float

    public init(rowid: Int64, similarity: Float) {
        self.rowid = rowid
        self.similarity = similarity
    }
}

/// The vectors of one index, keyed by item rowid (the key of the BLOB rows they are loaded from:
/// `VectorTable`, which stays the truth). Off the heap: each item has a slot, and a slot's data
/// is in two unnamed files (`ByteRegion`) in `directory`, read with `pread`, so they cost the
/// page cache (which the system reclaims) rather than resident memory:
///
/// - the signs file: slot i's 1-bit sign code (bit j set when component j > 0) at `i·words`
///   words, the prefilter of large indexes (Hamming distance by XOR and popcount, 48 bytes per
///   384-d item), scanned in chunks into one fixed buffer per query;
/// - the records file: slot i's int8 codes and float scale (`QuantizedVector`) at
///   `i·(dimension + 4)`, read only for the items a query rescores.
///
/// In memory, per slot: its rowid and a flags byte (live, refined), 9 bytes an item. Slots are
/// kept in rowid order (a load from the table, and donations, which get new larger rowids,
/// append in that order), so a rowid's slot is a binary search; a slot appended out of order is
/// found in a small `overflow` table, and a removed item's slot is only marked dead (and revived
/// when the same rowid comes back). When either grows past a share of the index, the index is
/// rewritten in rowid order (`compact`): about one full copy per eighth of the index changed.
///
/// The files have no name (O_TMPFILE): they are a cache made when the index is loaded from the
/// table and gone when the process ends, so no crash, migration or recovery can leave a file that
/// disagrees with the table. Without a directory, or when no file can be made there (or a write
/// fails), the same bytes are kept in memory.
///
/// Search is exact (every item's int8 dot product with the query) up to `exactLimit` items, and
/// above that prefiltered: the `candidates` items nearest in Hamming distance are rescored
/// exactly.
public struct VectorIndex: Sendable {
    public enum Mode: Sendable, Equatable {
        /// Exact below `exactLimit` items, prefiltered above.
        case automatic
        case exact
        /// Rescore the `candidates` nearest items in Hamming distance.
        case prefiltered(candidates: Int)
    }

    public let dimension: Int
    let words: Int
    /// Where the index's unnamed files are made; nil keeps them in memory.
    public let directory: String?
    var storage: VectorSlots

    /// Above this many items `automatic` search prefilters.
    public var exactLimit = 20_000
    /// Candidates rescored after the prefilter (automatic mode): at least this many, or
    /// `candidateFraction` of the index when that is more.
    public var minimumCandidates = 2_000
    public var candidateFraction = 0.002
    /// Candidates rescored by a partitioned search (automatic mode): at least this many, or half
    /// `candidateFraction` of the index. Its probed lists already hold the items near the query,
    /// and each candidate rescored is a read of its record: on the 1M bench index (its saved
    /// partition, 48 probes) 1 000 instead of 2 000 gave recall@10 0.989 instead of 0.991 against
    /// exact, for 3.29 instead of 4.28 ms CPU p50.
    public var partitionCandidates = 1_000
    /// Above this many items the index keeps a coarse partition (`VectorPartition`) and a
    /// prefiltered search reads only the `probes` nearest of its lists (plus the items the
    /// lists do not hold yet); at or below, every sign code.
    public var partitionLimit = 100_000
    /// Lists read by a partitioned search. At 1M (250 lists) recall@10 against exact was 0.940
    /// with 32, 0.964 with 48, 0.977 with 64 (CPU p50 5.6, 6.9, 8.4 ms; every sign code: 11.6
    /// ms, 0.998); rescoring 3 000 or 4 000 candidates instead of 2 000 changed none of them.
    public var probes = 48
    /// False while many items are set at once (`load`): the partition is built once, by
    /// `updatePartition`, rather than as the index grows.
    public var buildsPartition = true
    /// False searches as if there were no partition (for comparisons).
    public var usesPartition = true

    /// The directory of the files when none is given: $TMPDIR, else /tmp. The store passes its
    /// own directory (a tmpfs /tmp would keep the files in memory after all).
    public static var temporaryDirectory: String {
        if let t = getenv("TMPDIR"), t.pointee != 0 { return String(cString: t) }
        return "/tmp"
    }

    public init(dimension: Int, directory: String? = VectorIndex.temporaryDirectory) {
        self.dimension = dimension
        words = (dimension + 63) / 64
        self.directory = directory
        storage = VectorSlots(dimension: dimension, words: words, directory: directory)
    }

    /// An index over slots read back from a file (`VectorIndexFile.load`).
    init(dimension: Int, storage: VectorSlots) {
        self.dimension = dimension
        words = (dimension + 63) / 64
        directory = storage.directory
        self.storage = storage
    }

    /// Writes the files' append buffers out (before `VectorIndexFile.save` reads the files beside
    /// searches: only under the caller's exclusive lock).
    public func flushFiles() {
        storage.signs.flush()
        storage.records.flush()
    }

    public var count: Int { storage.live }
    /// The true refined flags, kept as they change: a hybrid query with the transformer asks for
    /// it (`SemanticRequest.tuning`), and counting 1M flags is most of a ms.
    public var refinedCount: Int { storage.refined }
    /// The rowids of the stored vectors, in slot order (mostly rowid order).
    public var rowids: [Int64] { storage.liveRowids() }
    /// Whether the vectors are in files (false: in memory, see the type's comment).
    public var isFileBacked: Bool { storage.isFileBacked }
    public func contains(_ rowid: Int64) -> Bool { storage.liveSlot(of: rowid) != nil }
    /// Bytes of the index on the heap (its per-item rowids and flags, append buffers): what it
    /// adds to the process's resident memory, beside the page cache of its files.
    public var heapBytes: Int { storage.heapBytes }

    /// The stored vector of an item.
    public func vector(for rowid: Int64) -> QuantizedVector? {
        guard let s = storage.liveSlot(of: rowid) else { return nil }
        let (codes, scale) = storage.record(s)
        return QuantizedVector(codes: codes, scale: scale, refined: storage.isRefined(s))
    }

    /// Adds or replaces an item's vector. A vector of another dimension is refused.
    public mutating func set(_ rowid: Int64, _ vector: QuantizedVector) throws(SemanticError) {
        guard vector.dimension == dimension else {
            throw SemanticError(.invalidArgument, "a \(vector.dimension)-dimensional vector for rowid \(rowid) in a \(dimension)-dimensional index")
        }
        unshare()
        storage.set(rowid, vector, sign: Self.signCode(vector.codes))
        if storage.needsCompaction { storage = storage.compacted() }
        if buildsPartition { updatePartition() }
    }

    /// Builds or rebuilds the partition when it is due (`VectorSlots.needsPartition`).
    public mutating func updatePartition() {
        guard storage.needsPartition(minimum: partitionLimit) else { return }
        unshare()
        storage.rebuildPartition()
    }

    /// Begins a build of the partition when one is due (`VectorSlots.needsPartition`), for a
    /// caller that runs it without its lock: `PartitionBuild.run` on any thread (when
    /// `isDetached`; else under the lock), then `finishPartitionBuild` under the lock. Until then
    /// searches use the partition there was (or none: every sign code), and no other build is due.
    public mutating func beginPartitionBuild(sampleSize: Int = 0, iterations: Int = 8) -> PartitionBuild? {
        guard storage.needsPartition(minimum: partitionLimit) else { return nil }
        unshare()
        let build = storage.beginPartitionBuild()
        build.sampleSize = sampleSize
        build.iterations = iterations
        return build
    }

    /// Puts a build that ran in place: false when the index was rewritten since it began (a
    /// compaction renumbers the slots), so it is dropped and the next one is due.
    @discardableResult
    public mutating func finishPartitionBuild(_ build: PartitionBuild) -> Bool {
        guard storage.pendingBuild === build else { return false }
        unshare()
        return storage.finishPartitionBuild(build)
    }

    /// Drops a build begun on this index without putting it in place.
    public func cancelPartitionBuild(_ build: PartitionBuild) { storage.cancelPartitionBuild(build) }

    /// Puts the partition saved at `path` (`PartitionBuild.save`) in place when none is and the
    /// index is above `partitionLimit`: what of it still matches the index is used, the rest is
    /// searched beside it (`VectorSlots.restorePartition`); a file that is missing, truncated,
    /// corrupt or too stale is ignored, and the partition is built as before.
    @discardableResult
    public mutating func restorePartition(from path: String) -> PartitionRestore {
        if let refusal = storage.restoreRefusal(minimum: partitionLimit) { return refusal }
        // Room for the entries of items deleted since it was saved, bounded by this index's size.
        let contents: PartitionFile.Contents
        switch PartitionFile.read(path, dimension: dimension, words: words, maxEntries: 2 * storage.slotCount + 65_536) {
        case .failure(let e): return .ignored(e.reason)
        case .success(let c): contents = c
        }
        unshare()
        return storage.restorePartition(contents, minimum: partitionLimit)
    }

    /// Whether `beginPartitionBuild` would begin one now.
    public var isPartitionDue: Bool { storage.needsPartition(minimum: partitionLimit) }

    /// Whether a build begun by `beginPartitionBuild` has not finished.
    public var isBuildingPartition: Bool { storage.pendingBuild != nil }

    /// Whether a partition is built (above `partitionLimit` items).
    public var isPartitioned: Bool { storage.partition != nil }
    /// The partition's list count, 0 without one.
    public var partitionLists: Int { storage.partition?.lists ?? 0 }

    /// Removes an item's vector; false when it had none.
    @discardableResult
    public mutating func remove(_ rowid: Int64) -> Bool {
        guard contains(rowid) else { return false }
        unshare()
        storage.remove(rowid)
        if storage.needsCompaction { storage = storage.compacted() }
        if buildsPartition { updatePartition() }
        return true
    }

    /// Rewrites the files in rowid order without dead slots (`compact`), now.
    public mutating func compact() {
        storage = storage.compacted()
        if buildsPartition { updatePartition() }
    }

    /// A copy that is changed gets storage of its own (value semantics, as when the index was arrays).
    private mutating func unshare() {
        if !isKnownUniquelyReferenced(&storage) { storage = storage.compacted() }
    }

    /// The candidates an automatic search rescores where `count` items are searched (nil: every
    /// one, at or below `exactLimit`): `partitionCandidates` or half `candidateFraction` when this
    /// index searches its partition, else `minimumCandidates` or `candidateFraction`. The one rule,
    /// for a search of this index and for its share of a search across indexes (the store's `mode`).
    public func automaticCandidates(count: Int) -> Int? {
        if count <= exactLimit { return nil }
        if usesPartition && storage.partition != nil { return max(partitionCandidates, Int(Double(count) * candidateFraction / 2)) }
        return max(minimumCandidates, Int(Double(count) * candidateFraction))
    }

    /// The `k` items most similar to `query` (any scale; cosine is computed on directions), best
    /// first. `allowed` restricts the hits (filter queries, expiration) before they are counted.
    public func search(_ query: [Float], k: Int, mode: Mode = .automatic, allowed: ((Int64) -> Bool)? = nil) -> [VectorMatch] {
        guard k > 0, count > 0, query.count == dimension else { return [] }
        let q = QuantizedVector(query)
        var norm: Float = 0
        for v in q.values { norm += v * v }
        let queryScale = q.scale / max(norm.squareRoot(), 1e-12)
        let candidates: Int? = switch mode {
        case .exact: nil
        case .prefiltered(let c): c
        case .automatic: automaticCandidates(count: count)
        }
        let slots: [Int]
        if let candidates, candidates < count, usesPartition, let partition = storage.partition {
            slots = nearestInPartition(partition, q.codes, count: candidates)
        } else if let candidates, candidates < count {
            slots = nearestInHamming(Self.signCode(q.codes), count: candidates)
        } else {
            slots = storage.liveSlots(allowed: allowed)
        }
        var top = TopK(k)
        q.codes.withUnsafeBufferPointer { qp in
            storage.forEachRecord(slots) { slot, codes, scale in
                let rowid = storage.rowid(slot)
                if let allowed, !allowed(rowid) { return }
                let dot = Self.dot(qp.baseAddress!, codes, dimension)
                // The stored vectors are unit vectors quantised: the scale restores their length.
                top.insert(VectorMatch(rowid: rowid, similarity: Float(dot) * scale * queryScale))
            }
        }
        return top.sorted()
    }

    /// The live slots of the `n` items whose sign codes are nearest to `code` (ties at the cut-off
    /// taken in slot order), ascending: distances into a histogram, the cut-off from it, one more pass.
    func nearestInHamming(_ code: [UInt64], count n: Int) -> [Int] {
        let total = storage.slotCount
        let dead = UInt16.max
        var distances = [UInt16](repeating: 0, count: total)
        var histogram = [Int](repeating: 0, count: words * 64 + 1)
        distances.withUnsafeMutableBufferPointer { dp in
            code.withUnsafeBufferPointer { qp in
                storage.forEachSignChunk { first, chunk, signs in
                    let out = dp.baseAddress! + first
                    if Self.usesKernels {
                        sl_hamming(signs, chunk, words, qp.baseAddress!, out)
                    } else {
                        for i in 0..<chunk {
                            var d = 0
                            let row = signs + i * words
                            for w in 0..<words { d += (row[w] ^ qp[w]).nonzeroBitCount }
                            out[i] = UInt16(d)
                        }
                    }
                    for i in 0..<chunk {
                        if storage.isLive(first + i) { histogram[Int(out[i])] += 1 } else { out[i] = dead }
                    }
                }
            }
        }
        var (cut, atCut) = Self.cut(histogram, count: n)
        var out: [Int] = []
        out.reserveCapacity(n)
        for i in 0..<total {
            let d = distances[i]
            if d == dead { continue }
            if Int(d) < cut {
                out.append(i)
            } else if Int(d) == cut && atCut > 0 {
                out.append(i)
                atCut -= 1
            }
        }
        return out
    }

    /// The distance below which a histogram of distances holds fewer than `n` items, and how
    /// many of those at that distance complete the `n` nearest (ties: the first met).
    static func cut(_ histogram: [Int], count n: Int) -> (cut: Int, atCut: Int) {
        var cut = 0, taken = 0
        while cut < histogram.count && taken + histogram[cut] < n {
            taken += histogram[cut]
            cut += 1
        }
        return (cut, n - taken)
    }

    /// As `nearestInHamming`, among the items of the partition's `probes` nearest lists and those
    /// outside its lists.
    func nearestInPartition(_ partition: VectorPartition, _ codes: [Int8], count n: Int) -> [Int] {
        let code = Self.signCode(codes)
        var found: [(slot: Int32, distance: UInt16)] = []
        var histogram = [Int](repeating: 0, count: words * 64 + 1)
        codes.withUnsafeBufferPointer { qp in
            code.withUnsafeBufferPointer { cp in
                storage.partitionCandidates(partition, query: qp.baseAddress!, code: cp.baseAddress!, probes: probes) { s, d in
                    found.append((Int32(s), d))
                    histogram[Int(d)] += 1
                }
            }
        }
        var (cut, atCut) = Self.cut(histogram, count: n)
        var out: [Int] = []
        out.reserveCapacity(min(n, found.count))
        for f in found {
            if Int(f.distance) < cut {
                out.append(Int(f.slot))
            } else if Int(f.distance) == cut && atCut > 0 {
                out.append(Int(f.slot))
                atCut -= 1
            }
        }
        out.sort()
        return out
    }

    /// Hamming distances of `count` sign codes to `code` (the kernel, or the portable loop).
    static func hamming(_ signs: UnsafePointer<UInt64>, _ count: Int, _ words: Int, _ code: UnsafePointer<UInt64>, _ out: UnsafeMutablePointer<UInt16>) {
        if usesKernels { return sl_hamming(signs, count, words, code, out) }
        for i in 0..<count {
            var d = 0
            let row = signs + i * words
            for w in 0..<words { d += (row[w] ^ code[w]).nonzeroBitCount }
            out[i] = UInt16(d)
        }
    }

    /// The int8 codes of live items, for `nearDuplicates`: nil for a rowid without a vector.
    func codes(of rowid: Int64) -> [Int8]? {
        storage.liveSlot(of: rowid).map { storage.record($0).codes }
    }

    /// POPCNT and AVX-512BW for the scans (`CVectorKernels`), where the CPU has them.
    static let usesKernels = sl_vector_kernels_available() != 0

    static func signCode(_ codes: [Int8]) -> [UInt64] {
        var out = [UInt64](repeating: 0, count: (codes.count + 63) / 64)
        for (j, c) in codes.enumerated() where c > 0 { out[j >> 6] |= 1 << UInt64(j & 63) }
        return out
    }

    /// The int8 dot product, 16 lanes at a time (sign-extended to Int32: no overflow for any
    /// dimension below 2^17), then the tail.
    @inline(__always)
    static func dot(_ a: UnsafePointer<Int8>, _ b: UnsafePointer<Int8>, _ n: Int) -> Int32 {
        if usesKernels { return sl_dot_i8(a, b, n) }
        var acc = SIMD16<Int32>()
        var j = 0
        let ra = UnsafeRawPointer(a), rb = UnsafeRawPointer(b)
        while j + 16 <= n {
            let x = SIMD16<Int32>(truncatingIfNeeded: ra.loadUnaligned(fromByteOffset: j, as: SIMD16<Int8>.self))
            let y = SIMD16<Int32>(truncatingIfNeeded: rb.loadUnaligned(fromByteOffset: j, as: SIMD16<Int8>.self))
            acc &+= x &* y
            j += 16
        }
        var sum = acc.wrappedSum()
        while j < n {
            sum &+= Int32(a[j]) &* Int32(b[j])
            j += 1
        }
        return sum
    }
}

/// The best `k` matches seen so far (a sorted array: k is small).
struct TopK {
    let k: Int
    var items: [VectorMatch] = []

    init(_ k: Int) {
        self.k = k
        items.reserveCapacity(k + 1)
    }

    @inline(__always)
    mutating func insert(_ m: VectorMatch) {
        if items.count == k, let last = items.last, !(m.similarity > last.similarity) { return }
        var i = items.count
        while i > 0 && items[i - 1].similarity < m.similarity { i -= 1 }
        items.insert(m, at: i)
        if items.count > k { items.removeLast() }
    }

    func sorted() -> [VectorMatch] { items }
}
