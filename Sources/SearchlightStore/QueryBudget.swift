#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// How long one query may work, and whether anyone still waits for its answer. SQLite asks it
/// from a progress handler every `Database.progressSteps` virtual-machine steps
/// (`Database.withBudget`), the Swift loops of a query (suggestions, corrections) at each
/// candidate; once it says stop, the statement is interrupted and the query answers `cancelled`.
/// A 60 KB query once ran for ten minutes after its client had gone; now it stops at its deadline
/// or, sooner, when the client disconnects.
///
/// The deadline counts the query's own work, not the time others took from it (issue 30): once
/// the wall clock passes `timeout`, the query is stopped only when its thread's CPU time (plus the
/// test seam's sleeps, which stand for work) has reached it too, or when the wall clock has
/// reached `wallFactor` × `timeout`. A 80 ms query on a 4 000-item index that waited behind
/// background threads and the machine's other processes for 10 s was answered `cancelled`; an
/// expensive query still stops at its limit, however loaded the machine is.
///
/// Used by the one thread that runs the query (the session's), so it needs no lock; it is made
/// on that thread too (its CPU clock is the thread's).
public final class QueryBudget: @unchecked Sendable {
    /// Why a query must stop.
    public enum Stop: Sendable, Equatable {
        /// It ran past its deadline (`--query-timeout`).
        case deadline(seconds: Double)
        /// Nobody waits for the answer any more: the client disconnected, or the daemon stops.
        case abandoned
    }

    /// What a query that answered too slowly looked like, for the operator's log.
    public typealias SlowObserver = @Sendable (_ elapsedSeconds: Double) -> Void

    let timeout: Double?
    let slowAfter: Double?
    let onSlow: SlowObserver?
    let isAbandoned: (@Sendable () -> Bool)?
    let stepDelay: Double
    private let started: UInt64
    /// The thread's CPU time when the budget was made (CLOCK_THREAD_CPUTIME_ID).
    private let cpuStarted: UInt64
    /// Seconds slept by the test seam (`stepDelay`): counted as the query's work.
    private var slept = 0.0
    private var lastWorkCheck: UInt64 = 0
    private var lastAbandonCheck: UInt64
    private var reportedSlow = false
    /// Why the query was stopped (sticky), nil while it may go on.
    public private(set) var stop: Stop?

    /// How often, at most, `isAbandoned` is asked (it is a system call): 20 ms. The thread's CPU
    /// clock (a system call too) is read as rarely, and only once the wall clock passed the limit.
    static let abandonCheckInterval: UInt64 = 20_000_000

    /// A query the machine keeps from working is stopped when the wall clock reaches this many
    /// times its limit, however little it worked (30 s with the default 10 s).
    public static let wallFactor = 3.0

    /// - Parameters:
    ///   - timeout: seconds the query may run; nil for no deadline.
    ///   - slowAfter: seconds after which `onSlow` is told, once, while the query still runs.
    ///   - isAbandoned: whether the answer is still awaited (checked at most every 20 ms).
    ///   - stepDelay: a test seam: seconds slept at each check, so that a small query runs long.
    public init(timeout: Double?, slowAfter: Double? = nil, onSlow: SlowObserver? = nil,
                isAbandoned: (@Sendable () -> Bool)? = nil, stepDelay: Double = 0) {
        self.timeout = timeout
        self.slowAfter = slowAfter
        self.onSlow = onSlow
        self.isAbandoned = isAbandoned
        self.stepDelay = stepDelay
        started = Self.now()
        cpuStarted = Self.threadCPUTime()
        lastAbandonCheck = started
    }

    /// The calling thread's CPU nanoseconds.
    public static func threadCPUTime() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Seconds of the query's own work so far: its thread's CPU time and the test seam's sleeps.
    public var worked: Double { Double(Self.threadCPUTime() &- cpuStarted) / 1e9 + slept }

    /// Monotonic nanoseconds (CLOCK_MONOTONIC: a vDSO call, cheap enough for every check).
    public static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Seconds since the query started.
    public var elapsed: Double { Double(Self.now() - started) / 1e9 }

    /// Seconds left before the deadline (negative once past it); nil without a deadline.
    public var remaining: Double? { timeout.map { $0 - elapsed } }

