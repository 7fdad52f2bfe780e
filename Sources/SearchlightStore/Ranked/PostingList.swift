import Foundation

extension UInt32 {
    /// A posting's frequency, column mask and `extra` as stored (`PostingListFormat.pack`).
    init(p: Posting) { self = PostingListFormat.pack(frequency: p.frequency, mask: p.mask, extra: p.extra) }
}

/// One document of a term's posting list in a segment of the ranked index.
struct Posting: Equatable {
    /// The document's rowid minus the segment's first rowid.
    var doc: UInt32
    /// bm25's `f` for this term alone: the sum of the column weights of its instances.
    var frequency: UInt32
    /// Which of the seven text columns (all but `aux`) hold the term: bit `i` for
    /// `Schema.ftsColumns[i]` (store format 6; format 4 and 5 kept only their number). A column
    /// filter (`title == "pars*"`) is applied from it (`RankedPageWalk`).
    var mask: UInt8
    /// How many of the seven text columns hold the term: the completions' weight.
    var columns: UInt8 { UInt8(mask.nonzeroBitCount) }
    /// The item's row must be read to score or show it: it has a boost (rankingHint, lastUsedDate,
    /// engagement), a related item, or an expiration before the segment's `safeUntil`.
    var extra: Bool
    /// bm25's `D`: the document's tokens in all columns.
    var length: UInt32
}

/// Little-endian base-128 varints.
enum Varint {
    @inline(__always)
    static func append(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    /// `read` without bounds checks: the caller guarantees 10 readable bytes at `pos`.
    @inline(__always)
    static func readUnchecked(_ base: UnsafePointer<UInt8>, _ pos: inout Int) -> UInt64 {
        var b = base[pos]
        pos += 1
        if b < 0x80 { return UInt64(b) }
        var result = UInt64(b & 0x7F)
        var shift: UInt64 = 7
        repeat {
            b = base[pos]
            pos += 1
            result |= UInt64(b & 0x7F) << shift
            shift += 7
        } while b >= 0x80 && shift < 70
        return result
    }

    /// Reads a varint at `pos`, advancing it. Malformed input (past the end, too long) yields 0 and
    /// puts `pos` at the end: a damaged blob stops a walk instead of trapping.
    @inline(__always)
    static func read(_ bytes: UnsafeBufferPointer<UInt8>, _ pos: inout Int) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while pos < bytes.count {
            let b = bytes[pos]
            pos += 1
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return result }
            shift += 7
            if shift > 63 { break }
        }
        pos = bytes.count
        return 0
    }
}

/// The bound data of one block of a posting list: what no document of the block can exceed.
struct BlockBound {
    /// The Pareto frontier of (frequency, length) in the block: every document has a frequency at
    /// most some pair's and a length at least that pair's. bm25's addend grows with the frequency
    /// and falls with the length, so its maximum over the block is at one of these pairs, whatever
    /// avgdl and idf the query has.
    var pairs: [(frequency: UInt32, length: UInt32)]
    /// Largest `hintFactor * engagementFactor` of the block's documents, 1 when none has a boost.
    var staticFactor: Double = 1
    /// Latest lastUsedDate in the block (the largest recency factor), nil when none has one.
    var latestUse: Double?

    /// Largest addend of a phrase with `idf` in this block.
    func addendBound(idf: Double, _ bm25: BM25) -> Double {
        var best = 0.0
        for p in pairs {
            best = max(best, BM25.addend(idf: idf, frequency: Double(p.frequency), norm: bm25.lengthNorm(p.length)))
        }
        return best
    }

    /// Largest boost multiplier in the block at `now`.
    func boostBound(now: Double) -> Double {
        staticFactor * BM25.recencyBound(latestUse: latestUse, now: now)
    }

    static func frontier(_ postings: ArraySlice<Posting>) -> [(frequency: UInt32, length: UInt32)] {
        var sorted = postings.map { ($0.frequency, $0.length) }
        sorted.sort { $0.1 != $1.1 ? $0.1 < $1.1 : $0.0 > $1.0 }
        var out: [(frequency: UInt32, length: UInt32)] = []
        for (f, d) in sorted where f > (out.last?.frequency ?? 0) { out.append((f, d)) }
        return out
    }
}

