import Foundation
import Testing
import TestThreads
@testable import SearchlightStore

/// `QueryYield`: background work hands the CPU to user queries every `intervalNanos` of its
/// work while a query began within `activeNanos`.
@Suite("Background work yields to queries", .onOwnThreads)
struct QueryYieldTests {
    @Test("a look every interval at most; a yield only while a query began within the active span")
    func decision() {
        let ms: UInt64 = 1_000_000
        let start: UInt64 = 10_000 * ms
        // Before the interval: no look, `last` kept.
        #expect(QueryYield.decide(at: start + QueryYield.intervalNanos - 1, last: start, lastQuery: start) == (false, start))
        // At the interval with a query just begun: a yield, `last` moves.
        let t = start + QueryYield.intervalNanos
        #expect(QueryYield.decide(at: t, last: start, lastQuery: t - ms) == (true, t))
        // No query ever, or the last one too long ago: a look, no yield.
        #expect(QueryYield.decide(at: t, last: start, lastQuery: 0) == (false, t))
        #expect(QueryYield.decide(at: t, last: start, lastQuery: t - QueryYield.activeNanos) == (false, t))
        #expect(QueryYield.decide(at: t, last: start, lastQuery: t - QueryYield.activeNanos + 1) == (true, t))
    }

    @Test("the writer's statements and a segment build yield while queries run beside them")
    func writerAndBuildYield() throws {
        let f = try StoreFixture(rankedBuilds: false)
        let items = try (0..<3000).map { i in
            try f.item("i\(i)", ["title": .string("alpha \(i) beta \(i % 97) gamma \(i % 13)"), "textContent": .string(String(repeating: "word\(i % 211) ", count: 20))])
        }
        let before = QueryYield.count
        // A query's read (this thread is not at background priority) marks queries active; the
        // donation's and the build's statements then run on the writer, which always yields.
        let stop = Flag()
        let ended = DispatchSemaphore(value: 0)
        let querier = Thread {
            while !stop.value { _ = try? f.store.lexicalCandidates("alpha ", limit: 10) }
            ended.signal()
        }
        querier.start()
        defer {
            stop.value = true
            ended.wait()
        }
        _ = try f.store.applySync([.items(items)])
        try f.store.buildRankedIndex()
        #expect(QueryYield.count > before, "no yield while queries ran: \(QueryYield.count) after \(before)")
    }
}

private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = false
    var value: Bool {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
