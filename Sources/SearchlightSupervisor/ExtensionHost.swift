#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire

/// One extension unit's process and its connection (DESIGN §5, §6): launched on demand with the
/// socketpair on fd 3, one live connection at a time (spawned, or attached by hand for debugging),
/// `ThrottleInterval` between launches, crash-loop backoff, idle exit after `TimeOut`, and
/// SIGTERM then SIGKILL after `ExitTimeOut` for one that hangs.
///
/// Its life is one value, `Machine` (ExtensionHostMachine.swift): a `State` enum changed only by
/// `transition`, under a `Mutex`; what a transition decides (launch, signal, log, resume a
/// waiter) is carried out here after the lock is released. Not an actor: its events come from
/// connection reader threads in an order that matters (an attach, then that connection's close)
/// and status is read from synchronous code (`admin.status`, systemd's STATUS line, donation
/// pacing on a reader thread); under a mutex each event is applied in order, at once, and read
/// back without a second, published copy of the state. Time comes from `clock`, processes from
/// `launcher`: tests inject a manual clock and in-process fake extensions.
final class ExtensionHost: Sendable {
    let label: String
    let context: ServiceContext
    private let launcher: any ExtensionLauncher
    private let clock: any DaemonClock
    /// The throttle's state (donation pacing; telling a new launch that the machine is busy).
    private let throttle: @Sendable () -> Throttle.State
    /// Called whenever the host becomes available or a request should be reconsidered.
    let wake: @Sendable () -> Void
    private let machine: Mutex<Machine>

    /// The delay before each index call of an extension serving a background request, per
    /// throttle state: at most 20 calls a second while throttled, 5 while paused (a request in
    /// flight when the pause came finishes, slowly). Chosen so that an extension's batches of
    /// a few hundred items keep progressing while its writes leave the machine room.
    static let donationPacing: [Throttle.State: TimeInterval] = [.throttled: 0.05, .paused: 0.2]

    init(unit: ExtensionUnit, context: ServiceContext, launcher: any ExtensionLauncher, clock: any DaemonClock,
         throttle: @escaping @Sendable () -> Throttle.State, wake: @escaping @Sendable () -> Void) {
        label = unit.label
        self.context = context
        self.launcher = launcher
        self.clock = clock
        self.throttle = throttle
        self.wake = wake
        machine = Mutex(Machine(unit: unit, backoffBase: context.config.backoffBase))
    }

    var log: Logger { context.log }

    /// The unit as last loaded.
    var unit: ExtensionUnit { machine.withLock { $0.unit } }

    func update(_ unit: ExtensionUnit) { handle(.unitChanged(unit)) }

    /// Applies one event and carries out what it decided.
    @discardableResult
    private func handle(_ event: Event) -> [Effect] {
        let now = clock.now
        let effects = machine.withLock { $0.transition(event, at: now) }
        for effect in effects { perform(effect) }
        return effects
    }

    // MARK: - Requests

    /// The live connection, launching the extension and waiting for its handshake if needed.
    /// `ticket`'s work counts from the moment the link is handed out until `endRequest`.
    /// Throws `NotAvailable` while no launch may happen yet, `extensionFailed` when the launch failed.
    func link(for ticket: Ticket?) async throws -> Link {
        try await withCheckedThrowingContinuation { continuation in
            handle(.linkWanted(Waiter(ticket: ticket) { continuation.resume(with: $0) }))
        }
    }

    /// The work of `ticket` on `link` is done.
    func endRequest(on link: Link, _ ticket: Ticket) { handle(.requestEnded(link.connection, ticket)) }

    /// A donation, progress report or answer from the extension: the inactivity timer restarts.
    func noteActivity() { handle(.activity) }

    /// When the extension on `link` was last heard from (nil once that link is gone).
    func lastActivity(on link: Link) -> Date? {
        machine.withLock { m in m.state.link?.connection === link.connection ? m.state.work?.lastActivity : nil }
    }

    /// Whether `id` is the journaled request the extension is serving: the only one it may report progress on.
    func isCurrentRequest(_ id: Int64) -> Bool { machine.withLock { $0.state.work?.request == id } }

