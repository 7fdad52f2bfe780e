/// The storage of a `VectorIndex` (see there): per slot a rowid and a flags byte in memory, the
/// sign code and the record (int8 codes, scale) in two `ByteRegion`s.
///
/// A reference type the index copies before changing when it is shared (`unshare`), so the
/// index keeps value semantics; reads of one instance may run side by side.
final class VectorSlots: @unchecked Sendable {
    let dimension: Int
    let words: Int
    let directory: String?
    /// Codes then the scale (Float32, native order): dimension + 4 bytes.
    let recordBytes: Int
    let signs: ByteRegion
    let records: ByteRegion

    /// Slot → rowid, for live and dead slots (a dead slot keeps its rowid to be found again).
    private(set) var rowids: [Int64] = []
    /// Slot → bit 0: live, bit 1: refined, bit 2: moved (changed since the partition placed it).
    private(set) var flags: [UInt8] = []
    /// The coarse partition of the slots (`VectorPartition`), nil below its size.
    var partition: VectorPartition?
    /// Slots below the partition's `covered` changed since it was built (replaced or revived): not
    /// in its lists as they are now, so searched beside them.
    var movedSlots: [Int] = []
    /// The partition build under way (`beginPartitionBuild`), and the slots below its end set
    /// since it began (searched apart once it is in place).
    var pendingBuild: PartitionBuild?
    var changedDuringBuild: [Int] = []
    /// Slots 0 ..< sortedPrefix have strictly increasing rowids (binary search).
    private var sortedPrefix = 0
    /// The slots after the sorted prefix, by rowid.
    private var overflow: [Int64: Int] = [:]
    private(set) var live = 0
    private(set) var refined = 0

    static let liveFlag: UInt8 = 1, refinedFlag: UInt8 = 2, movedFlag: UInt8 = 4
    /// Slots per chunk of a sign scan (48 bytes each at 384 dimensions: a 384 KiB buffer).
    static let signChunk = 8_192
    /// Most records per read when rescoring contiguous slots.
    static let recordRun = 256

    init(dimension: Int, words: Int, directory: String?) {
        self.dimension = dimension
        self.words = words
        self.directory = directory
        recordBytes = dimension + 4
        signs = ByteRegion(directory: directory)
        records = ByteRegion(directory: directory)
    }

    /// Slots read back from a saved index (`VectorIndexFile.load`): its rowids and flags, its
    /// sign codes and records in `signs` and `records` (one per slot, checked by the caller).
    /// Nil when the rowids repeat or a flag has a bit other than live and refined.
    init?(dimension: Int, words: Int, directory: String?, rowids: [Int64], flags: [UInt8], signs: ByteRegion, records: ByteRegion) {
        self.dimension = dimension
        self.words = words
        self.directory = directory
        recordBytes = dimension + 4
        self.signs = signs
        self.records = records
        var prefix = 0
        while prefix < rowids.count && (prefix == 0 || rowids[prefix] > rowids[prefix - 1]) { prefix += 1 }
        self.rowids = rowids
        self.flags = flags
        sortedPrefix = prefix
        for s in prefix..<rowids.count {
            overflow[rowids[s]] = s
        }
        for s in rowids.indices {
            let f = flags[s]
            guard f & ~(Self.liveFlag | Self.refinedFlag) == 0 else { return nil }
            if f & Self.liveFlag != 0 {
                live += 1
                if f & Self.refinedFlag != 0 { refined += 1 }
            }
        }
        // Every rowid once: the overflow's keys distinct, none of them in the sorted prefix.
        guard overflow.count == rowids.count - prefix else { return nil }
        for rowid in overflow.keys {
            var lo = 0, hi = prefix
            while lo < hi {
                let mid = (lo + hi) >> 1
                if rowids[mid] < rowid { lo = mid + 1 } else { hi = mid }
            }
            if lo < prefix && rowids[lo] == rowid { return nil }
        }
    }

    /// What a save writes (`VectorIndexFile.save`): the rowids and flags (without the moved bit,
    /// which belongs to this process's partition), and views of the regions that stay valid while
    /// the slots change (taken under the index's exclusive lock: flushing changes the regions).
    func savedState() -> (rowids: [Int64], flags: [UInt8], live: Int, refined: Int, signs: ByteRegion, records: ByteRegion) {
        signs.flush()
        records.flush()
        return (rowids, flags.map { $0 & ~Self.movedFlag }, live, refined, signs, records)
    }

