import Testing
import TestThreads
@testable import SearchlightStore

/// A reader connection's pool of union scratch arrays (`UnionScratchPool`): what it keeps between
/// queries is bounded, whatever the queries and segments (issue 32: at 1M items in 319 segments
/// the pool grew by ~190 KB a query, without end).
@Suite("Union scratch pool", .onOwnThreads)
struct UnionScratchPoolTests {
    /// The segments' document spans of one query, one union each (a prefix phrase over every
    /// segment), in an order that changes from query to query.
    static func spans(query: Int) -> [Int] {
        let base = [64, 300, 2_000, 4_096, 9_000, 120, 65_536, 1_500, 700, 33_000]
        return (0..<base.count).map { base[($0 * 7 + query * 3) % base.count] }
    }

    @Test("between queries the pool keeps at most its budget, query after query")
    func keepsItsBudget() {
        let budget = 64 * 1024
        let pool = UnionScratchPool(retainedBytes: budget)
        for q in 0..<50 {
            for span in Self.spans(query: q) { _ = pool.union([], span: span) }
            pool.reclaim()
            #expect(pool.freeBytes <= budget, "query \(q): \(pool.freeBytes) bytes kept")
        }
        #expect(pool.freeCount > 0, "the small scratches are kept for the next query")
    }

    @Test("without a budget the pool holds what its largest query borrowed, not one largest segment per union")
    func smallestThatFits() {
        let pool = UnionScratchPool(retainedBytes: Int.max)
        let oneQuery = Self.spans(query: 0).reduce(0) { $0 + UnionScratch.bytes(capacity: $1) }
        for q in 0..<50 {
            for span in Self.spans(query: q) { _ = pool.union([], span: span) }
            pool.reclaim()
        }
        // Lent at random, each scratch ends up grown to the largest span (10 × 65 536 documents,
        // 5.3 MB); lent the smallest that fits, the pool holds the spans of one query (~1 MB).
        #expect(pool.freeBytes == oneQuery, "\(pool.freeBytes) bytes kept, one query borrows \(oneQuery)")
    }

    @Test("a scratch lent again is zeroed: a union over it counts only its own lists")
    func reusedScratchIsClean() {
        let pool = UnionScratchPool(retainedBytes: 1 << 20)
        let first = pool.union([], span: 1_000)
        first.scratch.frequency[5] = 3
        first.scratch.seen[0] |= 1 << 5
        pool.reclaim()
        let again = pool.union([], span: 800)
        #expect(again.scratch === first.scratch)
        #expect(again.frequency(of: 5) == nil)
        #expect(again.count == 0)
        pool.reclaim()
    }

    @Test("SEARCHLIGHT_UNION_SCRATCH_KIB: KiB, unset or not a number 1 MiB, negative or too large no bound (it overflowed)")
    func budgetFromEnvironment() {
        #expect(UnionScratchPool.retainedBytes(kibibytes: nil) == 1 << 20)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "lots") == 1 << 20)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "64") == 64 * 1024)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "0") == 0)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "-1") == Int.max)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "\(Int.max / 1024 + 1)") == Int.max)
        #expect(UnionScratchPool.retainedBytes(kibibytes: "\(Int.max)") == Int.max)
    }
}
