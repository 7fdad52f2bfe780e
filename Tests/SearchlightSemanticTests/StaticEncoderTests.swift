import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The committed table: no download needed.
private let tablePath = TestModel.repositoryFile("Models/all-MiniLM-L6-v2-static.bin")
private let table: StaticEncoder? = try? StaticEncoder(file: tablePath)

@Suite("Static encoder (the committed token table)", .onOwnThreads)
struct StaticEncoderTests {
    static func reference() throws -> [(String, [Float], [Float])] {
        try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/static-reference.jsonl").map {
            ($0["text"] as! String, ($0["static"] as! [NSNumber]).map(\.floatValue), ($0["transformer"] as! [NSNumber]).map(\.floatValue))
        }
    }

    @Test("the committed table loads: the model's 30522 tokens, 384-d output")
    func loads() throws {
        let t = try #require(table, "cannot load \(tablePath)")
        #expect(t.tokenizer.vocabulary.count == 30522)
        #expect(t.dimension == 384)
        #expect(t.tokenizer.vocabulary.id(of: "[CLS]") == 101)
    }

    @Test("vectors equal the build script's for held-out documents, and lie near the transformer's")
    func matchesBuildScript() throws {
        let t = try #require(table)
        let cases = try Self.reference()
        #expect(cases.count >= 40)
        var total: Float = 0
        for (text, expected, transformer) in cases {
            let v = t.embed(text)
            #expect(cosine(v, expected) > 0.9999, "static vector differs from the script's for \(text.prefix(60).debugDescription)")
            total += cosine(v, transformer)
        }
        // The script reports the figure on 1000 held-out documents; these 40 are a sample of them.
        #expect(total / Float(cases.count) > 0.6)
    }

    @Test("a text without tokens gives the zero vector; vectors are unit length otherwise")
    func edges() throws {
        let t = try #require(table)
        #expect(t.embed("").allSatisfy { $0 == 0 })
        #expect(t.embed(" \u{0001} ").allSatisfy { $0 == 0 })
        let v = t.embed("json parser")
        #expect(abs(v.reduce(0) { $0 + $1 * $1 } - 1) < 1e-4)
    }

    @Test("a truncated, foreign or oversized table is refused with an error naming it")
    func damaged() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: tablePath))
        var foreign = data
        foreign[0] = 0x58
        var huge = data
        huge[8] = 0xFF
        huge[9] = 0xFF
        huge[10] = 0xFF
        for (bad, name) in [(data.prefix(data.count - 1), "truncated"), (data + Data([0]), "trailing"), (foreign, "foreign"), (huge, "huge")] {
            #expect(throws: SemanticError.self, "\(name)") { try StaticEncoder(data: Data(bad), path: "/x/\(name).bin") }
        }
    }

    @Test("static vectors of the same text from the tokenizer's pieces and from the text agree")
    func pieces() throws {
        let t = try #require(table)
        let text = "A library for reading and writing PNG images"
        #expect(t.embed(text) == t.embed(pieces: t.tokenizer.tokenize(text)))
    }
}
