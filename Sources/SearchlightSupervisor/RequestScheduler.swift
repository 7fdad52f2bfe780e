import Foundation
import SearchlightUnits
import SearchlightWire

/// Sends journaled reindex requests to extensions and acts on their acknowledgements (DESIGN §6).
///
/// One request at a time per extension. A scheduling thread sleeps until something is due (a new
/// request, a retry time, a launch allowed again, an idle extension to stop) and is woken by
/// every event that can change that; it never polls. Each request runs as a task that waits for
/// the acknowledgement under the unit's inactivity timeout.
final class RequestScheduler: @unchecked Sendable {
    /// Someone waiting for a request's outcome (`admin.reindex` with `wait`).
    struct Waiter: Sendable {
        /// The connection waiting: its waiters go when it closes.
        let owner: ObjectIdentifier?
        let progress: @Sendable (_ completed: Int, _ total: Int?) -> Void
        let done: @Sendable (Result<JSONValue, SearchlightError>) -> Void
    }

    let context: ServiceContext
    let journal: RequestJournal
    let catalog: UnitCatalog
    private let lock = NSLock()
    private let signal = NSCondition()
    private var woken = false
    private var _turns: UInt64 = 0
    private var stopped = false
    private var hosts: [String: ExtensionHost] = [:]
    /// Bundles with a request in flight.
    private var busy: Set<String> = []
    /// Background requests in flight (throttled: at most one across the daemon).
    private var backgroundRunning = 0
    let throttle: ThrottleController
    /// The delay before each index call of an extension serving a background request, per
    /// throttle state: at most 20 calls a second while throttled, 5 while paused (a request in
    /// flight when the pause came finishes, slowly). Chosen so that an extension's batches of
    /// a few hundred items keep progressing while its writes leave the machine room.
    static let donationPacing: [Throttle.State: TimeInterval] = [.throttled: 0.05, .paused: 0.2]
    /// Set once before `start()` (nil: no idle maintenance, e.g. in tests of the scheduler alone).
    var maintenance: Maintenance?
    /// Entered while an idle maintenance run is in progress (stop waits for it).
    private let maintenanceRuns = DispatchGroup()
    private var waiters: [Int64: [Waiter]] = [:]
    private var progress: [Int64: (completed: Int, total: Int?, reported: Date)] = [:]
    private let finished = DispatchSemaphore(value: 0)
    private var outcomeObservers: [@Sendable (ReindexRequest, Outcome) -> Void] = []

    /// How a request left the journal.
    enum Outcome: Sendable {
        case acknowledged
        case failed(String)
    }

    init(context: ServiceContext, journal: RequestJournal, catalog: UnitCatalog) {
        self.context = context
        self.journal = journal
        self.catalog = catalog
        throttle = ThrottleController(monitor: LoadMonitor(procRoot: context.config.procRoot, log: context.log),
            marks: context.config.throttleMarks, interval: context.config.loadInterval)
    }

    var log: Logger { context.log }
    var events: EventMonitor { context.events }

    // MARK: - Units

    /// Re-reads the unit directories; adds, updates and retires hosts; queues initial reindexes.
    @discardableResult
    func reloadUnits() -> UnitCatalog.Report {
        let report = catalog.reload()
        for problem in report.problems { log.warning("unit refused", ["problem": problem.description]) }
        let enabled = catalog.units.filter { !$0.disabled }
        var retired: [ExtensionHost] = []
        lock.withLock {
            let labels = Set(enabled.map(\.label))
            for (label, host) in hosts where !labels.contains(label) {
                retired.append(host)
                hosts[label] = nil
            }
            for unit in enabled {
                if let host = hosts[unit.label] {
                    host.update(unit)
                } else {
                    hosts[unit.label] = ExtensionHost(unit: unit, context: context, wake: { [weak self] in self?.wake() })
                }
            }
        }
        for host in retired { host.terminate(hung: false) }
        if report.changed {
            log.info("units loaded", ["units": enabled.count, "problems": report.problems.count])
            events.emit("units.reloaded", ["units": .number(Double(enabled.count)), "problems": .number(Double(report.problems.count))])
        }
        for unit in enabled { queueInitialReindex(unit) }
        context.migrator?.unitsReloaded(enabled)
        wake()
        return report
    }

