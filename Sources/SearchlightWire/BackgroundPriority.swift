#if canImport(Glibc)
import Glibc
#endif
import Foundation
import CSignalPipe

/// The CPU priority of the daemon's background threads (issue 30, "queries never wait behind
/// background work"): idle maintenance, transformer refinement, the vector fill, ranked-index
/// builds, migration and salvage copies and a shadow's writer run at nice `niceValue`, so that a
/// thread answering a query wins the CPU over them (and over nothing else: a nice-10 thread still
/// gets its share on an idle machine). With CFS a nice-10 thread weighs 110 against a nice-0
/// thread's 1 024: on two cores shared with busy processes, a query is no longer one runnable
/// thread among the daemon's many.
///
/// Linux's `setpriority(PRIO_PROCESS, 0)` sets the calling thread's nice. Raising it needs no
/// privilege, lowering it again does (RLIMIT_NICE is 0 for users): so only threads the daemon
/// owns for good are lowered, never a libdispatch or cooperative-pool thread, which later runs
/// other work (a client's reply). Background work that ran on a dispatch queue runs on a
/// `BackgroundQueue` instead.
///
/// `SEARCHLIGHT_BACKGROUND_NICE=0` in the daemon's environment turns it off (the bench compares
/// both in one binary); another value from 1 to 19 replaces the default 10.
public enum BackgroundPriority {
    /// The nice value of background threads; 0 when turned off.
    public static let niceValue: Int32 = {
        guard let text = ProcessInfo.processInfo.environment["SEARCHLIGHT_BACKGROUND_NICE"], let n = Int32(text) else { return 10 }
        return min(max(n, 0), 19)
    }()

    /// An experiment (issue 32 item 2), off unless `SEARCHLIGHT_BACKGROUND_IDLE=1`: threads asked
    /// to idle (`lowerCurrentThread(name:idle:)`: settling the ranked index) take the SCHED_IDLE
    /// policy. They then run only on a CPU nothing else wants, and any thread waking up (a query's,
    /// the app's waiting for its answer) preempts them at once, which nice 10 does not make happen
    /// (EEVDF lets the running thread finish its slice). Quiet, at 64k, the app's p99 right after
    /// a donation fell from 4.2× the settled index's to 3.2×. Off because of what it costs on a
    /// busy machine: beside two CPU hogs settling did not finish in 330 s (nice 10: 25 s), and
    /// queries stayed on unmerged segments meanwhile (p50 2.3–3.0 ms against 0.35 ms).
    public static let idlePolicy = ProcessInfo.processInfo.environment["SEARCHLIGHT_BACKGROUND_IDLE"] == "1"

    /// Whether the current thread took SCHED_IDLE (`lowerCurrentThread(name:idle:)`).
    public static var isCurrentThreadIdle: Bool { idleFlag.isSet }

    /// The kernel's word: whether the calling thread's policy is SCHED_IDLE (tests).
    public static var currentThreadPolicyIsIdle: Bool { sl_thread_is_idle() == 1 }

    /// Whether the current thread was lowered (`lowerCurrentThread`): CPU-heavy work that would
    /// fan out to shared pool threads (which run at the normal priority) runs serially on it instead.
    public static var isCurrentThreadBackground: Bool { flag.isSet }

    /// Lowers the calling thread's CPU priority to `niceValue`, for the rest of its life, and
    /// names it `name` (at most 15 bytes: what `top -H` and /proc/PID/task/TID/comm show; on Linux
    /// Foundation's `Thread.name` does not reach them). Call it first thing on a thread the daemon
    /// created for background work, never on a pool thread.
    ///
    /// `idle`: the thread also takes SCHED_IDLE (`idlePolicy`), for good. Only for work nothing
    /// waits for, that holds no lock or connection a client's call needs while it computes: a
    /// preempted SCHED_IDLE thread may wait seconds on a busy machine before it runs again.
    public static func lowerCurrentThread(name: String, idle: Bool = false) {
        nameCurrentThread(name)
        guard niceValue > 0 else { return }
        // `who` 0 is the calling thread on Linux (the nice value is per thread under NPTL,
        // setpriority(2) BUGS), which is what `gettid()` would name; Swift's Glibc has no gettid.
        if setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, niceValue) == 0 { flag.set() }
        if idle, idlePolicy, sl_thread_set_idle() == 0 {
            idleFlag.set()
            return  // the slice below applies to SCHED_OTHER threads only
        }
        // A long slice too (EEVDF): a thread that wakes up with a shorter one (any thread at the
        // default slice: a query's, the app's waiting for its answer) preempts this one at once
        // instead of waiting for its slice to end. Its share of the CPU stays its nice's.
        if QueryLatency.backgroundSliceMicroseconds > 0 {
            _ = sl_thread_set_slice(UInt64(QueryLatency.backgroundSliceMicroseconds) * 1000)
        }
    }
}

extension BackgroundPriority {
    /// Names the calling thread `name` (at most 15 bytes) where `top -H` and
    /// /proc/PID/task/TID/comm show it: on Linux Foundation's `Thread.name` does not reach them.
    public static func nameCurrentThread(_ name: String) {
        // Swift's Glibc has neither pthread_setname_np nor prctl (variadic): the kernel's file for it.
        let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
        if fd >= 0 {
            let bytes = Array(name.utf8.prefix(15))
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            close(fd)
        }
    }
}

