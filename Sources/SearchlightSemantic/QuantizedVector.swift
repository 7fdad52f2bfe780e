import CSemanticKernels

/// A vector stored as int8 codes with one float scale: value[j] ≈ codes[j] · scale, with
/// scale = max|value| / 127. A 384-dimensional vector takes 384 + 4 bytes instead of 1536.
///
/// `refined` says where the vector came from: false for the static table (given at donation),
/// true once the transformer has re-embedded the item (issue 18's background refinement).
public struct QuantizedVector: Sendable, Equatable {
    public var codes: [Int8]
    public var scale: Float
    public var refined: Bool

    public init(codes: [Int8], scale: Float, refined: Bool = false) {
        self.codes = codes
        self.scale = scale
        self.refined = refined
    }

    /// Quantises `values` (any length; usually a unit vector).
    public init(_ values: [Float], refined: Bool = false) {
        self = values.withUnsafeBufferPointer { QuantizedVector($0, refined: refined) }
    }

    /// The same from memory the caller owns (the static encoder's batch buffers), with
    /// `sl_quantize_i8`: codes round half to even; a value that is not finite counts as 0.
    public init(_ values: UnsafeBufferPointer<Float>, refined: Bool = false) {
        var scale: Float = 1
        codes = [Int8](unsafeUninitializedCapacity: values.count) { codes, initialized in
            if let v = values.baseAddress { scale = sl_quantize_i8(v, values.count, codes.baseAddress!) }
            initialized = values.count
        }
        self.scale = scale
        self.refined = refined
    }

    public var dimension: Int { codes.count }

    /// The float vector the codes stand for.
    public var values: [Float] { codes.map { Float($0) * scale } }

    // MARK: - The BLOB of one item (a row of the future vectors table, keyed by the item's rowid)

    /// Format 1: `[1][flags][dimension: UInt16 LE][scale: Float32 LE][codes: dimension × Int8]`;
    /// flags bit 0 is `refined`. 8 + dimension bytes.
    static let formatVersion: UInt8 = 1

    public var blob: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: blobCount) { out, initialized in
            writeBlob(into: UnsafeMutableRawBufferPointer(out))
            initialized = blobCount
        }
    }

    /// The BLOB's length: 8 + dimension.
    public var blobCount: Int { 8 + dimension }

    /// Writes the BLOB into `out` (at least `blobCount` bytes): the writer binds it from memory of
    /// its own, without an array per item.
    public func writeBlob(into out: UnsafeMutableRawBufferPointer) {
        precondition(out.count >= blobCount, "a vector BLOB needs \(blobCount) bytes")
        let n = dimension, bits = scale.bitPattern
        out[0] = Self.formatVersion
        out[1] = refined ? 1 : 0
        out[2] = UInt8(n & 0xFF)
        out[3] = UInt8(n >> 8)
        for i in 0..<4 { out[4 + i] = UInt8(truncatingIfNeeded: bits >> (8 * UInt32(i))) }
        codes.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[8..<(8 + n)]).copyMemory(from: $0) }
    }

    /// Decodes a BLOB written by `blob`; a BLOB of another format or a wrong length is refused
    /// (the caller re-embeds the item rather than trusting it).
    public init(blob: [UInt8]) throws(SemanticError) {
        guard blob.count >= 8, blob[0] == Self.formatVersion, blob[1] & ~1 == 0 else {
            throw SemanticError(.badFormat, "a vector BLOB of \(blob.count) bytes has an unknown format (first byte \(blob.first ?? 0)); re-embed the item")
        }
        let dimension = Int(blob[2]) | Int(blob[3]) << 8
        guard blob.count == 8 + dimension else {
            throw SemanticError(.badFormat, "a vector BLOB says \(dimension) dimensions but holds \(blob.count - 8) codes; re-embed the item")
        }
        var bits: UInt32 = 0
        for i in 0..<4 { bits |= UInt32(blob[4 + i]) << (8 * UInt32(i)) }
        let scale = Float(bitPattern: bits)
        guard scale.isFinite, scale > 0 else {
            throw SemanticError(.badFormat, "a vector BLOB has scale \(scale); re-embed the item")
        }
        self.init(codes: blob[8...].map { Int8(bitPattern: $0) }, scale: scale, refined: blob[1] & 1 == 1)
    }
}
