import Foundation

/// The BERT uncased tokenizer of all-MiniLM-L6-v2, giving the same ids as the reference
/// (Hugging Face `tokenizers`: `BertNormalizer(clean_text, handle_chinese_chars, strip_accents,
/// lowercase)`, `BertPreTokenizer`, `WordPiece(max_input_chars_per_word: 100)`, then
/// `[CLS] … [SEP]`). Steps, in the reference's order:
///
/// 0. the special tokens (`[CLS]`, `[SEP]`, `[UNK]`, `[PAD]`, `[MASK]`) written in the raw text are
///    those tokens, and split it (the reference's added tokens);
/// 1. clean: drop U+0000, U+FFFD and control characters (categories Cc, Cf, Co, Cs, except
///    tab, newline and carriage return); every other White_Space character becomes a space;
/// 2. CJK ideographs get a space on each side (each is a word of its own);
/// 3. NFD, then nonspacing marks (Mn) removed: accents go;
/// 4. lowercase, character by character (full mappings, no context);
/// 5. split on whitespace, and every punctuation character (ASCII punctuation or a P* category)
///    is a word of its own;
/// 6. WordPiece: greedy longest match from the start, continuation pieces as `##piece`; a word
///    with a piece that matches nothing, or longer than 100 characters, is one `[UNK]`.
///
/// ASCII text takes a byte loop that does all six steps in one pass (most documents are ASCII).
public struct WordPieceTokenizer: Sendable {
    public let vocabulary: Vocabulary
    public let clsID: Int32
    public let sepID: Int32
    public let unkID: Int32
    public let padID: Int32
    public let maxInputCharsPerWord = 100
    private let specialNames: [([UInt8], Int32)]
    /// The id of each ASCII punctuation byte as a word of its own (its vocabulary token, else
    /// `[UNK]`: WordPiece of a one-byte word), so the byte loop needs no lookup for it.
    private let punctuationIDs: [Int32]

    public init(vocabulary: Vocabulary) throws(SemanticError) {
        func special(_ t: String) throws(SemanticError) -> Int32 {
            guard let id = vocabulary.id(of: t) else {
                throw SemanticError(.badFormat, "the vocabulary has no \(t) token; is vocab.txt a BERT vocabulary?")
            }
            return id
        }
        self.vocabulary = vocabulary
        clsID = try special("[CLS]")
        sepID = try special("[SEP]")
        unkID = try special("[UNK]")
        padID = try special("[PAD]")
        specialNames = ["[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]"].compactMap { t in
            vocabulary.id(of: t).map { (Array(t.utf8), $0) }
        }
        let unk = unkID
        punctuationIDs = (0..<128).map { b in vocabulary.lookup([UInt8(b)][...], continuation: false) ?? unk }
    }

    public init(vocabularyFile: String) throws(SemanticError) {
        try self.init(vocabulary: Vocabulary(file: vocabularyFile))
    }

    /// The ids of `text` between `[CLS]` and `[SEP]`, the word pieces cut so that the whole is at
    /// most `maxLength` ids (the reference's truncation: the first pieces are kept).
    public func encode(_ text: String, maxLength: Int = 256) -> [Int32] {
        var ids: [Int32] = [clsID]
        ids.reserveCapacity(min(maxLength, text.utf8.count / 3 + 8))
        appendPieces(of: text, to: &ids, limit: max(0, maxLength - 2) + 1)
        if ids.count > maxLength - 1 { ids.removeLast(ids.count - max(1, maxLength - 1)) }
        ids.append(sepID)
        return ids
    }

    /// The word-piece ids of `text`, without `[CLS]`/`[SEP]` and without truncation.
    public func tokenize(_ text: String) -> [Int32] {
        var ids: [Int32] = []
        appendPieces(of: text, to: &ids, limit: .max)
        return ids
    }