    /// How long an index call of the extension waits before it is processed (DESIGN §6: pacing of
    /// a throttled extension's donations): only while it serves background work and the throttle
    /// is not normal. The caller's own thread waits (its connection's reader), nobody else's.
    func donationDelay() -> TimeInterval? {
        guard machine.withLock({ $0.state.work.map { $0.request != nil && $0.background } ?? false }),
              let delay = Self.donationPacing[throttle()] else { return nil }
        handle(.paced)
        return delay
    }

    /// A manual request for the running background request `id`: its donations are no longer
    /// paced. True when it was the current background request.
    func stopPacing(_ id: Int64) -> Bool { handle(.stopPacing(id)).contains { if case .answer = $0 { true } else { false } } }

    /// A request asked for by hand may launch the extension now: the crash backoff and
    /// `ThrottleInterval` are waived for the next launch. Says what was waived, nil when nothing was.
    func waiveLaunchDelay() -> String? {
        for case .answer(let note) in handle(.waiveLaunchDelay) { return note }
        return nil
    }

    // MARK: - Handshake, attach, exit

    /// The spawned extension said `initialize` (its answer is on the wire): requests may flow.
    func handshakeCompleted(_ session: some ExtensionSessionHandle) { handle(.handshakeCompleted(session.connection)) }

    /// A hand-started extension attached under this unit's label: requests go to it from now on.
    func attach(_ session: some ExtensionSessionHandle) { handle(.attached(session)) }

    /// The connection of a hand-started extension closed (the client server reads it, not the
    /// host): requests stop going to it, and the next one launches the unit's program again.
    func attachedConnectionClosed(_ connection: RPCConnection, reason: RPCConnection.CloseReason) {
        handle(.detached(connection, reason: "\(reason)"))
    }

    /// Stops the extension: `hung` sends SIGTERM at once; otherwise it is asked with
    /// `extension.shutdown`. Either way SIGKILL follows after `ExitTimeOut`.
    func terminate(hung: Bool) { handle(.terminate(hung: hung)) }

    /// Stops `launch` only if it is still the current one; a superseded launch that hung gets
    /// SIGTERM alone. Never touches an attached copy or a newer launch.
    func stopLaunch(_ launch: LaunchedExtension, hung: Bool) { handle(.stopLaunch(launch, hung: hung)) }

    /// Asks the extension to exit if it is (still) idle past its `TimeOut`: the check and the
    /// act are one transition, so a request that began meanwhile keeps it.
    func exitIfIdle() { handle(.idleExpired) }

    /// `searchlight units restart LABEL` (launchctl's `kickstart -k`), for an author who rebuilt the
    /// extension: the running copy is asked to exit (`extension.shutdown`, SIGKILL after
    /// `ExitTimeOut`), which counts as no crash, and a request it was serving is interrupted, not
    /// failed; then the program is launched at once, whatever its backoff or `ThrottleInterval`
    /// say. Returns the pids once the new copy has completed its handshake.
    func restart() async throws -> (previous: Int32?, pid: Int32) {
        let previous: LaunchedExtension? = try machine.withLock { m in
            if case .attached(let link, _) = m.state {
                throw SearchlightError(.invalidRequest,
                    "\(label) is attached by hand (pid \(link.pid)): restart that process yourself; the daemon does not stop an attached extension")
            }
            return m.state.launch
        }
        if let previous {
            log.notice("extension restart requested", ["label": label, "pid": previous.pid])
            stopLaunch(previous, hung: false)
            _ = await previous.exit.value(within: unit.exitTimeOut + 5, clock: clock)
        }
        _ = waiveLaunchDelay()
        let link = try await link(for: nil)
        return (previous?.pid, link.pid)
    }

    /// The daemon is stopping: asks the extension to exit, kills it if it has not after
    /// `deadline` (or its `ExitTimeOut`, if shorter). At once when the task is cancelled (forced stop).
    func shutdown(deadline: TimeInterval) async {
        let launch = machine.withLock { $0.state.launch }
        // Fixed before the extension is asked: read after, it would move with the time that passed
        // meanwhile (on a manual clock a test advances as soon as it sees the request, the kill
        // then waited for a time that never came: the hang of RequestSchedulerTests' graceful stop).
        let killAt = clock.now.addingTimeInterval(min(deadline, unit.exitTimeOut))
        terminate(hung: false)
        guard let launch else { return }
        if await launch.exit.value(until: killAt, clock: clock) == nil {
            launch.process.signal(SIGKILL)
            // Its exit handled (logged, reported) before the daemon goes on stopping, if it comes soon.
            _ = await launch.exit.value(within: 1, clock: clock)
        }
    }

