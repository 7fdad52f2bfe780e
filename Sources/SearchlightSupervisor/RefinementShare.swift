import Foundation
import Synchronization
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// Which indexes the low-priority refinement share (`RefinementShare`) looks at, and when: an
/// index is due `settle` seconds after its last donation (an app's burst of donations is refined
/// once, after it), or at once when asked to retry. Pure: the caller passes the time, so tests
/// drive it with an injected clock.
struct RefinementShareQueue: Sendable {
    struct Key: Hashable, Sendable, CustomStringConvertible {
        var bundle: String
        var index: String
        var description: String { index.isEmpty ? bundle : "\(bundle)/\(index)" }
    }

    let settle: TimeInterval
    private(set) var due: [Key: Date] = [:]

    init(settle: TimeInterval) { self.settle = settle }

    /// Items were donated to `key` at `now`: it is due once they have settled (a donation that
    /// keeps coming keeps moving it later; the running pass is not stopped by it).
    mutating func donated(_ key: Key, at now: Date) {
        due[key] = now.addingTimeInterval(settle)
    }

    /// Look at `key` again at `date` (after a pause), unless a donation already put it later.
    mutating func retry(_ key: Key, at date: Date) {
        due[key] = max(due[key] ?? date, date)
    }

    /// The first key that is due at `now` (the earliest), taken off the queue; else nil and when
    /// the next one is due (nil: nothing queued).
    mutating func take(at now: Date) -> (key: Key?, next: Date?) {
        guard let first = due.min(by: { ($0.value, $0.key.bundle, $0.key.index) < ($1.value, $1.key.bundle, $1.key.index) }) else {
            return (nil, nil)
        }
        guard first.value <= now else { return (nil, first.value) }
        due[first.key] = nil
        return (first.key, nil)
    }

    /// Whether a batch of the share should keep waiting for the transformer's user queries: while
    /// some run or are queued (`busy`), up to `maxWait` seconds per batch. Then the batch runs
    /// beside them at its lower priority: a stream of queries that never leaves the threads free
    /// (a client polling, a desktop search provider on every keystroke of a long session) would
    /// otherwise hold refinement, and so leave every query on unrefined vectors, indefinitely.
    static func keepsWaiting(busy: Bool, waited: TimeInterval, maxWait: TimeInterval) -> Bool {
        busy && waited < maxWait
    }

    /// Whether refinement of a pass should give way now, and why: memory pressure at or over the
    /// pause mark (the transformer's activations and the model's pages would push other
    /// processes to swap), or the daemon stopping. CPU pressure alone never pauses it: its thread
    /// runs at background priority, so it gets only the CPU that others leave.
    static func pauseReason(memory: Double?, pauseMemory: Double, stopping: Bool) -> String? {
        if stopping { return "stopping" }
        if let memory, memory >= pauseMemory { return "memory pressure \(String(format: "%.1f", memory)) % ≥ \(Int(pauseMemory)) %" }
        return nil
    }
}

/// The low-priority refinement share (issue 37; Docs/SemanticSearch.md, "Refinement"): a small
/// index (at most `--refine-share-items` vectors, 10 000 by default) is refined by the
/// transformer within minutes of its donations, even on a machine that is never idle, instead of
/// waiting for idle maintenance. It runs on one thread of its own at background priority (nice
/// 10, `BackgroundPriority`), in batches of `batch` items, and gives way:
///
/// - between batches, while the transformer's query threads (`QueryCompute`) have a user query
///   running or queued: the query gets the cores; the share waits for them to be free, up to
///   `maxQueryWait` a batch (`RefinementShareQueue.keepsWaiting`), so a steady stream of queries
///   slows it without stopping it;
/// - at the next batch when the memory pressure reaches the pause mark (`--pause-memory`), and
///   looks again one `--load-interval` later;
/// - at the daemon's stop, and when the store is closed under it (it goes on later).
///
/// Larger indexes keep the idle rule (`Maintenance`). An index being refined by idle maintenance
/// is left to it (`claim`), and the other way round.
final class RefinementShare: Sendable {
    typealias Key = RefinementShareQueue.Key
    /// Items per batch: one batch is what a user's query can find in the way of the CPU at most.
    static let batch = 8
    /// The longest a batch waits for the transformer's user queries (`RefinementShareQueue.keepsWaiting`):
    /// a burst of typing is over well within it; a batch of 8 beside a query stream then costs
    /// that stream one batch's time on one core at nice 10.
    static let maxQueryWait: TimeInterval = 2
    static let waitingForSample = "waiting for a load sample"