/// A term's posting list in one segment, as stored in `rank_terms.postings`:
///
///     count, blockCount, [directory: per block lastDoc, byteLength, frontier, boost], entries
///
/// Entries are grouped in blocks of `blockSize` documents in document order. A block holds its
/// documents as varint deltas (from the previous document, the first from -1), then one byte of
/// widths (low nibble: bytes per packed value, high nibble: bytes per length), then the packed
/// values `frequency << 8 | mask << 1 | extra` (`pack`) and the lengths, each at that fixed width,
/// little-endian. A lookup decodes the documents only and reads the one entry it found; a walk
/// reads fixed-width fields instead of varints. Lists of one block (almost all terms) have no
/// directory: they are read whole. The directory lets a query skip blocks by document and bound.
enum PostingListFormat {
    static let blockSize = 128

    /// A posting's packed value: `frequency << 8 | mask << 1 | extra`, the mask of the seven text
    /// columns holding the term (format 6; formats 4-5 stored their count in 3 bits, `<< 4`).
    @inline(__always)
    static func pack(frequency: UInt32, mask: UInt8, extra: Bool) -> UInt32 {
        frequency << 8 | UInt32(mask & 0x7F) << 1 | (extra ? 1 : 0)
    }
    @inline(__always) static func frequency(_ packed: UInt32) -> UInt32 { packed >> 8 }
    @inline(__always) static func mask(_ packed: UInt32) -> UInt8 { UInt8(truncatingIfNeeded: packed >> 1) & 0x7F }

    /// Encodes `postings` (in document order). `boosts` gives the boost of a document with `extra`.
    static func encode(_ postings: [Posting], boosts: (UInt32) -> BM25.Boosts) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(postings.count * 5 + 8)
        Varint.append(UInt64(postings.count), to: &out)
        let blockCount = (postings.count + blockSize - 1) / blockSize
        Varint.append(UInt64(blockCount), to: &out)
        var data: [UInt8] = []
        data.reserveCapacity(postings.count * 4)
        var previous: Int64 = -1
        var yieldPoint = QueryYield.Point(every: 4)  // a frequent word's list is thousands of blocks
        for block in 0..<blockCount {
            yieldPoint.check()
            let slice = postings[(block * blockSize)..<min(postings.count, (block + 1) * blockSize)]
            let start = data.count
            for p in slice {
                Varint.append(UInt64(Int64(p.doc) - previous), to: &data)
                previous = Int64(p.doc)
            }
            let packed = slice.map { UInt32(p: $0) }
            let packedWidth = width(packed.max() ?? 0), lengthWidth = width(slice.map(\.length).max() ?? 0)
            data.append(UInt8(packedWidth | lengthWidth << 4))
            for v in packed { appendFixed(v, width: packedWidth, to: &data) }
            for p in slice { appendFixed(p.length, width: lengthWidth, to: &data) }
            guard blockCount > 1 else { break }
            Varint.append(UInt64(slice.last!.doc), to: &out)
            Varint.append(UInt64(data.count - start), to: &out)
            let pairs = BlockBound.frontier(slice)
            Varint.append(UInt64(pairs.count), to: &out)
            for p in pairs {
                Varint.append(UInt64(p.frequency), to: &out)
                Varint.append(UInt64(p.length), to: &out)
            }
            var staticFactor = 1.0
            var latestUse: Double?
            for p in slice where p.extra {
                let b = boosts(p.doc)
                staticFactor = max(staticFactor, b.staticFactor)
                if let l = b.lastUsed { latestUse = max(latestUse ?? l, l) }
            }
            if staticFactor == 1, latestUse == nil {
                out.append(0)
            } else {
                out.append(1)
                appendDouble(staticFactor, to: &out)
                appendDouble(latestUse ?? -Double.infinity, to: &out)
            }
        }
        out += data
        return out
    }

    /// Bytes needed for `v` (1...4).
    static func width(_ v: UInt32) -> Int { v < 1 << 8 ? 1 : v < 1 << 16 ? 2 : v < 1 << 24 ? 3 : 4 }

    static func appendFixed(_ v: UInt32, width: Int, to out: inout [UInt8]) {
        for k in 0..<width { out.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(k)))) }
    }

    @inline(__always)
    static func readFixed(_ base: UnsafePointer<UInt8>, _ at: Int, width: Int) -> UInt32 {
        switch width {
        case 1: return UInt32(base[at])
        case 2: return UInt32(UInt16(base[at]) | UInt16(base[at + 1]) << 8)
        default:
            var v: UInt32 = 0
            for k in 0..<width { v |= UInt32(base[at + k]) << (8 * UInt32(k)) }
            return v
        }
    }

    static func appendDouble(_ d: Double, to out: inout [UInt8]) {
        var bits = d.bitPattern.littleEndian
        withUnsafeBytes(of: &bits) { out.append(contentsOf: $0) }
    }

    static func readDouble(_ bytes: UnsafeBufferPointer<UInt8>, _ pos: inout Int) -> Double {
        guard pos + 8 <= bytes.count else {
            pos = bytes.count
            return 0
        }
        var bits: UInt64 = 0
        for i in 0..<8 { bits |= UInt64(bytes[pos + i]) << (8 * UInt64(i)) }
        pos += 8
        return Double(bitPattern: bits)
    }
}

