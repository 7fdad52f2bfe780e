import Foundation
import SearchlightSemantic
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// Folding near-duplicate vector hits before fusion (`VectorIndex.nearDuplicates`,
/// `HybridFusion.demoteFolded`, `VectorFold`): a library's -dev and -doc siblings, whose vectors
/// are nearly one, must not fill the vector side's top together.
@Suite("Folding near-duplicate vector hits", .onOwnThreads)
struct VectorFoldTests {
    /// A unit vector in 4 dimensions at `degrees` in the plane of the first two axes.
    func at(_ degrees: Double) -> QuantizedVector {
        let r = degrees * .pi / 180
        return QuantizedVector([Float(cos(r)), Float(sin(r)), 0, 0])
    }

    func index(_ vectors: [(Int64, QuantizedVector)]) throws -> VectorIndex {
        var index = VectorIndex(dimension: 4)
        for (rowid, v) in vectors { try index.set(rowid, v) }
        return index
    }

    @Test("a hit within the threshold of a leader above it is folded; a chain of small steps folds only the step next to the leader")
    func leaders() throws {
        // 1 at 0°, 2 at 20° (cos 0.94 with 1), 3 at 40° (cos 0.94 with 2, 0.77 with 1), 4 at 90°.
        let idx = try index([(1, at(0)), (2, at(20)), (3, at(40)), (4, at(90))])
        #expect(idx.nearDuplicates([1, 2, 3, 4], threshold: 0.9, depth: 10) == [false, true, false, false],
            "3 is compared with the leader 1 (cos 0.77), not with 2, which is folded into 1")
        #expect(idx.nearDuplicates([1, 2, 3, 4], threshold: 0.95, depth: 10) == [false, false, false, false])
        #expect(idx.nearDuplicates([1, 2, 3, 4], threshold: 0.7, depth: 10) == [false, true, true, false])
        #expect(idx.nearDuplicates([4, 3, 2, 1], threshold: 0.9, depth: 10) == [false, false, true, false],
            "the order decides who leads: 2 folds into 3 above it, 1 (cos 0.77 with 3) stays")
    }

    @Test("only the first depth hits are compared, an item without a vector is neither folded nor a leader, and the scales do not matter")
    func depthMissingAndScale() throws {
        // 5 is 1 at another length: quantised to other codes and scale, the same direction.
        let idx = try index([(1, at(0)), (2, at(10)), (4, at(90)), (5, QuantizedVector([0.5, 0, 0, 0]))])
        #expect(idx.nearDuplicates([1, 4, 2, 5], threshold: 0.95, depth: 10) == [false, false, true, true])
        #expect(idx.nearDuplicates([1, 4, 2, 5], threshold: 0.95, depth: 3) == [false, false, true, false], "5 is below the depth")
        #expect(idx.nearDuplicates([9, 1, 2], threshold: 0.95, depth: 10) == [false, false, true], "9 has no vector")
        #expect(idx.nearDuplicates([1], threshold: 0.5, depth: 10) == [false])
        #expect(VectorIndex(dimension: 4).nearDuplicates([1, 2], threshold: 0.5, depth: 10) == [false, false])
    }

    func m(_ rowid: Int64) -> VectorMatch { VectorMatch(rowid: rowid, similarity: 0.5) }

    @Test("folded vector hits rank behind every other vector hit, or keep their rank with a damped contribution")
    func demotion() {
        let vector = [m(1), m(2), m(3), m(4)], folded = [false, true, true, false]
        let behind = HybridFusion.fuse(lexical: [], vector: vector, weight: 1, limit: 10, folded: folded, fold: .behind)
        #expect(behind.map(\.rowID) == [1, 4, 2, 3])
        #expect(behind.map(\.vectorRank) == [1, 2, 3, 4])
        #expect(abs(behind[1].score - 1.0 / 62) < 1e-12)
        let damped = HybridFusion.fuse(lexical: [], vector: vector, weight: 1, limit: 10, folded: folded, fold: .damped(0.25))
        #expect(damped.map(\.rowID) == [1, 4, 2, 3])
        #expect(damped.map(\.vectorRank) == [1, 4, 2, 3], "a damped hit keeps its rank")
        #expect(abs(damped[2].score - 0.25 / 62) < 1e-12 && abs(damped[1].score - 1.0 / 64) < 1e-12)
        // Without a fold, or without flags, the ranking is today's.
        let plain = HybridFusion.fuse(lexical: [], vector: vector, weight: 1, limit: 10)
        #expect(plain.map(\.rowID) == [1, 2, 3, 4])
        #expect(HybridFusion.fuse(lexical: [], vector: vector, weight: 1, limit: 10, folded: folded) == plain)
        #expect(HybridFusion.fuse(lexical: [], vector: vector, weight: 1, limit: 10, folded: [], fold: .behind) == plain)
    }

    @Test("a lexical hit keeps its lexical contribution when its vector hit is folded")
    func lexicalSideUntouched() {
        // 2 is a lexical hit and a folded vector hit: damped to 0 it scores its lexical part alone.
        let fused = HybridFusion.fuse(lexical: [2], vector: [m(1), m(2)], weight: 0.5, limit: 10, folded: [false, true], fold: .damped(0))
        #expect(fused.first { $0.rowID == 2 }.map { abs($0.score - 0.5 / 61) < 1e-12 } == true)
        #expect(fused.map(\.rowID) == [2, 1], "ties go to the lexical side's item, as without a fold")
    }

    @Test("in the store, a hybrid query's vector side folds identical siblings so that a distinct item rises above them")
    func storeFolds() throws {
        let f = try StoreFixture(vectors: true)
        try f.donateMeanings()
        // Three packages of one library with one description, and the program, described apart.
        let library: JSONValue = "Library to read audio compact discs and extract their tracks."
        try f.donate(try f.item("libcd1", ["title": "libcd", "textContent": library]),
                     try f.item("libcd-dev", ["title": "libcd", "textContent": library]),
                     try f.item("libcd-doc", ["title": "libcd", "textContent": library]),
                     try f.item("cdtool", ["title": "cdtool", "textContent": "Command line tools to play and rip music CDs."]))
        func order(_ fold: VectorFold?) throws -> [String] {
            var r = UserQueryRequest(text: "compact disc reader")
            var s = SemanticRequest(vector: staticEncoder.embed("compact disc reader"), weight: 1, minimumSimilarity: -1)
            s.staticTuning.fold = fold
            r.semantic = s
            return f.ids(try f.store.userQuery(r))
        }
        let plain = try order(nil)
        let siblings = ["libcd1", "libcd-dev", "libcd-doc"]
        // The premise: without the fold the siblings fill the top 3, the tool comes after them.
        #expect(Array(plain.prefix(3)).sorted() == siblings.sorted(), "\(plain)")
        #expect(plain[3] == "cdtool", "\(plain)")
        let folded = try order(VectorFold(similarity: 0.99, depth: 20, demotion: .behind))
        #expect(folded[1] == "cdtool", "\(folded)")
        #expect(Set(folded) == Set(plain), "folding reorders, it neither adds nor drops items")
        #expect(folded.firstIndex(of: plain[0]) == 0, "the best of the siblings leads")

        // A deleted leader never comes back, and the next sibling leads in its place; a filter
        // holds on the folded ranking as on the plain one.
        let fold = VectorFold(similarity: 0.99, depth: 20, demotion: .behind)
        _ = try f.store.applySync([.deleteIdentifiers([plain[0]])])
        let afterDelete = try order(fold)
        #expect(!afterDelete.contains(plain[0]))
        #expect(siblings.contains(afterDelete[0]) && afterDelete[1] == "cdtool", "\(afterDelete)")
        var r = UserQueryRequest(text: "compact disc reader")
        var s = SemanticRequest(vector: staticEncoder.embed("compact disc reader"), weight: 1, minimumSimilarity: -1)
        s.staticTuning.fold = fold
        r.semantic = s
        r.filter = try QueryFront.filter(query: nil, filterQueries: [#"title == "libcd""#], limits: Limits(), now: f.clock.now)
        let filtered = f.ids(try f.store.userQuery(r))
        #expect(Set(filtered) == Set(siblings).subtracting([plain[0]]), "\(filtered)")
    }

    @Test("the refined tier folds (cosine 0.80 within the vector top 5, no contribution); the static tier does not")
    func constants() {
        #expect(FusionTuning.refinedVectors.fold == VectorFold(similarity: 0.80, depth: 5, demotion: .damped(0)))
        #expect(FusionTuning.staticVectors.fold == nil)
    }
}