    /// Everything that changes, under one lock; the thread waits on `wake` (never under the lock).
    private struct State {
        var queue: RefinementShareQueue
        var stopping = false
        var started = false
        var finished = false
        /// The index being refined, for `status` and the scheduler's sampling.
        var current: Key?
        /// Why the share gave way, until a pass goes on again (the load is sampled meanwhile).
        var paused: String?
        /// Batches that waited for user queries on the transformer's threads, since the start.
        var queryWaitsTotal = 0
        /// Indexes being refined, by the share or by idle maintenance (one at a time each).
        var claims: Set<Key> = []
    }

    unowned let context: ServiceContext
    let maxItems: Int
    let settle: TimeInterval
    private let state: Mutex<State>
    /// The share's thread waits here for a donation, its next due time or the stop. Signals that
    /// come while it works are counted, so none is lost between a look at the queue and the wait;
    /// an extra one only makes it look again.
    private let wake = DispatchSemaphore(value: 0)
    /// Signalled once, when the thread has ended (`stop` waits for it).
    private let ended = DispatchSemaphore(value: 0)

    init(context: ServiceContext, maxItems: Int, settle: TimeInterval) {
        self.context = context
        self.maxItems = maxItems
        self.settle = settle
        state = Mutex(State(queue: RefinementShareQueue(settle: settle)))
    }

    var log: Logger { context.log }
    var isEnabled: Bool { maxItems > 0 }

    /// Starts the thread, with every existing index due after `settle` (a daemon restarted over
    /// an index donated but not yet refined finishes it).
    func start(now: Date = Date()) {
        guard isEnabled, context.semantic.staticEncoder != nil, context.semantic.directory.hasTransformer else { return }
        var keys: [Key] = []
        for bundle in context.registry.bundles() {
            for index in context.registry.indexes(of: bundle) { keys.append(Key(bundle: bundle, index: index)) }
        }
        let starts = state.withLock { state in
            guard !state.started, !state.stopping else { return false }
            for key in keys { state.queue.donated(key, at: now) }
            state.started = true
            return true
        }
        guard starts else { return }
        let t = Thread { [self] in loop() }
        t.name = "refine-share"
        t.start()
    }

    /// Items were donated to the index (`BundleCalls.apply`).
    func donated(bundle: String, index: String, now: Date = Date()) {
        guard isEnabled else { return }
        let queued = state.withLock { state in
            guard state.started, !state.stopping else { return false }
            state.queue.donated(Key(bundle: bundle, index: index), at: now)
            return true
        }
        if queued { wake.signal() }
    }

    /// Stops the thread at its next batch and waits for it, at most `timeout` seconds (a batch in
    /// flight on a loaded machine may take longer: the store's close then ends it). Call it off
    /// Swift's cooperative pool.
    func stop(timeout: TimeInterval = 5) {
        let running = state.withLock { state in
            state.stopping = true
            return state.started && !state.finished
        }
        guard running else { return }
        wake.signal()
        if ended.wait(timeout: .now() + timeout) == .success { ended.signal() }  // for another stop
    }

    /// True while the share is refining an index or paused in one: the load must be sampled
    /// (the memory pressure decides whether it goes on).
    var isActive: Bool { state.withLock { $0.current != nil || $0.paused != nil } }

    /// `admin.status`'s `refinementShare` object.
    var statusJSON: JSONValue {
        state.withLock { state in
            var o: [String: JSONValue] = ["enabled": .bool(isEnabled && state.started), "maxItems": .number(Double(maxItems)),
                "settleSeconds": .number(state.queue.settle), "queued": .number(Double(state.queue.due.count)),
                "queryWaits": .number(Double(state.queryWaitsTotal))]
            o["state"] = state.paused != nil ? "paused" : state.current != nil ? "refining" : "waiting"
            if let paused = state.paused { o["reason"] = .string(paused) }
            if let current = state.current {
                o["bundle"] = .string(current.bundle)
                o["index"] = .string(current.index)
            }
            return .object(o)
        }
    }

    /// Claims the index for one refinement (the share's or idle maintenance's); false when the
    /// other already refines it.
    func claim(bundle: String, index: String) -> Bool {
        state.withLock { $0.claims.insert(Key(bundle: bundle, index: index)).inserted }
    }

    func release(bundle: String, index: String) {
        _ = state.withLock { $0.claims.remove(Key(bundle: bundle, index: index)) }
    }

    private var isStopping: Bool { state.withLock { $0.stopping } || context.registry.isClosedForStop }

