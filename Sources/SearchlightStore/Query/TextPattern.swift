#if canImport(Glibc)
import Glibc
#endif

/// The exact string matcher behind `==` on strings (SQL function `sl_match`).
///
/// Pattern syntax: `*` matches any run of characters, `\*` is a literal star and `\\` a literal
/// backslash. Modifiers: `c` case-insensitive, `d` diacritic-insensitive, `w` word-based (the
/// pattern's words must match a run of whole words of the value; a wildcard stays inside one
/// word), `t` tokenized (like `w`, but words are also split at case changes and letter/digit
/// boundaries, compared case-insensitively: `"pc"wt` matches "WindowsPCFile"). Without `w`/`t`
/// the pattern must match the whole value. A value made of several array elements joined by
/// U+001F matches when any element matches.
public struct TextPattern: Sendable {
    /// One piece of a pattern: literal text or the `*` wildcard.
    public enum Part: Sendable, Hashable {
        case text(String)
        case wildcard
    }

    let caseInsensitive: Bool
    let diacriticInsensitive: Bool
    let wordBased: Bool
    let tokenized: Bool
    /// What was compiled, in one object: `sl_match` copies the pattern out of its connection's
    /// cache for every row it sees, and one reference is one retain where seven arrays were seven.
    private let compiled: Compiled

    private final class Compiled: Sendable {
        let glob: Glob
        let words: [Glob]
        let subWords: [Glob]
        /// Folded literal pieces every match must contain: a cheap rejection before word splitting.
        let required: [[UInt8]]
        /// The ASCII word search's anchor (`w` and `c`/`d`, not `t`): the longest literal piece
        /// of the pattern's words, the word it belongs to (-1: no literal piece, no anchor), and
        /// the piece's rarest byte (its offset), which `memchr` looks for.
        let anchorWord: Int
        let anchor: [UInt8]
        let anchorRareOffset: Int

        init(glob: Glob, words: [Glob], subWords: [Glob], required: [[UInt8]], anchorWord: Int, anchor: [UInt8]) {
            self.glob = glob
            self.words = words
            self.subWords = subWords
            self.required = required
            self.anchorWord = anchorWord
            self.anchor = anchor
            anchorRareOffset = TextPattern.rarestByteOffset(anchor)
        }
    }

    private var glob: Glob { compiled.glob }
    private var words: [Glob] { compiled.words }
    private var subWords: [Glob] { compiled.subWords }
    private var required: [[UInt8]] { compiled.required }
    private var anchorWord: Int { compiled.anchorWord }
    private var anchor: [UInt8] { compiled.anchor }
    private var anchorRareOffset: Int { compiled.anchorRareOffset }

    public init(_ pattern: String, modifiers: String) {
        self.init(parts: Self.parts(of: pattern), modifiers: modifiers)
    }

    public init(parts: [Part], modifiers: String) {
        tokenized = modifiers.contains("t")
        wordBased = tokenized || modifiers.contains("w")
        caseInsensitive = tokenized || modifiers.contains("c")
        diacriticInsensitive = modifiers.contains("d")
        let ci = caseInsensitive, di = diacriticInsensitive
        let glob = Glob(parts: parts.map { part in
            if case .text(let t) = part { return .text(TextAnalysis.fold(t, caseInsensitive: ci, diacriticInsensitive: di)) }
            return part
        })
        if wordBased {
            let patternWords = Self.patternWords(parts)
            let split = tokenized ? patternWords.flatMap(Self.splitWord) : []
            let words = patternWords.map { Self.wordGlob($0, ci, di) }
            let subWords = split.map { Self.wordGlob($0, ci, di) }
            var pieces: [[UInt8]] = []
            for word in tokenized ? split : patternWords {
                for case .text(let t) in word {
                    let piece = Array(TextAnalysis.fold(t, caseInsensitive: ci, diacriticInsensitive: di).utf8)
                    if !piece.isEmpty { pieces.append(piece) }
                }
            }
            var best = (word: -1, piece: [UInt8]())
            if !tokenized {
                for (k, word) in patternWords.enumerated() {
                    for case .text(let t) in word {
                        let piece = Array(TextAnalysis.fold(t, caseInsensitive: ci, diacriticInsensitive: di).utf8)
                        if piece.count > best.piece.count { best = (k, piece) }
                    }
                }
            }
            compiled = Compiled(glob: glob, words: words, subWords: subWords, required: pieces, anchorWord: best.word, anchor: best.piece)
        } else {
            compiled = Compiled(glob: glob, words: [], subWords: [], required: [], anchorWord: -1, anchor: [])
        }
    }

