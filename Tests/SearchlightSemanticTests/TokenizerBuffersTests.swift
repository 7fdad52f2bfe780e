import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

@Suite("Tokenizer buffers kept between texts", .onOwnThreads)
struct TokenizerBuffersTests {
    @Test("pieces with buffers (and a word cache) reused from text to text equal the pieces of each text alone")
    func reuseGivesTheSamePieces() throws {
        let t = try #require(try? StaticEncoder(file: TestModel.repositoryFile("Models/all-MiniLM-L6-v2-static.bin"))).tokenizer
        let documents = try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/static-reference.jsonl").map { $0["text"] as! String }
        let long = String(repeating: "Searchable items of many kinds, indexed and ranked; ", count: 120)
        let crafted = [
            long, "x", "", "Café naïve résumé — 東京の本 and a word", "[CLS] a [SEP] b [UNK]c [MASK]",
            String(repeating: "supercalifragilisticexpialidocious", count: 3) + " short", "A. B. C", long.uppercased(),
            "tab\tnew\nline\rcarriage  double", "\u{0001}control\u{0000}bytes", "ab", long + " end",
            // Past the limit inside a non-ASCII word: a word cut there must not leak into the next text.
            String(repeating: "naïveté crème brûlée ", count: 40), "Élan vital, words after it",
        ]
        // Long texts before short ones and after: what a longer text left in the buffers must not matter.
        let texts = crafted + documents + crafted.reversed() + documents.reversed()
        let buffers = TokenizerBuffers(), cache = WordPieceCache()
        var pieces = PieceBuffer(capacity: 16)
        defer { pieces.deallocate() }
        for limit in [254, 20, .max] {
            for text in texts {
                pieces.removeAll()
                t.appendPieces(of: text, to: &pieces, limit: limit, cache: cache, buffers: buffers)
                let alone = limit == .max ? t.tokenize(text) : Array(t.tokenize(text).prefix(limit))
                #expect(Array(pieces.pieces) == alone, "\(text.prefix(40).debugDescription), limit \(limit)")
            }
        }
    }
}