    /// A new bundle with an extension gets an initial reindex-all of each of its indexes.
    private func queueInitialReindex(_ unit: ExtensionUnit) {
        for index in unit.indexExtension.indexNames where journal.recordedVersion(bundle: unit.bundleIdentifier, index: index) == nil {
            do {
                try journal.recordVersion(bundle: unit.bundleIdentifier, index: index, version: unit.indexExtension.indexVersion)
                let queued = try enqueue(bundle: unit.bundleIdentifier, index: index, kind: .all, identifiers: [], reason: "initial", background: true)
                context.initialFill.queued(bundle: unit.bundleIdentifier, index: index, requestID: queued.id, label: unit.label)
            } catch {
                log.error("cannot journal the initial reindex", ["label": unit.label, "error": "\(error)"])
            }
        }
    }

    func host(label: String) -> ExtensionHost? { lock.withLock { hosts[label] } }

    func host(bundle: String) -> ExtensionHost? {
        guard let unit = catalog.unit(forBundle: bundle) else { return nil }
        return host(label: unit.label)
    }

    var allHosts: [ExtensionHost] { lock.withLock { hosts.values.sorted { $0.label < $1.label } } }

    // MARK: - Requests

    /// Journals a request (durably, before anything is sent) and wakes the dispatcher.
    func enqueue(bundle: String, index: String, kind: ReindexRequest.Kind, identifiers: [String],
                 reason: String, background: Bool, waiter: Waiter? = nil) throws -> RequestJournal.Enqueued {
        let now = Date()
        let running = background ? [] : journal.all().filter { $0.bundle == bundle && $0.index == index && $0.state == .running }
        var result = try journal.enqueue(bundle: bundle, index: index, kind: kind, identifiers: identifiers,
            reason: reason, background: background, now: now)
        if !background {
            result.note = promoteForManualRequest(result, bundle: bundle, running: running, now: now)
            if let note = result.note { log.notice("manual reindex request", ["id": result.id, "bundle": bundle, "note": note]) }
        }
        lock.withLock {
            for old in result.absorbed {
                if let moved = waiters.removeValue(forKey: old) { waiters[result.id, default: []] += moved }
            }
            if let waiter { waiters[result.id, default: []].append(waiter) }
        }
        log.info("reindex request queued", ["id": result.id, "bundle": bundle, "index": index, "kind": kind.rawValue,
            "identifiers": identifiers.count, "reason": reason, "coalesced": result.coalesced])
        events.emit("request.queued", ["requestId": .number(Double(result.id)), "bundle": .string(bundle), "index": .string(index),
            "kind": .string(kind.rawValue), "identifierCount": .number(Double(identifiers.count)), "reason": .string(reason),
            "coalesced": .bool(result.coalesced)])
        wake()
        return result
    }

    /// A request asked for by hand (`searchlight reindex`, not `--background`) runs now: what it
    /// joined was promoted by the journal (foreground, due now); the extension's launch backoff
    /// and ThrottleInterval are waived for the next launch (launchctl's kickstart); a background
    /// request of the bundle already running is no longer paced. Says what it did, for the asker.
    private func promoteForManualRequest(_ result: RequestJournal.Enqueued, bundle: String, running: [ReindexRequest],
                                         now: Date) -> String? {
        var notes: [String] = []
        if let joined = result.joined {
            var was: [String] = []
            if joined.notBefore > now {
                let attempts = joined.attempts == 1 ? "1 failed attempt" : "\(joined.attempts) failed attempts"
                was.append("waiting for a retry in \(DurationText.of(seconds: joined.notBefore.timeIntervalSince(now))) after \(attempts)"
                    + (joined.lastError.map { " (last: \($0.prefix(200)))" } ?? ""))
            }
            if joined.background {
                was.append(throttle.state == .normal ? "queued as background work"
                    : "held back as background work while the machine is busy (throttle \(throttle.state.rawValue))")
            }
            let what = "joined request \(joined.id) (\(joined.reason))"
            notes.append(was.isEmpty ? what + ", already queued" : what + ", which was " + was.joined(separator: " and ")
                + (result.promoted ? "; running it now, unthrottled" : ""))
        }
        if let host = host(bundle: bundle) {
            if let waived = host.waiveLaunchDelay(now) { notes.append(waived) }
            for request in running where request.background && host.stopPacing(request.id) {
                notes.append("request \(request.id) (\(request.reason)) is running as background work; it is no longer slowed down, "
                    + "and this request runs after it")
            }
        }
        return notes.isEmpty ? nil : notes.joined(separator: "; ")
    }

