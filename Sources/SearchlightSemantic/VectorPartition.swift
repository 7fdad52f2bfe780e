import CSemanticKernels
import Glibc
import Synchronization

/// A coarse partition of a large index's slots (an inverted file, IVF, as FAISS's `IndexIVF`
/// and pgvector's ivfflat): `lists` centroids trained by spherical k-means on a sample, each slot
/// in the list of its nearest centroid. A query scores the centroids, reads the sign codes of the
/// `probes` nearest lists only (and the slots the lists do not hold yet, below), and rescores the
/// nearest of those in Hamming distance as before: at 1M items it reads a few MB of sign codes
/// instead of all 48 MB.
///
/// The lists are a copy of the sign codes in list order, with each entry's slot, in two more
/// unnamed files (`ByteRegion`); in memory only the centroids (int8, `lists × dimension` bytes)
/// and the lists' bounds. Slots `covered ..< slotCount` (appended since the build) and slots
/// marked moved in `VectorSlots` (replaced or revived since) are not in the lists as they are
/// now; a search scans them beside the probed lists, so every live vector is found in exactly one
/// place. Dead slots stay in their lists and are skipped. When the slots outside the lists pass
/// a share of the index (`VectorSlots.needsPartition`) the lists are rebuilt: the slots already
/// placed keep their list, the others go to their nearest centroid; the centroids are retrained
/// when the index has doubled or halved since they were trained, and after a compaction (which
/// renumbers the slots) the lists are rebuilt from scratch with the same centroids.
final class VectorPartition: @unchecked Sendable {
    let dimension: Int
    let words: Int
    let lists: Int
    /// lists × dimension int8 codes, and each centroid's scale.
    let centroids: [Int8]
    let scales: [Float]
    /// List l's entries are `start[l] ..< start[l + 1]` in `signs` and `slots`.
    private(set) var start: [Int] = []
    let signs: ByteRegion
    let slots: ByteRegion
    /// Slots below this were placed when the lists were built.
    private(set) var covered = 0
    /// Live items when the centroids were trained.
    let trainedLive: Int

    init(dimension: Int, words: Int, centroids: [Int8], scales: [Float], trainedLive: Int, directory: String?) {
        self.dimension = dimension
        self.words = words
        lists = scales.count
        self.centroids = centroids
        self.scales = scales
        self.trainedLive = trainedLive
        signs = ByteRegion(directory: directory)
        slots = ByteRegion(directory: directory)
    }

    var heapBytes: Int { centroids.capacity + scales.capacity * 4 + start.capacity * 8 + signs.heapBytes + slots.heapBytes }

    /// How many lists for `live` items: about √n / 4, between 16 and 512 (at 1M, 250 lists of
    /// ~4 000; FAISS suggests 4–16 √n lists for a flat fine step, but here the fine step is a
    /// Hamming prefilter over the probed lists, so fewer, larger lists cost less to place).
    static func listCount(live: Int) -> Int { min(512, max(16, Int(Double(live).squareRoot() / 4))) }

    /// The `n` lists whose centroids are nearest to the query's codes.
    func nearestLists(_ q: UnsafePointer<Int8>, count n: Int) -> [Int] {
        var scored: [(Float, Int)] = []
        scored.reserveCapacity(lists)
        centroids.withUnsafeBufferPointer { c in
            for l in 0..<lists { scored.append((Float(VectorIndex.dot(q, c.baseAddress! + l * dimension, dimension)) * scales[l], l)) }
        }
        scored.sort { $0.0 > $1.0 }
        return scored.prefix(n).map(\.1)
    }

    /// The nearest centroid of an item's codes.
    func nearestList(_ v: UnsafePointer<Int8>) -> Int {
        var best = 0
        var bestScore = -Float.infinity
        centroids.withUnsafeBufferPointer { c in
            for l in 0..<lists {
                let s = Float(VectorIndex.dot(v, c.baseAddress! + l * dimension, dimension)) * scales[l]
                if s > bestScore { bestScore = s; best = l }
            }
        }
        return best
    }

    /// Calls `body(slots, their sign codes, count)` over list l's entries, in chunks.
    func forEachEntryChunk(of l: Int, signBuffer: UnsafeMutablePointer<UInt64>, slotBuffer: UnsafeMutablePointer<UInt32>, chunk: Int,
                           _ body: (UnsafePointer<UInt32>, UnsafePointer<UInt64>, Int) -> Void) {
        var first = start[l]
        let end = start[l + 1]
        while first < end {
            let n = min(chunk, end - first)
            signs.read(into: signBuffer, count: n * words * 8, at: first * words * 8)
            slots.read(into: slotBuffer, count: n * 4, at: first * 4)
            body(slotBuffer, signBuffer, n)
            first += n
        }
    }

