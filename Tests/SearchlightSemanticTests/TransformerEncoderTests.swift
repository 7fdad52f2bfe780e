import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The encoder is loaded once for the suite (90 MB of weights). OpenBLAS on one thread: the suite
/// runs beside the integration tests, whose timing-bounded checks (a fork bomb's process peak)
/// should not lose a core to BLAS threads spinning.
private let encoder: TransformerEncoder? = {
    TransformerEncoder.setThreads(1)
    return try? TransformerEncoder(directory: TestModel.directory)
}()

/// Runs `body` on a thread of its own: loading the model takes seconds in a debug build, and a
/// test (or a test waiting for the shared `encoder` to be loaded) would hold one of the test
/// pool's threads that long; on 2 cores two of them leave none for tests that need one within
/// seconds (RPCWriterTests).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// The shared encoder, loaded (once) off the test pool.
func sharedEncoder() async throws -> TransformerEncoder? {
    try await offPool { encoder }
}

func cosine(_ a: [Float], _ b: [Float]) -> Float {
    var dot: Float = 0, na: Float = 0, nb: Float = 0
    for i in a.indices {
        dot += a[i] * b[i]
        na += a[i] * a[i]
        nb += b[i] * b[i]
    }
    return dot / max((na * nb).squareRoot(), 1e-12)
}

@Suite("Transformer encoder (all-MiniLM-L6-v2)", .enabled(if: TestModel.available, TestModel.skipReason), .onOwnThreads)
struct TransformerEncoderTests {
    static func reference() throws -> [(String, [Float])] {
        try TestModel.jsonLines("Tests/SearchlightSemanticTests/Fixtures/embedding-reference.jsonl").map {
            ($0["text"] as! String, ($0["embedding"] as! [NSNumber]).map(\.floatValue))
        }
    }

    @Test("embeddings match sentence-transformers' (cosine >= 0.999 for every fixture text)")
    func matchesReference() async throws {
        let e = try #require(try await sharedEncoder())
        let cases = try Self.reference()
        #expect(cases.count >= 100)
        let mine = e.embed(cases.map(\.0))
        var worst: Float = 1
        for (i, c) in cases.enumerated() {
            let similarity = cosine(mine[i], c.1)
            worst = min(worst, similarity)
            if similarity < 0.999 { Issue.record("cosine \(similarity) for \(c.0.prefix(80).debugDescription)") }
        }
        #expect(worst >= 0.999)
        // One at a time, a short text's products are split over two threads: the same answers.
        for c in cases.prefix(30) where e.tokenizer.encode(c.0).count <= TransformerEncoder.shortPassRows {
            #expect(cosine(e.embed(c.0), c.1) >= 0.999, "split products differ for \(c.0.prefix(60).debugDescription)")
        }
    }

    @Test("a text embeds the same alone and inside a batch of texts of other lengths")
    func batching() async throws {
        let e = try #require(try await sharedEncoder())
        let texts = ["json parser", "a library for reading and writing PNG images, with a long description that has many more tokens", "x"]
        let batch = e.embed(texts)
        for (i, t) in texts.enumerated() {
            #expect(cosine(batch[i], e.embed(t)) > 0.99999)
        }
    }

    @Test("a batch shared over threads (refinement) gives every text its own vector, in order, as one thread does")
    func threadedBatch() async throws {
        let e = try #require(try await sharedEncoder())
        let texts = (0..<11).map { i in
            String(repeating: "text \(i) about a music player and audio files ", count: 1 + i % 4) + "end \(i)"
        }
        let one = e.embed(texts)
        for threads in [2, 3, 4, 20] {
            let shared = e.embed(texts, threads: threads)
            #expect(shared.count == texts.count)
            for i in texts.indices {
                #expect(cosine(shared[i], one[i]) > 0.99999, "text \(i) with \(threads) threads")
            }
        }
        #expect(e.embed(["alone"], threads: 2).count == 1)
        #expect(e.embed([], threads: 2).isEmpty)
    }

    @Test("vectors are unit length and have 384 dimensions; related texts are nearer than unrelated ones")
    func geometry() async throws {
        let e = try #require(try await sharedEncoder())
        let v = e.embed(["play music files", "audio player", "compiler for the C language"])
        for x in v {
            #expect(x.count == 384)
            #expect(abs(cosine(x, x) - 1) < 1e-5)
            #expect(abs(x.reduce(0) { $0 + $1 * $1 } - 1) < 1e-4)
        }
        #expect(cosine(v[0], v[1]) > cosine(v[0], v[2]))
    }

    @Test("a damaged weights file is refused with an error naming the file, not a crash")
    func damagedFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sl-sem-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let weights = dir.appendingPathComponent("model.safetensors").path
        let original = try Data(contentsOf: URL(fileURLWithPath: TestModel.directory.weightsFile), options: .alwaysMapped)
        try original.prefix(1_000_000).write(to: URL(fileURLWithPath: weights))
        #expect {
            try TransformerEncoder(weightsFile: weights, vocabularyFile: TestModel.directory.vocabularyFile)
        } throws: { error in
            (error as? SemanticError)?.kind == .badFormat && "\(error)".contains(weights)
        }
    }
}