    /// The daemon's forced stop: SIGKILL now.
    func kill() { handle(.kill) }

    // MARK: - Carrying out effects

    private func perform(_ effect: Effect) {
        switch effect {
        case .deliver(let waiters, let result):
            for waiter in waiters { waiter.deliver(result) }
        case .spawn(let unit, let at):
            spawn(unit, at: at)
        case .serve(let launch, let handshakeTimeout):
            serve(launch, handshakeTimeout: handshakeTimeout)
        case .askToExit(let launch):
            let deadline = clock.now.addingTimeInterval(unit.exitTimeOut)
            // Only queued here (the connection's writer sends it): this runs on the scheduler's
            // thread, which a write to an extension that stopped reading must never hold.
            try? launch.connection.notify(Method.extensionShutdown)
            killAfter(launch, deadline)
        case .stop(let launch):
            let deadline = clock.now.addingTimeInterval(unit.exitTimeOut)
            launch.process.signal(SIGTERM)
            killAfter(launch, deadline)
        case .signal(let launch, let signal):
            launch.process.signal(signal)
        case .close(let connection):
            connection.close()
        case .exited(let launch, let exit):
            launch.exit.fulfil(exit)
            // Outstanding calls fail now, even if something the extension started still holds fd 3.
            launch.connection.close()
            launch.process.killLeftovers()
        case .tellIfThrottled(let connection):
            if throttle() != .normal { notify(connection, Method.extensionDidThrottle) }
        case .log(let line):
            log.log(line.level, line.message, fields: line.fields)
        case .emit(let name, let fields):
            context.events.emit(name, fields)
        case .wake:
            wake()
        case .answer:
            break
        }
    }

    /// Starts the unit's program (`.spawning` was decided by the transition).
    private func spawn(_ unit: ExtensionUnit, at: Date) {
        let program = ProgramIdentity(path: unit.executable)
        let tail = StderrTail()
        let launch: LaunchedExtension
        do {
            let (process, socket) = try launcher.launch(unit, stderrTail: tail)
            // An extension that stops reading must not block a write (and the timeouts) forever.
            socket.setSendTimeout(seconds: 10)
            let limits = context.config.limits
            let connection = RPCConnection(socket: socket, maxFrameBytes: limits.maxFrameBytes, maxDepth: limits.maxJSONDepth,
                                           outboxLimit: limits.outboxLimit)
            let peer = PeerCredentials(pid: process.pid, uid: unitUID(unit), gid: 0)
            let session = ClientSession(context: context, connection: connection, peer: peer, spawnedFor: self)
            launch = LaunchedExtension(process: process, session: session, at: at, stderrTail: tail, program: program)
        } catch {
            handle(.spawnFailed("\(error)", program: program))
            return
        }
        handle(.spawned(launch))
    }

    /// Reads the launched extension's connection, waits for its exit, and gives it
    /// `handshakeTimeout` to say `initialize`.
    private func serve(_ launch: LaunchedExtension, handshakeTimeout: TimeInterval?) {
        let connection = launch.connection
        let session = launch.session
        connection.start(name: "ext-\(launch.pid)", onMessage: { _, message in session.handle(message) }) { [weak self] _, reason in
            self?.handle(.connectionClosed(connection, reason: "\(reason)"))
        }
        // On the control thread: handling the exit may start the next launch (a fork/exec).
        Task(executorPreference: ControlThread.executor) { [weak self] in
            let termination = await launch.process.waitForExit()
            self?.handle(.exited(launch, termination))
        }
        if let handshakeTimeout {
            let deadline = clock.now.addingTimeInterval(handshakeTimeout)
            Task(executorPreference: ControlThread.executor) { [weak self, clock] in
                try? await clock.sleep(until: deadline)
                self?.handle(.handshakeTimedOut(launch))
            }
        }
    }

    private func killAfter(_ launch: LaunchedExtension, _ deadline: Date) {
        Task(executorPreference: ControlThread.executor) { [weak self, clock] in
            try? await clock.sleep(until: deadline)
            self?.handle(.exitTimedOut(launch))
        }
    }

