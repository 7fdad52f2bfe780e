import Foundation
import Synchronization

/// Background work hands the CPU to user queries within a fraction of a millisecond (issue 32).
///
/// On two cores, an app searching without pause keeps more than one core busy (its own threads
/// and the daemon's session thread overlap). Settling's merge beside it then takes the rest, and
/// a query thread that wakes on the merge's core waits until the scheduler takes the core back:
/// under EEVDF a running thread keeps the CPU to the end of its slice, and without a high-resolution
/// tick that is the next tick, up to 4 ms at HZ 250. Measured with `perf sched` over the fresh
/// window at 64k: 51 waits of the query path over 0.3 ms, 94 ms together, behind the index's
/// writer (settling's term batches), and once those were lent to the merge's thread, 54 waits
/// (119 ms) behind the merge itself at nice 10; a nice-10 busy loop beside a settled index cost
/// its queries nothing. SCHED_IDLE would preempt at once but starved settling on a busy machine
/// and holds locks clients take (`SEARCHLIGHT_BACKGROUND_IDLE`).
///
/// So background loops ask, every `intervalNanos` of their work, whether a user query read began
/// in the last `activeNanos`; if so they call `sched_yield`, which under EEVDF lets a thread
/// waiting on that core run first, and returns at once when none waits. A thread that yields
/// keeps its share of the CPU (its virtual runtime is what it ran), so settling is not starved;
/// it only stops holding the core to its slice's end while an app searches. Where: the read and
/// tokenizing of a segment build (`IndexStore.buildSegment`), its sorting and encoding
/// (`SegmentBuilder.finish`), and every statement of the writer and of readers checked out at
/// background priority (SQLite's progress handler, `Database.yieldsToQueries`).
/// `SEARCHLIGHT_QUERY_YIELD=0` turns it off (for comparisons).
public enum QueryYield {
    static let enabled = ProcessInfo.processInfo.environment["SEARCHLIGHT_QUERY_YIELD"] != "0"
    /// How long after a user query's read began background work keeps yielding.
    static let activeNanos: UInt64 = 100_000_000
    /// Background work between two yields while queries are active.
    static let intervalNanos: UInt64 = 200_000

    private static let lastQuery = Atomic<UInt64>(0)
    private static let yields = Atomic<Int>(0)

    /// Yields made since the start (tests, `admin.status` does not show it).
    static var count: Int { yields.load(ordering: .relaxed) }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// A read began on a thread not at background priority: a user query, or another call an
    /// app or the desktop waits for.
    static func queryBegan() {
        guard enabled else { return }
        lastQuery.store(now(), ordering: .relaxed)
    }

    /// At `t`, `last` the previous look and `lastQuery` the latest query's start (0: none yet):
    /// whether to yield now, and the look to remember. A look every `intervalNanos` at most;
    /// a yield when a query began within `activeNanos` of it.
    @inline(__always)
    static func decide(at t: UInt64, last: UInt64, lastQuery: UInt64) -> (yield: Bool, last: UInt64) {
        guard t &- last >= intervalNanos else { return (false, last) }
        return (lastQuery != 0 && t &- lastQuery < activeNanos, t)
    }

    /// `decide` now, and the yield.
    @inline(__always)
    static func check(since last: inout UInt64) {
        let t = now()
        guard t &- last >= intervalNanos else { return }
        let (yield, look) = decide(at: t, last: last, lastQuery: lastQuery.load(ordering: .relaxed))
        last = look
        if yield {
            sched_yield()
            yields.add(1, ordering: .relaxed)
        }
    }

    /// A place in a background loop: `check()` reads the clock every `stride` calls.
    struct Point {
        private var last = QueryYield.now()
        private var count: UInt32 = 0
        private let stride: UInt32

        init(every stride: UInt32 = 1) { self.stride = max(1, stride) }

        @inline(__always)
        mutating func check() {
            guard QueryYield.enabled else { return }
            count &+= 1
            guard count >= stride else { return }
            count = 0
            QueryYield.check(since: &last)
        }
    }
}
