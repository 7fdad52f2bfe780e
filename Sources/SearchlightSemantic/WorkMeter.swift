#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// The CPU time of the threads doing one kind of work (the daemon's background refinement), read
/// live: a thread inside `measure` is counted by its own CPU clock as it runs, not only once its
/// work is done, so a reader sampling every second sees a long batch's CPU as it is spent.
///
/// Why: without PSI the throttle reads the load average, which counts the daemon's own busy
/// threads; `LoadMonitor` subtracts this work's share (Docs/Operations.md, "Throttling").
public final class WorkMeter: Sendable {
    private struct Running {
        var clock: clockid_t
        var start: Double
    }

    private struct State {
        var finished: Double = 0
        var running: [Int: Running] = [:]
        var next = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Runs `body` on the calling thread, its CPU time counted from now until it returns.
    public func measure<R>(_ body: () -> R) -> R {
        var clock = clockid_t()
        guard pthread_getcpuclockid(pthread_self(), &clock) == 0 else { return body() }
        let start = Self.seconds(clock)
        let key = state.withLock { s in
            let k = s.next
            s.next += 1
            s.running[k] = Running(clock: clock, start: start)
            return k
        }
        defer {
            let end = Self.seconds(clock)
            state.withLock { s in
                s.running[key] = nil
                s.finished += max(0, end - start)
            }
        }
        return body()
    }

    /// CPU seconds spent in `measure` so far, the threads still inside it included (the lock
    /// keeps a thread from leaving, and its clock from going away, while it is read).
    public var seconds: Double {
        state.withLock { s in
            s.running.values.reduce(s.finished) { $0 + max(0, Self.seconds($1.clock) - $1.start) }
        }
    }

    private static func seconds(_ clock: clockid_t) -> Double {
        var t = timespec()
        guard clock_gettime(clock, &t) == 0 else { return 0 }
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}
