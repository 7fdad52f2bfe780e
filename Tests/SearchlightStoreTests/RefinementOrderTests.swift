import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

@Suite("Refinement where users look first", .onOwnThreads)
struct RefinementOrderTests {
    @Test("hints hand out engaged before used before returned, the latest first within a tier, each once")
    func hintsOrder() {
        var h = RefinementHints()
        h.note([10, 11], tier: .returned, at: 100)
        h.note([12], tier: .returned, at: 200)
        h.note([20], tier: .used, at: 50)
        h.note([30], tier: .engaged, at: 10)
        h.note([11], tier: .engaged, at: 5)  // a returned item opened later keeps the better tier
        #expect(h.take(3) == [11, 30, 20])
        #expect(h.take(10) == [12, 10])
        #expect(h.take(1).isEmpty)
    }

    @Test("past its capacity the set drops its worst hints, so a batch scans a bounded set")
    func hintsBounded() {
        var h = RefinementHints(capacity: 64)
        h.note([1], tier: .engaged, at: 0)
        for i in 2...1000 { h.note([Int64(i)], tier: .returned, at: Double(i)) }
        #expect(h.count <= 64)
        #expect(h.take(2) == [1, 1000], "the engaged item and the latest hit survive")
    }

    @Test("the descending cursor walks down from the newest rowid, then once over rowids donated meanwhile")
    func cursor() {
        var c = RefinementCursor(descending: true)
        c.advance(over: [9, 8])
        #expect((c.lower, c.upper) == (0, 8))
        c.advance(over: [])  // the pass ended: once more above its start
        #expect((c.lower, c.upper, c.isDone) == (9, .max, false))
        c.advance(over: [12])
        c.advance(over: [])
        #expect((c.lower, c.upper, c.isDone) == (12, .max, false))
        c.advance(over: [])
        #expect(c.isDone)
        var up = RefinementCursor(descending: false)
        up.advance(over: [1, 2])
        #expect(up.lower == 2)
        up.advance(over: [])
        #expect(up.isDone)
    }

    /// Eight items, rowids 1 to 8 in donation order.
    static func fixture() throws -> StoreFixture {
        let f = try StoreFixture(vectors: true)
        for i in 1...8 {
            try f.donate(try f.item("item\(i)", ["title": .string("Item \(i)"), "textContent": .string("body of item number \(i) word\(i)")]))
        }
        return f
    }

    /// Refines one batch of `batch` items; the identifiers whose vectors it refined.
    static func refineOneBatch(_ f: StoreFixture, batch: Int, order: RefinementOrder = .whereUsersLook) throws -> Set<String> {
        var batches = 0
        _ = try f.store.refineVectors(batch: batch, order: order, embed: { batches += 1; return $0.map(staticEncoder.embed) },
            yieldNow: { batches >= 1 })
        return Set(try (1...8).map { "item\($0)" }.filter { try f.store.refinedCount(identifiers: [$0]).refined == 1 })
    }

    @Test("an engaged item and a user query's hits are refined first, then the newest donations; rowid order is the old one")
    func engagedAndReturnedFirst() throws {
        let f = try Self.fixture()
        try f.store.recordEngagement(identifier: "item2", suggestion: nil, weight: 1)
        var q = UserQueryRequest(text: "word4")
        q.maxResultCount = 5
        #expect(f.ids(try f.store.userQuery(q)) == ["item4"])
        #expect(try Self.refineOneBatch(f, batch: 2) == ["item2", "item4"])
        #expect(try Self.refineOneBatch(f, batch: 2) == ["item2", "item4", "item8", "item7"], "then the newest rowids")

        let old = try Self.fixture()
        try old.store.recordEngagement(identifier: "item2", suggestion: nil, weight: 1)
        #expect(try Self.refineOneBatch(old, batch: 2, order: .rowid) == ["item1", "item2"])
    }

    @Test("engagement and lastUsedDate survive a reopen: the reopened store refines those items first")
    func engagedFirstAfterReopen() throws {
        let f = try Self.fixture()
        try f.donate(try f.item("item3", ["title": "Item 3", "textContent": "body of item number 3 word3",
                                          "lastUsedDate": "2026-11-01T00:00:00Z"]))
        try f.store.recordEngagement(identifier: "item5", suggestion: nil, weight: 1)
        try f.reopen()
        #expect(try Self.refineOneBatch(f, batch: 2) == ["item3", "item5"])
    }

    @Test("items donated while a descending run is under way are refined in the same run")
    func donationsDuringTheRun() throws {
        let f = try Self.fixture()
        var batches = 0
        let n = try f.store.refineVectors(batch: 3, embed: { texts in
            batches += 1
            if batches == 1 { try? f.donate(try! f.item("late", ["title": "Late", "textContent": "donated during the run"])) }
            return texts.map(staticEncoder.embed)
        }, yieldNow: { false })
        #expect(n == 9)
        #expect(try f.store.vectorCounts() == (vectors: 9, refined: 9))
    }
}
