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
/// or ran in the last `activeNanos`; if so they call `sched_yield`, which under EEVDF lets a
/// thread waiting on that core run first, and returns at once when none waits. A yield gives up
/// the rest of the slice, so a thread that yields often is charged more than it ran: one that
/// waits for a CPU most of its runnable time stops yielding (`Pacing`), and settling keeps its
/// nice-10 share on a busy machine. Where: the read and
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

    /// A user query is still running at `t` (its budget's checks, every 1 000 statement steps):
    /// a slow one (a vector load, the first query after a donation) keeps background work
    /// yielding past `activeNanos` after it arrived.
    static func queryRunning(at t: UInt64) {
        guard enabled, t &- lastQuery.load(ordering: .relaxed) > 1_000_000 else { return }
        lastQuery.store(t, ordering: .relaxed)
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
        return true
    }

    /// Over each `windowNanos`, past this share of its runnable time spent waiting for a CPU a
    /// thread is starved and stops yielding until a window says otherwise.
    static let starvedShare = 0.85
    static let windowNanos: UInt64 = 250_000_000

    /// Whether a thread that waited `runDelay` ns for a CPU while it ran `cpu` ns is starved
    /// (time it slept, waiting for the writer or a lock, counts for neither).
    static func isStarved(runDelay: UInt64, cpu: UInt64) -> Bool {
        let runnable = runDelay &+ cpu
        return runnable > 0 && Double(runDelay) > starvedShare * Double(runnable)
    }

    /// A thread's yields and whether it is starved. Under EEVDF a yield forfeits the rest of the
    /// thread's slice: a nice-10 thread that yields every 0.2 ms is charged far more than it ran,
    /// and beside two CPU hogs settling had not finished after 220 s (without yields: 25 s). So a
    /// thread that spent more than `starvedShare` of its runnable time in the last quarter second
    /// waiting for a CPU (/proc/thread-self/schedstat) no longer yields: on a busy machine
    /// background work keeps its nice-10 share, and queries wait as before (for the busy machine
    /// anyway). A thread that yields waits more, so the share is high: beside an app searching
    /// without pause on a quiet machine, the fresh p99 was 2.6× the settled one at 0.75 and 2.2×
    /// at 0.85 (at 0.5 of the wall clock, 2.7×); beside two CPU hogs settling still took 27-29 s.
    /// Kept per thread (a loop's `Point` and a connection's handler see the same state).
    final class Pacing {
        var last = QueryYield.now()
        private var windowStart: UInt64 = 0
        private var window: Sched?
        private var isStarved = false
        /// Tests: this thread yields however long it waits (a loaded test machine starves it).
        var neverStarved = false
        /// Reads the thread's CPU time and run delay (tests inject their own).
        var read: () -> Sched? = QueryYield.sched

        /// As of the last window; a new window begins when this one is over. A window much longer
        /// than `windowNanos` (the thread did not ask for a while) is only a new baseline: its
        /// share would mostly be of time long past. Where schedstat cannot be read the thread is
        /// never starved.
        func starved(at t: UInt64) -> Bool {
            if neverStarved { return false }
            guard window == nil || t &- windowStart >= QueryYield.windowNanos else { return isStarved }
            guard let now = read() else { return isStarved }
            // A window the thread slept through (neither ran nor waited) says nothing.
            if let previous = window, t &- windowStart < 2 * QueryYield.windowNanos,
               now.runDelay >= previous.runDelay, now.cpu >= previous.cpu,
               now.runDelay &+ now.cpu > previous.runDelay &+ previous.cpu {
                isStarved = QueryYield.isStarved(runDelay: now.runDelay - previous.runDelay, cpu: now.cpu - previous.cpu)
            }
            windowStart = t
            window = now
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

    /// A thread's CPU time and time spent waiting on a run queue, ns.
    public struct Sched: Equatable, Sendable {
        public var cpu: UInt64
        public var runDelay: UInt64
    }

    /// The calling thread's, from /proc/thread-self/schedstat (nil where unreadable): also the
    /// daemon's `query cpu` log line's run-queue figures.
    public static func sched() -> Sched? {
        let fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 96)
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, 95) }
        guard n > 0 else { return nil }
        // "cpu_time run_delay timeslices"
        let fields = buffer[..<n].split(separator: UInt8(ascii: " "))
        guard fields.count >= 2 else { return nil }
        func number(_ digits: ArraySlice<UInt8>) -> UInt64? {
            var value: UInt64 = 0
            for b in digits {
                guard b >= 48, b <= 57 else { return nil }
                value = value &* 10 &+ UInt64(b - 48)
            }
            return value
        }
        guard let cpu = number(fields[0]), let delay = number(fields[1]) else { return nil }
        return Sched(cpu: cpu, runDelay: delay)
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
