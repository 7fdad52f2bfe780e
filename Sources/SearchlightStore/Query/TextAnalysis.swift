import Foundation

/// Text helpers shared by the writer (the auxiliary document), user queries and the query
/// compiler. Word boundaries and folding mirror SQLite's `unicode61 remove_diacritics 2`
/// tokenizer, so that what a full-text query finds is always a superset of what the exact
/// matcher (`TextPattern`) accepts.
public enum TextAnalysis {
    // MARK: Characters

    /// Han ideographs (with extensions and compatibility forms), Hiragana, Katakana (with halfwidth
    /// forms), Hangul syllables and jamo: scripts written without spaces between words.
    public static func isCJK(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x1100...0x11FF,  // Hangul jamo
            0x3005...0x3007,  // 々 〆 〇
            0x3040...0x309F,  // Hiragana
            0x30A0...0x30FF,  // Katakana
            0x3130...0x318F,  // Hangul compatibility jamo
            0x31F0...0x31FF,  // Katakana phonetic extensions
            0x3400...0x4DBF,  // Han extension A
            0x4E00...0x9FFF,  // Han
            0xA960...0xA97F,  // Hangul jamo extended A
            0xAC00...0xD7AF,  // Hangul syllables
            0xD7B0...0xD7FF,  // Hangul jamo extended B
            0xF900...0xFAFF,  // Han compatibility
            0xFF66...0xFF9F,  // halfwidth Katakana
            0xFFA0...0xFFDC,  // halfwidth Hangul
            0x20000...0x2FA1F,  // Han extensions B–F and compatibility supplement
            0x30000...0x323AF:  // Han extensions G, H
            return true
        default:
            return false
        }
    }

    /// Whether the `unicode61` tokenizer keeps `scalar` inside a token: letters, numbers, private
    /// use characters and (because diacritics are removed) nonspacing marks.
    static func isTokenChar(_ scalar: Unicode.Scalar) -> Bool {
        let v = scalar.value
        if v < 0x80 {
            return (v >= 0x30 && v <= 0x39) || (v >= 0x41 && v <= 0x5A) || (v >= 0x61 && v <= 0x7A)
        }
        switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
            .decimalNumber, .letterNumber, .otherNumber, .privateUse, .nonspacingMark:
            return true
        default:
            return false
        }
    }

    /// A CJK character that is also a token character (so `・` and the voicing marks are not).
    static func isCJKLetter(_ scalar: Unicode.Scalar) -> Bool {
        isCJK(scalar) && isTokenChar(scalar)
    }

    // MARK: Words

    /// The words of `text` as `unicode61` sees them (runs of letters and numbers), except that a
    /// run of CJK characters is its own word even when it touches Latin letters.
    public static func words(_ text: String) -> [Substring] {
        var result: [Substring] = []
        let scalars = text.unicodeScalars
        var start: String.UnicodeScalarView.Index? = nil
        var startIsCJK = false
        var i = scalars.startIndex
        while i < scalars.endIndex {
            let s = scalars[i]
            if isTokenChar(s) {
                let cjk = isCJK(s)
                if let st = start, cjk != startIsCJK {
                    result.append(Substring(text.unicodeScalars[st..<i]))
                    start = i
                } else if start == nil {
                    start = i
                }
                startIsCJK = cjk
            } else if let st = start {
                result.append(Substring(text.unicodeScalars[st..<i]))
                start = nil
            }
            i = scalars.index(after: i)
        }
        if let st = start { result.append(Substring(text.unicodeScalars[st..<scalars.endIndex])) }
        return result
    }

    /// The tokens exactly as `unicode61` splits them: maximal runs of token characters, CJK and
    /// Latin together. The exact matcher's word mode uses these so the full-text prefilter agrees.
    static func tokens(_ scalars: [Unicode.Scalar]) -> [Range<Int>] {
        var result: [Range<Int>] = []
        var start = -1
        for (i, s) in scalars.enumerated() {
            if isTokenChar(s) {
                if start < 0 { start = i }
            } else if start >= 0 {
                result.append(start..<i)
                start = -1
            }
        }
        if start >= 0 { result.append(start..<scalars.count) }
        return result
    }

    /// Splits one token at lower-to-upper case changes (`windowsPC` → `windows`, `PC`), before the
    /// last capital of a capital run that starts a word (`PCFile` → `PC`, `File`), at letter/digit
    /// boundaries (`mp3player` → `mp`, `3`, `player`) and at CJK/non-CJK boundaries.
    static func subTokens(_ scalars: ArraySlice<Unicode.Scalar>) -> [Range<Int>] {
        var result: [Range<Int>] = []
        var start = scalars.startIndex
        var i = scalars.startIndex + 1
        func kind(_ s: Unicode.Scalar) -> Int {
            if s.value < 0x80 { return s.value >= 0x30 && s.value <= 0x39 ? 2 : 1 }
            if isCJK(s) { return 3 }
            if s.properties.numericType != nil { return 2 }
            return 1
        }
        func isLower(_ s: Unicode.Scalar) -> Bool {
            s.value < 0x80 ? (s.value >= 0x61 && s.value <= 0x7A) : s.properties.isLowercase
        }
        func isUpper(_ s: Unicode.Scalar) -> Bool {
            s.value < 0x80 ? (s.value >= 0x41 && s.value <= 0x5A) : s.properties.isUppercase
        }
        while i < scalars.endIndex {
            let prev = scalars[i - 1], cur = scalars[i]
            var boundary = kind(prev) != kind(cur)
            if !boundary, isLower(prev), isUpper(cur) { boundary = true }
            if !boundary, isUpper(prev), isUpper(cur), i + 1 < scalars.endIndex, isLower(scalars[i + 1]) {
                boundary = true
            }
            if boundary {
                result.append(start..<i)
                start = i
            }
            i += 1
        }
        if start < scalars.endIndex { result.append(start..<scalars.endIndex) }
        return result
    }

    // MARK: The auxiliary document

    /// The document for the auxiliary full-text column `aux`, which holds what the index needs
    /// beyond the attributes' own words:
    /// - for each maximal run of CJK characters in `texts`, its overlapping bigrams and then its
    ///   last character alone ("星球大战" → "星球 球大 大战 战"), runs separated by " | ", so that
    ///   any CJK substring is a phrase query;
    /// - after them, the non-CJK pieces of every word the `t` modifier splits into more than one
    ///   piece ("WindowsPCFile" → "Windows PC File", "MP3Player" → "MP 3 Player"), so that a `t`
    ///   word is a term query.
    /// Nil when there is neither.
    public static func auxiliaryDocument(_ texts: [String]) -> String? {
        // Built as UTF-8 bytes: appending scalars to a String costs more than finding the pieces.
        var out: [UInt8] = []
        var pieces: [UInt8] = []
        var run: [Unicode.Scalar] = []
        var token: [Unicode.Scalar] = []
        let bar: [UInt8] = [0x20, 0x7C, 0x20]  // " | "
        func flushRun() {
            guard !run.isEmpty else { return }
            if !out.isEmpty { out += bar }
            for k in 0..<(run.count - 1) {
                append(run[k], to: &out)
                append(run[k + 1], to: &out)
                out.append(0x20)
            }
            append(run[run.count - 1], to: &out)
            run.removeAll(keepingCapacity: true)
        }
        func flushToken() {
            defer { token.removeAll(keepingCapacity: true) }
            guard mayHaveSubTokens(token) else { return }
            let ranges = subTokens(token[...])
            guard ranges.count > 1 else { return }
            for range in ranges where !isCJK(token[range.lowerBound]) {  // CJK is in the bigrams
                if !pieces.isEmpty { pieces.append(0x20) }
                for s in token[range] { append(s, to: &pieces) }
            }
        }
        for var text in texts {
            // Most text is ASCII: no CJK, and its pieces are found on the bytes.
            if text.withUTF8({ bytes in
                guard isASCII(bytes) else { return false }
                appendASCIIPieces(bytes, to: &pieces)
                return true
            }) { continue }
            for s in text.unicodeScalars {
                if isCJKLetter(s) { run.append(s) } else { flushRun() }
                if isTokenChar(s) { token.append(s) } else { flushToken() }
            }
            flushRun()
            flushToken()
        }
        if !pieces.isEmpty {
            if !out.isEmpty { out += bar }
            out += pieces
        }
        return out.isEmpty ? nil : String(decoding: out, as: UTF8.self)
    }

    /// Whether every byte is below 0x80, eight at a time.
    static func isASCII(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = b.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var i = 0
        while i + 8 <= b.count {
            if raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            i += 8
        }
        while i < b.count {
            if b[i] >= 0x80 { return false }
            i += 1
        }
        return true
    }

    private static func append(_ s: Unicode.Scalar, to bytes: inout [UInt8]) {
        UTF8.encode(s) { bytes.append($0) }
    }

    /// Byte classes for `appendASCIIPieces`: 0 separator, 1 lower, 2 digit, 3 upper.
    private static let asciiKinds: [UInt8] = (0..<256).map { c in
        if c >= 0x61 && c <= 0x7A { return 1 }
        if c >= 0x30 && c <= 0x39 { return 2 }
        return c >= 0x41 && c <= 0x5A ? 3 : 0
    }

    /// `subTokens` on ASCII bytes: appends the pieces of every word that splits, space-separated.
    /// One pass over the bytes with a class table: it runs on every donated item.
    private static func appendASCIIPieces(_ b: UnsafeBufferPointer<UInt8>, to pieces: inout [UInt8]) {
        asciiKinds.withUnsafeBufferPointer { kinds in
            func append(_ range: Range<Int>) {
                if !pieces.isEmpty { pieces.append(0x20) }
                pieces.append(contentsOf: UnsafeBufferPointer(rebasing: b[range]))
            }
            let n = b.count
            var i = 0
            while i < n {
                var p = kinds[Int(b[i])]
                guard p != 0 else {
                    i += 1
                    continue
                }
                let start = i
                var piece = start
                var j = i + 1
                while j < n {
                    let c = kinds[Int(b[j])]
                    if c == 0 { break }
                    // A digit edge, lower→upper, or the last capital of a run before a lower case letter.
                    if (p == 2) != (c == 2) || (p == 1 && c == 3) || (p == 3 && c == 3 && j + 1 < n && kinds[Int(b[j + 1])] == 1) {
                        append(piece..<j)
                        piece = j
                    }
                    p = c
                    j += 1
                }
                if piece > start { append(piece..<j) }
                i = j
            }
        }
    }

    /// A cheap test that rules out most words before `subTokens`: an ASCII word splits only at
    /// a digit edge, a lower→upper change or inside a run of capitals.
    private static func mayHaveSubTokens(_ token: [Unicode.Scalar]) -> Bool {
        guard token.count > 1 else { return false }
        var previous = token[0].value
        if previous >= 0x80 { return true }
        for s in token.dropFirst() {
            let v = s.value
            if v >= 0x80 { return true }
            let digitEdge = (previous <= 0x39) != (v <= 0x39)  // token characters: digits sort below letters
            let upper = v >= 0x41 && v <= 0x5A
            if digitEdge || (upper && previous >= 0x41) { return true }
            previous = v
        }
        return false
    }

    /// The maximal runs of CJK characters in `text`.
    static func cjkRuns(_ text: String) -> [String] {
        if text.utf8.allSatisfy({ $0 < 0x80 }) { return [] }
        var runs: [String] = []
        var run = String.UnicodeScalarView()
        for s in text.unicodeScalars {
            if isCJKLetter(s) {
                run.append(s)
            } else if !run.isEmpty {
                runs.append(String(run))
                run = String.UnicodeScalarView()
            }
        }
        if !run.isEmpty { runs.append(String(run)) }
        return runs
    }

    /// The FTS5 expression (without a column filter) that finds the CJK substring `run` in the
    /// bigram document: a quoted phrase of its bigrams, or a prefix query for a single character.
    public static func cjkFTSPhrase(_ run: String) -> String {
        let s = Array(run.unicodeScalars)
        guard s.count >= 2 else { return ftsQuoted(run) + " *" }
        var bigrams: [String] = []
        for k in 0..<(s.count - 1) {
            var b = String.UnicodeScalarView()
            b.append(s[k])
            b.append(s[k + 1])
            bigrams.append(String(b))
        }
        return ftsQuoted(bigrams.joined(separator: " "))
    }

    /// `term` as an FTS5 string: in double quotes, with `"` doubled.
    public static func ftsQuoted(_ term: String) -> String {
        // Foundation's replacing costs about 10 000 instructions even when there is nothing to
        // replace, and every query's driver is quoted: a word rarely holds a quote.
        guard term.utf8.contains(0x22) else { return "\"" + term + "\"" }
        return "\"" + term.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    // MARK: Folding

    /// Lowercases and removes diacritics from Latin letters, as the full-text index does.
    public static func fold(_ s: String) -> String {
        fold(s, caseInsensitive: true, diacriticInsensitive: true)
    }

    /// Folds case and/or diacritics. ASCII takes a fast path; diacritics are removed only where
    /// `unicode61` removes them (Latin letters and combining marks U+0300–U+036F), so a folded
    /// match is never one the full-text index would miss.
    static func fold(_ s: String, caseInsensitive: Bool, diacriticInsensitive: Bool) -> String {
        guard caseInsensitive || diacriticInsensitive else { return s }
        var ascii = true
        for b in s.utf8 where b >= 0x80 {
            ascii = false
            break
        }
        if ascii { return caseInsensitive ? asciiLowercased(s) : s }
        var out = String.UnicodeScalarView()
        for scalar in s.unicodeScalars {
            appendFolded(scalar, to: &out, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
        }
        return String(out)
    }

    /// `fold` on UTF-8 bytes, to UTF-8 bytes: the same result, without building a String one
    /// scalar at a time (the exact check of a query folds whole text attributes, and appending
    /// scalars to a String cost most of a term query's time in profiles). ASCII bytes are copied
    /// (lowercased); each other scalar is folded once per call.
    static func foldedUTF8(_ bytes: UnsafeBufferPointer<UInt8>, caseInsensitive: Bool, diacriticInsensitive: Bool) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var memo: [UInt32: [UInt8]] = [:]
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b < 0x80 {
                out.append(caseInsensitive && b >= 0x41 && b <= 0x5A ? b + 0x20 : b)
                i += 1
                continue
            }
            // One scalar (invalid sequences decode to U+FFFD, as String(decoding:) does).
            var iterator = UnsafeBufferPointer(rebasing: bytes[i...]).makeIterator()
            var decoder = UTF8()
            var scalar = Unicode.Scalar(0xFFFD)!
            var width = 1
            if case .scalarValue(let v) = decoder.decode(&iterator) {
                scalar = v
                width = UTF8.width(v)
            }
            if let folded = memo[scalar.value] {
                out += folded
            } else {
                var view = String.UnicodeScalarView()
                appendFolded(scalar, to: &view, caseInsensitive: caseInsensitive, diacriticInsensitive: diacriticInsensitive)
                let folded = Array(String(view).utf8)
                memo[scalar.value] = folded
                out += folded
            }
            i += width
        }
        return out
    }

    static func appendFolded(
        _ scalar: Unicode.Scalar, to out: inout String.UnicodeScalarView, caseInsensitive: Bool,
        diacriticInsensitive: Bool
    ) {
        var scalar = scalar
        let v = scalar.value
        if v < 0x80 {
            if caseInsensitive, v >= 0x41, v <= 0x5A { scalar = Unicode.Scalar(v + 0x20)! }
            out.append(scalar)
            return
        }
        if diacriticInsensitive {
            if v >= 0x300 && v <= 0x36F { return }
            if let base = latinBase[v] { scalar = base }
        }
        if caseInsensitive, !isCJK(scalar) {
            let lower = scalar.properties.lowercaseMapping
            for l in lower.unicodeScalars {
                if diacriticInsensitive, l.value >= 0x300, l.value <= 0x36F { continue }
                out.append(l)
            }
        } else {
            out.append(scalar)
        }
    }

    private static func asciiLowercased(_ s: String) -> String {
        var bytes = Array(s.utf8)
        for k in bytes.indices where bytes[k] >= 0x41 && bytes[k] <= 0x5A { bytes[k] += 0x20 }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Precomposed Latin letters (Latin-1 Supplement through Latin Extended-B, and Latin Extended
    /// Additional) mapped to their base letter, computed once from canonical decomposition.
    static let latinBase: [UInt32: Unicode.Scalar] = {
        var table: [UInt32: Unicode.Scalar] = [:]
        let ranges: [ClosedRange<UInt32>] = [0xC0...0x24F, 0x1E00...0x1EFF]
        for range in ranges {
            for v in range {
                guard let scalar = Unicode.Scalar(v) else { continue }
                let decomposed = String(Character(scalar)).decomposedStringWithCanonicalMapping.unicodeScalars
                guard let first = decomposed.first, decomposed.count > 1, first != scalar else { continue }
                table[v] = first
            }
        }
        return table
    }()
}
