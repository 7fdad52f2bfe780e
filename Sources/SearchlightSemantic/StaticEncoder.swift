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

    public convenience init(file: String) throws(SemanticError) {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SemanticError(.modelMissing, "the static table \(file) cannot be read; `make model` installs it into the model folder")
        }
        try self.init(data: data, path: file)
    }

    public init(data: Data, path: String = "(memory)") throws(SemanticError) {
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
    }

    /// The unit vector of `text` (all zeros when the text has no token).
    public func embed(_ text: String) -> [Float] {
        var pieces: [Int32] = []
        pieces.reserveCapacity(64)
        tokenizer.appendPieces(of: text, to: &pieces, limit: maxPieces)
        return embed(pieces: pieces)
    }

    /// The unit vector of word-piece ids (no `[CLS]`/`[SEP]`); ids outside the table are skipped.
    public func embed(pieces: [Int32]) -> [Float] {
        let d = reducedDimension, o = dimension
        var out = [Float](repeating: 0, count: o)
        var mean = [Float](repeating: 0, count: d)
        var n = 0
        rows.withUnsafeBufferPointer { rp in
            mean.withUnsafeMutableBufferPointer { mp in
                for id in pieces.prefix(maxPieces) where id >= 0 && Int(id) < scales.count {
                    let row = rp.baseAddress! + Int(id) * d
                    let s = scales[Int(id)]
                    for j in 0..<d { mp[j] += Float(row[j]) * s }
                    n += 1
                }
            }
        }
        guard n > 0 else { return out }
        let inverse = 1 / Float(n)
        map.withUnsafeBufferPointer { wp in
            out.withUnsafeMutableBufferPointer { op in
                for j in 0..<o { op[j] = bias[j] }
                for i in 0..<d {
                    let m = mean[i] * inverse
                    let w = wp.baseAddress! + i * o
                    for j in 0..<o { op[j] += m * w[j] }
                }
                var norm: Float = 0
                for j in 0..<o { norm += op[j] * op[j] }
                let scale = 1 / max(norm.squareRoot(), 1e-12)
                for j in 0..<o { op[j] *= scale }
            }
        }
        return out
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