    /// Appends the pieces of `text` to `ids` until `ids` holds `limit` ids.
    public func appendPieces(of text: String, to ids: inout [Int32], limit: Int) {
        var buffer = PieceBuffer(capacity: max(16, min(limit, 1024), ids.count + 16))
        defer { buffer.deallocate() }
        for id in ids { buffer.append(id) }
        appendPieces(of: text, to: &buffer, limit: limit, cache: nil)
        ids = Array(buffer.pieces)
    }

    /// The same into a `PieceBuffer`, taking the pieces of words seen before from `cache` (and
    /// adding new ones to it): the static encoder's path, with no Array in the inner loops.
    /// `buffers`: the word and queue buffers to use (and keep, grown) instead of allocating them
    /// for this text: a donation's texts then allocate nothing here.
    func appendPieces(of text: String, to ids: inout PieceBuffer, limit: Int, cache: WordPieceCache?,
                      buffers: TokenizerBuffers? = nil) {
        var text = text
        let specials: [(Range<Int>, Int32)] = text.withUTF8(specialTokens)
        guard !specials.isEmpty else {
            appendSegment(text, to: &ids, limit: limit, cache: cache, buffers: buffers)
            return
        }
        let utf8 = Array(text.utf8)
        var start = 0
        for (range, id) in specials {
            appendSegment(String(decoding: utf8[start..<range.lowerBound], as: UTF8.self), to: &ids, limit: limit, cache: cache,
                buffers: buffers)
            if ids.count < limit { ids.append(id) }
            start = range.upperBound
        }
        appendSegment(String(decoding: utf8[start...], as: UTF8.self), to: &ids, limit: limit, cache: cache, buffers: buffers)
    }

    /// Where the raw text names a special token, left to right.
    private func specialTokens(_ utf8: UnsafeBufferPointer<UInt8>) -> [(Range<Int>, Int32)] {
        var found: [(Range<Int>, Int32)] = []
        var i = 0
        while i < utf8.count {
            // Skip to the next '[' with memchr: most texts have none, and a byte loop was a
            // measurable part of a donation's embedding.
            guard let open = memchr(utf8.baseAddress! + i, 0x5B, utf8.count - i) else { break }
            i = utf8.baseAddress!.distance(to: open.assumingMemoryBound(to: UInt8.self))
            if let (length, id) = specialToken(at: i, in: utf8) {
                found.append((i..<(i + length), id))
                i += length
            } else {
                i += 1
            }
        }
        return found
    }

    private func specialToken(at i: Int, in utf8: UnsafeBufferPointer<UInt8>) -> (Int, Int32)? {
        for (name, id) in specialNames {
            let n = name.count
            guard i + n <= utf8.count else { continue }
            var equal = true
            for k in 0..<n where utf8[i + k] != name[k] {
                equal = false
                break
            }
            if equal { return (n, id) }
        }
        return nil
    }