/// A posting list read from its blob: the directory parsed into flat arrays (no allocation per
/// block), entries decoded a block at a time.
struct PostingList {
    struct Block {
        var lastDoc: UInt32
        var offset: Int
        var byteLength: Int
        var count: Int
        /// The block's frontier pairs are `pairFrequency[pairs]`, `pairLength[pairs]` (multi-block lists).
        var pairs: Range<Int> = 0..<0
        /// `BlockBound.staticFactor`, `latestUse` (nil: none) of the block.
        var staticFactor = 1.0
        var latestUse: Double?
    }

    let bytes: [UInt8]
    let count: Int
    private(set) var blocks: [Block] = []
    private var pairFrequency: [UInt32] = []
    private var pairLength: [UInt32] = []

    /// Whether blocks carry bounds (lists of more than one block).
    var hasBounds: Bool { blocks.count > 1 }

    /// Nil when the blob is malformed (a damaged file: the caller falls back to the exhaustive path).
    init?(_ bytes: [UInt8]) {
        self.bytes = bytes
        var parsedCount = 0
        var parsed: [Block] = []
        var frequencies: [UInt32] = [], lengths: [UInt32] = []
        let ok: Bool = bytes.withUnsafeBufferPointer { b in
            var pos = 0
            let count = Int(Varint.read(b, &pos))
            let blockCount = Int(Varint.read(b, &pos))
            guard count > 0, blockCount == (count + PostingListFormat.blockSize - 1) / PostingListFormat.blockSize else { return false }
            parsedCount = count
            if blockCount == 1 {
                parsed = [Block(lastDoc: UInt32.max, offset: pos, byteLength: b.count - pos, count: count)]
                return pos < b.count
            }
            parsed.reserveCapacity(blockCount)
            frequencies.reserveCapacity(blockCount * 4)
            lengths.reserveCapacity(blockCount * 4)
            for i in 0..<blockCount {
                let lastDoc = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                let length = Int(Varint.read(b, &pos))
                let pairCount = Int(Varint.read(b, &pos))
                guard pairCount <= PostingListFormat.blockSize else { return false }
                let start = frequencies.count
                for _ in 0..<pairCount {
                    frequencies.append(UInt32(truncatingIfNeeded: Varint.read(b, &pos)))
                    lengths.append(UInt32(truncatingIfNeeded: Varint.read(b, &pos)))
                }
                guard pos < b.count else { return false }
                let flag = b[pos]
                pos += 1
                var block = Block(lastDoc: lastDoc, offset: 0, byteLength: length,
                    count: i == blockCount - 1 ? count - PostingListFormat.blockSize * (blockCount - 1) : PostingListFormat.blockSize,
                    pairs: start..<frequencies.count)
                if flag == 1 {
                    block.staticFactor = PostingListFormat.readDouble(b, &pos)
                    let latest = PostingListFormat.readDouble(b, &pos)
                    block.latestUse = latest == -Double.infinity ? nil : latest
                }
                parsed.append(block)
            }
            var offset = pos
            for i in parsed.indices {
                parsed[i].offset = offset
                offset += parsed[i].byteLength
            }
            return offset == b.count
        }
        guard ok else { return nil }
        count = parsedCount
        blocks = parsed
        pairFrequency = frequencies
        pairLength = lengths
    }

