#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The one thread that touches the delegate's connection to the app's database. SQLite calls
/// block (a busy timeout, a rollback-journal lock held by the app, a large snapshot read), and on
/// Linux Swift's tasks share one pool as wide as the machine: they must not wait there. Work is
/// queued here and the awaiting task resumed with its result (GRDB's `DatabaseQueue` shape).
/// An idle worker sleeps on a condition: no CPU.
///
/// It is also the task executor of the delegate's indexing loop (`Task(executorPreference:)`):
/// the loop's steps between its awaits (and the SDK calls it makes) run on this thread too, so
/// indexing never waits for a thread of the app's pool. An app whose tasks keep that pool busy
/// (two threads on a small machine) would otherwise delay each of a batch's twenty-odd hops
/// behind all of its queued work: seen as a change not indexed within 60 s while the pool ran
/// `swift test`'s other suites beside two CPU hogs.
final class DatabaseWorker: TaskExecutor, Sendable {
    let path: String
    private let core: Core

    init(path: String) {
        self.path = path
        core = Core(path: path)
        let core = self.core
        let thread = Thread { core.run() }
        thread.name = "searchlight-sqlite"
        thread.start()
    }

    deinit { core.finish() }

    /// Runs `body` on the worker's thread with the connection (opened on first use).
    func perform<T: Sendable>(_ body: @escaping @Sendable (SQLiteDatabase) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            core.enqueue { core in continuation.resume(with: Result { try body(try core.connection()) }) }
        }
    }

    /// Runs a job of a task that prefers this executor, between the database jobs.
    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        core.enqueue { _ in job.runSynchronously(on: executor) }
    }

    /// Closes the connection; the next `perform` opens a new one.
    func closeConnection() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            core.enqueue { core in
                core.close()
                continuation.resume()
            }
        }
    }

    /// The queue, and the connection only the worker's thread uses.
    private final class Core: @unchecked Sendable {
        let path: String
        private let condition = NSCondition()
        private var jobs: [(Core) -> Void] = []
        private var finished = false
        /// Only touched on the worker's thread.
        private var database: SQLiteDatabase?
        /// The file the connection has open (device, inode): when the path names another file
        /// (the app restored a backup by renaming it into place), the connection is reopened.
        private var file: (UInt64, UInt64)?

        init(path: String) { self.path = path }

        func enqueue(_ job: @escaping (Core) -> Void) {
            condition.withLock {
                jobs.append(job)
                condition.signal()
            }
        }

        func finish() {
            condition.withLock {
                finished = true
                condition.signal()
            }
        }

        func run() {
            while true {
                let batch: [(Core) -> Void] = condition.withLock {
                    while jobs.isEmpty && !finished { condition.wait() }
                    defer { jobs.removeAll() }
                    return jobs
                }
                if batch.isEmpty { break }
                for job in batch { job(self) }
            }
            close()
        }

        func connection() throws -> SQLiteDatabase {
            var info = stat()
            let current = stat(path, &info) == 0 ? (UInt64(info.st_dev), UInt64(info.st_ino)) : nil
            if let database {
                if let current, let file, current == file { return database }
                if current != nil { close() }  // replaced: open the new file (a missing one keeps the old)
                else { return database }
            }
            guard let current else {
                throw SQLiteError(code: 14, extendedCode: 14,
                    message: "no database at \(path); the delegate indexes an existing SQLite database: create it (and its tables) first",
                    sql: nil)
            }
            let opened = try SQLiteDatabase(path: path)
            database = opened
            file = current
            return opened
        }

        func close() {
            database?.close()
            database = nil
            file = nil
        }
    }
}