extension TransformerEncoderTests {
    @Test("the single-precision OpenBLAS form (CPUs without AVX-512) matches the reference too (0.9999), and the packed form (0.999)")
    func openBLASForm() async throws {
        let e = try #require(try await sharedEncoder())
        let cases = Array(try Self.reference().prefix(12))
        let texts = cases.map(\.0)
        let (blas, packed) = try await offPool {
            let blas = try TransformerEncoder(directory: TestModel.directory, queryThreads: 1, packedWeights: false)
            return (texts.map { blas.embed($0) }, texts.map { e.embed($0) })
        }
        for (i, c) in cases.enumerated() {
            #expect(cosine(blas[i], c.1) >= 0.9999, "OpenBLAS form for \(c.0.prefix(60).debugDescription)")
            #expect(cosine(blas[i], packed[i]) >= 0.999, "packed against OpenBLAS for \(c.0.prefix(60).debugDescription)")
        }
    }
}

/// The word-embedding table (47 MB) is read from the model file as needed, through the descriptor
/// the file was loaded through: not on the heap, not from a second open of the path.
@Suite("Transformer word embeddings from the file", .enabled(if: TestModel.available, TestModel.skipReason), .onOwnThreads)
struct TransformerWordEmbeddingFileTests {
    static func scratchDirectory() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sl-emb-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }

    @Test("the table is not on the heap, and embedding works the same after the file's path is unlinked or replaced")
    func unlinked() async throws {
        let e = try #require(try await sharedEncoder())
        #expect(e.weights.wordEmbeddings.heapBytes == 0)
        let dir = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let weights = dir.appendingPathComponent("model.safetensors").path
        // A hard link: the same inode as the installed model, not a 90 MB copy.
        try #require(link(TestModel.directory.weightsFile, weights) == 0)
        let texts = ["play music files", "a compiler for the C language"]
        let (before, after, expected) = try await offPool {
            let mine = try TransformerEncoder(weightsFile: weights, vocabularyFile: TestModel.directory.vocabularyFile, queryThreads: 1)
            let before = try mine.embedding(tokenIDs: texts.map { mine.tokenizer.encode($0, maxLength: 256) })
            unlink(weights)
            // Something else in the path's place is never read.
            try Data(repeating: 0xFF, count: 4096).write(to: URL(fileURLWithPath: weights))
            let after = try mine.embedding(tokenIDs: texts.map { mine.tokenizer.encode($0, maxLength: 256) })
            return (before, after, texts.map { e.embed($0) })
        }
        #expect(before == after)
        for i in texts.indices { #expect(cosine(before[i], expected[i]) > 0.99999) }
    }

    @Test("a model file truncated after loading gives an error (or zero vectors from the non-throwing forms), never its rows' garbage")
    func truncated() async throws {
        let dir = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let weights = dir.appendingPathComponent("model.safetensors").path
        try FileManager.default.copyItem(atPath: TestModel.directory.weightsFile, toPath: weights)
        let file = try SafetensorsFile(path: weights)
        let range = try #require(file.tensors["embeddings.word_embeddings.weight"]).range
        let header = try Data(contentsOf: URL(fileURLWithPath: weights)).prefix(8).reversed().reduce(0) { $0 << 8 | Int($1) }
        let (ok, thrown, stopped, zero) = try await offPool {
            let mine = try TransformerEncoder(weightsFile: weights, vocabularyFile: TestModel.directory.vocabularyFile, queryThreads: 1)
            let ok = try mine.embed("play music files", shouldStop: { false })
            // Rows from 100 on ([CLS] is 101) are gone.
            truncate(weights, off_t(8 + header + range.lowerBound + 100 * 384 * 4 + 10))
            var thrown: SemanticError?
            do throws(SemanticError) { _ = try mine.embed("play music files", shouldStop: { false }) } catch { thrown = error }
            var stopped: SemanticError?
            do throws(SemanticError) { _ = try mine.embedding(["play music files", "audio"], threads: 2) } catch { stopped = error }
            return (ok, thrown, stopped, mine.embed("play music files"))
        }
        #expect(ok?.count == 384)
        #expect(thrown?.kind == .badFormat)
        #expect(thrown?.message.contains("changed after it was loaded") == true)
        #expect(stopped?.kind == .badFormat)
        #expect(zero == [Float](repeating: 0, count: 384))
    }

    @Test("a row outside the table is refused")
    func outside() async throws {
        let e = try #require(try await sharedEncoder())
        let out = UnsafeMutablePointer<Float>.allocate(capacity: 384)
        defer { out.deallocate() }
        #expect(throws: SemanticError.self) { try e.weights.wordEmbeddings.read(30522, into: out) }
        #expect(throws: SemanticError.self) { try e.weights.wordEmbeddings.read(-1, into: out) }
        try e.weights.wordEmbeddings.read(30521, into: out)
    }
}
