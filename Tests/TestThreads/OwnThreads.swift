import Foundation
import Testing

/// Runs a suite's tests on threads the test process owns (`TestThreads`), never on Swift's
/// cooperative pool.
///
/// The integration tests wait synchronously for processes, pipes, sockets and log lines (the
/// harnesses, `runCLI`, synchronous test bodies). On Linux the cooperative pool is as wide as the
/// machine (2 threads here) and runs every in-process suite of the same `swift test` too: a test
/// blocked there holds one of them, and two such tests stall every actor and continuation in the
/// process. Under this trait the test body, and whatever it awaits without an executor of its own
/// (nonisolated async functions, default actors, child tasks), runs on `TestThreads`, which starts
/// another thread whenever every one of its threads is busy or blocked: a blocking wait costs a
/// thread, never the pool's progress. Apply it to every integration suite:
/// `@Suite("…", .onOwnThreads)`.
public struct OnOwnThreads: TestTrait, SuiteTrait, TestScoping {
    /// Nested suites and every test function inside get it too.
    public var isRecursive: Bool { true }

    public init() {}

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(TestThreads.shared) {
            try await function()
        }
    }
}

extension SuiteTrait where Self == OnOwnThreads {
    /// Runs the tests on threads the test process owns, off Swift's cooperative pool (see `OnOwnThreads`).
    public static var onOwnThreads: Self { OnOwnThreads() }
}

/// A task executor whose jobs run on threads of its own: a job goes to an idle thread, or to a new
/// one when none is idle, so a job that blocks never delays another. Idle threads end after
/// `idleSeconds`. The number of threads is the number of jobs running or blocked at once (a test
/// waiting with `await` holds none).
public final class TestThreads: TaskExecutor, @unchecked Sendable {
    public static let shared = TestThreads()
    /// The name of its threads (seen in a debugger or `top -H`).
    public static let threadName = "own-test-thread"
    /// Set in each of its threads' dictionaries (`isCurrent`).
    private static let marker = "TestThreads"
    static let idleSeconds: TimeInterval = 10

    private let condition = NSCondition()
    // Guarded by `condition`.
    private var jobs: [UnownedJob] = []
    private var head = 0
    private var threads = 0
    private var busy = 0
    private var mostThreads = 0

    /// Whether the calling thread is one of a `TestThreads`' threads.
    public static var isCurrent: Bool { Thread.current.threadDictionary[marker] != nil }

    /// The most threads it has had at once.
    public var peakThreads: Int { condition.withLock { mostThreads } }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let start: Bool = condition.withLock {
            jobs.append(job)
            // Every queued job has an idle thread of its own, else a new thread is started.
            if jobs.count - head > threads - busy {
                threads += 1
                mostThreads = max(mostThreads, threads)
                return true
            }
            condition.signal()
            return false
        }
        if start {
            let thread = Thread { [self] in run() }
            thread.name = Self.threadName
            thread.start()
        }
    }

    private func run() {
        Thread.current.threadDictionary[Self.marker] = true
        condition.lock()
        while true {
            if head < jobs.count {
                let job = jobs[head]
                head += 1
                if head > 64, head * 2 > jobs.count {
                    jobs.removeFirst(head)
                    head = 0
                }
                busy += 1
                condition.unlock()
                job.runSynchronously(on: asUnownedTaskExecutor())
                condition.lock()
                busy -= 1
                continue
            }
            if !condition.wait(until: Date().addingTimeInterval(Self.idleSeconds)), head == jobs.count {
                threads -= 1
                condition.unlock()
                return
            }
        }
    }
}