    /// The text is cut at ASCII whitespace into chunks; an all-ASCII chunk takes the byte loop,
    /// any other chunk the Unicode steps on its own. The same as the Unicode steps on the whole
    /// text: every step but NFD is per character, NFD only reorders marks after a starter (an
    /// ASCII space is one, and it ends a word anyway), so one accented word no longer sends the
    /// whole document down the slow path.
    private func appendSegment(_ text: String, to ids: inout PieceBuffer, limit: Int, cache: WordPieceCache?,
                               buffers: TokenizerBuffers?) {
        // Local copies of the buffers (no exclusivity check per use of a class's property),
        // given back grown at the end.
        var word = buffers?.word ?? WordBuffer()
        word.removeAll()
        var queue = buffers?.queue ?? WordQueue(bytes: 0)
        defer {
            if let buffers {
                buffers.word = word
                buffers.queue = queue
            } else {
                word.deallocate()
                queue.deallocate()
            }
        }
        var text = text
        let classes = ASCIIClass.table  // read once: a static's every use checks its lazy initialisation
        classes.withUnsafeBufferPointer { classes in text.withUTF8 { utf8 in
            let n = utf8.count
            queue.removeAll()
            queue.reserve(bytes: n)
            var i = 0
            // Every queued word gives at least one piece: once the queue and the ids reach the
            // limit, the rest of the text cannot count.
            while i < n && ids.count + queue.count < limit {
                var end = i, ascii = true
                while end < n {
                    let b = utf8[end]
                    if b == 0x20 || b == 0x0A || b == 0x09 || b == 0x0D { break }
                    if b >= 0x80 { ascii = false }
                    end += 1
                }
                if ascii {
                    queueASCIIChunk(UnsafeBufferPointer(rebasing: utf8[i..<end]), classes, into: &queue, cache: cache)
                } else {
                    drain(&queue, into: &ids, word: &word, limit: limit, cache: cache)
                    appendPiecesUnicode(of: String(decoding: UnsafeBufferPointer(rebasing: utf8[i..<end]), as: UTF8.self),
                        to: &ids, word: &word, limit: limit, cache: cache)
                    if end < n && ids.count < limit { flush(&word, into: &ids, cache: cache) }  // the whitespace after the chunk
                }
                i = end + 1
            }
            drain(&queue, into: &ids, word: &word, limit: limit, cache: cache)
        } }
        if ids.count < limit { flush(&word, into: &ids, cache: cache) }
        ids.truncate(to: limit)
    }

    /// Queues the words of an all-ASCII chunk (no whitespace in it: the caller cut the text
    /// there): each word's bytes copied lowercased with one table read each, control bytes
    /// dropped, a punctuation byte queued as its precomputed id. Each word's hash is taken as it
    /// is queued and its cache entry fetched, so that `drain` finds the entries in the CPU's
    /// cache: looked up one word at a time, each waited on memory (the word cache is 512 KB).
    @inline(__always)
    private func queueASCIIChunk(_ chunk: UnsafeBufferPointer<UInt8>, _ classes: UnsafeBufferPointer<ASCIIClass>,
        into queue: inout WordQueue, cache: WordPieceCache?)
    {
        let out = queue.bytes
        var n = queue.byteCount
        for b in chunk {
            switch classes[Int(b)] {
            case .keep:
                out[n] = b
                n &+= 1
            case .upper:
                out[n] = b | 0x20
                n &+= 1
            case .drop, .space: continue  // no space inside a chunk
            case .punctuation:
                if n > queue.byteCount { queue.pushWord(end: n, cache: cache) }
                queue.pushPiece(punctuationIDs[Int(b)])
            }
        }
        if n > queue.byteCount { queue.pushWord(end: n, cache: cache) }
    }

    /// The pieces of the queued words, in order, until `ids` holds `limit`; empties the queue.
    private func drain(_ queue: inout WordQueue, into ids: inout PieceBuffer, word: inout WordBuffer, limit: Int,
        cache: WordPieceCache?)
    {
        defer { queue.removeAll() }
        for k in 0..<queue.count {
            if ids.count >= limit { return }
            let entry = queue.entries[k]
            guard entry.length > 0 else {
                ids.append(Int32(truncatingIfNeeded: entry.hash))
                continue
            }
            let bytes = UnsafeBufferPointer(start: queue.bytes + Int(entry.start), count: Int(entry.length))
            if bytes.count > maxInputCharsPerWord {  // ASCII: one character per byte
                ids.append(unkID)
                continue
            }
            if let cache, cache.append(bytes, hash: entry.hash, to: &ids) { continue }
            word.removeAll()
            word.reserve(bytes.count)
            word.storage.update(from: bytes.baseAddress!, count: bytes.count)
            word.setASCII(count: bytes.count)
            let firstOutput = ids.count
            wordPiece(&word, into: &ids)
            word.removeAll()
            cache?.insert(bytes, hash: entry.hash, pieces: UnsafeBufferPointer(start: ids.base + firstOutput, count: ids.count - firstOutput))
        }
    }