    /// What the thread does next: refine a key, wait (until a date, or for a signal), or end.
    private enum Next {
        case refine(Key)
        case wait(until: Date?)
        case end
    }

    private func next(at now: Date) -> Next {
        state.withLock { state in
            if state.stopping { return .end }
            let (taken, due) = state.queue.take(at: now)
            guard let taken else { return .wait(until: due) }
            state.current = taken
            return .refine(taken)
        }
    }

    private func loop() {
        BackgroundPriority.lowerCurrentThread(name: "refine-share")
        defer {
            state.withLock { $0.finished = true }
            ended.signal()
        }
        while true {
            switch next(at: Date()) {
            case .end:
                return
            case .wait(let until):
                if let until { _ = wake.wait(timeout: Self.dispatchTime(until)) } else { wake.wait() }
            case .refine(let key):
                context.scheduler?.wake()  // the load is sampled while the share runs
                let retryAt = refine(key)
                state.withLock { state in
                    state.current = nil
                    if let retryAt { state.queue.retry(key, at: retryAt) } else { state.paused = nil }
                }
            }
        }
    }

    /// `date` as a deadline on the monotonic clock the semaphore waits on.
    private static func dispatchTime(_ date: Date) -> DispatchTime {
        let seconds = min(max(date.timeIntervalSinceNow, 0), 365 * 86400)
        return .now() + .nanoseconds(Int(seconds * 1e9))
    }

    /// Records why the share gives way (nil: it goes on); logs and emits `refinement.share` on a
    /// change, unless `quiet` (waiting for a load sample is not a pause worth a line).
    private func setPaused(_ reason: String?, _ key: Key, quiet: Bool = false) {
        let previous: String?? = state.withLock { state in
            defer { state.paused = reason }
            return state.paused != reason ? .some(state.paused) : nil
        }
        guard let previous, !quiet, reason != nil || previous != Self.waitingForSample else { return }
        log.info(reason == nil ? "refinement share resumed" : "refinement share paused", ["bundle": key.bundle, "index": key.index,
            "reason": reason ?? "-"])
        context.events.emit("refinement.share", ["state": .string(reason == nil ? "refining" : "paused"),
            "bundle": .string(key.bundle), "index": .string(key.index), "reason": reason.map(JSONValue.string) ?? .null])
    }

    /// The memory pressure's pause rule, as the throttle last sampled it; then the power gate's
    /// (on battery at a low charge, `PowerGate`).
    private func pauseReason() -> String? {
        RefinementShareQueue.pauseReason(memory: context.scheduler?.throttle.snapshot.pressure?.memory,
            pauseMemory: context.config.throttleMarks.pauseMemory, stopping: isStopping)
            ?? context.scheduler?.backgroundDeferral
    }

    /// When to look again after a pause: the power is re-read only every `PowerGate.interval`,
    /// so a pause for it is not looked at more often.
    private func retryAfterPause(_ reason: String) -> Date {
        let powerPause = reason == context.scheduler?.backgroundDeferral
        let loadInterval = context.config.loadInterval
        return Date().addingTimeInterval(powerPause ? PowerGate.interval(loadInterval: loadInterval) : loadInterval)
    }

    /// Waits (on this thread, never the pool's) while the transformer's query threads have work,
    /// at most `maxQueryWait`; true when it waited.
    private func waitForQueries() -> Bool {
        var waited = false
        let start = Date()
        while !isStopping {
            let c = context.semantic.compute.counts
            guard RefinementShareQueue.keepsWaiting(busy: c.queued + c.running > 0, waited: Date().timeIntervalSince(start),
                maxWait: Self.maxQueryWait) else { break }
            if !waited {
                // Counted when the wait begins: a stream of queries may hold it for long.
                state.withLock { $0.queryWaitsTotal += 1 }
                waited = true
            }
            _ = wake.wait(timeout: .now() + .milliseconds(20))  // a stop ends it at once
        }
        return waited
    }

