import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire

/// Sends journaled reindex requests to extensions and acts on their acknowledgements (DESIGN §6).
///
/// An actor with one `State`, changed only by `transition`: per bundle, what its extension is
/// being asked (nothing, request N, nothing before time T), and whether the scheduler runs or
/// winds down. `run()` is its loop: it starts every request that is due on an available
/// extension, each as a child task (at most one per extension; one background request at a
/// time while throttled, none while paused), then sleeps on the clock until the next deadline
/// or a wake-up from an event that can change one; it never polls. A request's own work (the
/// journal, the extension's answer under its watchdog) runs in its task, off the actor.
///
/// What synchronous code needs (journaling a request, the hosts, waiters and progress, a
/// wake-up) is `nonisolated`, on objects with locks of their own.
actor RequestScheduler {
    typealias Waiter = RequestWaiters.Waiter

    /// How a request left the journal.
    enum Outcome: Sendable {
        case acknowledged
        case failed(String)
    }

    /// What the scheduler is doing for one bundle's extension.
    enum Slot: Sendable, Equatable {
        /// Nothing is due.
        case idle
        /// Something is due then: a retry time, the extension's launch backoff or `ThrottleInterval`
        /// (`distantFuture`: until the extension that is stopping has exited).
        case waiting(until: Date)
        /// Sending request `id`; nothing else goes to this extension meanwhile.
        case dispatching(Int64, background: Bool)
    }

    enum State {
        case initial
        /// `maintenance`: the idle maintenance run started last (stop waits for it).
        case running(slots: [String: Slot], maintenance: Promise<Void>?)
        /// Nothing new is sent; the extensions are asked to exit, and requests in flight end.
        case stopping(slots: [String: Slot], maintenance: Promise<Void>?, extensionDeadline: TimeInterval)
        case stopped
    }

    enum Event {
        case started
        case dispatched(bundle: String, ReindexRequest)
        case waiting(bundle: String, until: Date)
        case nothingDue(bundle: String)
        case requestEnded(bundle: String)
        case maintenanceStarted(Promise<Void>)
        case stopRequested(extensionDeadline: TimeInterval)
        case stopped
    }

    nonisolated let context: ServiceContext
    nonisolated let journal: RequestJournal
    nonisolated let catalog: UnitCatalog
    nonisolated let throttle: ThrottleController
    /// On battery, background work waits for AC or a charge above `--battery-threshold`.
    nonisolated let power: PowerGate
    /// Idle maintenance (nil in tests of the scheduler alone).
    nonisolated let maintenance: Maintenance?
    nonisolated let clock: any DaemonClock
    nonisolated let launcher: any ExtensionLauncher
    nonisolated let hosts = ExtensionHosts()
    nonisolated let waiters: RequestWaiters
    /// Requests the journal could not be written for: retried on the clock, never in a hot loop.
    nonisolated let journalFaults = JournalFaults()
    private nonisolated let wakeup = Wakeup()
    /// Read off the actor: the watchdog's turn counter, and whether stopping began (a maintenance
    /// run on its own thread gives way, a failure is an interruption). Set by `run` and `transition`.
    private nonisolated let flags = Mutex<(turns: UInt64, stopping: Bool)>((0, false))
    private var state = State.initial

    init(context: ServiceContext, journal: RequestJournal, catalog: UnitCatalog, maintenance: Maintenance? = nil,
         clock: any DaemonClock = SystemClock(), launcher: (any ExtensionLauncher)? = nil) {
        self.context = context
        self.journal = journal
        self.catalog = catalog
        self.maintenance = maintenance
        self.clock = clock
        self.launcher = launcher ?? ProcessLauncher(system: context.config.system, cgroups: context.cgroups, log: context.log,
                                                        daemonSocket: context.config.socketPath)
        waiters = RequestWaiters(events: context.events)
        let refinement = context.semantic.refinementWork
        throttle = ThrottleController(monitor: LoadMonitor(procRoot: context.config.procRoot, log: context.log,
                ownWork: { refinement.seconds }, now: clock.now),
            marks: context.config.throttleMarks, interval: context.config.loadInterval, now: clock.now)
        power = PowerGate(reader: PowerSupplyReader(root: context.config.powerSupplyRoot), threshold: context.config.batteryThreshold,
            interval: PowerGate.interval(loadInterval: context.config.loadInterval), log: context.log, now: clock.now)
    }

    /// Why background work may not start now, whatever the load (nil: the power allows it).
    nonisolated var backgroundDeferral: String? { power.deferReason }

    /// The scheduler's loop runs on the daemon's control thread, not on the cooperative pool: its
    /// pump reads the journal and /proc, which may wait on the disk.
    nonisolated var unownedExecutor: UnownedSerialExecutor { ControlThread.executor.asUnownedSerialExecutor() }

    nonisolated var log: Logger { context.log }
    nonisolated var events: EventMonitor { context.events }

    /// How many times the loop went round (the systemd watchdog's health probe).
    nonisolated var turns: UInt64 { flags.withLock { $0.turns } }

    /// True once stopping began: failures from then on are interruptions, not attempts.
    nonisolated var isStopping: Bool { flags.withLock { $0.stopping } }

    /// Makes the loop look again now (a new request, an extension available, the watchdog's poke).
    nonisolated func wake() { wakeup.signal() }

    // MARK: - The state

    /// The one place `state` changes. False when the event does not apply (nothing is started
    /// once stopping began).
    @discardableResult
    private func transition(_ event: Event) -> Bool {
        switch event {
        case .started:
            guard case .initial = state else { return false }
            state = .running(slots: [:], maintenance: nil)
        case .dispatched(let bundle, let request):
            guard case .running(var slots, let run) = state, !Self.dispatching(slots[bundle]) else { return false }
            slots[bundle] = .dispatching(request.id, background: request.background)
            state = .running(slots: slots, maintenance: run)
        case .waiting(let bundle, let until):
            return setSlot(bundle, .waiting(until: until), unlessDispatching: true)
        case .nothingDue(let bundle):
            return setSlot(bundle, .idle, unlessDispatching: true)
        case .requestEnded(let bundle):
            return setSlot(bundle, .idle, unlessDispatching: false)
        case .maintenanceStarted(let run):
            guard case .running(let slots, _) = state else { return false }
            state = .running(slots: slots, maintenance: run)
        case .stopRequested(let deadline):
            switch state {
            case .initial: state = .stopped
            case .running(let slots, let run): state = .stopping(slots: slots, maintenance: run, extensionDeadline: deadline)
            case .stopping, .stopped: return false
            }
            flags.withLock { $0.stopping = true }
        case .stopped:
            guard case .stopping = state else { return false }
            state = .stopped
        }
        return true
    }

    private func setSlot(_ bundle: String, _ slot: Slot, unlessDispatching: Bool) -> Bool {
        switch state {
        case .running(var slots, let run):
            if unlessDispatching, Self.dispatching(slots[bundle]) { return false }
            slots[bundle] = slot
            state = .running(slots: slots, maintenance: run)
        case .stopping(var slots, let run, let deadline):
            if unlessDispatching, Self.dispatching(slots[bundle]) { return false }
            slots[bundle] = slot
            state = .stopping(slots: slots, maintenance: run, extensionDeadline: deadline)
        case .initial, .stopped:
            return false
        }
        return true
    }

    private static func dispatching(_ slot: Slot?) -> Bool {
        if case .dispatching = slot { true } else { false }
    }

    private var slots: [String: Slot] {
        switch state {
        case .running(let slots, _), .stopping(let slots, _, _): slots
        case .initial, .stopped: [:]
        }
    }

    /// What is being done for each bundle (tests; a status view).
    var slotsNow: [String: Slot] { slots }

    // MARK: - The loop

    /// Dispatches until `beginShutdown()` (or cancellation, the forced stop), then lets a
    /// maintenance run give way, asks every extension to exit and returns once every request
    /// in flight has ended (each stays journaled, resumed at the next start).
    func run() async {
        guard transition(.started) else { return }
        await withDiscardingTaskGroup { group in
            while case .running = state, !Task.isCancelled {
                flags.withLock { $0.turns &+= 1 }
                let next = pump(clock.now, group: &group)
                await wakeup.wait(until: next, clock: clock)
            }
            if case .running = state { transition(.stopRequested(extensionDeadline: 0)) }
            await windDown()
        }
        transition(.stopped)
    }

    /// Graceful stop, first step: nothing new is sent; `run()` winds down and returns.
    /// `extensionDeadline`: how long each extension has to exit before SIGKILL.
    func beginShutdown(extensionDeadline: TimeInterval = 5) {
        transition(.stopRequested(extensionDeadline: extensionDeadline))
        wakeup.signal()
    }

    /// The forced stop: every extension gets SIGKILL now.
    nonisolated func killExtensions() {
        for host in hosts.all { host.kill() }
    }

    private func windDown() async {
        guard case .stopping(_, let maintenanceRun, let deadline) = state else { return }
        // An idle maintenance run gives way at its next step once stopping is set.
        if let maintenanceRun { _ = await maintenanceRun.value() }
        let all = hosts.all
        await withTaskGroup(of: Void.self) { group in
            for host in all { group.addTask(executorPreference: ControlThread.executor) { await host.shutdown(deadline: deadline) } }
        }
    }

    /// Starts every request that is due on an available extension; returns when to look again.
    /// The load is sampled here, and only while background work waits or runs: an idle daemon
    /// reads nothing and sleeps until its next deadline.
    private func pump(_ now: Date, group: inout DiscardingTaskGroup) -> Date {
        var next = now.addingTimeInterval(3600)
        requeueAfterJournalFaults(now, next: &next)
        var candidates: [(ExtensionHost, [ReindexRequest])] = []
        for host in hosts.all {
            let unit = host.unit
            let bundle = unit.bundleIdentifier
            if let idle = host.idleDeadline() {
                if idle <= now {
                    // Checked again inside the host's transition: a request may have begun since.
                    host.exitIfIdle()
                } else {
                    next = min(next, idle)
                }
            }
            if Self.dispatching(slots[bundle]) { continue }
            let served = Set(unit.indexExtension.indexNames)
            let pending = context.state.bundle(bundle)?.indexingEnabled == false
                ? [] : journal.pending(bundle: bundle).filter { served.contains($0.index) }.map { request -> ReindexRequest in
                    // A claim that failed is tried again after its delay, not at once.
                    var request = request
                    if let at = journalFaults.retryAt(request.id) { request.notBefore = max(request.notBefore, at) }
                    return request
                }
            if pending.isEmpty { transition(.nothingDue(bundle: bundle)) } else { candidates.append((host, pending)) }
        }
        var backgroundRunning = slots.values.filter { if case .dispatching(_, true) = $0 { true } else { false } }.count
        let backgroundDue = candidates.contains { $0.1.contains { $0.background && $0.notBefore <= now } }
        let maintenanceWaits = maintenance?.wantsSampling(at: now) ?? false
        // The refinement share gives way to memory pressure: sampled while it runs or is paused.
        let shareRuns = context.refinementShare?.isActive ?? false
        // The power first: while it defers, nothing waiting can start, so the load is not sampled
        // for it (only for background work already running); the power is re-read at its own,
        // slower period, so a daemon deferring for hours on battery stays nearly asleep.
        let waiting = backgroundDue || maintenanceWaits || shareRuns
        let powered = power.refresh(now: now, needed: waiting || backgroundRunning > 0)
        if let t = powered.transition { announce(t) }
        if let at = powered.nextRead { next = min(next, at) }
        let powerDefers = powered.state == .deferred
        let sampled = throttle.refresh(now: now, needed: (waiting && !powerDefers) || backgroundRunning > 0)
        if let t = sampled.transition { announce(t, sample: sampled.sample) }
        if let at = sampled.nextSample { next = min(next, at) }
        pollMaintenance(now, next: &next)
        for (host, pending) in candidates {
            let bundle = host.unit.bundleIdentifier
            let loadAllows = switch sampled.state {
            case .normal: true
            case .throttled: backgroundRunning == 0
            case .paused: false
            }
            let backgroundAllowed = loadAllows && !powerDefers
            let eligible = pending.filter { backgroundAllowed || !$0.background }
            guard let first = eligible.min(by: { ($0.notBefore, $0.background ? 1 : 0, $0.id) < ($1.notBefore, $1.background ? 1 : 0, $1.id) }) else {
                transition(.nothingDue(bundle: bundle))
                continue
            }
            guard let request = eligible.first(where: { $0.notBefore <= now }) else {
                next = min(next, first.notBefore)
                transition(.waiting(bundle: bundle, until: first.notBefore))
                continue
            }
            if let at = host.availableAt(now) {
                if at != .distantFuture { next = min(next, at) }
                transition(.waiting(bundle: bundle, until: at))
                continue
            }
            guard transition(.dispatched(bundle: bundle, request)) else { continue }
            if request.background { backgroundRunning += 1 }
            // On the control thread too: the claim, the spawn and the acknowledgement block.
            group.addTask(executorPreference: ControlThread.executor) {
                await self.perform(request, on: host)
                await self.requestEnded(bundle: bundle)
            }
        }
        return next
    }

    /// Rows left `running` by a failed journal write become pending again once the journal
    /// can be written; each failure doubles the wait (`JournalFaults`).
    private func requeueAfterJournalFaults(_ now: Date, next: inout Date) {
        let (due, later) = journalFaults.requeues(due: now)
        if let later { next = min(next, later) }
        for (id, error) in due {
            do {
                let requeued = try journal.requeue(id, error: error)
                journalFaults.clear(id)
                if requeued { log.notice("request journal writable again; request requeued", ["id": id]) }
            } catch {
                let fault = journalFaults.record(id, now: now)
                next = min(next, fault.retryAt)
                log.error("cannot update the request journal", ["id": id, "error": "\(error)", "failures": fault.failures,
                    "retry_in_s": fault.retryAt.timeIntervalSince(now)])
            }
        }
    }

    private func requestEnded(bundle: String) {
        transition(.requestEnded(bundle: bundle))
        wakeup.signal()
    }

    /// Idle maintenance: sleeps until it is due, then (the load being sampled meanwhile) starts
    /// once the machine has been idle long enough. It gives way when the throttle leaves normal,
    /// or when the power defers background work (on battery at a low charge).
    private func pollMaintenance(_ now: Date, next: inout Date) {
        guard let maintenance, case .running = state else { return }
        switch maintenance.poll(at: now, throttle: throttle.snapshot, deferral: power.deferReason) {
        case .sleep(let until): next = min(next, until)
        case .watching, .running: break  // the throttle's next sample (or the power's next read) wakes the loop
        case .start:
            let run = Promise<Void>()
            transition(.maintenanceStarted(run))
            maintenance.startIdleRun(yieldNow: { [weak self, throttle] in
                guard let self else { return true }
                return self.isStopping || throttle.state != .normal || self.power.defers
            }, done: { [weak self] in
                run.fulfil(())
                self?.wake()
            })
        }
    }

    /// A throttle state change: one log line with the numbers, a `throttle.changed` event, and
    /// `didThrottle` / `didFinishThrottle` to the running extensions.
    private func announce(_ t: Throttle.Transition, sample: Int) {
        let p = t.pressure
        log.notice("load throttle changed", ["from": t.from.rawValue, "to": t.to.rawValue,
            "cpu": p.map { String(format: "%.1f", $0.cpu) } ?? "-", "io": p.map { String(format: "%.1f", $0.io) } ?? "-",
            "memory": p.map { String(format: "%.1f", $0.memory) } ?? "-", "source": p?.source.rawValue ?? "none",
            "own": p.map { $0.source == .loadavg ? String(format: "%.2f", $0.own) : "-" } ?? "-", "reason": t.reason,
            "sample": sample])
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
        for host in hosts.all { host.notifyIfRunning(method) }
    }

    /// A power state change: one log line, a `power.changed` event.
    private func announce(_ t: PowerPolicy.Transition) {
        log.notice("power gate changed", ["from": t.from.rawValue, "to": t.to.rawValue, "reason": t.reason])
        events.emit("power.changed", ["state": .string(t.to.rawValue), "from": .string(t.from.rawValue), "reason": .string(t.reason)])
    }

    // MARK: - Requests

    /// Journals a request (durably, before anything is sent) and wakes the loop. The waiter is
    /// registered in the same step, before the wake-up: a quick acknowledgement cannot slip past it.
    nonisolated func enqueue(bundle: String, index: String, kind: ReindexRequest.Kind, identifiers: [String],
                             reason: String, background: Bool, waiter: Waiter? = nil) throws -> RequestJournal.Enqueued {
        let now = clock.now
        let running = background ? [] : journal.all().filter { $0.bundle == bundle && $0.index == index && $0.state == .running }
        var result = try journal.enqueue(bundle: bundle, index: index, kind: kind, identifiers: identifiers,
            reason: reason, background: background, now: now)
        if !background {
            result.note = promoteForManualRequest(result, bundle: bundle, running: running, now: now)
            if let note = result.note { log.notice("manual reindex request", ["id": result.id, "bundle": bundle, "note": note]) }
        }
        waiters.add(waiter, to: result.id, absorbed: result.absorbed)
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
    private nonisolated func promoteForManualRequest(_ result: RequestJournal.Enqueued, bundle: String, running: [ReindexRequest],
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
                if let deferral = power.deferReason {
                    was.append("held back as background work (\(deferral))")
                } else {
                    was.append(throttle.state == .normal ? "queued as background work"
                        : "held back as background work while the machine is busy (throttle \(throttle.state.rawValue))")
                }
            }
            let what = "joined request \(joined.id) (\(joined.reason))"
            notes.append(was.isEmpty ? what + ", already queued" : what + ", which was " + was.joined(separator: " and ")
                + (result.promoted ? "; running it now, unthrottled" : ""))
        }
        if let host = host(bundle: bundle) {
            if let waived = host.waiveLaunchDelay() { notes.append(waived) }
            for request in running where request.background && host.stopPacing(request.id) {
                notes.append("request \(request.id) (\(request.reason)) is running as background work; it is no longer slowed down, "
                    + "and this request runs after it")
            }
        }
        return notes.isEmpty ? nil : notes.joined(separator: "; ")
    }

    /// A connection closed: nobody is left to tell about its requests' outcomes.
    nonisolated func removeWaiters(owner: ObjectIdentifier) { waiters.remove(owner: owner) }

    nonisolated func progress(of id: Int64) -> (completed: Int, total: Int?)? { waiters.progress(of: id) }

    /// `$/progress` from an extension: forwarded to waiters, and to monitors at most once a second.
    nonisolated func reportProgress(requestID: Int64, completed: Int, total: Int?) {
        waiters.report(requestID: requestID, completed: completed, total: total, now: clock.now)
    }

    /// Tells `observer` of every request acknowledged or failed for good (recovery and migration
    /// wait for their reindex-all this way). Called on the request's task: it must not block.
    nonisolated func observeOutcomes(_ observer: @escaping RequestWaiters.Observer) { waiters.observe(observer) }
}
