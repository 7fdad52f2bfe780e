import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization
import Testing
@testable import SearchlightSupervisor

/// Issue 29, D2: the queue of query embeddings serves uids in turn, runs at most `perOwner` of
/// one uid at a time, expires waiting jobs at their deadline and lets a waiting job be withdrawn.
/// A pure state machine, driven with an injected clock (nanoseconds).
@Suite("Fair queue of query work between uids")
struct FairQueueTests {
    static let second: UInt64 = 1_000_000_000

    @Test("a flooding uid holds one slot; another uid's job starts at the next free slot, ahead of the flood")
    func floodDoesNotStarve() {
        var q = FairQueue<String>(slots: 1, perOwner: 1)
        for k in 0..<30 { _ = q.enqueue(owner: 1000, deadline: 10 * Self.second, job: "attacker-\(k)") }
        let first = q.next(now: 0)
        #expect(first.start.map(\.job) == ["attacker-0"])
        #expect(q.next(now: 0).start.isEmpty, "one slot, taken")
        _ = q.enqueue(owner: 2000, deadline: 10 * Self.second, job: "victim")
        q.finished(owner: 1000)
        #expect(q.next(now: Self.second).start.map(\.job) == ["victim"], "the victim goes before the 29 queued")
        q.finished(owner: 2000)
        #expect(q.next(now: Self.second).start.map(\.job) == ["attacker-1"])
        #expect(q.queued(owner: 1000) == 28)
    }

    @Test("one uid never runs more than perOwner jobs, even with slots free; other uids fill them")
    func perOwnerBound() {
        var q = FairQueue<Int>(slots: 3, perOwner: 1)
        for k in 0..<5 { _ = q.enqueue(owner: 7, deadline: .max, job: k) }
        #expect(q.next(now: 0).start.map(\.job) == [0])
        #expect(q.runningCount == 1 && q.running(owner: 7) == 1)
        _ = q.enqueue(owner: 8, deadline: .max, job: 100)
        _ = q.enqueue(owner: 9, deadline: .max, job: 200)
        _ = q.enqueue(owner: 9, deadline: .max, job: 201)
        let step = q.next(now: 0)
        #expect(step.start.map(\.job) == [100, 200])
        #expect(q.runningCount == 3)
        q.finished(owner: 9)
        q.finished(owner: 7)
        // Round robin: 7 and 9 both wait; 7 has waited longer in the turn.
        #expect(q.next(now: 0).start.map(\.job) == [1, 201])
    }

    @Test("owners are served in turn, each its own jobs in order")
    func roundRobin() {
        var q = FairQueue<String>(slots: 1, perOwner: 1)
        for k in 0..<3 { _ = q.enqueue(owner: 1, deadline: .max, job: "a\(k)") }
        for k in 0..<2 { _ = q.enqueue(owner: 2, deadline: .max, job: "b\(k)") }
        _ = q.enqueue(owner: 3, deadline: .max, job: "c0")
        var order: [String] = []
        while true {
            let step = q.next(now: 0)
            guard let e = step.start.first else { break }
            order.append(e.job)
            q.finished(owner: e.owner)
        }
        #expect(order == ["a0", "b0", "c0", "a1", "b1", "a2"])
        #expect(q.queuedCount == 0 && q.runningCount == 0)
    }

    @Test("a waiting job whose deadline passes leaves as expired and never starts")
    func deadlineExpires() {
        var q = FairQueue<String>(slots: 1, perOwner: 1)
        _ = q.enqueue(owner: 1, deadline: 10 * Self.second, job: "running")
        _ = q.enqueue(owner: 1, deadline: 5 * Self.second, job: "short")
        _ = q.enqueue(owner: 1, deadline: 20 * Self.second, job: "long")
        #expect(q.next(now: 0).start.map(\.job) == ["running"])
        let late = q.next(now: 5 * Self.second)
        #expect(late.expired.map(\.job) == ["short"] && late.start.isEmpty)
        q.finished(owner: 1)
        let step = q.next(now: 6 * Self.second)
        #expect(step.start.map(\.job) == ["long"] && step.expired.isEmpty)
        q.finished(owner: 1)
        #expect(q.next(now: 30 * Self.second).expired.isEmpty, "nothing left to expire")
    }

    @Test("a waiting job can be withdrawn (its client left); a started one cannot")
    func withdraw() {
        var q = FairQueue<String>(slots: 1, perOwner: 1)
        let a = q.enqueue(owner: 1, deadline: .max, job: "a")
        let b = q.enqueue(owner: 1, deadline: .max, job: "b")
        let c = q.enqueue(owner: 2, deadline: .max, job: "c")
        #expect(q.next(now: 0).start.map(\.job) == ["a"])
        #expect(q.withdraw(a) == nil, "started")
        #expect(q.withdraw(b)?.job == "b")
        #expect(q.withdraw(b) == nil, "already gone")
        #expect(q.queued(owner: 1) == 0)
        q.finished(owner: 1)
        #expect(q.next(now: 0).start.map(\.job) == ["c"])
        #expect(q.withdraw(c) == nil)
    }

    @Test("finished for an owner with nothing running changes nothing")
    func finishedIdempotent() {
        var q = FairQueue<Int>(slots: 2, perOwner: 1)
        q.finished(owner: 5)
        #expect(q.runningCount == 0)
        _ = q.enqueue(owner: 5, deadline: .max, job: 1)
        #expect(q.next(now: 0).start.count == 1)
        q.finished(owner: 5)
        q.finished(owner: 5)
        #expect(q.runningCount == 0)
    }
}