    /// Trains `lists` centroids on a sample of the live slots: spherical k-means (the mean of
    /// each cluster's unit vectors, renormalised), `iterations` rounds, seeded with evenly spaced
    /// sample items, an empty cluster reseeded with a sample item.
    static func train(_ storage: PartitionSource, lists requested: Int, sampleSize: Int = 0, iterations: Int = 8,
                      cancel: BuildCancellation? = nil) -> (centroids: [Int8], scales: [Float])? {
        let dim = storage.dimension
        let live = (0..<storage.slotCount).filter(storage.isLive)
        let want = sampleSize > 0 ? sampleSize : 48 * requested
        let step = max(1, live.count / max(1, want))
        let picked = stride(from: 0, to: live.count, by: step).map { live[$0] }
        let n = picked.count
        let lists = max(1, min(requested, n))
        var sample = [Float](repeating: 0, count: n * dim)
        var codes = [Int8](repeating: 0, count: n * dim)
        var i = 0
        storage.forEachRecord(picked) { _, c, scale in
            for j in 0..<dim {
                codes[i * dim + j] = c[j]
                sample[i * dim + j] = Float(c[j]) * scale
            }
            i += 1
        }
        var centroids = [Int8](repeating: 0, count: lists * dim)
        var scales = [Float](repeating: 0, count: lists)
        func setCentroid(_ l: Int, _ v: ArraySlice<Float>) {
            var norm: Float = 0
            for x in v { norm += x * x }
            let unit = v.map { $0 / max(norm.squareRoot(), 1e-12) }
            let q = QuantizedVector(unit)
            for j in 0..<dim { centroids[l * dim + j] = q.codes[j] }
            scales[l] = q.scale
        }
        for l in 0..<lists {
            let s = l * n / lists
            setCentroid(l, sample[s * dim ..< (s + 1) * dim])
        }
        var assign = [Int](repeating: 0, count: n)
        for round in 0..<iterations {
            // Stopped between rounds (a round at 1M: 12 000 samples × 250 centroids, a few ms).
            if cancel?.isCancelled ?? false { return nil }
            cancel?.roundsRun += 1
            cancel?.onRound?(round)
            let partition = VectorPartition(dimension: dim, words: storage.words, centroids: centroids, scales: scales, trainedLive: 0, directory: nil)
            codes.withUnsafeBufferPointer { cp in
                for s in 0..<n { assign[s] = partition.nearestList(cp.baseAddress! + s * dim) }
            }
            if round == iterations - 1 { break }
            var sums = [Float](repeating: 0, count: lists * dim)
            var members = [Int](repeating: 0, count: lists)
            for s in 0..<n {
                let l = assign[s]
                members[l] += 1
                for j in 0..<dim { sums[l * dim + j] += sample[s * dim + j] }
            }
            var reseed = 0
            for l in 0..<lists {
                if members[l] == 0 {
                    let s = (reseed * 7919 + round * 104_729) % n
                    reseed += 1
                    setCentroid(l, sample[s * dim ..< (s + 1) * dim])
                } else {
                    setCentroid(l, sums[l * dim ..< (l + 1) * dim])
                }
            }
        }
        return (centroids, scales)
    }

