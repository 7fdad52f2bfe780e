import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

@Suite("WordPiece tokenizer", .onOwnThreads)
struct WordPieceTokenizerTests {
    /// A small vocabulary for the rules that need no model.
    static let small = try! WordPieceTokenizer(vocabulary: Vocabulary(tokens: [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "runn", "##ing", ",", "!", "cafe", "中", "a", "##b",
    ]))

    @Test("greedy longest match with ## continuation pieces")
    func wordPiece() {
        #expect(Self.small.tokenize("unaffable running") == [4, 5, 6, 7, 8])
    }

    @Test("a word with an unmatched piece is one [UNK]; punctuation is a word of its own")
    func unknown() {
        #expect(Self.small.tokenize("unaffablex, running!") == [1, 9, 7, 8, 10])
    }

    @Test("accents are stripped and case folded; CJK characters are words of their own")
    func normalisation() {
        #expect(Self.small.tokenize("CAFÉ") == [11])
        #expect(Self.small.tokenize("a中a") == [13, 12, 13])
    }

    @Test("control characters vanish without splitting the word; a word over 100 characters is [UNK]")
    func cleaning() {
        #expect(Self.small.tokenize("ca\u{0001}fe") == [11])
        #expect(Self.small.tokenize("a" + String(repeating: "b", count: 99)) == [13] + Array(repeating: 14, count: 99))
        #expect(Self.small.tokenize("a" + String(repeating: "b", count: 100)) == [1])
    }

    @Test("encode adds [CLS] and [SEP] and truncates to the maximum length")
    func encode() {
        #expect(Self.small.encode("running", maxLength: 256) == [2, 7, 8, 3])
        #expect(Self.small.encode("running running", maxLength: 4) == [2, 7, 8, 3])
        #expect(Self.small.encode("running running", maxLength: 3) == [2, 7, 3])
    }

    @Test("a vocabulary without the special tokens is refused with a clear error")
    func badVocabulary() {
        #expect(throws: SemanticError.self) { try WordPieceTokenizer(vocabulary: Vocabulary(tokens: ["a", "b"])) }
    }

    @Test("ids equal the reference BERT uncased tokenizer's for every fixture string",
          .enabled(if: TestModel.available, TestModel.skipReason))
    func reference() throws {
        let tokenizer = try #require(TestModel.tokenizer)
        let cases = try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/tokenizer-reference.jsonl")
        #expect(cases.count >= 300)
        var mismatches = 0
        for c in cases {
            let text = c["text"] as! String
            let ids = (c["ids"] as! [NSNumber]).map { $0.int32Value }
            let ids256 = (c["ids256"] as! [NSNumber]).map { $0.int32Value }
            let mine = tokenizer.encode(text, maxLength: .max)
            let mine256 = tokenizer.encode(text, maxLength: 256)
            if mine != ids || mine256 != ids256 {
                mismatches += 1
                if mismatches <= 10 {
                    Issue.record("text \(text.debugDescription): reference \(ids.prefix(40)) …, ours \(mine.prefix(40)) … (256: \(mine256 == ids256))")
                }
            }
        }
        #expect(mismatches == 0)
    }

    @Test("a non-ASCII chunk is normalised a window at a time: the same pieces as the whole, across window cuts")
    func unicodeWindows() {
        // 3000 × "CAFÉ中" (and a mark after the ideograph): one chunk without ASCII whitespace,
        // several windows of `unicodeWindow` characters, cut after the ideographs' spaces.
        let unit = "CAFE\u{0301}中\u{0301}"
        let text = String(repeating: unit, count: 3000)
        #expect(text.unicodeScalars.count > 4 * WordPieceTokenizer.unicodeWindow)
        let expected: [Int32] = (0..<3000).flatMap { _ in [11, 12] }
        #expect(Self.small.tokenize(text) == expected)
        // Truncated: the first pieces, [CLS] and [SEP] around them.
        #expect(Self.small.encode(text, maxLength: 9) == [2, 11, 12, 11, 12, 11, 12, 11, 3])
        // A word running across a window cut is still one word (no cut inside it: only after a space).
        let long = String(repeating: "中", count: 2000) + "CAF" + "\u{00C9}"
        #expect(Self.small.tokenize(long) == Array(repeating: Int32(12), count: 2000) + [11])
    }

    @Test("a 60 KB CJK text encodes to the same ids as its first 300 characters")
    func longCJKTruncates() {
        let text = String(repeating: "中", count: 20_000)
        #expect(text.utf8.count == 60_000)
        let ids = Self.small.encode(text, maxLength: 256)
        #expect(ids.count == 256)
        #expect(ids == Self.small.encode(String(text.prefix(300)), maxLength: 256))
    }
}
