import Foundation
import Testing
import TestThreads

@testable import SearchlightStore

/// The ASCII word search (`w` without `t`: the anchor's occurrences found with `memchr`, words
/// checked only around them) against the definition it replaces on ASCII values, the tokenizing
/// path (`matchesElements`), over random texts and the shared corpus.
@Suite("TextPattern word search", .onOwnThreads)
struct TextPatternSearchTests {
    private static func reference(_ p: TextPattern, _ value: String) -> Bool {
        var v = value
        return v.withUTF8 { p.matchesElements($0) }
    }

    /// Compares the word search with the tokenizing path, counting how often they matched.
    private struct Agreement {
        var compared = 0, matched = 0

        mutating func check(_ pattern: String, _ modifiers: [String], on value: String) {
            for m in modifiers {
                let p = TextPattern(pattern, modifiers: m)
                let fast = p.matches(value), definition = TextPatternSearchTests.reference(p, value)
                #expect(fast == definition, "\(pattern) \(m) on \(value.debugDescription)")
                compared += 1
                if fast { matched += 1 }
            }
        }

        /// A sample that almost always or almost never matches would test little.
        func expectBalanced() {
            #expect(matched > compared / 10 && matched < compared * 9 / 10, "\(matched) of \(compared) matched: the sample is too one-sided")
        }
    }

    private struct Random {
        var state: UInt64
        mutating func next(_ n: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(n))
        }
    }

    @Test("on random ASCII texts the word search answers as the tokenizing path, for w, cw, dw and cdw")
    func randomTexts() {
        var r = Random(state: 0x2545_F491_4F6C_DD1D)
        // Words that contain one another, differ in case only, or mix digits; separators that
        // include an array element's end (U+001F) and characters next to the token classes.
        let words = ["lib", "Library", "library", "LIBRARY", "libraries", "gtk", "GTK3", "gtk3x", "x11", "3", "a",
                     "aa", "aaa", "foo", "Foobar", "bar", "a1b2", "libFoo", "l", "ab", "ba", "Z", "z9", "9z"]
        let separators = [" ", "-", ", ", "  ", ".", "_", "/", "(", ")", "\u{1F}", " \u{1F} ", "@", "[", "`", "{", "\t", ":"]
        var agreement = Agreement()
        for _ in 0..<6000 {
            var value = r.next(6) == 0 ? separators[r.next(separators.count)] : ""
            for k in 0..<(1 + r.next(14)) { value += (k == 0 ? "" : separators[r.next(separators.count)]) + words[r.next(words.count)] }
            if r.next(4) == 0 { value += separators[r.next(separators.count)] }
            var pattern = ""
            for k in 0..<(1 + r.next(3)) {
                var word = words[r.next(words.count)]
                switch r.next(10) {
                case 0: word = String(word.prefix(1 + r.next(word.count))) + "*"
                case 1: word = "*" + word.dropFirst(r.next(2))
                case 2 where word.count > 2: word = word.prefix(1) + "*" + word.suffix(1)
                case 3: word = "*"
                default: break
                }
                pattern += (k == 0 ? "" : [" ", "-", "  ", ". "][r.next(4)]) + word
            }
            agreement.check(pattern, ["w", "cw", "dw", "cdw"], on: value)
        }
        agreement.expectBalanced()
    }

    @Test("on the shared corpus's texts the word search answers as the tokenizing path", .enabled(if: StoreCorpus.path != nil))
    func corpusTexts() throws {
        let texts = try Self.corpusTexts(limit: 1500)
        try #require(texts.count > 1000, "the shared corpus is missing")
        var r = Random(state: 0x9E37_79B9_7F4A_7C15)
        var agreement = Agreement()
        for (n, text) in texts.enumerated() {
            let words = TextAnalysis.words(text)
            let other = TextAnalysis.words(texts[(n * 7 + 3) % texts.count])
            for _ in 0..<4 {
                // A run of one to three words of this text (a likely match) or of another text,
                // sometimes with a wildcard, in another case.
                let source = r.next(3) == 0 ? other : words
                guard !source.isEmpty else { continue }
                let start = r.next(source.count)
                var pattern = source[start..<min(source.count, start + 1 + r.next(3))].joined(separator: " ")
                switch r.next(6) {
                case 0: pattern = String(pattern.prefix(max(1, pattern.count - 2))) + "*"
                case 1: pattern = pattern.uppercased()
                case 2: pattern = "*" + pattern.dropFirst(min(2, pattern.count - 1))
                default: break
                }
                agreement.check(pattern, ["w", "cdw"], on: text)
            }
        }
        agreement.expectBalanced()
    }

    @Test("the word search keeps whole words, array elements and non-ASCII values as before")
    func edges() {
        func m(_ pattern: String, _ modifiers: String, _ value: String) -> Bool { TextPattern(pattern, modifiers: modifiers).matches(value) }
        #expect(m("library", "cdw", "A Library for things"))
        #expect(!m("library", "cdw", "libraries only"))
        #expect(!m("library", "cdw", "xlibrary"))
        #expect(!m("library", "cdw", "library9"))
        #expect(m("library", "cdw", "(library)"))
        #expect(m("gtk theme", "cdw", "a GTK -- theme engine"))
        #expect(!m("gtk theme", "cdw", "a gtk\u{1F}theme engine"))
        #expect(m("gtk theme", "cdw", "gtk\u{1F}gtk theme"))
        #expect(m("theme", "cdw", "gtk\u{1F}theme"))
        #expect(!m("library", "w", "LIBRARY"))
        #expect(m("librar*", "cdw", "the LIBRARY"))
        #expect(m("café", "cdw", "le cafe"))
        #expect(m("cafe", "cdw", "le café noir"))
        #expect(!m("café", "cw", "le cafe"))
        #expect(m("lib*ary", "cw", "a Library"))
        #expect(!m("", "cdw", "library"))
    }

    /// Texts of the shared corpus: each item's `textContent`, `title`, and its keywords joined
    /// as an array value is (U+001F between elements).
    static func corpusTexts(limit: Int) throws -> [String] {
        var texts: [String] = []
        for line in try StoreCorpus.lines(limit: limit) {
            guard let o = try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else { continue }
            if let t = o["textContent"] as? String { texts.append(t) }
            if let t = o["title"] as? String { texts.append(t) }
            if let k = o["keywords"] as? [String], !k.isEmpty { texts.append(k.joined(separator: "\u{1F}")) }
        }
        return texts
    }
}