    /// Places every live slot of `storage`: a slot `previous` placed, and that has not moved since,
    /// keeps its list (when the centroids are the same); the others go to their nearest centroid.
    /// The lists are written in list order, a group of lists at a time (`groupEntries` entries of
    /// buffer), each group from one scan of the sign codes.
    /// Returns false when `cancel` stopped it (the lists are then unfinished: not to be used).
    @discardableResult
    func build(from storage: PartitionSource, previous: VectorPartition?, groupEntries: Int = 1 << 18, cancel: BuildCancellation? = nil) -> Bool {
        let total = storage.slotCount
        var assign = [UInt16](repeating: .max, count: total)
        if let previous, previous.lists == lists, previous.centroids == centroids {
            let buffer = UnsafeMutablePointer<UInt32>.allocate(capacity: VectorSlots.signChunk)
            defer { buffer.deallocate() }
            for l in 0..<lists {
                var first = previous.start[l]
                while first < previous.start[l + 1] {
                    let n = min(VectorSlots.signChunk, previous.start[l + 1] - first)
                    previous.slots.read(into: buffer, count: n * 4, at: first * 4)
                    for i in 0..<n {
                        let s = Int(buffer[i])
                        if s < total && storage.isLive(s) && !storage.isMoved(s) { assign[s] = UInt16(l) }
                    }
                    first += n
                }
            }
        }
        let unplaced = (0..<total).filter { storage.isLive($0) && assign[$0] == .max }
        // The costly part (every record against every centroid: most of the 3.3 s at 1M), in
        // steps that a cancellation can stop between.
        var from = 0
        while from < unplaced.count {
            if cancel?.isCancelled ?? false { return false }
            let to = min(from + 16_384, unplaced.count)
            storage.forEachRecord(Array(unplaced[from..<to])) { s, codes, _ in assign[s] = UInt16(nearestList(codes)) }
            from = to
        }
        return writeLists(assign, from: storage, groupEntries: groupEntries, cancel: cancel)
    }

    /// Writes the lists of `assign` (slot → list, `.max` for none) from the sign codes of
    /// `storage`, in list order. False when `cancel` stopped it.
    func writeLists(_ assign: [UInt16], from storage: PartitionSource, groupEntries: Int = 1 << 18, cancel: BuildCancellation? = nil) -> Bool {
        let total = storage.slotCount
        var counts = [Int](repeating: 0, count: lists)
        for a in assign where a != .max { counts[Int(a)] += 1 }
        start = [0]
        for c in counts { start.append(start.last! + c) }
        // Groups of whole lists, each written from one scan of the sign codes.
        let signBytes = words * 8
        var firstList = 0
        while firstList < lists {
            if cancel?.isCancelled ?? false { return false }
            var lastList = firstList + 1
            while lastList < lists && start[lastList + 1] - start[firstList] <= groupEntries { lastList += 1 }
            let base = start[firstList], n = start[lastList] - base
            if n > 0 {
                let signOut = UnsafeMutableRawPointer.allocate(byteCount: n * signBytes, alignment: 8)
                let slotOut = UnsafeMutablePointer<UInt32>.allocate(capacity: n)
                defer { signOut.deallocate(); slotOut.deallocate() }
                var cursor = Array(start[firstList..<lastList])
                storage.forEachSignChunk { first, count, chunk in
                    for i in 0..<count {
                        let a = Int(assign[first + i])
                        guard a != Int(UInt16.max), a >= firstList, a < lastList else { continue }
                        let at = cursor[a - firstList] - base
                        cursor[a - firstList] += 1
                        (signOut + at * signBytes).copyMemory(from: chunk + i * words, byteCount: signBytes)
                        slotOut[at] = UInt32(first + i)
                    }
                }
                signs.append(UnsafeRawBufferPointer(start: signOut, count: n * signBytes))
                slots.append(UnsafeRawBufferPointer(start: slotOut, count: n * 4))
            }
            firstList = lastList
        }
        signs.flush()
        slots.flush()
        covered = total
        return true
    }

    /// What `PartitionFile` saves of these lists: for each entry, the rowid of its slot
    /// (`rowid`), its list and the hash of the sign code the list holds for it, by rowid.
    func fileContents(trainedLive: Int, rowid: (Int) -> Int64) -> PartitionFile.Contents {
        let n = start.last ?? 0
        var rowids = [Int64](), entryLists = [UInt16](), hashes = [UInt32]()
        rowids.reserveCapacity(n)
        entryLists.reserveCapacity(n)
        hashes.reserveCapacity(n)
        let chunk = VectorSlots.signChunk
        let signBuffer = UnsafeMutablePointer<UInt64>.allocate(capacity: chunk * words)
        let slotBuffer = UnsafeMutablePointer<UInt32>.allocate(capacity: chunk)
        defer { signBuffer.deallocate(); slotBuffer.deallocate() }
        for l in 0..<lists {
            forEachEntryChunk(of: l, signBuffer: signBuffer, slotBuffer: slotBuffer, chunk: chunk) { slots, signs, count in
                for i in 0..<count {
                    rowids.append(rowid(Int(slots[i])))
                    entryLists.append(UInt16(l))
                    hashes.append(PartitionFile.signHash(signs + i * words, words: words))
                }
            }
        }
        let order = rowids.indices.sorted { rowids[$0] < rowids[$1] }
        return PartitionFile.Contents(dimension: dimension, words: words, trainedLive: trainedLive, centroids: centroids, scales: scales,
                                      rowids: order.map { rowids[$0] }, lists: order.map { entryLists[$0] }, hashes: order.map { hashes[$0] })
    }
}

