import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// Settling's writes at background priority (issue 32 item 2): a maintenance write from a
/// background-priority thread runs on that thread while the writer waits in its turn, so its CPU
/// time is the background thread's, not the normal-priority writer's that queries wait behind.
@Suite("Maintenance writes lent to a background thread", .serialized, .onOwnThreads)
struct WriterLendTests {
    /// Runs `body` on a `BackgroundQueue` thread (background priority) and waits for it.
    static func onBackgroundThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        let queue = BackgroundQueue(label: "test-lend")
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<T, Error>?
        queue.async {
            result = Result { try body() }
            done.signal()
        }
        done.wait()
        return try result!.get()
    }

    /// A store with `lendWriterToBackground` on (off by default).
    static func lendingFixture() throws -> StoreFixture {
        let f = try StoreFixture(rankedBuilds: false)
        var options = StoreFixture.options(f.clock, maxItems: nil, rankedBuilds: false)
        options.lendWriterToBackground = true
        f.store.close()
        f.store = try IndexStore(path: f.dir + "/b/_default.sqlite", options: options)
        return f
    }

    @Test("from a background thread the work runs on that thread, and a query answers while its transaction is open")
    func lentToBackgroundThread() throws {
        let f = try Self.lendingFixture()
        _ = try f.store.applySync([.items([try f.item("a", ["title": .string("alpha report")])])])
        let inWork = DispatchSemaphore(value: 0), queried = DispatchSemaphore(value: 0)
        let store = f.store
        let background = Thread {
            _ = inWork.wait(timeout: .now() + 60)
            // The lent transaction is open (it wrote a row and waits): a reader answers meanwhile.
            let hits = (try? store.lexicalCandidates("alpha", limit: 20).candidates.count) ?? -1
            #expect(hits == 1)
            queried.signal()
        }
        background.start()
        let seen = try Self.onBackgroundThread { () -> (lowered: Bool, caller: pthread_t, worker: pthread_t?, waited: Bool) in
            let caller = pthread_self()
            nonisolated(unsafe) var worker: pthread_t?
            nonisolated(unsafe) var waited = false
            _ = try store.maintenanceWrite { s in
                worker = pthread_self()
                try s.writer.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('lend-test', '1')")
                inWork.signal()
                waited = queried.wait(timeout: .now() + 60) == .success
                return ApplyResult()
            }
            return (BackgroundPriority.isCurrentThreadBackground, caller, worker, waited)
        }
        try #require(seen.lowered, "the test's queue did not get background priority")
        #expect(seen.worker.map { pthread_equal($0, seen.caller) != 0 } == true, "the work ran on the writer thread")
        #expect(seen.waited, "the query did not answer while the lent write's transaction was open")
        // Committed, and the writer goes on as before.
        #expect(try f.store.read { db in try db.scalar("SELECT value FROM meta WHERE key = 'lend-test'") } != nil)
        _ = try f.store.applySync([.items([try f.item("b", ["title": .string("alpha notes")])])])
        #expect(try f.store.lexicalCandidates("alpha", limit: 20).candidates.count == 2)
    }

    @Test("from a normal-priority thread the work runs on the writer thread, as before")
    func normalThreadUsesWriter() throws {
        let f = try Self.lendingFixture()
        let caller = pthread_self()
        nonisolated(unsafe) var worker: pthread_t?
        _ = try f.store.maintenanceWrite { _ in
            worker = pthread_self()
            return ApplyResult()
        }
        #expect(worker.map { pthread_equal($0, caller) == 0 } == true)
    }

    @Test("off by default: a background thread's write runs on the writer thread")
    func offByDefault() throws {
        let f = try StoreFixture(rankedBuilds: false)
        let store = f.store
        let seen = try Self.onBackgroundThread { () -> Bool in
            let caller = pthread_self()
            nonisolated(unsafe) var worker: pthread_t?
            _ = try store.maintenanceWrite { _ in
                worker = pthread_self()
                return ApplyResult()
            }
            return worker.map { pthread_equal($0, caller) == 0 } == true
        }
        #expect(seen)
    }

    @Test("a lent write that fails rolls back and answers its error; the writer goes on")
    func lentFailure() throws {
        let f = try Self.lendingFixture()
        let store = f.store
        let failed = try Self.onBackgroundThread { () -> Bool in
            do {
                _ = try store.maintenanceWrite { s in
                    try s.writer.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('lend-fail', '1')")
                    try s.writer.run("INSERT INTO no_such_table VALUES (1)")
                    return ApplyResult()
                }
                return false
            } catch {
                return true
            }
        }
        #expect(failed)
        #expect(try f.store.read { db in try db.scalar("SELECT value FROM meta WHERE key = 'lend-fail'") } == nil)
        _ = try f.store.applySync([.items([try f.item("a", ["title": .string("alpha")])])])
        #expect(try f.store.lexicalCandidates("alpha", limit: 20).candidates.count == 1)
    }

    @Test("a store closed while a background thread waits for the writer refuses its write instead of hanging")
    func closedStoreRefuses() throws {
        let f = try Self.lendingFixture()
        let store = f.store
        f.store.close()
        let refused = try Self.onBackgroundThread { () -> Bool in
            do {
                _ = try store.maintenanceWrite { _ in ApplyResult() }
                return false
            } catch {
                return true
            }
        }
        #expect(refused)
    }
}
