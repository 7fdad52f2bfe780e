import Foundation
import SearchlightSemantic
import SearchlightStore
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// The daemon's query vector says which encoder made it, so that each index can pick the fusion
/// constants for it (`SemanticRequest.tuning`).
@Suite("Semantic engine: the query's encoder", .onOwnThreads)
struct SemanticEngineTests {
    static let repository: String = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url.path
    }()

    /// The model folder of `make model` (`SEARCHLIGHT_MODEL_DIR` under `make test`).
    static let model: ModelDirectory = {
        if let d = ProcessInfo.processInfo.environment["SEARCHLIGHT_MODEL_DIR"], !d.isEmpty { return ModelDirectory(path: d) }
        return ModelDirectory.resolve(systemMode: false)
    }()

    @Test("with only the static table, a query is embedded by it and says so")
    func staticOnly() throws {
        let dir = NSTemporaryDirectory() + "sl-engine-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createSymbolicLink(atPath: dir + "/static-table.bin",
            withDestinationPath: Self.repository + "/Models/all-MiniLM-L6-v2-static.bin")
        let engine = SemanticEngine(directory: ModelDirectory(path: dir), idleSeconds: 300, log: Logger(label: "test", level: .error))
        engine.prepare()  // no transformer files: stays unloaded
        let r = try #require(try engine.request("listen to songs", weight: 0.4, owner: 0, budget: QueryBudget(timeout: 10)))
        #expect(r.encoder == .staticTable)
        #expect(r.weight == 0.4)
        #expect(r.vector.count == 384)
    }

    @Test("once the transformer is loaded it embeds the queries and says so; unloaded, the static table again",
          .enabled(if: SemanticEngineTests.model.hasTransformer, Comment(rawValue: "SKIPPED: \(SemanticEngineTests.model.unavailableReason ?? "")")))
    func transformerLoaded() throws {
        let engine = SemanticEngine(directory: Self.model, idleSeconds: 300, log: Logger(label: "test", level: .error))
        engine.prepare()
        #expect(engine.isLoaded)
        #expect(try #require(try engine.request("listen to songs", weight: 0.5, owner: 0, budget: QueryBudget(timeout: 10))).encoder == .transformer)
        engine.unloadIfIdle(now: Date().addingTimeInterval(301))
        #expect(!engine.isLoaded)
        #expect(try #require(try engine.request("listen to songs", weight: 0.5, owner: 0, budget: QueryBudget(timeout: 10))).encoder == .staticTable)
    }

    @Test("a model file truncated after loading: the query gets the static table's vector, the transformer is dropped and status says why",
          .enabled(if: SemanticEngineTests.model.hasTransformer, Comment(rawValue: "SKIPPED: \(SemanticEngineTests.model.unavailableReason ?? "")")))
    func truncatedAfterLoading() throws {
        let dir = NSTemporaryDirectory() + "sl-engine-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = ModelDirectory(path: dir)
        try FileManager.default.createSymbolicLink(atPath: model.staticTableFile, withDestinationPath: Self.model.staticTableFile)
        try FileManager.default.createSymbolicLink(atPath: model.vocabularyFile, withDestinationPath: Self.model.vocabularyFile)
        try FileManager.default.copyItem(atPath: Self.model.weightsFile, toPath: model.weightsFile)
        let engine = SemanticEngine(directory: model, idleSeconds: 300, log: Logger(label: "test", level: .error))
        engine.prepare()
        #expect(engine.isLoaded)
        #expect(try #require(try engine.request("listen to songs", weight: 0.5, owner: 0, budget: QueryBudget(timeout: 10))).encoder == .transformer)
        // Every tensor's bytes gone: the word embeddings are read from the file per query.
        #expect(truncate(model.weightsFile, 20_000) == 0)
        let r = try #require(try engine.request("listen to songs", weight: 0.5, owner: 0, budget: QueryBudget(timeout: 10)))
        #expect(r.encoder == .staticTable)
        #expect(r.vector.count == 384)
        #expect(!engine.isLoaded)
        #expect(engine.status["reason"]?.stringValue?.contains("failed after loading") == true)
        engine.prepare()  // the truncated file does not load again
        #expect(!engine.isLoaded)
    }
}
