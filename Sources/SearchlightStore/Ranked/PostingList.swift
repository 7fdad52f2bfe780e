import Foundation

/// One document of a term's posting list in a segment of the ranked index.
struct Posting: Equatable {
    /// The document's rowid minus the segment's first rowid.
    var doc: UInt32
    /// bm25's `f` for this term alone: the sum of the column weights of its instances.
    var frequency: UInt32
    /// How many of the seven text columns (all but `aux`) hold the term: the completions' weight.
    var columns: UInt8
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
/// Entries are grouped in blocks of `blockSize` documents in document order, each `docDelta
/// (from the previous document, the first from -1), frequency << 4 | columns << 1 | extra,
/// length`, all varints. Lists of one block (almost all terms) have no directory: they are read
/// whole. The directory lets a query skip blocks by document and by bound.
enum PostingListFormat {
    static let blockSize = 128

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
        for block in 0..<blockCount {
            let slice = postings[(block * blockSize)..<min(postings.count, (block + 1) * blockSize)]
            let start = data.count
            for p in slice {
                Varint.append(UInt64(Int64(p.doc) - previous), to: &data)
                Varint.append(UInt64(p.frequency) << 4 | UInt64(p.columns & 7) << 1 | (p.extra ? 1 : 0), to: &data)
                Varint.append(UInt64(p.length), to: &data)
                previous = Int64(p.doc)
            }
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

/// A posting list read from its blob: the directory parsed, entries decoded a block at a time.
struct PostingList {
    struct Block {
        var lastDoc: UInt32
        var offset: Int
        var byteLength: Int
        var count: Int
        var bound: BlockBound?
    }

    let bytes: [UInt8]
    let count: Int
    private(set) var blocks: [Block] = []

    /// Nil when the blob is malformed (a damaged file: the caller falls back to the exhaustive path).
    init?(_ bytes: [UInt8]) {
        self.bytes = bytes
        var parsedCount = 0
        var parsed: [Block] = []
        let ok: Bool = bytes.withUnsafeBufferPointer { b in
            var pos = 0
            let count = Int(Varint.read(b, &pos))
            let blockCount = Int(Varint.read(b, &pos))
            guard count > 0, blockCount == (count + PostingListFormat.blockSize - 1) / PostingListFormat.blockSize else { return false }
            parsedCount = count
            if blockCount == 1 {
                parsed = [Block(lastDoc: UInt32.max, offset: pos, byteLength: b.count - pos, count: count, bound: nil)]
                return pos < b.count
            }
            var entries: [(UInt32, Int, BlockBound)] = []
            entries.reserveCapacity(blockCount)
            for _ in 0..<blockCount {
                let lastDoc = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                let length = Int(Varint.read(b, &pos))
                let pairCount = Int(Varint.read(b, &pos))
                guard pairCount <= PostingListFormat.blockSize else { return false }
                var bound = BlockBound(pairs: [])
                for _ in 0..<pairCount {
                    let f = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                    let d = UInt32(truncatingIfNeeded: Varint.read(b, &pos))
                    bound.pairs.append((f, d))
                }
                guard pos < b.count else { return false }
                let flag = b[pos]
                pos += 1
                if flag == 1 {
                    bound.staticFactor = PostingListFormat.readDouble(b, &pos)
                    let latest = PostingListFormat.readDouble(b, &pos)
                    bound.latestUse = latest == -Double.infinity ? nil : latest
                }
                entries.append((lastDoc, length, bound))
            }
            var offset = pos
            for (i, e) in entries.enumerated() {
                let n = i == blockCount - 1 ? count - PostingListFormat.blockSize * (blockCount - 1) : PostingListFormat.blockSize
                parsed.append(Block(lastDoc: e.0, offset: offset, byteLength: e.1, count: n, bound: e.2))
                offset += e.1
            }
            return offset == b.count
        }
        guard ok else { return nil }
        count = parsedCount
        blocks = parsed
    }

    /// Decodes block `index` into `out` (replacing its contents). `previousDoc` is the last
    /// document of the block before (ignored for the first).
    func decode(block index: Int, into out: inout [Posting]) {
        out.removeAll(keepingCapacity: true)
        let block = blocks[index]
        var doc: Int64 = index == 0 ? -1 : Int64(blocks[index - 1].lastDoc)
        bytes.withUnsafeBufferPointer { b in
            var pos = block.offset
            let end = min(b.count, block.offset + block.byteLength)
            let slice = UnsafeBufferPointer(rebasing: b[0..<end])
            for _ in 0..<block.count {
                guard pos < end else { break }
                doc += Int64(Varint.read(slice, &pos))
                let packed = Varint.read(slice, &pos)
                let length = Varint.read(slice, &pos)
                out.append(Posting(doc: UInt32(truncatingIfNeeded: doc), frequency: UInt32(truncatingIfNeeded: packed >> 4),
                    columns: UInt8(truncatingIfNeeded: (packed >> 1) & 7), extra: packed & 1 == 1,
                    length: UInt32(truncatingIfNeeded: length)))
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
