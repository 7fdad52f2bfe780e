import Foundation
import Testing
import TestThreads
@testable import SearchlightStore

/// `QueryYield`: background work hands the CPU to user queries every `intervalNanos` of its
/// work while a query arrived within `activeNanos`.
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

    @Test("a thread that waited for a CPU more than `starvedShare` of its runnable time in a window is starved; a long gap is only a new baseline")
    func starvation() throws {
        let limit = UInt64(QueryYield.starvedShare * 1000)
        #expect(!QueryYield.isStarved(runDelay: limit, cpu: 1000 - limit))
        #expect(QueryYield.isStarved(runDelay: limit + 1, cpu: 1000 - limit - 1))
        #expect(!QueryYield.isStarved(runDelay: 0, cpu: 0))

        let w = QueryYield.windowNanos
        var sched: QueryYield.Sched? = QueryYield.Sched(cpu: 0, runDelay: 0)
        let pacing = QueryYield.Pacing()
        pacing.read = { sched }
        let t0: UInt64 = 1_000 * w
        #expect(!pacing.starved(at: t0), "the first window is a baseline")
        // Within a window: the state of the last one, however the thread fared meanwhile.
        sched = QueryYield.Sched(cpu: w / 10, runDelay: w)
        #expect(!pacing.starved(at: t0 + w / 2))
        // A window over: waited 10 of every 11 runnable ns: starved.
        #expect(pacing.starved(at: t0 + w))
        // Slept the next window through (no CPU, no wait): the state holds.
        #expect(pacing.starved(at: t0 + 2 * w))
        // Ran more than it waited: no longer starved.
        sched = QueryYield.Sched(cpu: w / 10 + w, runDelay: w + w / 10)
        #expect(!pacing.starved(at: t0 + 3 * w))
        // A gap of many windows, starved at its end: only a new baseline, the state holds; the
        // next window decides.
        sched = QueryYield.Sched(cpu: 2 * w, runDelay: 20 * w)
        #expect(!pacing.starved(at: t0 + 30 * w), "a long gap is a baseline")
        sched = QueryYield.Sched(cpu: 2 * w + w / 10, runDelay: 21 * w)
        #expect(pacing.starved(at: t0 + 31 * w))
        // Unreadable: the state holds and the baseline stays.
        sched = nil
        #expect(pacing.starved(at: t0 + 32 * w))
        sched = QueryYield.Sched(cpu: 3 * w, runDelay: 21 * w + w / 10)
        #expect(!pacing.starved(at: t0 + 32 * w + w / 2), "measured from the last readable baseline")
        // The kernel's own figures parse (a running thread's CPU time lags by up to a tick).
        if FileManager.default.fileExists(atPath: "/proc/thread-self/schedstat") { #expect(QueryYield.sched() != nil) }
    }

    @Test("a build's writes yield while queries arrive beside them; a client's donation does not", .enabled(if: QueryYield.enabled))
    func buildYieldsDonationDoesNot() throws {
        let f = try StoreFixture(rankedBuilds: false)
        let items = try (0..<3000).map { i in
            try f.item("i\(i)", ["title": .string("alpha \(i) beta \(i % 97) gamma \(i % 13)"), "textContent": .string(String(repeating: "word\(i % 211) ", count: 20))])
        }
        // Queries arrive without pause (as the daemon's query entry marks them), reading the store.
        let stop = Flag()
        let ended = DispatchSemaphore(value: 0)
        let querier = Thread {
            while !stop.value {
                QueryYield.queryBegan()
                _ = try? f.store.lexicalCandidates("alpha ", limit: 10)
            }
            ended.signal()
        }
        querier.start()
        defer {
            stop.value = true
            ended.wait()
        }
        // A loaded test machine could starve the writer, which then rightly stops yielding.
        _ = try f.store.writeOutsideTransaction { _ in
            QueryYield.Pacing.current.neverStarved = true
            return ApplyResult()
        }
        _ = try f.store.applySync([.items(items)])
        #expect(f.store.writer.yieldState.yields == 0, "the donation's statements kept the writer's slice")
        try f.store.buildRankedIndex()
        #expect(f.store.writer.yieldState.yields > 0, "the build's term batches yielded")
        // Work outside a transaction after them (a query's vector load, a checkpoint) does not.
        let after = f.store.writer.yieldState.yields
        _ = try f.store.writeOutsideTransaction { store in
            QueryYield.queryBegan()
            _ = try store.writer.intScalar("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) SELECT count(*) FROM n")
            return ApplyResult()
        }
        #expect(f.store.writer.yieldState.yields == after)
    }

    @Test("a connection's statements yield while it is marked, also after a budget ran on it, and not once unmarked", .enabled(if: QueryYield.enabled))
    func progressHandlerFollowsTheMark() throws {
        let dir = NSTemporaryDirectory() + "slyield-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let db = try Database(path: dir + "/y.sqlite")
        defer { db.close() }
        QueryYield.Pacing.current.neverStarved = true  // this thread's (a loaded machine starves it)
        defer { QueryYield.Pacing.current.neverStarved = false }
        // About 20 ms of statement steps.
        let long = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) SELECT count(*) FROM n"
        func run() throws {
            QueryYield.queryBegan()
            _ = try db.intScalar(long)
        }
        try run()
        #expect(db.yieldState.yields == 0, "unmarked: no handler")
        db.yieldsToQueries = true
        try run()
        let marked = db.yieldState.yields
        #expect(marked > 0)
        try db.withBudget(QueryBudget(timeout: 60)) { _ = try db.intScalar("SELECT 1") }
        try run()
        #expect(db.yieldState.yields > marked, "the budget gave the handler back")
        db.yieldsToQueries = false
        let unmarked = db.yieldState.yields
        try run()
        #expect(db.yieldState.yields == unmarked)
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