    /// The largest addend of a phrase with `idf` in block `b` (multi-block lists).
    func addendBound(block b: Int, idf: Double, _ bm25: BM25) -> Double {
        var best = 0.0
        for k in blocks[b].pairs {
            best = max(best, BM25.addend(idf: idf, frequency: Double(pairFrequency[k]), norm: bm25.lengthNorm(pairLength[k])))
        }
        return best
    }

    /// The largest boost multiplier in block `b` at `now`.
    func boostBound(block b: Int, now: Double) -> Double {
        blocks[b].staticFactor * BM25.recencyBound(latestUse: blocks[b].latestUse, now: now)
    }

    /// One block's documents, decoded, and where its fixed-width fields are.
    struct DecodedBlock {
        var docs: [UInt32] = []
        var packedAt = 0
        var packedWidth = 1
        var lengthAt = 0
        var lengthWidth = 1
    }

    /// Decodes block `index`'s documents into `out` (nil fields when the block is malformed).
    func decodeDocs(block index: Int, into out: inout DecodedBlock) {
        let block = blocks[index]
        var doc: UInt64 = index == 0 ? UInt64.max : UInt64(blocks[index - 1].lastDoc)
        bytes.withUnsafeBufferPointer { b in
            let end = min(b.count, block.offset + block.byteLength)
            var pos = block.offset
            let slice = UnsafeBufferPointer(rebasing: b[0..<end])
            out.docs = [UInt32](unsafeUninitializedCapacity: block.count) { docs, filled in
                filled = 0
                guard let base = b.baseAddress else { return }
                while filled < block.count, pos + 10 <= end {
                    doc &+= Varint.readUnchecked(base, &pos)
                    docs[filled] = UInt32(truncatingIfNeeded: doc)
                    filled += 1
                }
                while filled < block.count, pos < end {
                    doc &+= Varint.read(slice, &pos)
                    docs[filled] = UInt32(truncatingIfNeeded: doc)
                    filled += 1
                }
            }
            guard out.docs.count == block.count, pos < end else {
                out.docs = []
                return
            }
            out.packedWidth = Int(max(1, min(4, b[pos] & 0x0F)))
            out.lengthWidth = Int(max(1, min(4, b[pos] >> 4)))
            out.packedAt = pos + 1
            out.lengthAt = out.packedAt + block.count * out.packedWidth
            if out.lengthAt + block.count * out.lengthWidth > end { out.docs = [] }
        }
    }

    /// Entry `i` of a block decoded by `decodeDocs`: the packed value and the length.
    @inline(__always)
    func fields(_ block: DecodedBlock, _ i: Int) -> (packed: UInt32, length: UInt32) {
        bytes.withUnsafeBufferPointer { b in
            (PostingListFormat.readFixed(b.baseAddress!, block.packedAt + i * block.packedWidth, width: block.packedWidth),
             PostingListFormat.readFixed(b.baseAddress!, block.lengthAt + i * block.lengthWidth, width: block.lengthWidth))
        }
    }

    /// Decodes block `index` into `out` (replacing its contents).
    func decode(block index: Int, into out: inout [Posting]) {
        var d = DecodedBlock()
        decodeDocs(block: index, into: &d)
        let n = d.docs.count
        out = bytes.withUnsafeBufferPointer { b in
            [Posting](unsafeUninitializedCapacity: n) { buffer, filled in
                guard let base = b.baseAddress else {
                    filled = 0
                    return
                }
                for i in 0..<n {
                    let packed = PostingListFormat.readFixed(base, d.packedAt + i * d.packedWidth, width: d.packedWidth)
                    let length = PostingListFormat.readFixed(base, d.lengthAt + i * d.lengthWidth, width: d.lengthWidth)
                    (buffer.baseAddress! + i).initialize(to: Posting(doc: d.docs[i], frequency: PostingListFormat.frequency(packed),
                        mask: PostingListFormat.mask(packed), extra: packed & 1 == 1, length: length))
                }
                filled = n
            }
        }
    }

