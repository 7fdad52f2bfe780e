import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore

/// Which fusion constants a hybrid query uses (`SemanticRequest.tuning`): the refined ones only
/// for a query the transformer embedded, on an index whose vectors the transformer mostly made.
@Suite("Fusion constants by query encoder and refined share", .onOwnThreads)
struct FusionTuningTests {
    /// A request whose two tunings differ in every field, so that the one chosen is unmistakable.
    func request(_ encoder: QueryEncoder) -> SemanticRequest {
        var r = SemanticRequest(vector: [], weight: 0.5, encoder: encoder)
        r.staticTuning = FusionTuning(minimumSimilarity: 0.1, rrfK: 10, confidentHits: 5, confidentFactor: 0.1)
        r.refinedTuning = FusionTuning(minimumSimilarity: 0.9, rrfK: 90, confidentHits: nil, confidentFactor: 0.9)
        return r
    }

    @Test("a transformer query uses the refined constants where at least 90% of the index's vectors are refined, else the static ones")
    func transformerQuery() {
        let r = request(.transformer)
        #expect(r.tuning { (100, 100) } == r.refinedTuning)
        #expect(r.tuning { (100, 90) } == r.refinedTuning)
        #expect(r.tuning { (100, 89) } == r.staticTuning, "the mixed case: most of the ranking is static vectors")
        #expect(r.tuning { (100, 0) } == r.staticTuning)
        #expect(r.tuning { (0, 0) } == r.staticTuning, "an index without vectors")
    }

    @Test("issue 37: a transformer query searches a mostly unrefined index with the static table's embedding, a refined one with its own")
    func queryInDocumentsSpace() {
        var r = request(.transformer)
        r.vector = [1, 0]
        let table: [Float] = [0, 1]
        #expect(r.resolved(counts: { (100, 0) }, staticEmbedding: { table }) == (table, r.staticTuning))
        #expect(r.resolved(counts: { (100, 89) }, staticEmbedding: { table }) == (table, r.staticTuning))
        #expect(r.resolved(counts: { (100, 90) }, staticEmbedding: { table }) == ([1, 0], r.refinedTuning))
        #expect(r.resolved(counts: { (100, 0) }, staticEmbedding: { nil }) == ([1, 0], r.staticTuning), "no table: the transformer's vector")
        var s = request(.staticTable)
        s.vector = table
        var embedded = false
        #expect(s.resolved(counts: { (100, 100) }, staticEmbedding: { embedded = true; return [1, 0] }) == (table, s.staticTuning))
        #expect(!embedded, "a static query is already in the table's space")
    }

    @Test("issue 37: the vector floor is lowered to within the margin of a weak best hit, never below the minimum, never raised")
    func relativeFloor() {
        let f = RelativeFloor(margin: 0.08, minimum: 0.20)
        #expect(f.floor(best: 0.70, absolute: 0.35) == 0.35, "a strong best hit: the absolute floor")
        #expect(abs(f.floor(best: 0.30, absolute: 0.35) - 0.22) < 1e-6)
        #expect(f.floor(best: 0.22, absolute: 0.35) == 0.20, "never below the minimum")
        #expect(f.floor(best: 0.30, absolute: -1) == -1, "a lower floor given (tests: -1) stays")
        #expect(FusionTuning.staticVectors.relativeFloor == .standard && FusionTuning.refinedVectors.relativeFloor == .standard)
    }

    @Test("a static-table query uses the static constants whatever the index holds, without counting its refined vectors")
    func staticQuery() {
        let r = request(.staticTable)
        var counted = false
        #expect(r.tuning { counted = true; return (100, 100) } == r.staticTuning)
        #expect(!counted, "a static query has no use for the count: it must not ask for it")
    }

    @Test("the static tier keeps the constants tuned for it (floor 0.35, k 60, 10 lexical hits × 0.15)")
    func staticConstantsUnchanged() {
        #expect(FusionTuning.staticVectors == FusionTuning(minimumSimilarity: 0.35, rrfK: 60, confidentHits: 10, confidentFactor: 0.15))
        let r = SemanticRequest(vector: [], weight: 0.5)
        #expect(r.encoder == .staticTable)
        #expect(r.staticTuning == .staticVectors && r.refinedTuning == .refinedVectors)
        #expect(SemanticRequest.defaultMinimumSimilarity == 0.35)
    }

    @Test("lexical confidence scales the weight once the lexical side found enough items; weight 1 stays vectors only")
    func confidence() {
        let t = FusionTuning(minimumSimilarity: 0.35, confidentHits: 10, confidentFactor: 0.15)
        #expect(t.weight(0.5, lexicalHits: 9, limit: 100) == 0.5)
        #expect(abs(t.weight(0.5, lexicalHits: 10, limit: 100) - 0.075) < 1e-12)
        #expect(abs(t.weight(0.5, lexicalHits: 3, limit: 3) - 0.075) < 1e-12, "the result count filled counts as confident")
        #expect(t.weight(1, lexicalHits: 100, limit: 100) == 1)
        #expect(FusionTuning(minimumSimilarity: 0.35, confidentHits: nil, confidentFactor: 0.15).weight(0.5, lexicalHits: 100, limit: 100) == 0.5)
    }

    @Test("the store applies the constants of its own refined share: refining the index switches a transformer query to the refined ones")
    func storeSwitchesOnRefinement() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        // Static floor -1: every item is a vector hit; refined floor above any cosine: none is.
        func ids(_ encoder: QueryEncoder) throws -> [String] {
            var q = UserQueryRequest(text: "xyzzy")
            var s = SemanticRequest(vector: staticEncoder.embed("xyzzy"), weight: 0.5, encoder: encoder)
            s.staticTuning.minimumSimilarity = -1
            s.refinedTuning.minimumSimilarity = 2
            q.semantic = s
            return f.ids(try f.store.userQuery(q))
        }
        #expect(try ids(.transformer).count == 5, "no vector refined yet: the static constants")
        // 4 of 5 refined (80%): still mostly static.
        var batches = 0
        _ = try f.store.refineVectors(batch: 4, embed: { batches += 1; return $0.map(staticEncoder.embed) }, yieldNow: { batches >= 1 })
        #expect(try f.store.vectorCounts().refined == 4)
        #expect(try ids(.transformer).count == 5, "80% refined: below the share")
        _ = try f.store.refineVectors(batch: 4, embed: { $0.map(staticEncoder.embed) }, yieldNow: { false })
        #expect(try f.store.vectorCounts().refined == 5)
        #expect(try ids(.transformer).isEmpty, "all refined: the refined constants")
        #expect(try ids(.staticTable).count == 5, "a static query keeps the static constants on refined vectors")
    }
}