    /// The offset of the byte of `piece` least frequent in English text (digits and symbols
    /// count as rare), so that `memchr` stops at few false candidates.
    static func rarestByteOffset(_ piece: [UInt8]) -> Int {
        let common = Array("etaoinsrhldcumfpgwybvkxjqz".utf8)
        var best = 0, bestRank = -1
        for (i, b) in piece.enumerated() {
            let rank = common.firstIndex(of: b | 0x20).map { b &- 0x41 < 26 || b &- 0x61 < 26 ? $0 : common.count } ?? common.count
            if rank > bestRank { (best, bestRank) = (i, rank) }
        }
        return best
    }

    /// Splits pattern syntax into literal text and wildcards.
    public static func parts(of pattern: String) -> [Part] {
        var result: [Part] = []
        var text = String.UnicodeScalarView()
        var escaped = false
        for s in pattern.unicodeScalars {
            if escaped {
                text.append(s)
                escaped = false
            } else if s == "\\" {
                escaped = true
            } else if s == "*" {
                if !text.isEmpty { result.append(.text(String(text))) }
                text = String.UnicodeScalarView()
                if result.last != .wildcard { result.append(.wildcard) }
            } else {
                text.append(s)
            }
        }
        if escaped { text.append("\\") }
        if !text.isEmpty || result.isEmpty { result.append(.text(String(text))) }
        return result
    }

    /// Writes parts back in pattern syntax.
    public static func syntax(of parts: [Part]) -> String {
        var out = ""
        for part in parts {
            switch part {
            case .wildcard: out += "*"
            case .text(let t):
                for ch in t.unicodeScalars {
                    if ch == "*" || ch == "\\" { out += "\\" }
                    out.unicodeScalars.append(ch)
                }
            }
        }
        return out
    }

    public func matches(_ value: String) -> Bool {
        var v = value
        return v.withUTF8 { matches(utf8: $0) }
    }

    /// Matches UTF-8 bytes directly (the SQL function passes SQLite's buffer without copying).
    public func matches(utf8 value: UnsafeBufferPointer<UInt8>) -> Bool {
        if anchorWord >= 0, let found = searchASCIIWords(value) { return found }
        return matchesElements(value)
    }

    /// The answer without the ASCII word search: each element of the value, its words tokenized
    /// (the definition the search is tested against).
    func matchesElements(_ value: UnsafeBufferPointer<UInt8>) -> Bool {
        var start = 0
        var k = 0
        while k <= value.count {
            if k == value.count || value[k] == 0x1F {
                if matchesElement(UnsafeBufferPointer(rebasing: value[start..<k])) { return true }
                start = k + 1
            }
            k += 1
        }
        return false
    }

