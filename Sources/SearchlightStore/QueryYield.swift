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
/// So background loops ask, every `intervalNanos` of their work, whether a user query arrived
/// in the last `activeNanos`; if so they call `sched_yield`, which under EEVDF lets a thread
/// waiting on that core run first, and returns at once when none waits. A thread that yields
/// keeps its share of the CPU (its virtual runtime is what it ran), so settling is not starved;
/// it only stops holding the core to its slice's end while an app searches. Where: the read and
/// tokenizing of a segment build (`IndexStore.buildSegment`), its sorting and encoding
/// (`SegmentBuilder.finish`), and every statement of the writer's maintenance transactions and
/// of readers checked out at background priority (SQLite's progress handler,
/// `Database.yieldsToQueries`); a client's donation does not yield. A commit and
/// the checkpoint after it run no statement, so while queries are active a build writes its
/// terms in smaller transactions (`RankMaintainer.batchBytes`).
/// `SEARCHLIGHT_QUERY_YIELD=0` turns it off (for comparisons).
public enum QueryYield {
    static let enabled = ProcessInfo.processInfo.environment["SEARCHLIGHT_QUERY_YIELD"] != "0"
    /// How long after a user query arrived background work keeps yielding.
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

    /// A user query arrived (`query.user`, `query.search`: the daemon's query budget for it).
    public static func queryBegan() {
        guard enabled else { return }
        lastQuery.store(now(), ordering: .relaxed)
    }

    /// At `t`, `last` the previous look and `lastQuery` the latest query's arrival (0: none
    /// yet): whether to yield now, and the look to remember. A look every `intervalNanos` at
    /// most; a yield when a query arrived within `activeNanos` of it.
    @inline(__always)
    static func decide(at t: UInt64, last: UInt64, lastQuery: UInt64) -> (yield: Bool, last: UInt64) {
        guard t &- last >= intervalNanos else { return (false, last) }
        return (lastQuery != 0 && t &- lastQuery < activeNanos, t)
    }

    /// Whether a user query arrived within `activeNanos` (always false when turned off).
    static var queriesActive: Bool {
        guard enabled else { return false }
        let last = lastQuery.load(ordering: .relaxed)
        return last != 0 && now() &- last < activeNanos
    }

    /// `decide` now for the calling thread, and the yield unless it is starved (`Pacing`);
    /// whether it yielded.
    @discardableResult
    static func check() -> Bool {
        let pacing = Pacing.current
        let t = now()
        guard t &- pacing.last >= intervalNanos else { return false }
        let (yield, look) = decide(at: t, last: pacing.last, lastQuery: lastQuery.load(ordering: .relaxed))
        pacing.last = look
        guard yield, !pacing.starved(at: t) else { return false }
        sched_yield()
        yields.add(1, ordering: .relaxed)
        return true
    }

    /// Over each `windowNanos`, past this share of the wall clock spent waiting for a CPU a
    /// thread is starved and stops yielding until a window says otherwise.
    static let starvedShare = 0.75
    static let windowNanos: UInt64 = 250_000_000

    /// Whether a thread that waited `runDelay` ns for a CPU over `wall` ns is starved.
    static func isStarved(runDelay: UInt64, wall: UInt64) -> Bool {
        wall > 0 && Double(runDelay) > starvedShare * Double(wall)
    }

    /// A thread's yields and whether it is starved. Under EEVDF a yield forfeits the rest of the
    /// thread's slice: a nice-10 thread that yields every 0.2 ms is charged far more than it ran,
    /// and beside two CPU hogs settling had not finished after 220 s (without yields: 25 s). So a
    /// thread that spent more than three quarters of the last quarter second waiting for a CPU
    /// (/proc/thread-self/schedstat's run delay) no longer yields: on a busy machine background
    /// work keeps its nice-10 share, and queries wait as before (for the busy machine anyway).
    /// Beside an app searching without pause on a quiet machine, settling waits less than that
    /// (at half, the fresh p99 was 2.7× the settled one instead of 2.1×).
    /// Kept per thread (a loop's `Point` and a connection's handler see the same state).
    final class Pacing {
        var last = QueryYield.now()
        private var windowStart: UInt64 = 0
        private var windowDelay: UInt64?
        private var isStarved = false
        /// Tests: this thread yields however long it waits (a loaded test machine starves it).
        var neverStarved = false

        /// As of the last window; a new window begins when this one is over.
        func starved(at t: UInt64) -> Bool {
            if neverStarved { return false }
            guard windowDelay == nil || t &- windowStart >= QueryYield.windowNanos else { return isStarved }
            let delay = QueryYield.runDelay()
            if let delay, let previous = windowDelay, delay >= previous {
                isStarved = QueryYield.isStarved(runDelay: delay - previous, wall: t &- windowStart)
            }
            windowStart = t
            windowDelay = delay ?? 0
            return isStarved
        }

        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            pthread_key_create(&key) { p in
                if let p { Unmanaged<Pacing>.fromOpaque(p).release() }
            }
            return key
        }()

        /// The calling thread's.
        static var current: Pacing {
            if let p = pthread_getspecific(key) { return Unmanaged<Pacing>.fromOpaque(p).takeUnretainedValue() }
            let pacing = Pacing()
            pthread_setspecific(key, Unmanaged.passRetained(pacing).toOpaque())
            return pacing
        }
    }

    /// The calling thread's time spent waiting on a run queue, ns (nil where unreadable).
    static func runDelay() -> UInt64? {
        let fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 96)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 95) }
        guard n > 0 else { return nil }
        // "cpu_time run_delay timeslices"
        let fields = buffer[..<n].split(separator: UInt8(ascii: " "))
        guard fields.count >= 2 else { return nil }
        var value: UInt64 = 0
        for b in fields[1] {
            guard b >= 48, b <= 57 else { return nil }
            value = value &* 10 &+ UInt64(b - 48)
        }
        return value
    }

    /// A place in a background loop: `check()` reads the clock every `stride` calls.
    struct Point {
        private var count: UInt32 = 0
        private let stride: UInt32

        init(every stride: UInt32 = 1) { self.stride = max(1, stride) }

        @inline(__always)
        mutating func check() {
            guard QueryYield.enabled else { return }
            count &+= 1
            guard count >= stride else { return }
            count = 0
            QueryYield.check()
        }
    }
}