    /// True when the query must stop (then `stop` says why). Cheap: a clock read, and a `poll`
    /// of the client's socket at most every 20 ms.
    public func shouldStop() -> Bool {
        if stop != nil { return true }
        if stepDelay > 0 {
            usleep(useconds_t(stepDelay * 1e6))
            slept += stepDelay
        }
        let now = Self.now()
        QueryYield.queryRunning(at: now)  // background work keeps yielding while it runs
        let seconds = Double(now - started) / 1e9
        if let timeout, seconds >= timeout, lastWorkCheck == 0 || now - lastWorkCheck >= Self.abandonCheckInterval {
            lastWorkCheck = now
            if worked >= timeout || seconds >= timeout * Self.wallFactor {
                stop = .deadline(seconds: timeout)
                return true
            }
        }
        if let isAbandoned, now - lastAbandonCheck >= Self.abandonCheckInterval {
            lastAbandonCheck = now
            if isAbandoned() {
                stop = .abandoned
                return true
            }
        }
        if !reportedSlow, let slowAfter, seconds >= slowAfter {
            reportedSlow = true
            onSlow?(seconds)
        }
        return false
    }

    /// Thread-CPU and wall nanoseconds per named phase, summed (nil: not recorded). Set to `[:]`
    /// to record them (`SEARCHLIGHT_QUERY_CPU_LOG=1`: the daemon's `query cpu` line).
    public var phases: [String: (cpu: UInt64, wall: UInt64)]?

    /// `body`, its thread-CPU and wall time added to phase `name` when phases are recorded.
    public func phase<T, E: Error>(_ name: String, _ body: () throws(E) -> T) throws(E) -> T {
        guard phases != nil else { return try body() }
        let cpu = Self.threadCPUTime(), wall = Self.now()
        defer {
            let c = Self.threadCPUTime() &- cpu, w = Self.now() &- wall
            let old = phases?[name] ?? (0, 0)
            phases?[name] = (old.cpu + c, old.wall + w)
        }
        return try body()
    }

    /// `body` timed as phase `name` of `budget` (`phase`), or just run without one.
    public static func phase<T, E: Error>(_ budget: QueryBudget?, _ name: String, _ body: () throws(E) -> T) throws(E) -> T {
        guard let budget else { return try body() }
        return try budget.phase(name, body)
    }

    /// Thread-CPU nanoseconds spent for this query on other threads (the transformer's embedding
    /// on `QueryCompute`'s), added by `addOffThread`; not counted against the limit (`worked`).
    public private(set) var offThreadCPU: UInt64 = 0

    /// Adds `nanoseconds` of another thread's CPU, spent for this query, to phase `name` (CPU
    /// only: its wall time is the waiting phase's) and to `offThreadCPU`, when phases are recorded.
    public func addOffThread(_ name: String, cpu nanoseconds: UInt64) {
        guard phases != nil else { return }
        offThreadCPU += nanoseconds
        let old = phases?[name] ?? (0, 0)
        phases?[name] = (old.cpu + nanoseconds, old.wall)
    }

    /// Adds the time since `cpuSince`/`wallSince` (`threadCPUTime`, `now`) to phase `name`.
    public func add(_ name: String, cpuSince: UInt64, wallSince: UInt64) {
        guard phases != nil else { return }
        let old = phases?[name] ?? (0, 0)
        phases?[name] = (old.cpu + (Self.threadCPUTime() &- cpuSince), old.wall + (Self.now() &- wallSince))
    }

    /// For Swift loops: throws the `cancelled` error once the query must stop.
    public func check() throws(SearchlightError) {
        if shouldStop() { throw error }
    }

    /// The answer for a stopped query.
    public var error: SearchlightError {
        switch stop {
        case .deadline(let seconds)?:
            SearchlightError(.cancelled,
                "the query ran longer than searchlightd's limit of \(Self.format(seconds)) s for one query and was stopped; narrow it "
                    + "(fewer words or alternatives, a more specific attribute, a filter query) and retry",
                data: ["reason": "deadline", "limitSeconds": .number(seconds)])
        case .abandoned?, nil:
            SearchlightError(.cancelled, "the query was stopped: its client disconnected", data: ["reason": "disconnected"])
        }
    }

    static func format(_ seconds: Double) -> String {
        seconds.rounded() == seconds ? String(Int(seconds)) : String(format: "%.3g", seconds)
    }
}