/// The time slice of the daemon's query threads (issue 32 item 2). On two cores a query's thread
/// that wakes up (a request arrived) waited on the run queue until the running thread's slice
/// ended: 1.4 ms by default, up to 3 ms at p99 while the daemon settled an app's fresh donation
/// (its writer and build lanes running), 0.08 ms once settled. A thread asking for a shorter
/// slice (EEVDF, Linux 6.12 and later) preempts the running one when it wakes up; its share of
/// the CPU is unchanged, and it still gives way after each slice to a thread whose turn is due.
///
/// `SEARCHLIGHT_QUERY_SLICE_US` in the daemon's environment: the slice in microseconds (the
/// kernel keeps 100 to 100 000; 100 is the value tried). Off (the kernel's default) unless set:
/// in side-by-side runs at 64k it showed no clear gain in the fresh queries' wall p99.
public enum QueryLatency {
    public static let sliceMicroseconds: Int = {
        guard let text = ProcessInfo.processInfo.environment["SEARCHLIGHT_QUERY_SLICE_US"], let n = Int(text) else { return 0 }
        return n <= 0 ? 0 : min(max(n, 100), 100_000)
    }()

    /// The slice of the daemon's background threads (`BackgroundPriority`), in microseconds:
    /// longer than the kernel's default, so that a thread at the default slice waking up preempts
    /// them (the kernel lets the running thread finish its slice only against a waking thread
    /// whose slice is not shorter). `SEARCHLIGHT_BACKGROUND_SLICE_US` (12 000 is the value tried); off
    /// unless set, like the query slice.
    public static let backgroundSliceMicroseconds: Int = {
        guard let text = ProcessInfo.processInfo.environment["SEARCHLIGHT_BACKGROUND_SLICE_US"], let n = Int(text) else { return 0 }
        return n <= 0 ? 0 : min(max(n, 100), 100_000)
    }()

    /// Asks for the short slice for the calling thread, for the rest of its life: a thread the
    /// daemon owns that answers queries (a connection's reader). Nothing on older kernels.
    public static func shortenCurrentThreadSlice() {
        guard sliceMicroseconds > 0 else { return }
        _ = sl_thread_set_slice(UInt64(sliceMicroseconds) * 1000)
    }

    /// Sets the calling thread's slice to `microseconds` (tests probe the kernel with it); false
    /// where the kernel refused.
    @discardableResult
    public static func setCurrentThreadSlice(microseconds: Int) -> Bool {
        sl_thread_set_slice(UInt64(max(0, microseconds)) * 1000) == 0
    }

    /// The calling thread's slice in microseconds; 0 where the kernel does not say.
    public static var currentThreadSliceMicroseconds: Int { Int(sl_thread_slice() / 1000) }
}

/// A per-thread flag in a pthread key (cheaper than Foundation's thread dictionary).
private let flag = ThreadFlag()
private let idleFlag = ThreadFlag()

private final class ThreadFlag: @unchecked Sendable {
    private var key = pthread_key_t()
    init() { pthread_key_create(&key, nil) }
    var isSet: Bool { pthread_getspecific(key) != nil }
    func set() { pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1)) }
}

/// A serial queue of background work on one thread of its own, started at `BackgroundPriority`:
/// what a `DispatchQueue` did for ranked-index builds and salvage, without lowering a shared
/// libdispatch thread. Jobs run in order; `async(after:)` runs one once its delay has passed.
public final class BackgroundQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [(due: Double, job: @Sendable () -> Void)] = []
    private var thread: Thread?
    private let name: String
    private let idle: Bool

    /// The thread starts on the first job; `idle`: it takes SCHED_IDLE (`BackgroundPriority.idlePolicy`).
    public init(label: String, idle: Bool = false) {
        name = label
        self.idle = idle
    }

    public func async(_ job: @escaping @Sendable () -> Void) { async(after: 0, job) }

    /// Runs `job` on the queue's thread once `seconds` have passed (monotonic clock).
    public func async(after seconds: Double, _ job: @escaping @Sendable () -> Void) {
        condition.lock()
        defer { condition.unlock() }
        jobs.append((Self.now() + max(0, seconds), job))
        if thread == nil {
            let t = Thread { [self] in loop() }
            t.name = name
            thread = t
            t.start()
        }
        condition.signal()
    }

    private func loop() {
        BackgroundPriority.lowerCurrentThread(name: name, idle: idle)
        while true {
            condition.lock()
            var job: (@Sendable () -> Void)?
            while job == nil {
                let now = Self.now()
                // The first due job in order of arrival; else wait for the earliest.
                if let i = jobs.firstIndex(where: { $0.due <= now }) {
                    job = jobs.remove(at: i).job
                } else if let next = jobs.map(\.due).min() {
                    _ = condition.wait(until: Date(timeIntervalSinceNow: next - now))
                } else {
                    condition.wait()
                }
            }
            condition.unlock()
            job?()
        }
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
