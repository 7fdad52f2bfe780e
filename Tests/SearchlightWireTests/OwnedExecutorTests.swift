import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// The daemon's own executor (`OwnedExecutor`) and the probe that keeps blocking calls off Swift's
/// cooperative pool (`BlockingCheck`): the probe tells a pool thread from an owned one, and work
/// given to the executor (an actor pinned to it, a task that prefers it) runs on its thread.
@Suite("Owned executor and the blocking-call probe", .onOwnThreads)
struct OwnedExecutorTests {
    static let executor = OwnedExecutor(name: "test-owned")

    actor Pinned {
        nonisolated var unownedExecutor: UnownedSerialExecutor { OwnedExecutorTests.executor.asUnownedSerialExecutor() }
        var count = 0
        func step() -> (onThread: Bool, onPool: Bool) {
            count += 1
            return (OwnedExecutorTests.executor.isCurrent, BlockingCheck.onCooperativePool)
        }
    }

    @Test("a task on the cooperative pool is seen as on the pool")
    func poolTaskIsSeen() async {
        let seen = await Task.detached { BlockingCheck.onCooperativePool }.value
        #expect(seen)
    }

    @Test("a task that prefers the owned executor runs on its thread, not on the pool")
    func preferredTaskRunsOnOwnedThread() async {
        let (onThread, onPool) = await Task(executorPreference: Self.executor) {
            (Self.executor.isCurrent, BlockingCheck.onCooperativePool)
        }.value
        #expect(onThread)
        #expect(!onPool)
    }

    @Test("an actor pinned to the owned executor runs there, and its child tasks that prefer it too")
    func pinnedActor() async {
        let actor = Pinned()
        for _ in 0..<3 {
            let (onThread, onPool) = await actor.step()
            #expect(onThread)
            #expect(!onPool)
        }
        let children = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<4 { group.addTask(executorPreference: Self.executor) { Self.executor.isCurrent && !BlockingCheck.onCooperativePool } }
            return await group.reduce(true) { $0 && $1 }
        }
        #expect(children)
        #expect(await actor.count == 3)
    }

    @Test("synchronous code on a thread of its own is not on the pool")
    func plainThreadIsNotPool() async {
        let seen = Mutex<Bool?>(nil)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                seen.withLock { $0 = BlockingCheck.onCooperativePool }
                done.resume()
            }
            thread.start()
        }
        #expect(seen.withLock { $0 } == false)
    }

    final class Order: Sendable {
        let seen = Mutex<[Int]>([])
    }

    @Test("every job given runs")
    func everyJobRuns() async {
        let order = Order()
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                group.addTask(executorPreference: Self.executor) { order.seen.withLock { $0.append(i) } }
            }
        }
        #expect(order.seen.withLock { $0.sorted() } == Array(0..<50))
    }
}