    private func appendPiecesUnicode(of text: String, to ids: inout PieceBuffer, word: inout WordBuffer, limit: Int,
        cache: WordPieceCache?)
    {
        // Steps 1-2 on the original characters, then 3 on the cleaned text, as the reference
        // does; but a window at a time, stopping once `ids` holds `limit`, so that a 60 KB chunk
        // without ASCII whitespace (CJK text) costs what its first pieces cost (issue 29, D2). A
        // window ends only after a space this loop wrote (a starter, canonical combining class 0,
        // with no decomposition): NFD then gives the same scalars window by window as on the
        // whole, since it reorders only runs of nonspacing marks, which such a cut never splits.
        var cleaned = String.UnicodeScalarView()
        func process() -> Bool {
            let decomposed = String(cleaned).decomposedStringWithCanonicalMapping
            cleaned = String.UnicodeScalarView()
            for c in decomposed.unicodeScalars {
                if ids.count >= limit { return false }
                if c.properties.generalCategory == .nonspacingMark { continue }
                for l in UnicodeClass.lowercase(c) {
                    if UnicodeClass.isWhitespace(l) {
                        flush(&word, into: &ids, cache: cache)
                    } else if UnicodeClass.isPunctuation(l) {
                        flush(&word, into: &ids, cache: cache)
                        word.append(l)
                        flush(&word, into: &ids, cache: cache)
                    } else {
                        word.append(l)
                    }
                }
            }
            return ids.count < limit
        }
        var scalars = 0
        for c in text.unicodeScalars {
            if c.value == 0 || c.value == 0xFFFD || UnicodeClass.isControl(c) { continue }
            var cut = false
            if UnicodeClass.isWhitespace(c) {
                cleaned.append(" ")
                cut = true
            } else if UnicodeClass.isCJK(c) {
                cleaned.append(" ")
                cleaned.append(c)
                cleaned.append(" ")
                cut = true
            } else {
                cleaned.append(c)
            }
            scalars += 1
            if cut && scalars >= Self.unicodeWindow {
                scalars = 0
                if !process() { return }
            }
        }
        _ = process()
    }

    /// Characters of a non-ASCII chunk normalised at a time (`appendPiecesUnicode`): a few times
    /// the 254 pieces of a query, so that a window usually suffices.
    static let unicodeWindow = 1024

    /// WordPiece on the word in `word` (then emptied). With a cache, a word seen before takes its
    /// pieces from it (a word of at most 48 bytes has at most 48 characters, so the 100-character
    /// rule, the only thing besides the bytes that decides the pieces, cannot apply to it).
    @inline(__always)
    private func flush(_ word: inout WordBuffer, into ids: inout PieceBuffer, cache: WordPieceCache?) {
        guard word.count > 0 else { return }
        defer { word.removeAll() }
        if word.characterCount > maxInputCharsPerWord {
            ids.append(unkID)
            return
        }
        guard let cache else {
            wordPiece(&word, into: &ids)
            return
        }
        let hash = word.cacheHash
        if cache.append(word.bytes, hash: hash, to: &ids) { return }
        let firstOutput = ids.count
        wordPiece(&word, into: &ids)
        cache.insert(word.bytes, hash: hash, pieces: UnsafeBufferPointer(start: ids.base + firstOutput, count: ids.count - firstOutput))
    }