    /// A connection closed: nobody is left to tell about its requests' outcomes.
    func removeWaiters(owner: ObjectIdentifier) {
        lock.withLock {
            for (id, list) in waiters {
                let kept = list.filter { $0.owner != owner }
                waiters[id] = kept.isEmpty ? nil : kept
            }
        }
    }

    func progress(of id: Int64) -> (completed: Int, total: Int?)? {
        lock.withLock { progress[id].map { ($0.completed, $0.total) } }
    }

    /// `$/progress` from an extension: forwarded to waiters, and to monitors at most once a second.
    func reportProgress(requestID: Int64, completed: Int, total: Int?) {
        let (targets, announce): ([Waiter], Bool) = lock.withLock {
            let last = progress[requestID]?.reported ?? .distantPast
            let announce = Date().timeIntervalSince(last) >= 1
            progress[requestID] = (completed, total, announce ? Date() : last)
            return (waiters[requestID] ?? [], announce)
        }
        for w in targets { w.progress(completed, total) }
        if announce {
            var e: [String: JSONValue] = ["requestId": .number(Double(requestID)), "completed": .number(Double(completed))]
            if let total { e["total"] = .number(Double(total)) }
            events.emit("request.progress", e)
        }
    }

    /// Tells `observer` of every request acknowledged or failed for good (recovery and migration
    /// wait for their reindex-all this way). Called on the request's task: it must not block.
    func observeOutcomes(_ observer: @escaping @Sendable (ReindexRequest, Outcome) -> Void) {
        lock.withLock { outcomeObservers.append(observer) }
    }

    func reportOutcome(_ request: ReindexRequest, _ outcome: Outcome) {
        for observer in lock.withLock({ outcomeObservers }) { observer(request, outcome) }
    }

    func finish(_ id: Int64, _ result: Result<JSONValue, SearchlightError>, final: Bool) {
        let targets: [Waiter] = lock.withLock {
            if final { progress[id] = nil }
            return waiters.removeValue(forKey: id) ?? []
        }
        for w in targets { w.done(result) }
    }

    // MARK: - The dispatch loop

    func start() {
        let thread = Thread { [self] in
            while lock.withLock({ !stopped }) {
                lock.withLock { _turns &+= 1 }
                let next = pump(Date())
                signal.lock()
                if !woken { _ = signal.wait(until: next) }
                woken = false
                signal.unlock()
            }
            finished.signal()
        }
        thread.name = "scheduler"
        thread.start()
    }

    /// How many times the dispatch loop went round (the systemd watchdog's health probe).
    var turns: UInt64 { lock.withLock { _turns } }

    /// True once `stop()` began: failures from then on are interruptions, not attempts.
    var isStopping: Bool { lock.withLock { stopped } }

    func wake() {
        signal.lock()
        woken = true
        signal.signal()
        signal.unlock()
    }

    /// Stops dispatching and asks every extension to exit (SIGKILL after `deadline`).
    func stop(deadline: TimeInterval = 5) {
        lock.withLock { stopped = true }
        wake()
        finished.wait()
        // A maintenance run gives way at its next step once stopping is set; wait for it.
        maintenanceRuns.wait()
        let all = allHosts
        let done = DispatchSemaphore(value: 0)
        Task {
            await withTaskGroup(of: Void.self) { group in
                for host in all { group.addTask { await host.shutdown(deadline: deadline) } }
            }
            done.signal()
        }
        _ = done.wait(timeout: .now() + deadline + 1)
    }

