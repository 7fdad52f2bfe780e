import Testing
import TestThreads

@testable import SearchlightStore

@Suite("TextPattern", .onOwnThreads)
struct TextPatternTests {
    private func match(_ pattern: String, _ modifiers: String, _ value: String) -> Bool {
        TextPattern(pattern, modifiers: modifiers).matches(value)
    }

    private func match(_ pattern: String, _ value: String) -> Bool {
        TextPattern(pattern, modifiers: "").matches(value)
    }

    @Test("without wildcards the pattern must equal the whole value")
    func exact() {
        #expect(match("Bridge", "Bridge"))
        #expect(!match("Bridge", "Bridges"))
        #expect(!match("Bridge", "bridge"))
        #expect(match("", ""))
        #expect(!match("", "x"))
    }

    @Test("a star matches any run of characters, at either end or inside")
    func wildcards() {
        #expect(match("Nat*", "Natural Bridges"))
        #expect(match("*Bridges", "Natural Bridges"))
        #expect(match("*ral Bri*", "Natural Bridges"))
        #expect(match("N*l*B*s", "Natural Bridges"))
        #expect(match("*", ""))
        #expect(match("a*a", "aa"))
        #expect(!match("a*a", "a"))
        #expect(!match("Nat*x", "Natural Bridges"))
        #expect(!match("*ral", "Natural Bridges"))
    }

    @Test("an escaped star is a literal star")
    func literalStar() {
        #expect(match("5\\*", "5*"))
        #expect(!match("5\\*", "55"))
        #expect(match("a\\\\b", "a\\b"))
    }

    @Test("c folds case and d folds diacritics, separately or together")
    func caseAndDiacritics() {
        #expect(match("café", "c", "CAFÉ"))
        #expect(!match("cafe", "c", "CAFÉ"))
        #expect(match("cafe", "d", "café"))
        #expect(!match("cafe", "d", "CAFÉ"))
        #expect(match("cafe", "cd", "CAFÉ"))
        #expect(match("Việt*", "cd", "viet nam"))
        #expect(match("HELLO", "c", "hello"))
    }

    @Test("w matches a run of whole words, a trailing star extending the last word")
    func words() {
        #expect(match("Natural Bridges*", "w", "Visit the Natural Bridges National Monument"))
        #expect(match("Natural Bridges*", "w", "Natural Bridgestone"))
        #expect(!match("Natural Bridges*", "w", "Supernatural Bridges"))
        #expect(!match("Natural Bridges", "w", "Natural Bridgestone"))
        #expect(!match("Natural Bridges*", "w", "Natural and Bridges"))
        #expect(match("paris", "cw", "I love Paris, in spring"))
        #expect(!match("par", "cw", "I love Paris"))
        #expect(match("*ris", "cw", "I love Paris"))
        #expect(match("e-mail", "w", "send e mail"))
    }

    @Test("t also splits at case changes and digits, and ignores case")
    func tokenized() {
        #expect(match("pc", "wt", "WindowsPCFile"))
        #expect(match("file", "wt", "WindowsPCFile"))
        #expect(match("windows pc", "wt", "WindowsPCFile"))
        #expect(match("windowspcfile", "wt", "WindowsPCFile"))
        #expect(match("player", "t", "mp3player"))
        #expect(match("3", "t", "mp3player"))
        #expect(!match("pc", "w", "WindowsPCFile"))
        #expect(!match("dows", "wt", "WindowsPCFile"))
    }

    @Test("CJK: a star-surrounded pattern finds a substring, and words of CJK match inside words")
    func cjk() {
        #expect(match("*星球*", "cd", "星球大战"))
        #expect(match("*星球*", "cd", "我爱星球大战"))
        #expect(!match("*星际*", "cd", "星球大战"))
        #expect(match("星球", "w", "我爱星球大战 movie"))
        #expect(match("スター*", "", "スターウォーズ"))
    }

    @Test("word modes work on non-ASCII text")
    func nonASCIIWords() {
        #expect(match("normale", "wt", "ÉcoleNormale"))
        #expect(match("ecole", "cdw", "l'École normale"))
        #expect(!match("ecole", "cw", "l'École normale"))
        #expect(match("straße", "w", "Die straße hier"))
        #expect(match("iphone手机", "cw", "new iPhone手机 case"))
    }