    private func matchesElement(_ element: UnsafeBufferPointer<UInt8>) -> Bool {
        if wordBased, !words.isEmpty { return matchesWords(element) }
        if !caseInsensitive && !diacriticInsensitive { return glob.matches(element) }
        var ascii = true
        for b in element where b >= 0x80 {
            ascii = false
            break
        }
        if ascii && !caseInsensitive { return glob.matches(element) }
        if ascii {
            var folded = [UInt8](element)
            for i in folded.indices where folded[i] >= 0x41 && folded[i] <= 0x5A { folded[i] += 0x20 }
            return folded.withUnsafeBufferPointer { glob.matches($0) }
        }
        let folded = TextAnalysis.foldedUTF8(element, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        return folded.withUnsafeBufferPointer { glob.matches($0) }
    }

    // MARK: Word mode

    private func matchesWords(_ element: UnsafeBufferPointer<UInt8>) -> Bool {
        if !element.contains(where: { $0 >= 0x80 }) { return matchesASCIIWords(element) }
        // Folding maps letters to letters and drops only marks, so the tokens of the folded
        // value are the folded tokens.
        let folded = TextAnalysis.foldedUTF8(element, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        guard folded.withUnsafeBufferPointer({ mayMatch($0) }) else { return false }
        var ranges: [Range<Int>] = []
        var start = -1
        folded.withUnsafeBufferPointer { f in
            var offset = 0
            while offset < f.count {
                let b = f[offset]
                var scalar = Unicode.Scalar(b)
                var width = 1
                if b >= 0x80 {
                    var iterator = UnsafeBufferPointer(rebasing: f[offset...]).makeIterator()
                    var decoder = UTF8()
                    if case .scalarValue(let v) = decoder.decode(&iterator) {
                        scalar = v
                        width = UTF8.width(v)
                    }
                }
                if TextAnalysis.isTokenChar(scalar) {
                    if start < 0 { start = offset }
                } else if start >= 0 {
                    ranges.append(start..<offset)
                    start = -1
                }
                offset += width
            }
            if start >= 0 { ranges.append(start..<f.count) }
        }
        if folded.withUnsafeBufferPointer({ Self.sequenceMatches(words, $0, ranges) }) { return true }
        guard tokenized else { return false }
        // Sub-tokens need the original case; fold each one into a shared buffer.
        let scalars = Array(String(decoding: element, as: UTF8.self).unicodeScalars)
        var buffer: [UInt8] = []
        var subRanges: [Range<Int>] = []
        for range in TextAnalysis.tokens(scalars) {
            for sub in TextAnalysis.subTokens(scalars[range]) {
                let begin = buffer.count
                buffer += fold(scalars[sub])
                subRanges.append(begin..<buffer.count)
            }
        }
        return buffer.withUnsafeBufferPointer { Self.sequenceMatches(subWords, $0, subRanges) }
    }

    /// The same as the general path, on bytes: ASCII letters and digits are the token characters.
    /// Words mode folds into a scratch buffer (on the stack for short values), rejects values that
    /// lack a literal piece (`memmem`), then walks the tokens and stops at the first run that
    /// matches: no token list is built. It runs once per candidate row of a `cdw` query, so it is
    /// the hot residual check of the term query (issue 17's profile: 44 % of a call before).
    private func matchesASCIIWords(_ e: UnsafeBufferPointer<UInt8>) -> Bool {
        if tokenized { return matchesASCIITokens(e) }
        let n = e.count
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(n, 1)) { scratch in
            for i in 0..<n {
                let b = e[i]
                scratch[i] = caseInsensitive && b &- 0x41 < 26 ? b | 0x20 : b
            }
            let folded = UnsafeBufferPointer(rebasing: UnsafeBufferPointer(scratch)[0..<n])
            guard mayMatch(folded) else { return false }
            var next = 0
            while let first = Self.nextASCIIToken(folded, from: &next) {
                guard words[0].matches(UnsafeBufferPointer(rebasing: folded[first])) else { continue }
                var after = next
                var all = true
                for j in 1..<max(words.count, 1) {
                    guard let token = Self.nextASCIIToken(folded, from: &after),
                        words[j].matches(UnsafeBufferPointer(rebasing: folded[token]))
                    else {
                        all = false
                        break
                    }
                }
                if all { return true }
            }
            return false
        }
    }

    /// Word mode on an ASCII value (nil when the value is not ASCII): finds the anchor's
    /// occurrences in the value (`memchr` on its rarest byte, both cases of it under `c`), and
    /// only around each one checks the whole-word match: the token holding the occurrence must
    /// match the anchor's word, and the tokens before and after it (in the same array element)
    /// the other words. Every match holds the anchor inside its anchor word's token, so this
    /// finds every match the tokenizing path finds, without cutting the whole value into words.
    /// The value is not case-folded as a whole: only the bytes compared with the anchor and the
    /// tokens given to a word's glob are (the fold of a long text was 1 000 of the 1 400
    /// instructions per candidate row); the ASCII check reads it 32 bytes at a time.
    private func searchASCIIWords(_ v: UnsafeBufferPointer<UInt8>) -> Bool? {
        let n = v.count
        guard n > 0 else { return false }
        guard Self.isASCII(v) else { return nil }
        return anchor.withUnsafeBufferPointer { piece in
            var scanner = AnchorScanner(piece, rareOffset: anchorRareOffset, caseInsensitive: caseInsensitive)
            var from = 0
            while let hit = scanner.next(in: v, from: from) {
                guard Self.isASCIIToken(v[hit]) else {
                    from = hit + 1
                    continue
                }
                var start = hit, end = hit + 1
                while start > 0, Self.isASCIIToken(v[start - 1]) { start -= 1 }
                while end < n, Self.isASCIIToken(v[end]) { end += 1 }
                if wordsMatchAround(v, start..<end) { return true }
                // Every other occurrence starting in this token gives the same answer.
                from = end
            }
            return false
        }
    }

    /// Whether every byte is below 0x80.
    static func isASCII(_ v: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = v.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        let n = v.count
        var high: UInt64 = 0
        var i = 0
        while i + 32 <= n {
            high |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) | raw.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self)
                | raw.loadUnaligned(fromByteOffset: i + 16, as: UInt64.self) | raw.loadUnaligned(fromByteOffset: i + 24, as: UInt64.self)
            i += 32
        }
        while i + 8 <= n {
            high |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < n {
            high |= UInt64(base[i])
            i += 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    @inline(__always)
    private static func isASCIIToken(_ b: UInt8) -> Bool { b &- 0x30 < 10 || (b | 0x20) &- 0x61 < 26 }

    /// Whether word `j` of the pattern matches `v[range]`, folded for `c` (ASCII only).
    @inline(__always)
    private func word(_ j: Int, matches v: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Bool {
        let token = UnsafeBufferPointer(rebasing: v[range])
        guard caseInsensitive, token.contains(where: { $0 &- 0x41 < 26 }) else { return words[j].matches(token) }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: token.count) { scratch in
            for (i, b) in token.enumerated() { scratch[i] = b &- 0x41 < 26 ? b | 0x20 : b }
            return words[j].matches(UnsafeBufferPointer(scratch))
        }
    }

    /// Whether `token` matches the anchor's word and its neighbours the pattern's other words,
    /// in order, none across an array element's end (U+001F).
    private func wordsMatchAround(_ f: UnsafeBufferPointer<UInt8>, _ token: Range<Int>) -> Bool {
        guard word(anchorWord, matches: f, token) else { return false }
        var lower = token.lowerBound
        for j in stride(from: anchorWord - 1, through: 0, by: -1) {
            var i = lower - 1
            while i >= 0, !Self.isASCIIToken(f[i]) {
                if f[i] == 0x1F { return false }
                i -= 1
            }
            guard i >= 0 else { return false }
            let end = i + 1
            while i >= 0, Self.isASCIIToken(f[i]) { i -= 1 }
            guard word(j, matches: f, (i + 1)..<end) else { return false }
            lower = i + 1
        }
        var upper = token.upperBound
        for j in (anchorWord + 1)..<words.count {
            var i = upper
            while i < f.count, !Self.isASCIIToken(f[i]) {
                if f[i] == 0x1F { return false }
                i += 1
            }
            guard i < f.count else { return false }
            let start = i
            while i < f.count, Self.isASCIIToken(f[i]) { i += 1 }
            guard word(j, matches: f, start..<i) else { return false }
            upper = i
        }
        return true
    }

    /// The occurrences of the anchor (folded) in an ASCII value, in order: `memchr` for its rare
    /// byte, and under `c` for that byte's capital too (each case's next position kept, so the
    /// value is read once per case however many hits), then the whole anchor compared.
    struct AnchorScanner {
        let piece: UnsafeBufferPointer<UInt8>
        let rareOffset: Int
        let rare: UInt8
        /// The rare byte's other case, when `c` and it is a letter.
        let other: UInt8?
        let caseInsensitive: Bool
        /// The next position of each case's byte at or after the last search's start (Int.max: none).
        private var nextRare = -1
        private var nextOther = -1

        init(_ piece: UnsafeBufferPointer<UInt8>, rareOffset: Int, caseInsensitive: Bool) {
            self.piece = piece
            self.rareOffset = rareOffset
            self.caseInsensitive = caseInsensitive
            rare = piece.isEmpty ? 0 : piece[rareOffset]
            other = caseInsensitive && rare &- 0x61 < 26 ? rare - 0x20 : nil
        }

        /// The first start of the anchor in `v` at or after `from`.
        mutating func next(in v: UnsafeBufferPointer<UInt8>, from: Int) -> Int? {
            let m = piece.count
            guard m > 0, m <= v.count - from, let base = v.baseAddress else { return nil }
            // Candidate starts run from `from` to `v.count - m`; their rare bytes are `rareOffset` later.
            var i = from + rareOffset
            let end = v.count - m + rareOffset + 1
            while i < end {
                if nextRare < i { nextRare = Self.position(of: rare, base, i, end) }
                if let other, nextOther < i { nextOther = Self.position(of: other, base, i, end) }
                let found = other == nil ? nextRare : min(nextRare, nextOther)
                guard found < end else { return nil }
                let at = found - rareOffset
                if matches(base + at) { return at }
                i = found + 1
            }
            return nil
        }

        private static func position(of byte: UInt8, _ base: UnsafePointer<UInt8>, _ i: Int, _ end: Int) -> Int {
            guard let hit = memchr(base + i, Int32(byte), end - i) else { return Int.max }
            return base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
        }

        @inline(__always)
        private func matches(_ at: UnsafePointer<UInt8>) -> Bool {
            guard caseInsensitive else { return memcmp(at, piece.baseAddress!, piece.count) == 0 }
            for k in 0..<piece.count {
                let b = at[k]
                if (b &- 0x41 < 26 ? b | 0x20 : b) != piece[k] { return false }
            }
            return true
        }
    }

    /// The next run of ASCII letters and digits at or after `offset`, which moves past it.
    private static func nextASCIIToken(_ v: UnsafeBufferPointer<UInt8>, from offset: inout Int) -> Range<Int>? {
        func isToken(_ b: UInt8) -> Bool { b &- 0x30 < 10 || (b | 0x20) &- 0x61 < 26 }
        var i = offset
        while i < v.count, !isToken(v[i]) { i += 1 }
        guard i < v.count else {
            offset = v.count
            return nil
        }
        let start = i
        while i < v.count, isToken(v[i]) { i += 1 }
        offset = i
        return start..<i
    }

    /// `t` mode on ASCII: the words, then the sub-words split at case and letter/digit edges.
    private func matchesASCIITokens(_ e: UnsafeBufferPointer<UInt8>) -> Bool {
        func kind(_ b: UInt8) -> Int {
            if b >= 0x30 && b <= 0x39 { return 2 }
            if b >= 0x41 && b <= 0x5A { return 3 }  // upper
            if b >= 0x61 && b <= 0x7A { return 1 }  // lower
            return 0
        }
        var folded = [UInt8](e)
        if caseInsensitive { for i in folded.indices where folded[i] >= 0x41 && folded[i] <= 0x5A { folded[i] += 0x20 } }
        guard folded.withUnsafeBufferPointer({ mayMatch($0) }) else { return false }
        var ranges: [Range<Int>] = []
        var start = -1
        for i in 0...e.count {
            let isToken = i < e.count && kind(e[i]) != 0
            if isToken, start < 0 { start = i }
            if !isToken, start >= 0 {
                ranges.append(start..<i)
                start = -1
            }
        }
        if folded.withUnsafeBufferPointer({ Self.sequenceMatches(words, $0, ranges) }) { return true }
        guard tokenized else { return false }
        var subRanges: [Range<Int>] = []
        for range in ranges {
            var s = range.lowerBound
            for i in stride(from: range.lowerBound + 1, to: range.upperBound, by: 1) {
                let p = kind(e[i - 1]), c = kind(e[i])
                let digitEdge = (p == 2) != (c == 2)
                let camel = p == 1 && c == 3
                let acronymEnd = p == 3 && c == 3 && i + 1 < range.upperBound && kind(e[i + 1]) == 1
                if digitEdge || camel || acronymEnd {
                    subRanges.append(s..<i)
                    s = i
                }
            }
            subRanges.append(s..<range.upperBound)
        }
        return folded.withUnsafeBufferPointer { Self.sequenceMatches(subWords, $0, subRanges) }
    }

    /// False when the folded value lacks a literal piece of the pattern, so no word can match.
    private func mayMatch(_ folded: UnsafeBufferPointer<UInt8>) -> Bool {
        required.allSatisfy { piece in
            piece.withUnsafeBufferPointer { Glob.find($0, in: folded, from: 0, to: folded.count) != nil }
        }
    }

    private func fold(_ scalars: ArraySlice<Unicode.Scalar>) -> [UInt8] {
        var out = String.UnicodeScalarView()
        for s in scalars {
            TextAnalysis.appendFolded(
                s, to: &out, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        }
        return Array(String(out).utf8)
    }

    /// Whether the pattern's words match consecutive tokens (byte ranges of `bytes`).
    private static func sequenceMatches(_ pattern: [Glob], _ bytes: UnsafeBufferPointer<UInt8>, _ tokens: [Range<Int>])
        -> Bool
    {
        guard !pattern.isEmpty, tokens.count >= pattern.count else { return false }
        for start in 0...(tokens.count - pattern.count) {
            var all = true
            for j in pattern.indices where !pattern[j].matches(UnsafeBufferPointer(rebasing: bytes[tokens[start + j]])) {
                all = false
                break
            }
            if all { return true }
        }
        return false
    }

    /// The pattern's words: maximal runs of token characters and wildcards.
    static func patternWords(_ parts: [Part]) -> [[Part]] {
        var result: [[Part]] = []
        var current: [Part] = []
        var text = String.UnicodeScalarView()
        func endText() {
            if !text.isEmpty { current.append(.text(String(text))) }
            text = String.UnicodeScalarView()
        }
        func endWord() {
            endText()
            if !current.isEmpty { result.append(current) }
            current = []
        }
        for part in parts {
            switch part {
            case .wildcard:
                endText()
                current.append(.wildcard)
            case .text(let t):
                for s in t.unicodeScalars {
                    if TextAnalysis.isTokenChar(s) { text.append(s) } else { endWord() }
                }
            }
        }
        endWord()
        return result
    }

    /// Splits a pattern word at case and letter/digit boundaries; a wildcard stays with the piece
    /// it touches.
    static func splitWord(_ word: [Part]) -> [[Part]] {
        var result: [[Part]] = []
        var pendingLeadingWildcard = false
        for part in word {
            switch part {
            case .wildcard:
                if result.isEmpty {
                    pendingLeadingWildcard = true
                } else {
                    result[result.count - 1].append(.wildcard)
                }
            case .text(let t):
                let scalars = Array(t.unicodeScalars)
                for range in TextAnalysis.subTokens(scalars[...]) {
                    var piece: [Part] = []
                    if pendingLeadingWildcard {
                        piece.append(.wildcard)
                        pendingLeadingWildcard = false
                    }
                    var view = String.UnicodeScalarView()
                    view.append(contentsOf: scalars[range])
                    piece.append(.text(String(view)))
                    result.append(piece)
                }
            }
        }
        if pendingLeadingWildcard { result.append([.wildcard]) }
        return result
    }

    /// A word glob; a word of CJK characters only matches anywhere inside a token, because CJK
    /// text has no spaces between words.
    private static func wordGlob(_ word: [Part], _ ci: Bool, _ di: Bool) -> Glob {
        var allCJK = true
        var folded: [Part] = []
        for part in word {
            if case .text(let t) = part {
                if !t.unicodeScalars.allSatisfy(TextAnalysis.isCJKLetter) { allCJK = false }
                folded.append(.text(TextAnalysis.fold(t, caseInsensitive: ci, diacriticInsensitive: di)))
            } else {
                folded.append(part)
            }
        }
        if allCJK {
            if folded.first != .wildcard { folded.insert(.wildcard, at: 0) }
            if folded.last != .wildcard { folded.append(.wildcard) }
        }
        return Glob(parts: folded)
    }
}
