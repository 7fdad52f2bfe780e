import Foundation
import Synchronization
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
final class RefinementShare: @unchecked Sendable {
    typealias Key = RefinementShareQueue.Key
    /// Items per batch: one batch is what a user's query can find in the way of the CPU at most.
    static let batch = 8
    /// The longest a batch waits for the transformer's user queries (`RefinementShareQueue.keepsWaiting`):
    /// a burst of typing is over well within it; a batch of 8 beside a query stream then costs
    /// that stream one batch's time on one core at nice 10.
    static let maxQueryWait: TimeInterval = 2
    static let waitingForSample = "waiting for a load sample"

    unowned let context: ServiceContext
    let maxItems: Int
    private let condition = NSCondition()
    private var queue: RefinementShareQueue
    private var stopping = false
    private var thread: Thread?
    private var finished = false
    /// The index being refined, for `status` and the scheduler's sampling.
    private var current: Key?
    /// Why the share gave way, until a pass goes on again (the load is sampled meanwhile).
    private var paused: String?
    /// Batches that waited for user queries on the transformer's threads, since the start.
    private var queryWaitsTotal = 0
    /// Indexes being refined, by the share or by idle maintenance (one at a time each).
    private let claims = Mutex<Set<Key>>([])

    init(context: ServiceContext, maxItems: Int, settle: TimeInterval) {
        self.context = context
        self.maxItems = maxItems
        queue = RefinementShareQueue(settle: settle)
    }

    var log: Logger { context.log }
    var isEnabled: Bool { maxItems > 0 }

    /// Starts the thread, with every existing index due after `settle` (a daemon restarted over
    /// an index donated but not yet refined finishes it).
    func start(now: Date = Date()) {
        guard isEnabled, context.semantic.staticEncoder != nil, context.semantic.directory.hasTransformer else { return }
        condition.withLock {
            for bundle in context.registry.bundles() {
                for index in context.registry.indexes(of: bundle) { queue.donated(Key(bundle: bundle, index: index), at: now) }
            }
            let t = Thread { [self] in loop() }
            t.name = "refine-share"
            thread = t
            t.start()
        }
    }

    /// Items were donated to the index (`BundleCalls.apply`).
    func donated(bundle: String, index: String, now: Date = Date()) {
        guard isEnabled else { return }
        condition.withLock {
            guard thread != nil, !stopping else { return }
            queue.donated(Key(bundle: bundle, index: index), at: now)
            condition.signal()
        }
    }

    /// Stops the thread at its next batch and waits for it, at most `timeout` seconds (a batch in
    /// flight on a loaded machine may take longer: the store's close then ends it). Call it off
    /// Swift's cooperative pool.
    func stop(timeout: TimeInterval = 5) {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        stopping = true
        condition.broadcast()
        while thread != nil, !finished, Date() < deadline { _ = condition.wait(until: deadline) }
    }

    /// True while the share is refining an index or paused in one: the load must be sampled
    /// (the memory pressure decides whether it goes on).
    var isActive: Bool { condition.withLock { current != nil || paused != nil } }

    /// `admin.status`'s `refinementShare` object.
    var statusJSON: JSONValue {
        condition.withLock {
            var o: [String: JSONValue] = ["enabled": .bool(isEnabled && thread != nil), "maxItems": .number(Double(maxItems)),
                "settleSeconds": .number(queue.settle), "queued": .number(Double(queue.due.count)),
                "queryWaits": .number(Double(queryWaitsTotal))]
            o["state"] = paused != nil ? "paused" : current != nil ? "refining" : "waiting"
            if let paused { o["reason"] = .string(paused) }
            if let current {
                o["bundle"] = .string(current.bundle)
                o["index"] = .string(current.index)
            }
            return .object(o)
        }
    }

    /// Claims the index for one refinement (the share's or idle maintenance's); false when the
    /// other already refines it.
    func claim(bundle: String, index: String) -> Bool {
        claims.withLock { $0.insert(Key(bundle: bundle, index: index)).inserted }
    }

    func release(bundle: String, index: String) {
        _ = claims.withLock { $0.remove(Key(bundle: bundle, index: index)) }
    }

    private var isStopping: Bool { condition.withLock { stopping } || context.registry.isClosedForStop }

    private func loop() {
        BackgroundPriority.lowerCurrentThread(name: "refine-share")
        defer {
            condition.withLock {
                finished = true
                condition.broadcast()
            }
        }
        while true {
            condition.lock()
            var key: Key?
            while key == nil, !stopping {
                let (taken, next) = queue.take(at: Date())
                if let taken { key = taken } else if let next { _ = condition.wait(until: next) } else { condition.wait() }
            }
            if stopping { condition.unlock(); return }
            current = key!
            condition.unlock()
            context.scheduler?.wake()  // the load is sampled while the share runs
            let retryAt = refine(key!)
            condition.withLock {
                current = nil
                if let retryAt { queue.retry(key!, at: retryAt) } else { paused = nil }
            }
        }
    }

    /// Records why the share gives way (nil: it goes on); logs and emits `refinement.share` on a
    /// change, unless `quiet` (waiting for a load sample is not a pause worth a line).
    private func setPaused(_ reason: String?, _ key: Key, quiet: Bool = false) {
        let previous: String?? = condition.withLock {
            defer { paused = reason }
            return paused != reason ? .some(paused) : nil
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
                condition.withLock { queryWaitsTotal += 1 }
                waited = true
            }
            condition.withLock { _ = condition.wait(until: Date().addingTimeInterval(0.02)) }
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
            return Date().addingTimeInterval(queue.settle)
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
        guard claim(bundle: key.bundle, index: key.index) else { return Date().addingTimeInterval(queue.settle) }
        defer { release(bundle: key.bundle, index: key.index) }
        guard let encoder = context.semantic.transformerForRefinement() else { return nil }
        setPaused(nil, key)
        let started = Date()
        let cpuStart = context.semantic.refinementWork.seconds
        var yielded: String?
        var queryWaits = 0
        let n: Int
        do {
            n = try store.refineVectors(batch: Self.batch, embed: { texts in
                if waitForQueries() { queryWaits += 1 }
                context.semantic.touch()
                return encoder.embed(texts, threads: 1, meter: context.semantic.refinementWork)
            }, yieldNow: {
                yielded = pauseReason()
                return yielded != nil
            }, committed: { total in
                context.events.emit("refinement.progress", ["bundle": .string(key.bundle), "index": .string(key.index),
                    "refined": .number(Double(counts.refined + total)), "vectors": .number(Double(counts.vectors))])
            })
        } catch {
            log.warning("refinement share: pass failed", ["bundle": key.bundle, "index": key.index, "error": error.message])
            return Date().addingTimeInterval(queue.settle)
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