    /// Greedy longest-match WordPiece of `word`'s bytes, appended to `ids` (one `[UNK]` when a
    /// piece matches nothing).
    private func wordPiece(_ word: inout WordBuffer, into ids: inout PieceBuffer) {
        // The whole word first: most words are one token.
        let bytes = word.bytes
        var whole = Vocabulary.hashSeed
        for b in bytes { whole = Vocabulary.hashStep(whole, b) }
        if let id = vocabulary.lookup(bytes, hash: whole, continuation: false) {
            ids.append(id)
            return
        }
        let firstOutput = ids.count
        var start = 0
        let count = bytes.count
        let prefixHashes = word.prefixHashes
        while start < count {
            // The hash of every prefix of bytes[start...] in one pass, so that trying shorter
            // pieces costs one probe each rather than hashing the piece again.
            var h = Vocabulary.hashSeed
            for k in start..<count {
                h = Vocabulary.hashStep(h, bytes[k])
                prefixHashes[k - start] = h
            }
            var end = count
            if start == 0 {  // the whole word was tried above
                end -= 1
                while end > start && bytes[end] & 0xC0 == 0x80 { end -= 1 }
            }
            var found: Int32?
            while end > start {
                if let id = vocabulary.lookup(UnsafeBufferPointer(rebasing: bytes[start..<end]), hash: prefixHashes[end - start - 1],
                    continuation: start > 0)
                {
                    found = id
                    break
                }
                // Back to the previous character boundary (UTF-8 continuation bytes are 10xxxxxx).
                end -= 1
                while end > start && bytes[end] & 0xC0 == 0x80 { end -= 1 }
            }
            guard let id = found else {
                ids.truncate(to: firstOutput)
                ids.append(unkID)
                return
            }
            ids.append(id)
            start = end
        }
    }
}

/// One word's UTF-8 bytes and its character count, reused across words: unsafe storage, grown
/// when a word is longer than any before, so that appending a byte is a store (an Array checks
/// that its buffer is unique and large enough on every append). The owner calls `deallocate`.
///
/// The capacity is a multiple of 8 and the storage starts zeroed, so `cacheHash` may read the
/// last 8-byte word whole (the bytes past `count` are masked off).
struct WordBuffer {
    private(set) var storage: UnsafeMutablePointer<UInt8>
    /// Scratch for `wordPiece`: FNV state of each prefix of the piece being matched.
    private(set) var prefixStorage: UnsafeMutablePointer<UInt64>
    private var capacity = 64
    private(set) var count = 0
    var characterCount = 0

    init() {
        storage = .allocate(capacity: 64)
        storage.initialize(repeating: 0, count: 64)
        prefixStorage = .allocate(capacity: 64)
    }

    func deallocate() {
        storage.deallocate()
        prefixStorage.deallocate()
    }

    var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: storage, count: count) }
    /// Room for one hash per byte of the word.
    var prefixHashes: UnsafeMutableBufferPointer<UInt64> { UnsafeMutableBufferPointer(start: prefixStorage, count: capacity) }

    /// The word-cache hash (`WordPieceCache`): the bytes 8 at a time, one multiply each, where
    /// FNV (the vocabulary's hash, needed only on a cache miss) takes one per byte.
    var cacheHash: UInt64 { Self.cacheHash(UnsafeRawPointer(storage), count: count) }

    /// `cacheHash` of the `count` bytes at `raw`; it reads whole 8-byte words, so up to 7 bytes
    /// past the end must be readable (their values do not matter).
    @inline(__always)
    static func cacheHash(_ raw: UnsafeRawPointer, count: Int) -> UInt64 {
        var h = UInt64(truncatingIfNeeded: count) &* 0x9E37_79B9_7F4A_7C15
        var i = 0
        while i + 8 <= count {
            h = (h ^ raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)) &* 0xFF51_AFD7_ED55_8CCD
            h ^= h >> 32
            i += 8
        }
        if i < count {
            let tail = raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & (~UInt64(0) >> (64 - 8 * UInt64(count - i)))
            h = (h ^ tail) &* 0xFF51_AFD7_ED55_8CCD
        }
        h ^= h >> 29
        h = h &* 0xC4CE_B9FE_1A85_EC53
        return h ^ (h >> 32)
    }

    @inline(__always) private mutating func store(_ b: UInt8) {
        if count == capacity { grow(to: capacity * 2) }
        storage[count] = b
        count &+= 1
    }

    /// Room for `extra` more bytes (and the 8-byte read past the end that `cacheHash` makes).
    @inline(__always) mutating func reserve(_ extra: Int) {
        if count + extra + 8 > capacity { grow(to: max(capacity * 2, (count + extra + 8 + 7) & ~7)) }
    }

    private mutating func grow(to bigger: Int) {
        let s = UnsafeMutablePointer<UInt8>.allocate(capacity: bigger)
        s.moveInitialize(from: storage, count: count)
        (s + count).initialize(repeating: 0, count: bigger - count)
        storage.deallocate()
        storage = s
        prefixStorage.deallocate()
        prefixStorage = .allocate(capacity: bigger)
        capacity = bigger
    }

    /// After ASCII bytes were written straight into `storage` (one character each).
    @inline(__always) mutating func setASCII(count n: Int) {
        characterCount += n - count
        count = n
    }

    @inline(__always) mutating func append(_ b: UInt8) {
        store(b)
        characterCount += 1
    }

    mutating func append(_ c: Unicode.Scalar) {
        characterCount += 1
        if c.isASCII {
            store(UInt8(c.value))
        } else {
            for b in String(c).utf8 { store(b) }
        }
    }

    @inline(__always) mutating func removeAll() {
        count = 0
        characterCount = 0
    }
}