    var slotCount: Int { rowids.count }
    /// What the slots hold on the heap: rowids, flags, the overflow table, the regions' buffers.
    var heapBytes: Int {
        rowids.capacity * 8 + flags.capacity + overflow.capacity * 16 + signs.heapBytes + records.heapBytes
            + movedSlots.capacity * 8 + changedDuringBuild.capacity * 8 + (partition?.heapBytes ?? 0)
    }
    var isFileBacked: Bool { signs.isFileBacked && records.isFileBacked }
    func rowid(_ slot: Int) -> Int64 { rowids[slot] }
    func isLive(_ slot: Int) -> Bool { flags[slot] & Self.liveFlag != 0 }
    func isRefined(_ slot: Int) -> Bool { flags[slot] & Self.refinedFlag != 0 }

    /// The slot of a rowid, live or dead.
    func slot(of rowid: Int64) -> Int? {
        var lo = 0, hi = sortedPrefix
        while lo < hi {
            let mid = (lo + hi) >> 1
            if rowids[mid] < rowid { lo = mid + 1 } else { hi = mid }
        }
        if lo < sortedPrefix && rowids[lo] == rowid { return lo }
        return overflow[rowid]
    }

    func liveSlot(of rowid: Int64) -> Int? {
        guard let s = slot(of: rowid), isLive(s) else { return nil }
        return s
    }

    func liveRowids() -> [Int64] { rowids.indices.filter(isLive).map { rowids[$0] } }

    func liveSlots(allowed: ((Int64) -> Bool)?) -> [Int] {
        rowids.indices.filter { isLive($0) && (allowed?(rowids[$0]) ?? true) }
    }