/// The compute threads around the queue (`QueryCompute`), with real threads and a real budget:
/// a caller whose query's deadline passes or whose client leaves gets `cancelled` while its job
/// waits or runs, and the job stops.
@Suite("Query compute threads: cancellation and fairness")
struct QueryComputeTests {
    /// A job that runs until told to stop (or released), counting what it saw.
    final class Gate: @unchecked Sendable {
        let started = DispatchSemaphore(value: 0)
        let release = Atomic<Bool>(false)
        let stoppedByCaller = Atomic<Bool>(false)
        func work(_ shouldStop: @Sendable () -> Bool) -> [Float]? {
            started.signal()
            while !release.load(ordering: .relaxed) {
                if shouldStop() {
                    stoppedByCaller.store(true, ordering: .relaxed)
                    return nil
                }
                usleep(1000)
            }
            return [1]
        }
    }

    final class Flag: @unchecked Sendable {
        private let value = Atomic<Bool>(false)
        func set() { value.store(true, ordering: .relaxed) }
        var isSet: Bool { value.load(ordering: .relaxed) }
    }

    @Test("a job waiting behind another uid's running job answers cancelled at its deadline and never runs")
    func queuedDeadline() async throws {
        let compute = QueryCompute(slots: 1, perOwner: 1)
        defer { compute.stop() }
        let blocker = Gate()
        let first = OwnThread { try? compute.run(owner: 1, budget: QueryBudget(timeout: 60)) { blocker.work($0) } }
        await onOwnThread { blocker.started.wait() }
        let ran = Flag()
        let budget = QueryBudget(timeout: 0.3)
        let outcome = await onOwnThread {
            Result { () throws -> [Float]? in
                try compute.run(owner: 2, budget: budget) { _ in
                    ran.set()
                    return [2]
                }
            }
        }
        #expect(throws: SearchlightError.self) { _ = try outcome.get() }
        #expect(budget.stop == .deadline(seconds: 0.3))
        #expect(compute.counts.queued == 0, "withdrawn from the queue")
        blocker.release.store(true, ordering: .relaxed)
        #expect(await first.value == [1])
        let didRun = ran.isSet
        #expect(!didRun)
    }

    @Test("a running job is told to stop when its client leaves, and its slot serves the next job")
    func runningAbandoned() async throws {
        let compute = QueryCompute(slots: 1, perOwner: 1)
        defer { compute.stop() }
        let gate = Gate()
        let gone = Flag()
        let budget = QueryBudget(timeout: 60, isAbandoned: { gone.isSet })
        let caller = OwnThread { () -> SearchlightError? in
            do {
                _ = try compute.run(owner: 1, budget: budget) { gate.work($0) }
                return nil
            } catch let error as SearchlightError {
                return error
            } catch {
                return nil
            }
        }
        await onOwnThread { gate.started.wait() }
        gone.set()
        let error = await caller.value
        #expect(error?.code == .cancelled && error?.data?["reason"]?.stringValue == "disconnected", "\(String(describing: error))")
        // The next job (another uid) runs on the freed slot.
        let next = try await onOwnThread { Result { () throws -> [Float]? in try compute.run(owner: 2, budget: QueryBudget(timeout: 60)) { _ in [3] } } }.get()
        #expect(next == [3])
        let stopped = gate.stoppedByCaller.load(ordering: .relaxed)
        #expect(stopped)
    }

    @Test("with one uid's job running, another uid's job runs on the second slot while the first uid's others wait")
    func secondSlotForOtherUID() async throws {
        let compute = QueryCompute(slots: 2, perOwner: 1)
        defer { compute.stop() }
        let gate = Gate()
        let first = OwnThread { try? compute.run(owner: 1, budget: QueryBudget(timeout: 60)) { gate.work($0) } }
        await onOwnThread { gate.started.wait() }
        let queuedSame = OwnThread { try? compute.run(owner: 1, budget: QueryBudget(timeout: 60)) { _ in [5] } }
        let other = try await onOwnThread { Result { () throws -> [Float]? in try compute.run(owner: 2, budget: QueryBudget(timeout: 60)) { _ in [4] } } }.get()
        #expect(other == [4])
        #expect(compute.counts.running == 1, "uid 1's second job waits for its first")
        gate.release.store(true, ordering: .relaxed)
        #expect(await first.value == [1])
        #expect(await queuedSame.value == [5])
    }
}

/// Runs `body` on a thread of its own. These tests block (semaphores, `QueryCompute.run`'s own
/// wait for a slot), and a blocked thread of Swift's cooperative pool (two on two cores) stalls
/// every other suite of the run: two of these tests blocking at once deadlocked it.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in Thread.detachNewThread { continuation.resume(returning: body()) } }
}

/// `Task.detached` for blocking work: the closure runs on a thread of its own.
final class OwnThread<T: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var result: T?

    init(_ body: @escaping @Sendable () -> T) {
        Thread.detachNewThread { [self] in
            result = body()
            done.signal()
        }
    }

    var value: T {
        get async {
            await onOwnThread { [self] in
                done.wait()
                done.signal()
                return result!
            }
        }
    }
}