/// The words of a document's ASCII chunks, queued lowercased with their cache hashes (or a
/// punctuation byte's id) until `WordPieceTokenizer.drain` looks them up: one pass over the
/// bytes, then one over the words, with every word's cache entry requested in between. Sized
/// for the whole text (a word takes at least one byte of it). The owner calls `deallocate`.
struct WordQueue {
    struct Entry {
        var start: Int32
        /// 0 for a punctuation piece, whose id is `hash`.
        var length: Int32
        var hash: UInt64
    }

    private(set) var bytes: UnsafeMutablePointer<UInt8>
    private(set) var entries: UnsafeMutablePointer<Entry>
    private(set) var byteCount = 0
    private(set) var count = 0
    /// Bytes (and entries) of text it has room for.
    private var capacity: Int

    init(bytes n: Int) {
        capacity = max(1, n)
        bytes = .allocate(capacity: capacity + 8)  // `cacheHash` reads up to 7 bytes past a word
        bytes.initialize(repeating: 0, count: capacity + 8)
        entries = .allocate(capacity: capacity)
    }

    /// Room for a text of `n` bytes (kept between texts by `TokenizerBuffers`; the queue must be
    /// empty). The bytes past a word that `cacheHash` reads are masked out of the hash, so what
    /// an earlier text left there changes nothing.
    mutating func reserve(bytes n: Int) {
        guard n > capacity else { return }
        deallocate()
        self = WordQueue(bytes: max(n, capacity * 2))
    }

    func deallocate() {
        bytes.deallocate()
        entries.deallocate()
    }

    /// Queues the word written at `bytes[byteCount..<end]`.
    @inline(__always)
    mutating func pushWord(end: Int, cache: WordPieceCache?) {
        let length = end - byteCount
        let hash = WordBuffer.cacheHash(UnsafeRawPointer(bytes + byteCount), count: length)
        cache?.prefetch(hash)
        entries[count] = Entry(start: Int32(truncatingIfNeeded: byteCount), length: Int32(truncatingIfNeeded: length), hash: hash)
        count &+= 1
        byteCount = end
    }

    @inline(__always)
    mutating func pushPiece(_ id: Int32) {
        entries[count] = Entry(start: 0, length: 0, hash: UInt64(UInt32(bitPattern: id)))
        count &+= 1
    }

    mutating func removeAll() {
        count = 0
        byteCount = 0
    }
}

/// The word and queue buffers of one thread's tokenizing, kept between texts (the static
/// encoder's scratch holds one): with them a text allocates nothing.
final class TokenizerBuffers {
    var word = WordBuffer()
    var queue = WordQueue(bytes: 4096)

    deinit {
        word.deallocate()
        queue.deallocate()
    }
}