/// Asks a partition build under way to stop (`PartitionBuild.cancel`): checked between k-means
/// rounds, between steps of the placement and between groups of lists written.
final class BuildCancellation: @unchecked Sendable {
    private let cancelled = Atomic<Bool>(false)
    /// k-means rounds begun, and a call at the start of each (for tests).
    var roundsRun = 0
    var onRound: ((Int) -> Void)?

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    func cancel() { cancelled.store(true, ordering: .releasing) }
}

extension VectorSlots {
    /// Whether the partition should be built or rebuilt: above `minimum` live items, none yet,
    /// or the slots outside its lists (appended or moved since) past an eighth of the live ones
    /// (at least 16 384, or `minimum` when less: a rebuild reads the sign codes a few times over).
    /// False while a build is under way (`beginPartitionBuild`).
    func needsPartition(minimum: Int) -> Bool {
        guard live > minimum, pendingBuild == nil else { return false }
        guard let partition else { return true }
        return (slotCount - partition.covered) + movedSlots.count > max(min(16_384, minimum), live / 8)
    }

    /// Starts a build of the partition from the slots as they are now (`PartitionBuild`): the
    /// same centroids when the live count is within a factor 2 of the one they were trained at
    /// (and the list count still fits), else trained again. Slots set from now until
    /// `finishPartitionBuild` are searched beside the new lists once it is in place.
    func beginPartitionBuild() -> PartitionBuild {
        let old = partition
        let keep = old.map { $0.trainedLive <= live * 2 && live <= $0.trainedLive * 2 } ?? false
        let source = partitionSource()
        let build = PartitionBuild(source: source, lists: VectorPartition.listCount(live: live), live: live,
                                   previous: keep ? old : nil, directory: directory)
        pendingBuild = build
        changedDuringBuild.removeAll()
        return build
    }

    /// The slots as they are now, to read beside later changes (`PartitionSource`).
    func partitionSource() -> PartitionSource {
        PartitionSource(dimension: dimension, words: words, recordBytes: recordBytes, flags: flags, rowids: rowids,
                        signs: signs.frozen(), records: records.frozen())
    }

    /// Puts a saved partition (`PartitionFile`) in place when none is: each saved entry whose
    /// rowid has a live slot with the sign code it was saved with keeps its list; the other live
    /// slots are searched beside the lists (moved). Ignored when those are more than a rebuild
    /// would allow (`needsPartition`): the index would then scan them one read each.
    /// Why a saved partition is not to be restored into these slots now (nil: it may be);
    /// checked before the file is read (`VectorIndex.restorePartition`) and again here.
    func restoreRefusal(minimum: Int) -> PartitionRestore? {
        if partition != nil || pendingBuild != nil { return .ignored("the index already has a partition") }
        if live <= minimum { return .ignored("the index is below the partition's size") }
        return nil
    }

    func restorePartition(_ c: PartitionFile.Contents, minimum: Int) -> PartitionRestore {
        if let refusal = restoreRefusal(minimum: minimum) { return refusal }
        let total = slotCount
        var assign = [UInt16](repeating: .max, count: total)
        var expected = [UInt32](repeating: 0, count: total)
        for i in c.rowids.indices {
            guard let s = liveSlot(of: c.rowids[i]) else { continue }
            assign[s] = c.lists[i]
            expected[s] = c.hashes[i]
        }
        var placed = 0
        forEachSignChunk { first, n, chunk in
            for i in 0..<n where assign[first + i] != .max {
                if PartitionFile.signHash(chunk + i * words, words: words) == expected[first + i] { placed += 1 } else { assign[first + i] = .max }
            }
        }
        let unplaced = live - placed
        guard unplaced <= max(min(16_384, minimum), live / 8) else {
            return .ignored("\(unplaced) of \(live) vectors changed since the partition was saved")
        }
        let next = VectorPartition(dimension: dimension, words: words, centroids: c.centroids, scales: c.scales, trainedLive: c.trainedLive,
                                   directory: directory)
        guard next.writeLists(assign, from: partitionSource()) else { return .ignored("the lists could not be written") }
        clearMoved()
        partition = next
        for s in 0..<total where isLive(s) && assign[s] == .max { markMoved(s) }
        return .restored(placed: placed, unplaced: unplaced)
    }