    func record(_ slot: Int) -> (codes: [Int8], scale: Float) {
        var codes = [Int8](repeating: 0, count: dimension)
        var scale: Float = 0
        withUnsafeTemporaryAllocation(byteCount: recordBytes, alignment: 8) { buffer in
            records.read(into: buffer.baseAddress!, count: recordBytes, at: slot * recordBytes)
            codes.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[0..<dimension])) }
            scale = buffer.loadUnaligned(fromByteOffset: dimension, as: Float.self)
        }
        return (codes, scale)
    }

    // MARK: Changes

    func set(_ rowid: Int64, _ vector: QuantizedVector, sign: [UInt64]) {
        let newFlags = Self.liveFlag | (vector.refined ? Self.refinedFlag : 0)
        withUnsafeTemporaryAllocation(byteCount: recordBytes, alignment: 8) { buffer in
            vector.codes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: dimension) }
            buffer.storeBytes(of: vector.scale, toByteOffset: dimension, as: Float.self)
            sign.withUnsafeBytes { signBytes in
                let record = UnsafeRawBufferPointer(buffer)
                if let s = slot(of: rowid) {
                    if isLive(s) { unflag(s) }
                    markMoved(s)
                    if let pendingBuild, s < pendingBuild.source.slotCount { changedDuringBuild.append(s) }
                    records.write(record, at: s * recordBytes)
                    signs.write(signBytes, at: s * words * 8)
                    flag(s, newFlags)
                } else {
                    let s = rowids.count
                    if s == sortedPrefix && (s == 0 || rowid > rowids[s - 1]) { sortedPrefix += 1 } else { overflow[rowid] = s }
                    rowids.append(rowid)
                    flags.append(0)
                    records.append(record)
                    signs.append(signBytes)
                    flag(s, newFlags)
                }
            }
        }
    }

    func remove(_ rowid: Int64) {
        guard let s = liveSlot(of: rowid) else { return }
        unflag(s)
    }

    /// A slot the partition placed changes: its list entry is stale until the next rebuild.
    func markMoved(_ s: Int) {
        guard let partition, s < partition.covered, flags[s] & Self.movedFlag == 0 else { return }
        flags[s] |= Self.movedFlag
        movedSlots.append(s)
    }

    /// Forgets the partition's placement of every slot (before a rebuild).
    func clearMoved() {
        for s in movedSlots { flags[s] &= ~Self.movedFlag }
        movedSlots.removeAll()
    }

    func isMoved(_ slot: Int) -> Bool { flags[slot] & Self.movedFlag != 0 }

    private func flag(_ s: Int, _ f: UInt8) {
        flags[s] = (flags[s] & Self.movedFlag) | f
        live += 1
        if f & Self.refinedFlag != 0 { refined += 1 }
    }

    private func unflag(_ s: Int) {
        if isRefined(s) { refined -= 1 }
        live -= 1
        flags[s] &= Self.movedFlag
    }

    /// Whether out-of-order or dead slots passed their share: an eighth of the live ones for the
    /// overflow table (its memory), a quarter for dead slots (scanned for nothing), never fewer
    /// than 4 096 of either.
    var needsCompaction: Bool {
        overflow.count > max(4_096, live / 8) || rowids.count - live > max(4_096, live / 4)
    }

    /// A copy with the live slots in rowid order, in new files: no overflow, no dead slots.
    func compacted() -> VectorSlots {
        let copy = VectorSlots(dimension: dimension, words: words, directory: directory)
        var order = rowids.indices.filter(isLive)
        if !overflow.isEmpty { order.sort { rowids[$0] < rowids[$1] } }
        copy.rowids.reserveCapacity(order.count)
        copy.flags.reserveCapacity(order.count)
        let signBytes = words * 8
        var i = 0
        let recordBuffer = UnsafeMutableRawPointer.allocate(byteCount: Self.recordRun * recordBytes, alignment: 8)
        let signBuffer = UnsafeMutableRawPointer.allocate(byteCount: Self.recordRun * signBytes, alignment: 8)
        defer { recordBuffer.deallocate(); signBuffer.deallocate() }
        while i < order.count {
            // A run of consecutive slots is read at once.
            var n = 1
            while n < Self.recordRun && i + n < order.count && order[i + n] == order[i] + n { n += 1 }
            records.read(into: recordBuffer, count: n * recordBytes, at: order[i] * recordBytes)
            signs.read(into: signBuffer, count: n * signBytes, at: order[i] * signBytes)
            copy.records.append(UnsafeRawBufferPointer(start: recordBuffer, count: n * recordBytes))
            copy.signs.append(UnsafeRawBufferPointer(start: signBuffer, count: n * signBytes))
            for j in 0..<n {
                copy.rowids.append(rowids[order[i + j]])
                copy.flags.append(flags[order[i + j]] & ~Self.movedFlag)
            }
            i += n
        }
        copy.sortedPrefix = copy.rowids.count
        copy.live = live
        copy.refined = refined
        return copy
    }

    // MARK: Scans

    /// Calls `body(first slot, slots, their sign codes)` over every slot, in chunks read into one
    /// buffer.
    func forEachSignChunk(from start: Int = 0, _ body: (Int, Int, UnsafePointer<UInt64>) -> Void) {
        Self.forEachSignChunk(total: rowids.count, from: start, words: words, read: { signs.read(into: $0, count: $1, at: $2) }, body)
    }

    /// Calls `body(slot, codes, scale)` for each of `slots` (ascending), reading runs of nearby
    /// slots at once.
    func forEachRecord(_ slots: [Int], _ body: (Int, UnsafePointer<Int8>, Float) -> Void) {
        Self.forEachRecord(slots, recordBytes: recordBytes, dimension: dimension, read: { records.read(into: $0, count: $1, at: $2) }, body)
    }

    static func forEachSignChunk(total: Int, from start: Int, words: Int, read: (UnsafeMutableRawPointer, Int, Int) -> Void,
                                 _ body: (Int, Int, UnsafePointer<UInt64>) -> Void) {
        guard total > start else { return }
        let chunk = min(signChunk, total - start)
        let buffer = UnsafeMutablePointer<UInt64>.allocate(capacity: chunk * words)
        defer { buffer.deallocate() }
        var first = start
        while first < total {
            let n = min(chunk, total - first)
            read(buffer, n * words * 8, first * words * 8)
            body(first, n, buffer)
            first += n
        }
    }

    static func forEachRecord(_ slots: [Int], recordBytes: Int, dimension: Int, read: (UnsafeMutableRawPointer, Int, Int) -> Void,
                              _ body: (Int, UnsafePointer<Int8>, Float) -> Void) {
        guard !slots.isEmpty else { return }
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: recordRun * recordBytes, alignment: 8)
        defer { buffer.deallocate() }
        var i = 0
        while i < slots.count {
            // Slots within one run's span are read with one call (a few records read for nothing
            // cost less than a call each).
            let first = slots[i]
            var j = i + 1
            while j < slots.count && slots[j] - first < recordRun && slots[j] - slots[j - 1] <= 4 { j += 1 }
            let span = slots[j - 1] - first + 1
            read(buffer, span * recordBytes, first * recordBytes)
            for s in slots[i..<j] {
                let p = buffer + (s - first) * recordBytes
                body(s, p.assumingMemoryBound(to: Int8.self), p.loadUnaligned(fromByteOffset: dimension, as: Float.self))
            }
            i = j
        }
    }
}
