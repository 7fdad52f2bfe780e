import Dispatch
import Foundation
import Synchronization

/// Hands the heap's free pages back to the system once reads go quiet (glibc's malloc_trim).
///
/// A query's temporaries (its unions' scratch arrays beyond the pool's budget, row buffers,
/// rankings) are freed when it ends, but glibc keeps the pages of free chunks inside its thread
/// arenas resident: at 1M items the daemon's arenas held ~28 MB of free memory after the bench's
/// query forms, a quarter of its resident set (issue 32). `quietSeconds` after the last read,
/// and at most once per quiet spell, a trim on a utility thread gives them back; never while
/// queries run, so it costs them nothing (a trim takes the arenas' locks for a few milliseconds).
public final class HeapTrimmer: Sendable {
    public static let shared = HeapTrimmer(quietSeconds: 2)

    let quietSeconds: Double
    private struct State {
        var lastActivity = 0.0
        var pending = false
        var trims = 0
    }
    private let state = Mutex(State())
    private let queue = DispatchQueue(label: "heap-trim", qos: .utility)
    /// `SEARCHLIGHT_HEAP_TRIM=0` turns it off (for measuring against no trim).
    static let enabled = ProcessInfo.processInfo.environment["SEARCHLIGHT_HEAP_TRIM"] != "0"

    init(quietSeconds: Double) { self.quietSeconds = quietSeconds }

    /// Trims done since the start.
    public var trims: Int { state.withLock { $0.trims } }

    /// A read ended: a trim follows once none has ended for `quietSeconds`.
    func noteActivity() {
        guard Self.enabled else { return }
        let now = Self.clock()
        let schedule = state.withLock { s in
            s.lastActivity = now
            if s.pending { return false }
            s.pending = true
            return true
        }
        if schedule { queue.asyncAfter(deadline: .now() + quietSeconds) { self.fire() } }
    }

    private func fire() {
        let now = Self.clock()
        let wait: Double? = state.withLock { s in
            let quiet = now - s.lastActivity
            if quiet < quietSeconds { return quietSeconds - quiet }
            s.pending = false
            return nil
        }
        if let wait {
            queue.asyncAfter(deadline: .now() + wait) { self.fire() }
            return
        }
        ProcessMemory.releaseFreeHeap()
        state.withLock { s in
            s.trims += 1
        }
    }

    static func clock() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
