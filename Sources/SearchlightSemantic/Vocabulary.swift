import Foundation

/// The WordPiece vocabulary (`vocab.txt`: one token per line, the id is the line number), looked
/// up by UTF-8 bytes without building Strings: the tokenizer's inner loop probes it once per
/// candidate piece, so a String per probe would dominate the static encoder's time.
///
/// Word-initial pieces and continuation pieces (`##xyz`, stored without the `##`) live in two
/// open-addressing tables over one byte buffer.
public struct Vocabulary: Sendable {
    public let tokens: [String]
    private let bytes: [UInt8]
    private let starts: [Int32]
    private let lengths: [Int32]
    private let initial: [Int32]       // slots -> id + 1 (0: empty)
    private let continuation: [Int32]
    private let mask: Int

    public var count: Int { tokens.count }

    /// Reads `vocab.txt`. Throws when the file is missing or empty.
    public init(file: String) throws(SemanticError) {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw SemanticError(.modelMissing, "the vocabulary \(file) cannot be read; run `make model` to fetch the model files")
        }
        var lines = String(decoding: data, as: UTF8.self).components(separatedBy: "\n")
        if lines.last == "" { lines.removeLast() }
        try self.init(tokens: lines.map { $0.hasSuffix("\r") ? String($0.dropLast()) : $0 })
    }

    public init(tokens: [String]) throws(SemanticError) {
        guard !tokens.isEmpty else { throw SemanticError(.badFormat, "the vocabulary is empty") }
        self.tokens = tokens
        var bytes: [UInt8] = []
        var starts: [Int32] = [], lengths: [Int32] = []
        var size = 1
        while size < tokens.count * 2 { size <<= 1 }
        mask = size - 1
        var initial = [Int32](repeating: 0, count: size)
        var continuation = [Int32](repeating: 0, count: size)
        for (id, token) in tokens.enumerated() {
            var u = Array(token.utf8)
            let isContinuation = u.count > 2 && u[0] == 0x23 && u[1] == 0x23
            if isContinuation { u.removeFirst(2) }
            starts.append(Int32(bytes.count))
            lengths.append(Int32(u.count))
            bytes.append(contentsOf: u)
            var slot = Vocabulary.hash(u[...]) & (size - 1)
            // The first occurrence of a duplicate keeps its id, as a Python dict built in order would not;
            // vocab.txt has none, so either rule gives the same answers.
            if isContinuation {
                while continuation[slot] != 0 { slot = (slot + 1) & (size - 1) }
                continuation[slot] = Int32(id + 1)
            } else {
                while initial[slot] != 0 { slot = (slot + 1) & (size - 1) }
                initial[slot] = Int32(id + 1)
            }
        }
        self.bytes = bytes
        self.starts = starts
        self.lengths = lengths
        self.initial = initial
        self.continuation = continuation
    }

    /// The id of `token` (a whole token as written in vocab.txt, `##` included), or nil.
    public func id(of token: String) -> Int32? {
        var u = Array(token.utf8)
        if u.count > 2 && u[0] == 0x23 && u[1] == 0x23 {
            u.removeFirst(2)
            return lookup(u[...], continuation: true)
        }
        return lookup(u[...], continuation: false)
    }

    static let hashSeed: UInt64 = 0xcbf2_9ce4_8422_2325

    /// FNV-1a, one byte.
    @inline(__always)
    static func hashStep(_ h: UInt64, _ b: UInt8) -> UInt64 { (h ^ UInt64(b)) &* 0x100_0000_01b3 }

    @inline(__always)
    static func finish(_ h: UInt64) -> Int { Int(truncatingIfNeeded: h ^ (h >> 29)) }

    @inline(__always)
    static func hash(_ s: ArraySlice<UInt8>) -> Int {
        var h = hashSeed
        for b in s { h = hashStep(h, b) }
        return finish(h)
    }

    /// The id of a piece given as bytes; `continuation` looks the piece up as `##piece`.
    @inline(__always)
    func lookup(_ piece: ArraySlice<UInt8>, continuation: Bool) -> Int32? {
        var h = Vocabulary.hashSeed
        for b in piece { h = Vocabulary.hashStep(h, b) }
        return piece.withUnsafeBufferPointer { lookup($0, hash: h, continuation: continuation) }
    }

    /// The same, given the piece's FNV state (`hashStep` over its bytes from `hashSeed`).
    @inline(__always)
    func lookup(_ piece: UnsafeBufferPointer<UInt8>, hash: UInt64, continuation: Bool) -> Int32? {
        let slot = Vocabulary.finish(hash) & mask
        // Not `(continuation ? a : b).with…`: that copies an array reference (a retain and a
        // release per probe).
        if continuation { return probe(self.continuation, slot: slot, piece) }
        return probe(initial, slot: slot, piece)
    }

    @inline(__always)
    private func probe(_ table: [Int32], slot: Int, _ piece: UnsafeBufferPointer<UInt8>) -> Int32? {
        let mask = self.mask
        var slot = slot
        return table.withUnsafeBufferPointer { table -> Int32? in
            bytes.withUnsafeBufferPointer { bytes -> Int32? in
                lengths.withUnsafeBufferPointer { lengths -> Int32? in
                    while true {
                        let entry = table[slot]
                        if entry == 0 { return nil }
                        let id = Int(entry &- 1)
                        let len = Int(lengths[id])
                        if len == piece.count {
                            let start = Int(starts[id])
                            if len == 0 || memcmp(bytes.baseAddress! + start, piece.baseAddress!, len) == 0 { return Int32(id) }
                        }
                        slot = (slot + 1) & mask
                    }
                }
            }
        }
    }
}