    /// One pass over the index: refines every static vector, or gives way. Returns when to look
    /// again (paused or interrupted), or nil (done, nothing to do, or not the share's to do).
    private func refine(_ key: Key) -> Date? {
        if let reason = pauseReason() {
            if reason == "stopping" { return nil }
            setPaused(reason, key)
            return retryAfterPause(reason)
        }
        // The memory pressure is known only from a recent sample: the scheduler samples while the
        // share is active (paused included), so wait for one.
        let interval = context.config.loadInterval
        if let throttle = context.scheduler?.throttle, Date().timeIntervalSince(throttle.lastSampleTime ?? .distantPast) > 2 * interval + 1 {
            setPaused(Self.waitingForSample, key, quiet: true)
            context.scheduler?.wake()
            return Date().addingTimeInterval(min(interval, 1))
        }
        if context.registry.condition(bundle: key.bundle, index: key.index) != nil {
            // Rebuilt by another trigger (migration, recovery): its donations bring it back.
            return Date().addingTimeInterval(settle)
        }
        // A closed index is judged on its summary first (read without opening it, and kept by
        // the registry): opening every index a restart finds just to count its vectors left
        // each open, with its connections and caches, in the daemon's memory (issue 32). An open
        // one is judged on its store's counts below (one read of them, none when loaded).
        if let summary = try? context.registry.closedSummary(bundle: key.bundle, index: key.index),
           summary.refined >= summary.vectors || summary.vectors > maxItems
        {
            log.debug("refinement share: closed index left closed", ["bundle": key.bundle, "index": key.index,
                "vectors": summary.vectors, "refined": summary.refined, "max_items": maxItems])
            return nil
        }
        let lease = IndexLeases(context.registry)
        defer { lease.release() }
        let store: IndexStore
        let counts: (vectors: Int, refined: Int)
        do {
            guard let s = try context.registry.store(bundle: key.bundle, index: key.index, create: false, lease: lease),
                  s.hasVectors, s.detectedDamage == nil else { return nil }
            store = s
            counts = try s.vectorCounts()
        } catch {
            log.warning("refinement share: index not readable", ["bundle": key.bundle, "index": key.index, "error": error.message])
            return nil
        }
        guard counts.refined < counts.vectors else { return nil }
        guard counts.vectors <= maxItems else {
            log.debug("refinement share: index over the share's size, left to idle maintenance", ["bundle": key.bundle,
                "index": key.index, "vectors": counts.vectors, "max_items": maxItems])
            return nil
        }
        guard claim(bundle: key.bundle, index: key.index) else { return Date().addingTimeInterval(settle) }
        defer { release(bundle: key.bundle, index: key.index) }
        guard let encoder = context.semantic.transformerForRefinement() else { return nil }
        setPaused(nil, key)
        let started = Date()
        let cpuStart = context.semantic.refinementWork.seconds
        var yielded: String?
        var queryWaits = 0
        var failed = false
        let n: Int
        do {
            n = try store.refineVectors(batch: Self.batch, embed: { texts in
                if waitForQueries() { queryWaits += 1 }
                context.semantic.touch()
                do throws(SemanticError) {
                    return try encoder.embedding(texts, threads: 1, meter: context.semantic.refinementWork)
                } catch {
                    // The model file changed after loading: nothing is refined with it.
                    context.semantic.transformerFailed(encoder, error)
                    failed = true
                    return []
                }
            }, yieldNow: {
                // The model failed: stop this pass (nothing more can be refined with it).
                if failed { return true }
                yielded = pauseReason()
                return yielded != nil
            }, committed: { total in
                context.events.emit("refinement.progress", ["bundle": .string(key.bundle), "index": .string(key.index),
                    "refined": .number(Double(counts.refined + total)), "vectors": .number(Double(counts.vectors))])
            })
        } catch {
            log.warning("refinement share: pass failed", ["bundle": key.bundle, "index": key.index, "error": error.message])
            return Date().addingTimeInterval(settle)
        }
        let elapsed = Date().timeIntervalSince(started)
        let cpu = context.semantic.refinementWork.seconds - cpuStart
        let closed = store.isClosed && yielded == nil
        log.info("vectors refined by the share", ["bundle": key.bundle, "index": key.index, "items": n,
            "refined": counts.refined + n, "vectors": counts.vectors, "elapsed_s": String(format: "%.1f", elapsed),
            "items_per_s": String(format: "%.1f", Double(n) / max(elapsed, 0.001)), "cpu_s": String(format: "%.1f", cpu),
            "query_waits": queryWaits, "yielded": yielded ?? (closed ? "closed" : "no")])
        context.events.emit("refinement.finished", ["bundle": .string(key.bundle), "index": .string(key.index), "items": .number(Double(n)),
            "refined": .number(Double(counts.refined + n)), "vectors": .number(Double(counts.vectors)),
            "yielded": .bool(yielded != nil || closed)])
        if yielded == "stopping" { return nil }
        if let yielded {
            setPaused(yielded, key)
            return retryAfterPause(yielded)
        }
        // Closed under it (the open-index bound, a replace): go on with the store reopened.
        if closed { return Date() }
        return nil
    }
}