    /// Puts a finished build in place, unless these slots are not the ones it was begun on (then
    /// false). The slots set while it ran are marked moved: searched beside its lists.
    @discardableResult
    func finishPartitionBuild(_ build: PartitionBuild) -> Bool {
        guard pendingBuild === build, let next = build.result else { return false }
        pendingBuild = nil
        clearMoved()
        partition = next
        for s in changedDuringBuild { markMoved(s) }
        changedDuringBuild.removeAll()
        return true
    }

    /// Forgets a build begun on these slots (it failed, or was abandoned).
    func cancelPartitionBuild(_ build: PartitionBuild) {
        guard pendingBuild === build else { return }
        pendingBuild = nil
        changedDuringBuild.removeAll()
    }

    /// Builds the partition anew, now, on this thread.
    func rebuildPartition() {
        let build = beginPartitionBuild()
        build.run()
        finishPartitionBuild(build)
    }

    /// The live slots of the probed lists, of slots `partition.covered ..< slotCount` and of the
    /// moved slots, with their Hamming distances to `code`: what a partitioned search ranks.
    func partitionCandidates(_ partition: VectorPartition, query: UnsafePointer<Int8>, code: UnsafePointer<UInt64>, probes: Int,
                             _ body: (Int, UInt16) -> Void) {
        let chunk = Self.signChunk
        let signBuffer = UnsafeMutablePointer<UInt64>.allocate(capacity: chunk * words)
        let slotBuffer = UnsafeMutablePointer<UInt32>.allocate(capacity: chunk)
        let distances = UnsafeMutablePointer<UInt16>.allocate(capacity: chunk)
        defer { signBuffer.deallocate(); slotBuffer.deallocate(); distances.deallocate() }
        for l in partition.nearestLists(query, count: probes) {
            partition.forEachEntryChunk(of: l, signBuffer: signBuffer, slotBuffer: slotBuffer, chunk: chunk) { slots, signs, n in
                VectorIndex.hamming(signs, n, words, code, distances)
                for i in 0..<n {
                    let s = Int(slots[i])
                    if isLive(s) && !isMoved(s) { body(s, distances[i]) }
                }
            }
        }
        forEachSignChunk(from: partition.covered) { first, n, signs in
            VectorIndex.hamming(signs, n, words, code, distances)
            for i in 0..<n where isLive(first + i) { body(first + i, distances[i]) }
        }
        for s in movedSlots where isLive(s) {
            self.signs.read(into: signBuffer, count: words * 8, at: s * words * 8)
            VectorIndex.hamming(signBuffer, 1, words, code, distances)
            body(s, distances[0])
        }
    }
}

extension VectorIndex {
    /// For tests: how many times each rowid is reached by a partitioned search reading every list
    /// (each live item must be reached once, a removed one never).
    func partitionReach() -> [Int64: Int]? {
        guard let partition = storage.partition else { return nil }
        var reached: [Int64: Int] = [:]
        let q = [Int8](repeating: 1, count: dimension), code = Self.signCode(q)
        q.withUnsafeBufferPointer { qp in
            code.withUnsafeBufferPointer { cp in
                storage.partitionCandidates(partition, query: qp.baseAddress!, code: cp.baseAddress!, probes: partition.lists) { s, _ in
                    reached[storage.rowid(s), default: 0] += 1
                }
            }
        }
        return reached
    }
}

/// What a partition is built from: the slots' flags and their files as they were when the build
/// began (`VectorSlots.beginPartitionBuild`). With files, it reads its own descriptors of them, so
/// the build runs without the index's lock while the index changes: appended slots are past its
/// end, and a slot rewritten in place meanwhile is searched apart once the build is in place
/// (`changedDuringBuild`), whatever list the build gave it.
final class PartitionSource: @unchecked Sendable {
    let dimension: Int
    let words: Int
    let recordBytes: Int
    let flags: [UInt8]
    /// Slot → rowid (a slot keeps its rowid until a compaction, which drops the build).
    let rowids: [Int64]
    let signs: FrozenRegion
    let records: FrozenRegion

