import CSemanticKernels
import Foundation

/// Word → word-piece ids, remembered from earlier WordPiece runs (`WordPieceTokenizer.flush`).
///
/// Most words of a donation were seen in earlier documents ("the", "library", "package"…), and a
/// word the vocabulary does not hold whole costs WordPiece one vocabulary probe per candidate
/// prefix, each likely a cache miss in the 30 522-token tables ("customizable": `custom`
/// after six failed probes, then `##iza`, `##ble`). A hit here reads one 64-byte line and
/// compares the word, and gives the same ids, so the tokenizer's output does not change.
///
/// Direct-mapped, one cache line per entry: a word goes to the entry its hash picks, replacing
/// whatever was there, so the memory is fixed (`entries` × 64 bytes, 512 KB by default) and the
/// words in use stay (a frequent word is put back as soon as a rare one pushed it out). Words of
/// more than 32 bytes or more than 6 pieces are not kept. One thread at a time: `StaticEncoder`
/// lends each call a scratch that owns one.
final class WordPieceCache {
    static let maxWordBytes = 32
    static let maxPieces = 6
    /// Entry layout: tag (UInt32, upper half of the hash), byte count (UInt8), piece count
    /// (UInt8), 2 bytes free, 6 pieces (Int32), 32 bytes of the word.
    private static let entrySize = 64
    private static let piecesOffset = 8
    private static let wordOffset = 32
    let entries: Int
    private let mask: Int
    private let storage: UnsafeMutableRawPointer

    init(entries: Int = 8192) {
        var size = 1
        while size < entries { size <<= 1 }
        self.entries = size
        mask = size - 1
        storage = UnsafeMutableRawPointer.allocate(byteCount: size * Self.entrySize, alignment: 64)
        storage.initializeMemory(as: UInt8.self, repeating: 0, count: size * Self.entrySize)  // byte count 0: empty
    }

    deinit { storage.deallocate() }

    @inline(__always)
    private func entry(_ hash: UInt64) -> UnsafeMutableRawPointer {
        storage + (Vocabulary.finish(hash) & mask) * Self.entrySize
    }

    /// Asks the CPU for the entry of a word's hash ahead of `append` (`WordQueue`).
    @inline(__always)
    func prefetch(_ hash: UInt64) { sl_prefetch(entry(hash)) }

    /// Appends the cached pieces of `word` (`hash`: its `WordBuffer.cacheHash`) to `ids` and
    /// returns true, or returns false when it is not cached.
    @inline(__always)
    func append(_ word: UnsafeBufferPointer<UInt8>, hash: UInt64, to ids: inout PieceBuffer) -> Bool {
        let n = word.count
        guard n <= Self.maxWordBytes, n > 0 else { return false }
        let e = entry(hash)
        guard e.load(as: UInt32.self) == UInt32(truncatingIfNeeded: hash >> 32),
              Int(e.load(fromByteOffset: 4, as: UInt8.self)) == n,
              Self.equal(e + Self.wordOffset, word)
        else { return false }
        let pieces = Int(e.load(fromByteOffset: 5, as: UInt8.self))
        for k in 0..<pieces { ids.append(e.load(fromByteOffset: Self.piecesOffset + 4 * k, as: Int32.self)) }
        return true
    }

    /// Whether the `word.count` bytes at `stored` are the word's: 8 bytes at a time, then byte by
    /// byte (a call of memcmp cost more than the compare of a 6-byte word).
    @inline(__always)
    private static func equal(_ stored: UnsafeMutableRawPointer, _ word: UnsafeBufferPointer<UInt8>) -> Bool {
        let raw = UnsafeRawPointer(word.baseAddress!)
        var i = 0
        while i + 8 <= word.count {
            if stored.loadUnaligned(fromByteOffset: i, as: UInt64.self) != raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) { return false }
            i += 8
        }
        while i < word.count {
            if stored.load(fromByteOffset: i, as: UInt8.self) != word[i] { return false }
            i += 1
        }
        return true
    }

    /// Remembers the pieces of `word`, replacing the entry its hash picks.
    @inline(__always)
    func insert(_ word: UnsafeBufferPointer<UInt8>, hash: UInt64, pieces: UnsafeBufferPointer<Int32>) {
        let n = word.count
        guard n <= Self.maxWordBytes, n > 0, pieces.count <= Self.maxPieces else { return }
        let e = entry(hash)
        e.storeBytes(of: UInt32(truncatingIfNeeded: hash >> 32), as: UInt32.self)
        e.storeBytes(of: UInt8(n), toByteOffset: 4, as: UInt8.self)
        e.storeBytes(of: UInt8(pieces.count), toByteOffset: 5, as: UInt8.self)
        for (k, id) in pieces.enumerated() { e.storeBytes(of: id, toByteOffset: Self.piecesOffset + 4 * k, as: Int32.self) }
        (e + Self.wordOffset).copyMemory(from: word.baseAddress!, byteCount: n)
    }
}
