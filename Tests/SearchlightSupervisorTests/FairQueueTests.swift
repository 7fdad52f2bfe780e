import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// Issue 29, D2: the queue of query embeddings serves uids in turn, runs at most `perOwner` of
/// one uid at a time, expires waiting jobs at their deadline and lets a waiting job be withdrawn.
/// A pure state machine, driven with an injected clock (nanoseconds).
@Suite("Fair queue of query work between uids", .onOwnThreads)
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

/// A call on a thread of its own (not the task pool, which these tests would block), whose
/// outcome `wait()` gives.
final class OnThread<T>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var outcome: T?
    init(_ body: @escaping @Sendable () -> T) {
        Thread { [self] in
            outcome = body()
            done.signal()
        }.start()
    }
    func wait() -> T {
        done.wait()
        return outcome!
    }
}

/// The compute threads around the queue (`QueryCompute`), with real threads and a real budget:
/// a caller whose query's deadline passes or whose client leaves gets `cancelled` while its job
/// waits or runs, and the job stops.
@Suite("Query compute threads: cancellation and fairness", .serialized, .onOwnThreads)
struct QueryComputeTests {
    /// A job that runs until told to stop (or released), saying what it saw.
    final class Gate: @unchecked Sendable {
        let started = DispatchSemaphore(value: 0)
        let release = Flag()
        let stoppedByCaller = Flag()
        func work(_ shouldStop: @Sendable () -> Bool) -> [Float]? {
            started.signal()
            while !release.isSet {
                if shouldStop() {
                    stoppedByCaller.set()
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

    static func call(_ compute: QueryCompute, owner: UInt32, _ budget: QueryBudget,
                     _ work: @escaping @Sendable (_ shouldStop: @Sendable () -> Bool) -> [Float]?) -> Result<[Float], SearchlightError> {
        Result { () throws(SearchlightError) -> [Float] in try compute.run(owner: owner, budget: budget, work) }
    }

    @Test("a job waiting behind another uid's running job answers cancelled at its deadline and never runs")
    func queuedDeadline() throws {
        let compute = QueryCompute(slots: 1, perOwner: 1)
        defer { compute.stop() }
        let blocker = Gate()
        let first = OnThread { Self.call(compute, owner: 1, QueryBudget(timeout: 60)) { blocker.work($0) } }
        blocker.started.wait()
        let ran = Flag()
        let budget = QueryBudget(timeout: 0.3)
        let second = Self.call(compute, owner: 2, budget) { _ in
            ran.set()
            return [2]
        }
        #expect(throws: SearchlightError.self) { try second.get() }
        #expect(budget.stop == .deadline(seconds: 0.3))
        #expect(compute.counts.queued == 0, "withdrawn from the queue")
        blocker.release.set()
        #expect(try first.wait().get() == [1])
        #expect(!ran.isSet)
    }

    @Test("a running job is told to stop when its client leaves, and its slot serves the next job")
    func runningAbandoned() throws {
        let compute = QueryCompute(slots: 1, perOwner: 1)
        defer { compute.stop() }
        let gate = Gate()
        let gone = Flag()
        let budget = QueryBudget(timeout: 60, isAbandoned: { gone.isSet })
        let caller = OnThread { Self.call(compute, owner: 1, budget) { gate.work($0) } }
        gate.started.wait()
        gone.set()
        guard case .failure(let error) = caller.wait() else {
            Issue.record("answered, not cancelled")
            return
        }
        #expect(error.code == .cancelled && error.data?["reason"]?.stringValue == "disconnected", "\(error)")
        // The next job (another uid) runs on the freed slot.
        #expect(try Self.call(compute, owner: 2, QueryBudget(timeout: 60)) { _ in [3] }.get() == [3])
        #expect(gate.stoppedByCaller.isSet)
    }

    @Test("with one uid's job running, another uid's job runs on the second slot while the first uid's others wait")
    func secondSlotForOtherUID() throws {
        let compute = QueryCompute(slots: 2, perOwner: 1)
        defer { compute.stop() }
        let gate = Gate()
        let first = OnThread { Self.call(compute, owner: 1, QueryBudget(timeout: 60)) { gate.work($0) } }
        gate.started.wait()
        let sameUID = OnThread { Self.call(compute, owner: 1, QueryBudget(timeout: 60)) { _ in [5] } }
        #expect(try Self.call(compute, owner: 2, QueryBudget(timeout: 60)) { _ in [4] }.get() == [4])
        #expect(compute.counts.running == 1, "uid 1's second job waits for its first")
        gate.release.set()
        #expect(try first.wait().get() == [1])
        #expect(try sameUID.wait().get() == [5])
    }
    @Test("the embedding's CPU, spent on a compute thread, is counted in the query's phases (the query cpu log), not lost as the waiting thread's")
    func workerCPUCounted() throws {
        let compute = QueryCompute(slots: 1, perOwner: 1)
        defer { compute.stop() }
        let budget = QueryBudget(timeout: 60)
        budget.phases = [:]
        let result = try budget.phase("embed") { () throws(SearchlightError) -> [Float] in
            try compute.run(owner: 1, budget: budget) { _ in
                // 30 ms of this thread's CPU.
                let start = QueryBudget.threadCPUTime()
                var x: Float = 1
                while QueryBudget.threadCPUTime() &- start < 30_000_000 { x = x * 1.000001 + 0.5 }
                return [x.isNaN ? 0 : 1]
            }
        }
        #expect(result == [1])
        let worker = try #require(budget.phases?["embed-compute"])
        #expect(worker.cpu >= 30_000_000)
        #expect(budget.offThreadCPU == worker.cpu)
        // The caller's thread waited: its "embed" CPU is far below the worker's.
        #expect((budget.phases?["embed"]?.cpu ?? .max) < worker.cpu)
    }
}