    init(dimension: Int, words: Int, recordBytes: Int, flags: [UInt8], rowids: [Int64], signs: FrozenRegion, records: FrozenRegion) {
        self.dimension = dimension
        self.words = words
        self.recordBytes = recordBytes
        self.flags = flags
        self.rowids = rowids
        self.signs = signs
        self.records = records
    }

    var slotCount: Int { flags.count }
    /// Whether it may be read beside changes to the index (both regions in files).
    var isDetached: Bool { signs.isDetached && records.isDetached }
    func isLive(_ slot: Int) -> Bool { flags[slot] & VectorSlots.liveFlag != 0 }
    func isMoved(_ slot: Int) -> Bool { flags[slot] & VectorSlots.movedFlag != 0 }

    func forEachSignChunk(from start: Int = 0, _ body: (Int, Int, UnsafePointer<UInt64>) -> Void) {
        VectorSlots.forEachSignChunk(total: slotCount, from: start, words: words, read: { self.signs.read(into: $0, count: $1, at: $2) }, body)
    }

    func forEachRecord(_ slots: [Int], _ body: (Int, UnsafePointer<Int8>, Float) -> Void) {
        VectorSlots.forEachRecord(slots, recordBytes: recordBytes, dimension: dimension, read: { self.records.read(into: $0, count: $1, at: $2) }, body)
    }
}

/// One build of a partition (`VectorSlots.beginPartitionBuild`): `run` trains (or keeps) the
/// centroids and writes the lists, on any thread, without the index's lock when its source is
/// detached; `VectorSlots.finishPartitionBuild` then puts it in place under the lock.
public final class PartitionBuild: @unchecked Sendable {
    let source: PartitionSource
    let lists: Int
    let live: Int
    let previous: VectorPartition?
    let directory: String?
    /// Sample size and k-means rounds of a training (0: 48 sample items a list).
    var sampleSize = 0
    var iterations = 8
    private(set) var result: VectorPartition?
    let cancellation = BuildCancellation()

    init(source: PartitionSource, lists: Int, live: Int, previous: VectorPartition?, directory: String?) {
        self.source = source
        self.lists = lists
        self.live = live
        self.previous = previous
        self.directory = directory
    }

    /// Whether `run` may go without the index's lock (its files are read through descriptors of its own).
    public var isDetached: Bool { source.isDetached }

    /// Trains and places; leaves `result` nil when cancelled (`cancel`) before it ended.
    public func run() {
        let next: VectorPartition
        if let previous {
            next = VectorPartition(dimension: source.dimension, words: source.words, centroids: previous.centroids, scales: previous.scales,
                                   trainedLive: previous.trainedLive, directory: directory)
        } else {
            guard let (c, s) = VectorPartition.train(source, lists: lists, sampleSize: sampleSize, iterations: iterations, cancel: cancellation)
            else { return }
            next = VectorPartition(dimension: source.dimension, words: source.words, centroids: c, scales: s, trainedLive: live, directory: directory)
        }
        guard next.build(from: source, previous: previous.flatMap { $0.covered <= source.slotCount ? $0 : nil }, cancel: cancellation)
        else { return }
        result = next
    }

    /// Asks `run` to stop at its next check (between k-means rounds, placement steps and list
    /// writes); from any thread. A cancelled build leaves no result and is never put in place.
    public func cancel() { cancellation.cancel() }
    public var isCancelled: Bool { cancellation.isCancelled }
    /// Whether `run` ended with lists to put in place.
    public var hasResult: Bool { result != nil }
    /// k-means rounds begun by `run`, and a call at the start of each, on `run`'s thread (for tests).
    public var roundsRun: Int { cancellation.roundsRun }
    public var onRound: ((Int) -> Void)? {
        get { cancellation.onRound }
        set { cancellation.onRound = newValue }
    }

    /// Saves the lists `run` made (`PartitionFile`) to `path`; false when there are none, the
    /// build is cancelled (`cancel`) before the file is in place, or it could not be written.
    /// `publish` is given the final rename (`PartitionFile.write`): a caller runs it under its own
    /// lock, or not at all (its store closed), and then the new file is removed.
    @discardableResult
    public func save(to path: String, publish: (_ rename: () -> Bool) -> Bool = { $0() }) -> Bool {
        guard let result, !isCancelled else { return false }
        let rowids = source.rowids
        let contents = result.fileContents(trainedLive: result.trainedLive) { rowids[$0] }
        return PartitionFile.write(contents, to: path, cancelled: { isCancelled }, publish: publish)
    }
}
