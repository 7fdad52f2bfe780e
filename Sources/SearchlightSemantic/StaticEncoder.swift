import CSemanticKernels
import Foundation

/// The static tier: a document's vector is a linear map of the mean of its tokens' rows in a
/// table derived from all-MiniLM-L6-v2 (Model2Vec-like), in the transformer's own 384-d space,
/// at a few microseconds per document. `Scripts/semantic/build-static-table.py` makes the table:
/// every token's transformer embedding, reduced by PCA, weighted by corpus frequency (rare
/// tokens weigh more), stored int8 with a scale per row; then a map fitted so that
/// `normalize(mean(rows) · map + bias)` approximates the transformer's embedding of the document.
///
/// The table file carries its vocabulary, so the static tier needs no other file.
///
/// Format 1, little-endian: `"SLST"`, `UInt32` version 1, vocabulary count `V`, reduced
/// dimension `D`, output dimension `O`, vocabulary byte count `B`; `B` bytes of tokens joined by
/// `\n`; `V` Float32 row scales; `V·D` Int8 rows; `D·O` Float32 map (row-major); `O` Float32 bias.
public final class StaticEncoder: Sendable {
    public let tokenizer: WordPieceTokenizer
    public let reducedDimension: Int
    public let dimension: Int
    /// Pieces of a document that count (the transformer's window: 256 less `[CLS]` and `[SEP]`).
    public let maxPieces = 254
    private let scales: [Float]
    private let rows: [Int8]
    private let map: [Float]
    private let bias: [Float]
    /// Which kernels of `CStaticKernels` run (2 AVX-512, 1 AVX2, 0 portable C): the CPU's best
    /// unless a test picks another.
    let kernelLevel: Int32
    private let scratches = ScratchPool()

    /// Documents per call of the map kernel: their sums (16 KB) and outputs (48 KB) stay in cache.
    static let batchSize = 32

    public convenience init(file: String) throws(SemanticError) {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SemanticError(.modelMissing, "the static table \(file) cannot be read; `make model` installs it into the model folder")
        }
        try self.init(data: data, path: file)
    }

    public convenience init(data: Data, path: String = "(memory)") throws(SemanticError) {
        try self.init(data: data, path: path, kernelLevel: sl_static_level())
    }

    init(data: Data, path: String, kernelLevel: Int32) throws(SemanticError) {
        var reader = ByteReader(data: data, path: path)
        guard try reader.bytes(4) == Array("SLST".utf8) else { throw reader.bad("it does not start with SLST") }
        let version = try reader.uint32()
        guard version == 1 else { throw reader.bad("format \(version) is not 1; this build reads format 1") }
        let v = Int(try reader.uint32()), d = Int(try reader.uint32()), o = Int(try reader.uint32()), b = Int(try reader.uint32())
        guard (1...1_000_000).contains(v), (1...4096).contains(d), (1...4096).contains(o), b <= 64 << 20 else {
            throw reader.bad("implausible sizes (vocabulary \(v), dimensions \(d) → \(o))")
        }
        let tokens = String(decoding: try reader.bytes(b), as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard tokens.count == v else { throw reader.bad("it names \(tokens.count) tokens, its header says \(v)") }
        tokenizer = try WordPieceTokenizer(vocabulary: Vocabulary(tokens: tokens))
        scales = try reader.floats(v)
        rows = try reader.bytes(v * d).map { Int8(bitPattern: $0) }
        map = try reader.floats(d * o)
        bias = try reader.floats(o)
        guard reader.atEnd else { throw reader.bad("it has bytes after the bias") }
        guard scales.allSatisfy(\.isFinite), map.allSatisfy(\.isFinite), bias.allSatisfy(\.isFinite) else {
            throw reader.bad("it holds a value that is not finite")
        }
        reducedDimension = d
        dimension = o
        self.kernelLevel = kernelLevel
    }

    /// The unit vector of `text` (all zeros when the text has no token).
    public func embed(_ text: String) -> [Float] {
        scratches.use { scratch in
            var pieces = scratch.pieces
            defer { scratch.pieces = pieces }
            pieces.removeAll()
            tokenizer.appendPieces(of: text, to: &pieces, limit: maxPieces, cache: scratch.cache, buffers: scratch.buffers)
            return embed(validPieces: pieces.pieces)
        }
    }

    /// The unit vector of word-piece ids (no `[CLS]`/`[SEP]`); ids outside the table are skipped.
    public func embed(pieces: [Int32]) -> [Float] {
        let ids = pieces.prefix(maxPieces).filter { $0 >= 0 && Int($0) < scales.count }
        return ids.withUnsafeBufferPointer(embed(validPieces:))
    }

    private func embed(validPieces ids: UnsafeBufferPointer<Int32>) -> [Float] {
        let d = reducedDimension, o = dimension
        var out = [Float](repeating: 0, count: o)
        guard !ids.isEmpty else { return out }
        var mean = [Float](repeating: 0, count: d)
        mean.withUnsafeMutableBufferPointer { sum(ids, into: $0.baseAddress!) }
        out.withUnsafeMutableBufferPointer { y in
            mean.withUnsafeBufferPointer { project($0.baseAddress!, count: 1, into: y.baseAddress!) }
            normalize(y)
        }
        return out
    }

    /// The quantised vectors of `texts` for donation, in order (the codes of a text without tokens
    /// are all zero): the same vectors as `QuantizedVector(embed(text))`, made in batches (the map
    /// applied to `batchSize` documents at a time) with the pieces of repeated words cached.
    public func quantizedVectors(of texts: [String]) -> [QuantizedVector] {
        let d = reducedDimension, o = dimension
        var vectors: [QuantizedVector] = []
        vectors.reserveCapacity(texts.count)
        scratches.use { scratch in
            scratch.reserve(documents: Self.batchSize, reduced: d, outputs: o)
            var first = 0
            while first < texts.count {
                let n = min(Self.batchSize, texts.count - first)
                var empty = [Bool](repeating: false, count: n)
                var pieces = scratch.pieces
                for k in 0..<n {
                    pieces.removeAll()
                    tokenizer.appendPieces(of: texts[first + k], to: &pieces, limit: maxPieces, cache: scratch.cache,
                        buffers: scratch.buffers)
                    empty[k] = pieces.count == 0
                    sum(pieces.pieces, into: scratch.sums + k * d)  // the tokenizer's ids are the table's rows
                }
                scratch.pieces = pieces
                project(scratch.sums, count: n, into: scratch.outputs)
                for k in 0..<n {
                    let y = UnsafeMutableBufferPointer(start: scratch.outputs + k * o, count: o)
                    if empty[k] {
                        y.update(repeating: 0)
                    } else {
                        normalize(y)
                    }
                    vectors.append(QuantizedVector(UnsafeBufferPointer(y)))
                }
                first += n
            }
        }
        return vectors
    }

    /// The mean of the rows of `ids` (all valid rows), or zeros when there are none.
    private func sum(_ ids: UnsafeBufferPointer<Int32>, into mean: UnsafeMutablePointer<Float>) {
        let d = reducedDimension
        guard !ids.isEmpty else {
            mean.update(repeating: 0, count: d)
            return
        }
        rows.withUnsafeBufferPointer { r in
            scales.withUnsafeBufferPointer { s in
                sl_static_sum(kernelLevel, r.baseAddress!, s.baseAddress!, d, ids.baseAddress!, ids.count, mean)
            }
        }
        let inverse = 1 / Float(ids.count)
        for j in 0..<d { mean[j] *= inverse }
    }

    /// `count` documents' means (count × reduced) through the map, plus the bias.
    private func project(_ means: UnsafePointer<Float>, count: Int, into y: UnsafeMutablePointer<Float>) {
        map.withUnsafeBufferPointer { m in
            bias.withUnsafeBufferPointer { b in
                sl_static_project(kernelLevel, means, count, reducedDimension, m.baseAddress!, b.baseAddress!, dimension, y)
            }
        }
    }

    /// Scales `v` to unit length (`sl_static_normalize`: a fixed order of additions, so every
    /// path that normalises gets the same bits).
    func normalize(_ v: UnsafeMutableBufferPointer<Float>) {
        sl_static_normalize(kernelLevel, v.baseAddress!, v.count)
    }
}

