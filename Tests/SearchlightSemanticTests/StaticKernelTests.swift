import CSemanticKernels
import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

private let tablePath = TestModel.repositoryFile("Models/all-MiniLM-L6-v2-static.bin")

/// The static encoder's C kernels (`CStaticKernels`) at every level this CPU runs, its batch path
/// and its word cache, against plain loops and the one-at-a-time path.
@Suite("Static encoder kernels, batches and word cache", .onOwnThreads)
struct StaticKernelTests {
    /// The levels this CPU can run (0 always).
    static let levels: [Int32] = Array(0...sl_static_level())

    /// Deterministic pseudo-random values.
    struct Numbers {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 33
        }
        mutating func float() -> Float { Float(next() % 20_001) / 10_000 - 1 }
        mutating func int8() -> Int8 { Int8(truncatingIfNeeded: Int(next() % 255) - 127) }
    }

    @Test("the row sum and the map give the plain loops' values at every level, for any dimension (the tails too), and levels 1 and 2 the same bits",
          arguments: [(128, 384), (37, 53), (16, 16), (200, 70), (8, 9)])
    func kernels(dims: (Int, Int)) {
        let (d, o) = dims
        var numbers = Numbers(state: UInt64(d * 1000 + o))
        let vocabulary = 500
        let rows = (0..<(vocabulary * d)).map { _ in numbers.int8() }
        let scales = (0..<vocabulary).map { _ in numbers.float() / 100 }
        let map = (0..<(d * o)).map { _ in numbers.float() }
        let bias = (0..<o).map { _ in numbers.float() }
        let ids = (0..<57).map { _ in Int32(numbers.next() % UInt64(vocabulary)) }
        var expectedSum = [Float](repeating: 0, count: d)
        for id in ids { for j in 0..<d { expectedSum[j] += scales[Int(id)] * Float(rows[Int(id) * d + j]) } }
        let documents = 7
        let x = (0..<(documents * d)).map { _ in numbers.float() }
        var expectedY = [Float](repeating: 0, count: documents * o)
        for r in 0..<documents {
            for j in 0..<o {
                var a = bias[j]
                for i in 0..<d { a += x[r * d + i] * map[i * o + j] }
                expectedY[r * o + j] = a
            }
        }
        var byLevel: [Int32: ([Float], [Float])] = [:]
        for level in Self.levels {
            var sum = [Float](repeating: .nan, count: d)
            sl_static_sum(level, rows, scales, d, ids, ids.count, &sum)
            var y = [Float](repeating: .nan, count: documents * o)
            sl_static_project(level, x, documents, d, map, bias, o, &y)
            for j in 0..<d { #expect(abs(sum[j] - expectedSum[j]) <= 1e-3 * max(1, abs(expectedSum[j])), "level \(level) sum[\(j)]") }
            for j in 0..<(documents * o) { #expect(abs(y[j] - expectedY[j]) <= 1e-3 * max(1, abs(expectedY[j])), "level \(level) y[\(j)]") }
            // A document's row does not depend on the others: each alone gives the same bits.
            for r in 0..<documents {
                var alone = [Float](repeating: .nan, count: o)
                sl_static_project(level, Array(x[(r * d)..<((r + 1) * d)]), 1, d, map, bias, o, &alone)
                #expect(alone == Array(y[(r * o)..<((r + 1) * o)]), "level \(level) row \(r) alone")
            }
            byLevel[level] = (sum, y)
        }
        if let one = byLevel[1], let two = byLevel[2] {
            #expect(one.0 == two.0)
            #expect(one.1 == two.1)
        }
    }

    @Test("quantising gives the portable loop's codes and scale at every level, for any length (the tails too), with values that are not finite, ties and zeros",
          arguments: [384, 1, 15, 17, 100, 0])
    func quantize(n: Int) {
        var numbers = Numbers(state: UInt64(n + 7))
        var cases: [[Float]] = (0..<20).map { _ in (0..<n).map { _ in numbers.float() } }
        cases.append([Float](repeating: 0, count: n))
        if n >= 4 {
            var special = (0..<n).map { _ in numbers.float() }
            special[0] = .nan
            special[1] = .infinity
            special[2] = -.infinity
            special[3] = -0.0
            cases.append(special)
            // Halfway codes: with a top of 127, ±0.5, ±1.5, ±2.5 are ties (round half to even).
            var ties = [Float](repeating: 0.5, count: n)
            ties[0] = 127
            for j in 1..<n { ties[j] = Float(j % 6) - 2.5 }
            cases.append(ties)
        }
        for values in cases {
            var reference = [Int8](repeating: 0, count: max(1, n))
            let referenceScale = sl_quantize_i8_level(0, values, n, &reference)
            for level in Self.levels {
                var codes = [Int8](repeating: 0, count: max(1, n))
                let scale = sl_quantize_i8_level(level, values, n, &codes)
                #expect(scale.bitPattern == referenceScale.bitPattern && codes == reference, "level \(level), n \(n)")
            }
            var best = [Int8](repeating: 0, count: max(1, n))
            #expect(sl_quantize_i8(values, n, &best).bitPattern == referenceScale.bitPattern && best == reference)
        }
    }

    static func texts() throws -> [String] {
        let fixture = try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/tokenizer-reference.jsonl").map { $0["text"] as! String }
        // Empty and token-less texts, one longer than the window, and repeats (cache hits).
        return ["", " \u{0001} ", String(repeating: "customizable packages, ", count: 200)] + fixture + fixture.prefix(20)
    }

    @Test("a batch of texts gets the same vectors as QuantizedVector(embed(text)) one at a time, at every kernel level, across batch boundaries")
    func batches() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: tablePath))
        let texts = try Self.texts()
        #expect(texts.count > 2 * StaticEncoder.batchSize)
        for level in Self.levels {
            let encoder = try StaticEncoder(data: data, path: tablePath, kernelLevel: level)
            let batch = encoder.quantizedVectors(of: texts)
            #expect(batch.count == texts.count)
            for (text, vector) in zip(texts, batch) {
                #expect(vector == QuantizedVector(encoder.embed(text)), "level \(level): \(text.prefix(40).debugDescription)")
            }
            #expect(batch[0].codes.allSatisfy { $0 == 0 } && batch[1].codes.allSatisfy { $0 == 0 })
        }
    }

    @Test("every kernel level embeds the build script's held-out documents to within cosine 0.9999 of its vectors")
    func levelsMatchScript() throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: tablePath))
        let cases = try StaticEncoderTests.reference()
        for level in Self.levels {
            let encoder = try StaticEncoder(data: data, path: tablePath, kernelLevel: level)
            for (text, expected, _) in cases {
                let v = encoder.embed(text)
                let dot = zip(v, expected).reduce(Float(0)) { $0 + $1.0 * $1.1 }
                let norm = expected.reduce(Float(0)) { $0 + $1 * $1 }.squareRoot()
                #expect(dot / norm > 0.9999, "level \(level): \(text.prefix(40).debugDescription)")
            }
        }
    }

    @Test("with the word cache, cold, warm and small enough to keep replacing entries, the pieces equal the reference tokenizer's")
    func cache() throws {
        let tokenizer = try StaticEncoder(file: tablePath).tokenizer
        let cases = try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/tokenizer-reference.jsonl")
        #expect(cases.count >= 300)
        for cache in [WordPieceCache(), WordPieceCache(entries: 2)] {
            for pass in 0..<2 {
                var mismatches = 0
                for c in cases {
                    let text = c["text"] as! String
                    let reference = Array((c["ids"] as! [NSNumber]).map { $0.int32Value }.dropFirst().dropLast())
                    var buffer = PieceBuffer(capacity: 4)
                    defer { buffer.deallocate() }
                    tokenizer.appendPieces(of: text, to: &buffer, limit: .max, cache: cache)
                    if Array(buffer.pieces) != reference {
                        mismatches += 1
                        if mismatches <= 5 { Issue.record("cache of \(cache.entries), pass \(pass): \(text.prefix(60).debugDescription)") }
                    }
                }
                #expect(mismatches == 0)
            }
        }
    }

    @Test("a cached word's entry is checked against the whole word: words of the same hash slot never borrow each other's pieces")
    func cacheCollisions() throws {
        let tokenizer = try StaticEncoder(file: tablePath).tokenizer
        let cache = WordPieceCache(entries: 1)  // every word shares the one entry
        let words = ["customizable", "customizables", "custom", "library", "libraries", "x", "xx", "parser", "parsers"]
        for _ in 0..<3 {
            for w in words {
                var buffer = PieceBuffer(capacity: 4)
                defer { buffer.deallocate() }
                tokenizer.appendPieces(of: w, to: &buffer, limit: .max, cache: cache)
                #expect(Array(buffer.pieces) == tokenizer.tokenize(w), "\(w)")
            }
        }
    }
}