    /// Calls `body(doc, frequency, length, extra)` for every posting, in document order. No
    /// allocation: a block's documents are decoded into stack memory (unions of many small lists
    /// run this once per list). Stops at a damaged block.
    @inline(__always)
    func forEachPosting(_ body: (UInt32, UInt32, UInt32, Bool) -> Void) {
        _ = forEachBlock(from: 0) { docs, n, base, packedAt, packedWidth, lengthWidth in
            let lengthAt = packedAt + n * packedWidth
            for i in 0..<n {
                let packed = PostingListFormat.readFixed(base, packedAt + i * packedWidth, width: packedWidth)
                let length = PostingListFormat.readFixed(base, lengthAt + i * lengthWidth, width: lengthWidth)
                body(docs[i], PostingListFormat.frequency(packed), length, packed & 1 == 1)
            }
        }
    }

    /// Decodes the blocks from `start` on, one at a time, into stack memory and calls
    /// `body(docs, count, base, packedAt, packedWidth, lengthWidth)` with each: the block's
    /// documents, and where its fixed-width packed values (then its lengths) are in `bytes`.
    /// False at the first damaged block (the blocks before it were passed on).
    @inline(__always)
    func forEachBlock(from start: Int,
                      _ body: (UnsafeMutablePointer<UInt32>, Int, UnsafePointer<UInt8>, Int, Int, Int) -> Void) -> Bool {
        bytes.withUnsafeBufferPointer { b in
            guard let base = b.baseAddress else { return false }
            return withUnsafeTemporaryAllocation(of: UInt32.self, capacity: PostingListFormat.blockSize) { scratch in
                guard let docs = scratch.baseAddress else { return false }
                var doc: UInt64 = start == 0 ? UInt64.max : UInt64(blocks[start - 1].lastDoc)
                for index in start..<blocks.count {
                    let block = blocks[index]
                    let end = min(b.count, block.offset + block.byteLength)
                    var pos = block.offset
                    var n = 0
                    while n < block.count, pos + 10 <= end {
                        doc &+= Varint.readUnchecked(base, &pos)
                        docs[n] = UInt32(truncatingIfNeeded: doc)
                        n += 1
                    }
                    let slice = UnsafeBufferPointer(rebasing: b[0..<end])
                    while n < block.count, pos < end {
                        doc &+= Varint.read(slice, &pos)
                        docs[n] = UInt32(truncatingIfNeeded: doc)
                        n += 1
                    }
                    guard n == block.count, n <= PostingListFormat.blockSize, pos < end else { return false }
                    let packedWidth = Int(max(1, min(4, base[pos] & 0x0F))), lengthWidth = Int(max(1, min(4, base[pos] >> 4)))
                    let packedAt = pos + 1
                    guard packedAt + n * (packedWidth + lengthWidth) <= end else { return false }
                    body(docs, n, base, packedAt, packedWidth, lengthWidth)
                }
                return true
            }
        }
    }

    /// Every posting, in document order.
    func all() -> [Posting] {
        var out: [Posting] = []
        out.reserveCapacity(count)
        var block: [Posting] = []
        for i in blocks.indices {
            decode(block: i, into: &block)
            out += block
        }
        return out
    }

    /// The posting of `doc`, if the list has it.
    func find(_ doc: UInt32) -> Posting? {
        guard let i = blockIndex(containing: doc) else { return nil }
        var block: [Posting] = []
        decode(block: i, into: &block)
        return block.first { $0.doc == doc }
    }

    /// The first block whose last document is at or after `doc`.
    func blockIndex(containing doc: UInt32) -> Int? {
        if blocks.count == 1 { return 0 }
        var low = 0, high = blocks.count
        while low < high {
            let mid = (low + high) / 2
            if blocks[mid].lastDoc < doc { low = mid + 1 } else { high = mid }
        }
        return low < blocks.count ? low : nil
    }
}
