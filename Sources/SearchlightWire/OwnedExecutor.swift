#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// An executor backed by one thread the process owns (issue 30, "one concurrency model"): a
/// `SerialExecutor` an actor pins itself to (`unownedExecutor`), and a `TaskExecutor` tasks prefer
/// (`Task(executorPreference:)`, `addTask(executorPreference:)`), so that work which may block (a
/// journal fsync, SQLite, a fork/exec waiting for the child's exec) runs here and never on Swift's
/// cooperative pool, whose threads (one per core, two on a small machine) every timer and
/// continuation of the process needs.
///
/// Jobs run in the order they were enqueued, one at a time.
public final class OwnedExecutor: SerialExecutor, TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` is guarded by `condition` (an NSCondition, not a Mutex: the thread waits on it).
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private let threadID = Mutex<pthread_t?>(nil)
    public let name: String

    /// Starts the thread at once; it lives as long as the process.
    public init(name: String) {
        self.name = name
        let started = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            // Foundation's `Thread.name` does not reach /proc on Linux (the thread kept its
            // creator's name, a pool thread's): named through the kernel's file, as
            // `BackgroundPriority.lowerCurrentThread` does.
            let fd = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                let bytes = Array(name.utf8.prefix(15))
                _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
            OwnedThreads.markCurrent()
            threadID.withLock { $0 = pthread_self() }
            started.signal()
            loop()
        }
        thread.name = name
        thread.stackSize = 1 << 20
        thread.start()
        started.wait()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func isSameExclusiveExecutionContext(other: OwnedExecutor) -> Bool { other === self }

    /// True on this executor's thread.
    public var isCurrent: Bool {
        guard let id = threadID.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    public func checkIsolated() {
        precondition(isCurrent, "not on the \(name) executor's thread")
    }

    private func loop() {
        var batch: [UnownedJob] = []
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            swap(&batch, &jobs)
            condition.unlock()
            for job in batch {
                job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            }
            batch.removeAll(keepingCapacity: true)
        }
    }
}

/// Marks the threads the process owns (an `OwnedExecutor`'s, a connection's reader, a
/// `BackgroundQueue`'s…), for `BlockingCheck`.
public enum OwnedThreads {
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// Called by a thread the process owns, once, when it starts.
    public static func markCurrent() {
        pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
    }

    /// Whether the calling thread marked itself as owned.
    public static var isCurrentOwned: Bool { pthread_getspecific(key) != nil }
}

/// A probe that a call which may block (SQLite, an fsync, a blocking socket write, a fork/exec)
/// does not run on Swift's cooperative pool (issue 30). Off unless enabled: `searchlightd` enables
/// it in debug builds (`SEARCHLIGHT_BLOCKING_CHECK=abort|log|off` overrides), so that the
/// integration tests, which run the debug daemon, fail when a path puts blocking work on the pool.
///
/// "On the pool" means: inside a task (`withUnsafeCurrentTask`), on a thread the process does not
/// own. Synchronous code on a reader thread or a dispatch queue is not in a task; a task on an
/// `OwnedExecutor` runs on an owned thread.
public enum BlockingCheck {
    /// What a violation does.
    public enum Mode: UInt8, Sendable {
        /// Nothing (release builds, in-process tests).
        case off = 0
        /// One log line on stderr per violation.
        case log = 1
        /// The process stops with the call's name (debug daemons: a test that takes the path fails).
        case abort = 2
    }

    private static let mode = Atomic<UInt8>(0)
    private static let count = Atomic<Int>(0)

    /// Sets the mode for the whole process.
    public static func enable(_ m: Mode) { mode.store(m.rawValue, ordering: .relaxed) }

    /// The mode from `SEARCHLIGHT_BLOCKING_CHECK`, else `fallback`.
    public static func enableFromEnvironment(default fallback: Mode) {
        let text = ProcessInfo.processInfo.environment["SEARCHLIGHT_BLOCKING_CHECK"]
        enable(text.flatMap { ["off": .off, "log": .log, "abort": .abort][$0] } ?? fallback)
    }

    /// How many violations were seen (the log mode's tests).
    public static var violations: Int { count.load(ordering: .relaxed) }

    /// Whether the calling code runs on the cooperative pool.
    public static var onCooperativePool: Bool {
        withUnsafeCurrentTask { $0 != nil } && !OwnedThreads.isCurrentOwned
    }

    /// Called at the start of a call that may block; `what` names it.
    @inline(__always)
    public static func blocking(_ what: StaticString, file: StaticString = #fileID, line: UInt = #line) {
        guard mode.load(ordering: .relaxed) != 0 else { return }
        check(what, file: file, line: line)
    }

    private static func check(_ what: StaticString, file: StaticString, line: UInt) {
        guard onCooperativePool else { return }
        count.add(1, ordering: .relaxed)
        let message = "blocking call on Swift's cooperative pool: \(what) at \(file):\(line)"
        switch Mode(rawValue: mode.load(ordering: .relaxed)) {
        case .abort: fatalError(message)
        case .log: FileHandle.standardError.write(Data("<3>\(message)\n".utf8))
        case .off, nil: break
        }
    }
}