    @Test("on ASCII values the byte-level word matcher agrees with the general one, for w, cw, cdw and cwt")
    func asciiWordPathAgreesWithGeneralPath() {
        // An em dash is not a token character and folds to itself, so appending it changes no
        // token but sends the value down the general (non-ASCII) path.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ n: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(n))
        }
        let words = ["lib", "Library", "gtk", "GTK3", "x11", "foo", "bar", "a1b2", "libFoo", "l"]
        let separators = [" ", "-", ", ", "  ", ".", "_", "/", "(", ")"]
        var compared = 0, matched = 0
        for _ in 0..<4000 {
            var value = ""
            for k in 0..<(1 + next(12)) { value += (k == 0 ? "" : separators[next(separators.count)]) + words[next(words.count)] }
            var pattern = ""
            for k in 0..<(1 + next(3)) {
                var word = words[next(words.count)]
                if next(4) == 0 { word = String(word.prefix(1 + next(word.count))) + "*" }
                if next(8) == 0 { word = "*" + word.dropFirst(next(2)) }
                pattern += (k == 0 ? "" : separators[next(3)]) + word
            }
            for modifiers in ["w", "cw", "cdw", "cwt"] {
                let p = TextPattern(pattern, modifiers: modifiers)
                let fast = p.matches(value), general = p.matches(value + " \u{2014}")
                #expect(fast == general, "\(pattern) \(modifiers) on \(value)")
                compared += 1
                if fast { matched += 1 }
            }
        }
        #expect(matched > compared / 20 && matched < compared * 19 / 20, "\(matched) of \(compared) matched: the sample is too one-sided")
    }

    @Test("an array value matches when any element matches")
    func arrays() {
        let value = "alpha\u{1F}Natural Bridges\u{1F}gamma"
        #expect(match("Natural Bridges*", "cwdt", value))
        #expect(match("gamma", "", value))
        #expect(!match("alpha*gamma", "", value))
        #expect(!match("delta", "c", value))
    }

    @Test("the canonical example: Natural Bridges* with cwdt")
    func canonical() {
        #expect(match("Natural Bridges*", "cwdt", "natural bridges"))
        #expect(match("Natural Bridges*", "cwdt", "NATURAL BRIDGES NATIONAL MONUMENT"))
        #expect(match("Natural Bridges*", "cwdt", "Natürál Bridgés"))
    }

    @Test("ordering folds with c and d and compares scalar order")
    func ordering() {
        let order = TextOrder(modifiers: "cd")
        #expect(TextOrder.compare(order.folded("Émile"), order.folded("emile")) == 0)
        #expect(TextOrder.compare(order.folded("apple"), order.folded("Banana")) < 0)
        let plain = TextOrder(modifiers: "")
        #expect(TextOrder.compare(plain.folded("apple"), plain.folded("Banana")) > 0)
    }
}

@Suite("TextAnalysis", .onOwnThreads)
struct TextAnalysisTests {
    @Test("the auxiliary document lists overlapping CJK bigrams and the last character")
    func bigrams() {
        #expect(TextAnalysis.auxiliaryDocument(["星球大战"]) == "星球 球大 大战 战")
        #expect(TextAnalysis.auxiliaryDocument(["Star 星球 and 大战"]) == "星球 球 | 大战 战")
        #expect(TextAnalysis.auxiliaryDocument(["星"]) == "星")
        #expect(TextAnalysis.auxiliaryDocument(["plain latin", "text"]) == nil)
        #expect(TextAnalysis.auxiliaryDocument(["Library HTTP GTK 2024 x"]) == nil)
    }

    @Test("the auxiliary document lists the pieces of words the t modifier splits, after the bigrams")
    func compoundPieces() {
        #expect(TextAnalysis.auxiliaryDocument(["WindowsPCFile"]) == "Windows PC File")
        #expect(TextAnalysis.auxiliaryDocument(["an MP3Player", "libgtk3 x86"]) == "MP 3 Player libgtk 3 x 86")
        #expect(TextAnalysis.auxiliaryDocument(["iPhone手机壳 星球"]) == "手机 机壳 壳 | 星球 球 | i Phone")
        #expect(TextAnalysis.auxiliaryDocument(["ÉcoleNormale"]) == "École Normale")
    }

    @Test("CJK phrases: bigram phrase for two or more characters, prefix for one")
    func phrases() {
        #expect(TextAnalysis.cjkFTSPhrase("星球大") == "\"星球 球大\"")
        #expect(TextAnalysis.cjkFTSPhrase("星球") == "\"星球\"")
        #expect(TextAnalysis.cjkFTSPhrase("星") == "\"星\" *")
    }

    @Test("words split like unicode61, with CJK runs on their own")
    func words() {
        #expect(TextAnalysis.words("Hello, wörld! x_y 3.14").map(String.init) == ["Hello", "wörld", "x", "y", "3", "14"])
        #expect(TextAnalysis.words("iPhone手机壳").map(String.init) == ["iPhone", "手机壳"])
    }

    @Test("fold lowercases and strips Latin diacritics")
    func fold() {
        #expect(TextAnalysis.fold("ÉCOLE Straße") == "ecole straße")
        #expect(TextAnalysis.fold("Ǖber") == "uber")
        #expect(TextAnalysis.fold("ASCII only") == "ascii only")
        #expect(TextAnalysis.fold("星球") == "星球")
    }

    @Test("folding UTF-8 bytes gives fold's text, byte for byte, for every combination of c and d")
    func foldedBytes() {
        // Latin with precomposed and combining diacritics, German, Turkish dotted/dotless i,
        // Greek (final sigma), Cyrillic, CJK, Hangul, emoji, ASCII punctuation and digits.
        let pieces = ["ÉCOLE", "Straße", "Ǖber", "e\u{301}", "İstanbul", "ıI", "ΟΔΟΣ", "Москва", "星球大战", "한국어", "👍🏽", "A-Z_09 ", "Việt", "ǅ", "ﬁ"]
        var random = SeededRandom(state: 17)
        for _ in 0..<300 {
            let text = (0..<Int.random(in: 1...6, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
            for (c, d) in [(true, true), (true, false), (false, true), (false, false)] {
                let bytes = Array(text.utf8).withUnsafeBufferPointer {
                    TextAnalysis.foldedUTF8($0, caseInsensitive: c, diacriticInsensitive: d)
                }
                #expect(bytes == Array(TextAnalysis.fold(text, caseInsensitive: c, diacriticInsensitive: d).utf8), "\(text) c=\(c) d=\(d)")
            }
        }
    }

    @Test("FTS quoting doubles quotes")
    func quoting() {
        #expect(TextAnalysis.ftsQuoted("say \"hi\"") == "\"say \"\"hi\"\"\"")
    }

    @Test("isCJK covers Han, kana and Hangul, not Latin")
    func isCJK() {
        for s in "星ひカｶ한ᄀ".unicodeScalars { #expect(TextAnalysis.isCJK(s)) }
        for s in "aé1".unicodeScalars { #expect(!TextAnalysis.isCJK(s)) }
    }
}
