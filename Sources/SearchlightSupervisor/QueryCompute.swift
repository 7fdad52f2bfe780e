import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// The daemon's own threads for a query's CPU-heavy step, the transformer's embedding of the
/// query text (issue 29, D2). Not Swift's cooperative pool and not the connection's thread: a
/// few threads (`slots`), fed by a `FairQueue`, so one uid has at most `perOwner` embeddings
/// running and the rest of its queries queue behind every other uid's. The connection's thread
/// waits for its job while it watches its query's budget: once the deadline passes or the client
/// disconnects, a waiting job is withdrawn and a running one told to stop (the encoder checks
/// between layers), and the query answers `-2003 cancelled`.
final class QueryCompute: @unchecked Sendable {
    // @unchecked: `state` is read and written under `condition` only.
    /// One job: its work, its outcome, and whether its caller gave up.
    private final class Ticket: Sendable {
        let work: @Sendable (_ shouldStop: @Sendable () -> Bool) -> [Float]?
        let stop = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        /// Written by the worker before `done` is signalled, read by the caller after.
        let result = Mutex<[Float]?>(nil)
        /// The worker thread's CPU nanoseconds on the job, written before `done` is signalled.
        let cpu = Atomic<UInt64>(0)
        init(_ work: @escaping @Sendable (_ shouldStop: @Sendable () -> Bool) -> [Float]?) { self.work = work }
    }

    let slots: Int
    let perOwner: Int
    private let condition = NSCondition()
    private var state: FairQueue<Ticket>
    private var stopping = false
    private var threads: [Thread] = []

    /// One thread per core, 2 to 4, one job per uid at a time: a flooding uid holds one core,
    /// and another uid's query finds a free thread instead of waiting for the flood's running
    /// embedding (with one thread it waited for it: p50 177 ms instead of a few).
    static let defaultSlots = max(2, min(4, ProcessInfo.processInfo.activeProcessorCount))

    init(slots: Int = QueryCompute.defaultSlots, perOwner: Int = 1) {
        self.slots = slots
        self.perOwner = perOwner
        state = FairQueue(slots: slots, perOwner: perOwner)
        for k in 0..<slots {
            let t = Thread { [unowned self] in self.workerLoop() }
            t.name = "searchlightd.embed.\(k)"
            t.stackSize = 1 << 20
            threads.append(t)
            t.start()
        }
    }

    /// Jobs waiting and running, for tests and status.
    var counts: (queued: Int, running: Int) { condition.withLock { (state.queuedCount, state.runningCount) } }

    /// Runs `work` on a compute thread as `owner`'s job and waits for it within `budget`
    /// (checked every 20 ms): `cancelled` when the budget says stop (deadline, disconnection) or
    /// the job's deadline passed in the queue; `work` gets a `shouldStop` to poll.
    func run(owner: UInt32, budget: QueryBudget,
             _ work: @escaping @Sendable (_ shouldStop: @Sendable () -> Bool) -> [Float]?) throws(SearchlightError) -> [Float] {
        try budget.check()
        let ticket = Ticket(work)
        let remaining = budget.remaining ?? 3600
        let deadline = QueryBudget.now() + UInt64(max(0, remaining) * 1e9)
        let id: UInt64 = condition.withLock {
            let id = state.enqueue(owner: owner, deadline: deadline, job: ticket)
            condition.broadcast()
            return id
        }
        while ticket.done.wait(timeout: .now() + .milliseconds(20)) == .timedOut {
            guard budget.shouldStop() else { continue }
            let withdrawn = condition.withLock { state.withdraw(id) != nil }
            if !withdrawn {
                // Running: told to stop at its next layer; its slot frees when it returns.
                ticket.stop.store(true, ordering: .relaxed)
            }
            throw budget.error
        }
        if let result = ticket.result.withLock({ $0 }) {
            // The session thread only waited: the embedding's CPU is the worker's.
            budget.addOffThread("embed-compute", cpu: ticket.cpu.load(ordering: .relaxed))
            return result
        }
        // Stopped or expired in the queue: the budget says why (its deadline, at the latest now).
        if budget.shouldStop() { throw budget.error }
        throw SearchlightError(.cancelled, "the query's embedding waited past searchlightd's query limit and was stopped; retry",
            data: ["reason": "deadline"])
    }

    private func workerLoop() {
        while true {
            var job: FairQueue<Ticket>.Entry?
            condition.lock()
            while job == nil && !stopping {
                if !handOff.isEmpty {
                    job = handOff.removeFirst()
                    break
                }
                let step = state.next(now: QueryBudget.now())
                for e in step.expired {
                    e.job.done.signal()
                }
                if let first = step.start.first {
                    job = first
                    // A step may start several jobs (several slots freed): the others are handed
                    // to the threads woken next.
                    handOff += step.start.dropFirst()
                    if !handOff.isEmpty { condition.broadcast() }
                } else {
                    // Woken by a new job or a finished one, never by a timer: an idle daemon's
                    // threads stay asleep. A waiting job whose deadline passes is withdrawn by its
                    // caller, which watches its budget; `next` expires any it finds too.
                    condition.wait()
                }
            }
            condition.unlock()
            guard let job else { return }
            let ticket = job.job
            let cpuBefore = QueryBudget.threadCPUTime()
            let result: [Float]? = ticket.stop.load(ordering: .relaxed) ? nil : ticket.work { ticket.stop.load(ordering: .relaxed) }
            ticket.cpu.store(QueryBudget.threadCPUTime() &- cpuBefore, ordering: .relaxed)
            ticket.result.withLock { $0 = result }
            condition.withLock {
                state.finished(owner: job.owner)
                condition.broadcast()
            }
            ticket.done.signal()
        }
    }

    /// Started jobs a worker took for another worker (a step that started several).
    private var handOff: [FairQueue<Ticket>.Entry] = []

    /// Stops the threads once their jobs end (the daemon stops).
    func stop() {
        condition.withLock {
            stopping = true
            condition.broadcast()
        }
    }
}