    /// Starts every request that is due on an available extension; returns when to look again.
    /// The load is sampled here, and only while background work waits or runs: an idle daemon
    /// reads nothing and sleeps until its next deadline.
    private func pump(_ now: Date) -> Date {
        var next = now.addingTimeInterval(3600)
        var candidates: [(ExtensionHost, [ReindexRequest])] = []
        for host in allHosts {
            let bundle = host.unit.bundleIdentifier
            if let idle = host.idleDeadline() {
                if idle <= now {
                    log.info("extension idle; asking it to exit", ["label": host.label, "timeout_s": host.unit.timeOut])
                    host.terminate(hung: false)
                } else {
                    next = min(next, idle)
                }
            }
            if lock.withLock({ busy.contains(bundle) }) { continue }
            if context.state.bundle(bundle)?.indexingEnabled == false { continue }
            let served = Set(host.unit.indexExtension.indexNames)
            let pending = journal.pending(bundle: bundle).filter { served.contains($0.index) }
            if !pending.isEmpty { candidates.append((host, pending)) }
        }
        let backgroundDue = candidates.contains { $0.1.contains { $0.background && $0.notBefore <= now } }
        let maintenanceWaits = maintenance?.wantsSampling(at: now) ?? false
        let sampled = throttle.refresh(now: now, needed: backgroundDue || maintenanceWaits || lock.withLock { backgroundRunning > 0 })
        if let t = sampled.transition { announce(t) }
        if let at = sampled.nextSample { next = min(next, at) }
        pollMaintenance(now, next: &next)
        for (host, pending) in candidates {
            let bundle = host.unit.bundleIdentifier
            let backgroundAllowed: Bool = lock.withLock {
                switch sampled.state {
                case .normal: true
                case .throttled: backgroundRunning == 0
                case .paused: false
                }
            }
            let eligible = pending.filter { backgroundAllowed || !$0.background }
            guard let first = eligible.min(by: { ($0.notBefore, $0.background ? 1 : 0, $0.id) < ($1.notBefore, $1.background ? 1 : 0, $1.id) }) else { continue }
            let due = eligible.first { $0.notBefore <= now }
            guard let request = due else {
                next = min(next, first.notBefore)
                continue
            }
            if let at = host.availableAt(now) {
                if at != .distantFuture { next = min(next, at) }
                continue
            }
            lock.withLock {
                _ = busy.insert(bundle)
                if request.background { backgroundRunning += 1 }
            }
            Task {
                await self.perform(request, on: host)
                self.lock.withLock {
                    _ = self.busy.remove(bundle)
                    if request.background { self.backgroundRunning -= 1 }
                }
                self.wake()
            }
        }
        return next
    }

    /// Idle maintenance: sleeps until it is due, then (the load being sampled meanwhile) starts
    /// once the machine has been idle long enough. It gives way when the throttle leaves normal.
    private func pollMaintenance(_ now: Date, next: inout Date) {
        guard let maintenance, !isStopping else { return }
        switch maintenance.poll(at: now, throttle: throttle.snapshot) {
        case .sleep(let until): next = min(next, until)
        case .watching, .running: break  // the throttle's next sample wakes the loop
        case .start:
            maintenanceRuns.enter()
            maintenance.startIdleRun(yieldNow: { [weak self] in
                guard let self else { return true }
                return self.isStopping || self.throttle.state != .normal
            }, done: { [weak self] in
                guard let self else { return }
                self.maintenanceRuns.leave()
                self.wake()
            })
        }
    }

    /// A throttle state change: one log line with the numbers, a `throttle.changed` event, and
    /// `didThrottle` / `didFinishThrottle` to the running extensions.
    private func announce(_ t: Throttle.Transition) {
        let p = t.pressure
        log.notice("load throttle changed", ["from": t.from.rawValue, "to": t.to.rawValue,
            "cpu": p.map { String(format: "%.1f", $0.cpu) } ?? "-", "io": p.map { String(format: "%.1f", $0.io) } ?? "-",
            "memory": p.map { String(format: "%.1f", $0.memory) } ?? "-", "source": p?.source.rawValue ?? "none", "reason": t.reason])
        var e: [String: JSONValue] = ["state": .string(t.to.rawValue), "from": .string(t.from.rawValue), "reason": .string(t.reason)]
        if let p {
            e["cpu"] = .number(p.cpu)
            e["io"] = .number(p.io)
            e["memory"] = .number(p.memory)
            e["source"] = .string(p.source.rawValue)
        }
        events.emit("throttle.changed", e)
        let method: String
        if t.from == .normal { method = Method.extensionDidThrottle }
        else if t.to == .normal { method = Method.extensionDidFinishThrottle }
        else { return }  // throttled <-> paused: the extensions were told already
        for host in allHosts { host.notifyIfRunning(method) }
    }
}
