import Dispatch
import Foundation
import Synchronization

/// Hands the heap's free pages back to the system once reads go quiet (glibc's malloc_trim).
///
/// A query's temporaries (its unions' scratch arrays beyond the pool's budget, row buffers,
/// rankings) are freed when it ends, but glibc keeps the pages of free chunks inside its thread
/// arenas resident: at 1M items the daemon's arenas held ~28 MB of free memory after the bench's
/// query forms, a quarter of its resident set (issue 32). `quietSeconds` after the last read
/// ended, with no read in flight, a trim on a utility thread gives them back: once per quiet
/// spell, and after work that asked for one (`requestTrim`; requests made while one is pending
/// share it). A trim takes the arenas' locks for a few milliseconds, so it never begins while a
/// reader is checked out (a read longer than `quietSeconds` defers it); a read that begins
/// during a trim may wait those milliseconds at its first allocation.
public final class HeapTrimmer: Sendable {
    public static let shared = HeapTrimmer(quietSeconds: 2)

    let quietSeconds: Double
    private struct State {
        var lastActivity = 0.0
        /// Readers checked out now (`readBegan` … `readEnded`), over every store.
        var inFlight = 0
        var pending = false
        var trims = 0
    }
    private let state = Mutex(State())
    private let clock: @Sendable () -> Double
    /// Runs `fire` after the delay (seconds): a utility queue, or a test's manual scheduler.
    private let schedule: @Sendable (Double, @escaping @Sendable () -> Void) -> Void
    private let enabled: Bool
    /// `SEARCHLIGHT_HEAP_TRIM=0` turns every trim off (for measuring against no trim).
    static let enabled = ProcessInfo.processInfo.environment["SEARCHLIGHT_HEAP_TRIM"] != "0"

    init(quietSeconds: Double, enabled: Bool = HeapTrimmer.enabled, clock: @escaping @Sendable () -> Double = HeapTrimmer.monotonic,
         schedule: (@Sendable (Double, @escaping @Sendable () -> Void) -> Void)? = nil)
    {
        self.quietSeconds = quietSeconds
        self.enabled = enabled
        self.clock = clock
        if let schedule {
            self.schedule = schedule
        } else {
            let queue = DispatchQueue(label: "heap-trim", qos: .utility)
            self.schedule = { delay, work in queue.asyncAfter(deadline: .now() + delay, execute: work) }
        }
    }

    /// Trims done since the start, once reads went quiet.
    public var trims: Int { state.withLock { $0.trims } }

    /// A reader was checked out: no quiet trim begins until it is given back.
    func readBegan() {
        guard enabled else { return }
        state.withLock { $0.inFlight += 1 }
    }

    /// A reader was given back: a trim follows once none has been for `quietSeconds` and none
    /// is out.
    func readEnded() {
        guard enabled else { return }
        let now = clock()
        let start = state.withLock { s in
            // Every end follows its begin (IndexStore's checkout and checkin); a miscount would
            // let a trim run beside a read unseen.
            assert(s.inFlight > 0, "a read ended that never began")
            s.inFlight = max(0, s.inFlight - 1)
            s.lastActivity = now
            if s.pending { return false }
            s.pending = true
            return true
        }
        if start { schedule(quietSeconds) { self.fire() } }
    }

    /// Asks for a trim after work that freed much (a vector load, a write stream, a ranked or
    /// partition build). It runs on the trim's own thread, like a quiet trim: once no reader is
    /// out and reads have been quiet for `quietSeconds`; never on the caller's thread, which may
    /// be a query's (a load) or the writer's.
    public func requestTrim() {
        guard enabled else { return }
        let start = state.withLock { s in
            if s.pending { return false }
            s.pending = true
            return true
        }
        if start { schedule(quietSeconds) { self.fire() } }
    }

    func fire() {
        let now = clock()
        let wait: Double? = state.withLock { s in
            // A read in flight (one longer than the quiet spell) defers the trim to its end.
            if s.inFlight > 0 { return quietSeconds }
            let quiet = now - s.lastActivity
            if quiet < quietSeconds { return quietSeconds - quiet }
            s.pending = false
            return nil
        }
        if let wait {
            schedule(wait) { self.fire() }
            return
        }
        ProcessMemory.releaseFreeHeap()
        state.withLock { $0.trims += 1 }
    }

    @Sendable static func monotonic() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
