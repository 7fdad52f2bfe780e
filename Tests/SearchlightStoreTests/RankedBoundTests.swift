import Foundation
import Testing
import TestThreads
@testable import SearchlightStore

/// The bounds that let the ranked top k skip blocks: a bound below a document's true score would
/// drop it from the answer, so each is checked against every document it covers.
@Suite("Ranked index bounds", .onOwnThreads)
struct RankedBoundTests {
    static func postings(_ docs: Int, among span: Int, _ r: inout SeededRandom) -> [Posting] {
        var chosen = Set<UInt32>()
        while chosen.count < docs { chosen.insert(UInt32.random(in: 0..<UInt32(span), using: &r)) }
        return chosen.sorted().map { d in
            // A few documents with a high frequency in a short text, in the first tenth of the
            // segment: the blocks' bounds differ there from the rest.
            let strong = d < UInt32(span / 10) && UInt32.random(in: 0..<10, using: &r) == 0
            return Posting(doc: d, frequency: strong ? UInt32.random(in: 20...60, using: &r) : UInt32.random(in: 1...2, using: &r),
                mask: 1, extra: false, length: strong ? UInt32.random(in: 3...20, using: &r) : UInt32.random(in: 100...400, using: &r))
        }
    }

    static func list(_ postings: [Posting]) throws -> PostingList {
        try #require(PostingList(PostingListFormat.encode(postings) { _ in .none }))
    }

    @Test("the other phrases' bound over a driver block's documents is at least every document's addends, and within the segment's")
    func otherBlockBounds() throws {
        var r = SeededRandom(state: 0xB10C_B0DD)
        let bm25 = BM25(rows: 20_000, tokens: 20_000 * 120)
        for round in 0..<20 {
            let span = 20_000
            let blocked = Self.postings(Int.random(in: 300...4000, using: &r), among: span, &r)
            let small = Self.postings(Int.random(in: 1...100, using: &r), among: span, &r)
            let driver = try Self.list(Self.postings(Int.random(in: 200...3000, using: &r), among: span, &r))
            #expect(driver.hasBounds)
            let (idfA, idfB) = (Double.random(in: 0.1...8, using: &r), Double.random(in: 0.1...8, using: &r))
            let sources: [(source: PhraseSource, idf: Double)] = [(.list(try Self.list(blocked)), idfA), (.list(try Self.list(small)), idfB)]
            var bounds = OtherBlockBounds(sources, bm25: bm25)
            let segmentWide = sources.reduce(0.0) { $0 + Scorer.maxAddend(idf: $1.idf, $1.source, bm25) }
            func addend(_ p: Posting, _ idf: Double) -> Double {
                BM25.addend(idf: idf, frequency: Double(p.frequency), norm: bm25.lengthNorm(p.length))
            }
            var tighter = 0
            for b in driver.blocks.indices {
                let first = b == 0 ? 0 : driver.blocks[b - 1].lastDoc + 1, last = driver.blocks[b].lastDoc
                let bound = bounds.bound(from: first, through: last)
                // Each phrase's largest addend among the documents of the range (0: none there).
                let a = blocked.filter { (first...last).contains($0.doc) }.map { addend($0, idfA) }.max() ?? 0
                let c = small.filter { (first...last).contains($0.doc) }.map { addend($0, idfB) }.max() ?? 0
                #expect(bound * RankedTopK.boundSlack >= a + c, "round \(round), block \(b): \(bound) < \(a) + \(c)")
                #expect(bound <= segmentWide * RankedTopK.boundSlack, "round \(round), block \(b): looser than the segment's \(segmentWide)")
                if bound < segmentWide * 0.99 { tighter += 1 }
            }
            // Not a correctness condition, but the point of the bound: some blocks get less.
            if round == 0 { #expect(tighter > 0) }
        }
    }
}