/// Word-piece ids appended without Array's per-append checks (see `WordBuffer`); grows by
/// doubling. The owner calls `deallocate`.
struct PieceBuffer {
    private(set) var base: UnsafeMutablePointer<Int32>
    private var capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = max(1, capacity)
        base = .allocate(capacity: self.capacity)
    }

    func deallocate() { base.deallocate() }

    /// Drops the ids after the first `n`.
    mutating func truncate(to n: Int) {
        precondition(n >= 0)
        count = min(count, n)
    }

    mutating func removeAll() { count = 0 }

    var pieces: UnsafeBufferPointer<Int32> { UnsafeBufferPointer(start: base, count: count) }

    @inline(__always) mutating func append(_ id: Int32) {
        if count == capacity { grow() }
        base[count] = id
        count &+= 1
    }

    private mutating func grow() {
        let bigger = capacity * 2
        let b = UnsafeMutablePointer<Int32>.allocate(capacity: bigger)
        b.moveInitialize(from: base, count: count)
        base.deallocate()
        base = b
        capacity = bigger
    }
}

/// What the ASCII fast path does with each byte.
enum ASCIIClass: UInt8 {
    case drop, space, punctuation, upper, keep

    static let table: [ASCIIClass] = (0..<128).map { b -> ASCIIClass in
        switch b {
        case 0x09, 0x0A, 0x0D, 0x20: .space
        // Other C0 controls and DEL are Cc: the reference's clean step removes them (even VT and FF).
        case 0x00..<0x20, 0x7F: .drop
        case 0x21...0x2F, 0x3A...0x40, 0x5B...0x60, 0x7B...0x7E: .punctuation
        case 0x41...0x5A: .upper
        default: .keep
        }
    }
}

/// The character classes of the reference tokenizer, on Unicode scalars.
enum UnicodeClass {
    /// Cc, Cf, Co, Cs, except tab, newline and carriage return (counted as whitespace). Unassigned
    /// code points (Cn) stay, as in the reference: they become `[UNK]`.
    static func isControl(_ c: Unicode.Scalar) -> Bool {
        switch c.value {
        case 0x09, 0x0A, 0x0D: return false
        default: break
        }
        switch c.properties.generalCategory {
        case .control, .format, .privateUse, .surrogate: return true
        default: return false
        }
    }

    /// Tab, newline, carriage return, or the White_Space property (Rust's `char::is_whitespace`).
    static func isWhitespace(_ c: Unicode.Scalar) -> Bool {
        c.value == 0x09 || c.value == 0x0A || c.value == 0x0D || c.properties.isWhitespace
    }

    /// ASCII punctuation (which includes symbols such as `$+<=>^|~`) or a P* category.
    static func isPunctuation(_ c: Unicode.Scalar) -> Bool {
        if c.isASCII {
            let b = c.value
            return (0x21...0x2F).contains(b) || (0x3A...0x40).contains(b) || (0x5B...0x60).contains(b) || (0x7B...0x7E).contains(b)
        }
        switch c.properties.generalCategory {
        case .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation,
             .initialPunctuation, .finalPunctuation, .otherPunctuation: return true
        default: return false
        }
    }

    /// The CJK Unified Ideographs blocks the reference pads with spaces.
    static func isCJK(_ c: Unicode.Scalar) -> Bool {
        switch c.value {
        case 0x4E00...0x9FFF, 0x3400...0x4DBF, 0x20000...0x2A6DF, 0x2A700...0x2B73F,
             0x2B740...0x2B81F, 0x2B820...0x2CEAF, 0xF900...0xFAFF, 0x2F800...0x2FA1F: return true
        default: return false
        }
    }

    /// The full lowercase mapping of one scalar (no context, as Rust's `char::to_lowercase`).
    static func lowercase(_ c: Unicode.Scalar) -> String.UnicodeScalarView {
        if c.isASCII {
            let v = c.value
            return String.UnicodeScalarView([(0x41...0x5A).contains(v) ? Unicode.Scalar(v | 0x20)! : c])
        }
        return c.properties.lowercaseMapping.unicodeScalars
    }
}