/// Scratch memory of one embedding call, lent by a pool: a call allocates nothing per document.
private final class EmbedScratch {
    /// Given back after each use (it may have grown).
    var pieces = PieceBuffer(capacity: 512)
    let cache = WordPieceCache()
    /// The tokenizer's word and queue buffers, reused from text to text.
    let buffers = TokenizerBuffers()
    private(set) var sums = UnsafeMutablePointer<Float>.allocate(capacity: 1)
    private(set) var outputs = UnsafeMutablePointer<Float>.allocate(capacity: 1)
    private var capacity = (sums: 1, outputs: 1)


    func reserve(documents: Int, reduced: Int, outputs o: Int) {
        if capacity.sums < documents * reduced {
            sums.deallocate()
            sums = .allocate(capacity: documents * reduced)
            capacity.sums = documents * reduced
        }
        if capacity.outputs < documents * o {
            outputs.deallocate()
            outputs = .allocate(capacity: documents * o)
            capacity.outputs = documents * o
        }
    }

    deinit {
        pieces.deallocate()
        sums.deallocate()
        outputs.deallocate()
    }
}

/// Scratches for the threads embedding at once (the daemon's connections each prepare their own
/// donations). At most `kept` stay between calls, so the memory is bounded: a scratch is about
/// 0.6 MB, most of it its word cache.
private final class ScratchPool: @unchecked Sendable {
    // @unchecked: `free` is only touched under `lock`; a scratch is used by one call at a time.
    private let lock = NSLock()
    private var free: [EmbedScratch] = []
    static let kept = 8

    func use<R>(_ body: (EmbedScratch) -> R) -> R {
        let scratch = lock.withLock { free.popLast() } ?? EmbedScratch()
        defer { lock.withLock { if free.count < Self.kept { free.append(scratch) } } }
        return body(scratch)
    }
}

/// Reads a binary table front to back, every read bounds-checked.
private struct ByteReader {
    let data: Data
    let path: String
    var offset = 0

    init(data: Data, path: String) {
        self.data = data
        self.path = path
    }

    var atEnd: Bool { offset == data.count }

    func bad(_ why: String) -> SemanticError {
        SemanticError(.badFormat, "\(path) is not a usable static table: \(why); run `make model` to install it again")
    }

    mutating func bytes(_ n: Int) throws(SemanticError) -> [UInt8] {
        guard n >= 0, n <= data.count - offset else { throw bad("it ends early (wanted \(n) bytes at offset \(offset))") }
        let start = data.startIndex + offset
        offset += n
        return Array(data[start..<(start + n)])
    }

    mutating func uint32() throws(SemanticError) -> UInt32 {
        let b = try bytes(4)
        return UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24
    }

    mutating func floats(_ n: Int) throws(SemanticError) -> [Float] {
        let b = try bytes(n * 4)
        return (0..<n).map { i in
            Float(bitPattern: UInt32(b[4 * i]) | UInt32(b[4 * i + 1]) << 8 | UInt32(b[4 * i + 2]) << 16 | UInt32(b[4 * i + 3]) << 24)
        }
    }
}