    /// Sends a notification (`didThrottle`, …) to the extension if it is running (queued for
    /// the connection's writer: an extension that stops reading blocks nobody).
    func notifyIfRunning(_ method: String) {
        guard let link = machine.withLock({ m -> Link? in if case .running(let link, _, _) = m.state { link } else { nil } }) else { return }
        notify(link.connection, method)
    }

    private func notify(_ connection: RPCConnection, _ method: String) {
        do {
            try connection.notify(method)
        } catch {
            log.info("cannot notify the extension", ["label": label, "method": method, "error": "\(error)"])
        }
    }

    /// The uid the extension's indexes belong to: its unit's user in system mode, else ours.
    private func unitUID(_ unit: ExtensionUnit) -> UInt32 {
        if getuid() == 0, let name = unit.userName, let ids = ProcessLauncher.userIDs(name) { return ids.uid }
        return getuid()
    }

    // MARK: - Reporting

    /// When a request could be sent: nil means now; otherwise the earliest time (distantFuture
    /// while the extension is stopping; its exit wakes the scheduler).
    func availableAt(_ now: Date) -> Date? {
        machine.withLock { m in
            switch m.state {
            case .running, .attached, .launching, .spawning: return nil
            case .stopping: return .distantFuture
            case .idle(let lastLaunch, _):
                guard let allowed = lastLaunch?.addingTimeInterval(m.unit.throttleInterval), allowed > now else { return nil }
                return allowed
            case .backingOff(let until, _): return until > now ? until : nil
            }
        }
    }

    /// When the running extension should be asked to exit for being idle, if it is running.
    func idleDeadline() -> Date? {
        machine.withLock { m in
            guard case .running(_, let work, _) = m.state, work.inFlight == 0 else { return nil }
            return work.lastActivity.addingTimeInterval(m.unit.timeOut)
        }
    }

    /// When the extension may be launched again after its last failure; nil when it may now.
    var nextLaunch: Date? {
        let now = clock.now
        return machine.withLock { m in if case .backingOff(let until, _) = m.state, until > now { until } else { nil } }
    }

    var stateName: String {
        let now = clock.now
        return machine.withLock { m in
            switch m.state {
            case .idle: "idle"
            case .backingOff(let until, _): until > now ? "backoff" : "idle"
            case .spawning, .launching: "launching"
            case .running: "running"
            case .attached: "attached"
            case .stopping: "stopping"
            }
        }
    }

    /// Whether the program file differs from the one the running copy was started from.
    var programChangedSinceLaunch: Bool {
        let (launched, executable): (ProgramIdentity?, String) = machine.withLock { m in
            guard case .running = m.state else { return (nil, m.unit.executable) }
            return (m.record.program, m.unit.executable)
        }
        guard let launched, let now = ProgramIdentity(path: executable) else { return false }
        return launched != now
    }

    var statusJSON: JSONValue {
        let now = clock.now
        let (u, state, record) = machine.withLock { ($0.unit, $0.state, $0.record) }
        var o: [String: JSONValue] = [
            "label": .string(u.label), "bundleIdentifier": .string(u.bundleIdentifier), "path": .string(u.path),
            "executable": .string(u.executable), "disabled": .bool(u.disabled), "state": .string(stateName),
            "indexNames": .array(u.indexExtension.indexNames.map(JSONValue.string)),
            "indexVersion": .number(Double(u.indexExtension.indexVersion)),
            "launches": .number(Double(record.launches)), "crashes": .number(Double(record.crashes)),
            "pacedCalls": .number(Double(record.pacedCalls)),
        ]
        if let failure = record.launchFailure {
            o["lastExit"] = .string(failure)
        } else if let lastExit = record.lastExit {
            o["lastExit"] = .string(lastExit.summary)
            o["lastExitAt"] = .string(ISO8601.format(lastExit.at))
            if !lastExit.lastStderr.isEmpty { o["lastStderr"] = .array(lastExit.lastStderr.map(JSONValue.string)) }
        }
        if case .backingOff(let until, let streak) = state, until > now {
            o["nextLaunch"] = .string(ISO8601.format(until))
            o["crashStreak"] = .number(Double(streak))
        }
        if let pid = state.link?.pid ?? state.launch?.pid { o["pid"] = .number(Double(pid)) }
        if programChangedSinceLaunch { o["programChanged"] = true }
        return .object(o)
    }
}
