#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightWire

/// The daemon as a library: loads state, listens on the socket, serves clients until stopped.
///
/// A service in the shape of swift-service-lifecycle's `ServiceGroup`: one `run()` that returns
/// when the daemon has stopped, and `stop()` (SIGTERM, SIGINT) that asks for a graceful stop,
/// which escalates to a forced one after `--stop-timeout`. The request scheduler's loop is its
/// child task; blocking calls (loading state, joining connection threads, draining index writers)
/// run on threads of their own, never on the task pool.
public final class Supervisor: Sendable {
    public let config: Configuration
    let log: Logger
    /// `$NOTIFY_SOCKET` and the watchdog, read (and removed from the environment) at init.
    let notifier = SystemdNotifier.fromEnvironment()

    private enum State {
        case initial
        case starting
        case running(Daemon)
        case finished
    }

    private let state = Mutex(State.initial)
    /// Whether a stop was asked (a second is only logged).
    private let stopAsked = Mutex(false)
    /// A reload asked before the daemon ran; set and taken inside `state`'s lock.
    private let reloadWhenRunning = Mutex(false)
    /// `stop()` yields here; `run()` waits on it (a stop asked before `run()` is kept).
    private let stopRequests: AsyncStream<Void>
    private let stopContinuation: AsyncStream<Void>.Continuation

    /// What `run()` started, for the stop.
    private struct Daemon: Sendable {
        let context: ServiceContext
        let scheduler: RequestScheduler
        let server: ClientServer
        let migrator: Migrator
        let agent: SystemdAgent
        /// The listening socket came from systemd, which owns (and removes) its file.
        let activated: Bool
    }

    public init(config: Configuration) {
        self.config = config
        self.log = Logger(label: "searchlightd", level: config.logLevel)
        (stopRequests, stopContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Runs until `stop()`; throws when the daemon cannot start (state or socket unusable).
    public func run() async throws {
        try state.withLock { state in
            guard case .initial = state else { throw SearchlightError(.invalidRequest, "Supervisor.run() was called twice") }
            state = .starting
        }
        let daemon: Daemon
        do {
            daemon = try await onThread("start") { try self.start() }
        } catch {
            state.withLock { $0 = .finished }
            throw error
        }
        let reload: Bool = state.withLock {
            $0 = .running(daemon)
            return reloadWhenRunning.withLock { pending in
                defer { pending = false }
                return pending
            }
        }
        if reload { _ = try? await onThread("reload") { daemon.scheduler.reloadUnits() } }
        // The scheduler's loop in a task of its own, not a child: a forced stop must be able to
        // end `run()` even if the loop does not end when cancelled (the last resort of the stop).
        let schedulerEnded = Promise<Void>()
        let loop = Task(executorPreference: ControlThread.executor) {
            await daemon.scheduler.run()
            schedulerEnded.fulfil(())
        }
        for await _ in stopRequests { break }
        log.notice("searchlightd stopping")
        // The stop's own time, from here to "searchlightd stopped" (what `--stop-timeout` bounds).
        let stopBegan = ContinuousClock.now
        var forced = false
        // Graceful, in a task of its own too, so that its deadline holds even over a call that blocks.
        let stopped = Promise<Void>()
        // The wait for a maintenance run ends 10 s before the forced stop would begin, so that
        // what follows it (reads given 5 s as the stores close, the journal closed) still runs.
        let waitsEnd = Date().addingTimeInterval(max(config.stopTimeout - 10, config.stopTimeout / 2))
        // Vector indexes are saved only while 8 s remain before the forced stop: the stores'
        // reads (5 s), a save under way and the journal's close still fit.
        let savesEnd = Date().addingTimeInterval(max(0, config.stopTimeout - 8))
        Task(executorPreference: ControlThread.executor) {
            await self.stopGracefully(daemon, schedulerEnded: schedulerEnded, waitsEnd: waitsEnd, savesEnd: savesEnd)
            stopped.fulfil(())
        }
        let clock = SystemClock()
        if await stopped.value(within: config.stopTimeout, clock: clock) == nil {
            // Forced: the scheduler's loop and its requests are cancelled, every extension is
            // killed with what it started; what still blocks is left to the process's exit.
            log.error("graceful stop did not finish in time; forcing it", ["after_s": config.stopTimeout])
            forced = true
            loop.cancel()
            daemon.scheduler.killExtensions()
            let killed = Promise<Void>()
            let thread = Thread {
                daemon.context.cgroups?.removeAll()
                killed.fulfil(())
            }
            thread.name = "force-stop"
            thread.start()
            _ = await killed.value(within: 10, clock: clock)
            if await schedulerEnded.value(within: 5, clock: clock) == nil {
                log.error("the request scheduler did not end when cancelled; stopping without it")
            }
        }
        if !daemon.activated { unlink(config.socketPath) }
        state.withLock { $0 = .finished }
        let took = ContinuousClock.now - stopBegan
        log.notice("searchlightd stopped", ["forced": forced,
            "elapsed_s": String(format: "%.2f", took.seconds)])
    }

    /// Client calls in flight finish and commit; extensions are asked to exit (their requests
    /// stay journaled, resumed at the next start; SIGKILL after 5 s); then connections close,
    /// every index writer drains its queue, and the journal closes.
    private func stopGracefully(_ daemon: Daemon, schedulerEnded: Promise<Void>, waitsEnd: Date, savesEnd: Date) async {
        daemon.context.maintenance?.beginStop()
        _ = try? await onThread("stop") { daemon.agent.stopping() }
        await daemon.scheduler.beginShutdown(extensionDeadline: 5)
        _ = await schedulerEnded.value()
        _ = try? await onThread("stop") {
            // What the extensions left running dies with their cgroups.
            daemon.context.cgroups?.removeAll()
            daemon.server.stop()
            // Runs by hand (`simulate idle`) end at their next step; the idle run has ended with
            // the scheduler. A read step still running gets the stores' 5 s grace as they close; a
            // write step (the full-text optimize) is waited for, up to the forced stop.
            if daemon.context.maintenance?.waitForRuns(until: waitsEnd) == false {
                self.log.warning("maintenance did not give way in time; closing its indexes under it")
            }
            daemon.migrator.drain()
            daemon.context.refinementShare?.stop()
            daemon.context.semantic.stop()
            daemon.context.registry.closeAll(saveUntil: savesEnd)
            // Last: the journal (and the records beside it) closed, its WAL checkpointed and synced.
            daemon.context.closeSupervisorDatabase()
        }
    }

    /// Asks `run()` to stop gracefully (escalating to a forced stop after `--stop-timeout`).
    /// Idempotent: a second request during a stop is logged and changes nothing.
    public func stop(reason: String? = nil) {
        let first = stopAsked.withLock { asked in
            defer { asked = true }
            return !asked
        }
        if let reason {
            if first {
                log.notice("stop requested", ["by": reason])
            } else {
                log.notice("stop requested again; the stop in progress goes on (forced after --stop-timeout)", ["by": reason,
                    "stop_timeout_s": config.stopTimeout])
            }
        }
        stopContinuation.yield()
    }

    /// Re-reads the unit files (SIGHUP). Asked while the daemon starts, it is done once it runs
    /// (a unit file added meanwhile may have been missed by the start's own reading).
    public func reloadUnits(reason: String? = nil) {
        if let reason { log.notice("units reload requested", ["by": reason]) }
        let daemon: Daemon? = state.withLock { state in
            if case .running(let daemon) = state { return daemon }
            reloadWhenRunning.withLock { $0 = true }
            return nil
        }
        guard let report = daemon?.scheduler.reloadUnits() else { return }
        // Also when nothing changed ("units loaded" is logged only then): whoever sent the
        // signal sees it was taken.
        if let reason { log.info("units reload done", ["by": reason, "changed": report.changed]) }
    }

    /// Loads the state, opens the socket, starts serving; `READY=1`.
    private func start() throws -> Daemon {
        signal(SIGPIPE, SIG_IGN)
        let context = try ServiceContext(config: config, log: log)
        context.semantic.startIdleUnload()
        context.cgroups = ExtensionCgroups.make(mode: config.extensionCgroups, log: log)
        // Before anything opens an index: a set-aside the last run was killed in is finished.
        context.recovery.finishSetAsides(registry: context.registry)
        let maintenance = try Maintenance(context: context)
        context.maintenance = maintenance
        let scheduler = RequestScheduler(context: context, journal: context.journal, catalog: context.catalog, maintenance: maintenance)
        context.scheduler = scheduler
        scheduler.observeOutcomes { [recovery = context.recovery] request, outcome in recovery.requestFinished(request, outcome) }
        scheduler.observeOutcomes { [fill = context.initialFill] request, outcome in fill.requestFinished(request, outcome) }
        context.initialFill.resume()
        let share = RefinementShare(context: context, maxItems: config.refineShareItems, settle: config.refineShareSettle)
        context.refinementShare = share
        share.start()
        let migrator = try Migrator(context: context)
        context.migrator = migrator
        migrator.resume(scheduler: scheduler)
        scheduler.reloadUnits()
        context.recovery.resume()
        migrator.scanFormats()
        // Socket activation: systemd owns the socket file (and removes it); else we bind and own it.
        let activated = try SocketActivation.adopt(log: log)
        let listener: UnixSocket
        if let activated {
            listener = activated
        } else {
            try prepareSocketDirectory()
            listener = try UnixSocket.listen(path: config.socketPath, mode: config.system ? 0o666 : 0o600)
        }
        let socketPath = activated.flatMap { SocketActivation.localPath($0.fd) } ?? config.socketPath
        let server = ClientServer(context: context, listener: listener)
        server.start()
        // The loops the watchdog checks: the scheduler's (woken), and the accept loop (a
        // connection of our own, closed at once, makes it go round).
        var probes: [WatchdogHealth.Probe] = [.init(name: "scheduler", turns: { scheduler.turns }, poke: { scheduler.wake() })]
        if socketPath.hasPrefix("/") {
            probes.append(.init(name: "accept", turns: { server.turns }, poke: { WatchdogHealth.knock(socketPath) }))
        }
        let agent = SystemdAgent(notifier: notifier, log: log, status: { StatusLine.make(context) }, health: WatchdogHealth(probes: probes))
        let status = agent.ready()
        context.events.observe { _, _ in agent.statusChanged() }
        log.notice("searchlightd ready", [
            "version": Version.string, "mode": config.system ? "system" : "user", "socket": socketPath,
            "activated": activated != nil, "state": config.stateDirectory, "pid": getpid(),
            "units": context.catalog.units.filter { !$0.disabled }.count, "notify": notifier.isEnabled,
            "watchdog_s": notifier.watchdogInterval.map { "\($0 * 2)" } ?? "off",
            "watchdog_loops": probes.map(\.name).joined(separator: ","), "max_open_indexes": context.registry.maxOpen,
            "max_connections": config.maxConnections, "max_connections_per_user": config.maxConnectionsPerUser,
            "idle_timeout_s": config.idleTimeout, "status": status,
        ])
        return Daemon(context: context, scheduler: scheduler, server: server, migrator: migrator, agent: agent, activated: activated != nil)
    }

    /// A socket directory the daemon creates is private (0700) in user mode and world-searchable
    /// in system mode, since every request is checked against SO_PEERCRED. One that exists is
    /// left as it is: `--socket /tmp/x.sock` or `~/x.sock` must not change the mode of /tmp or of
    /// a home folder (it did: /tmp became 0700); the socket file's own mode guards it there.
    private func prepareSocketDirectory() throws {
        let dir = (config.socketPath as NSString).deletingLastPathComponent
        let mode: mode_t = config.system ? 0o755 : 0o700
        let created = mkdir(dir, mode) == 0
        if !created && errno != EEXIST { throw SystemError("mkdir(\(dir))") }
        var st = stat()
        guard lstat(dir, &st) == 0 else { throw SystemError("stat(\(dir))") }
        guard (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid() else {
            throw SystemError("socket directory \(dir) is not a directory owned by uid \(getuid()); remove it", errno: EPERM)
        }
        // mkdir's mode went through the umask.
        if created { chmod(dir, mode) }
    }
}

/// Runs `work` on a thread of its own and returns its result: for calls that block (opening
/// databases, joining threads, draining writers), which must never hold a thread of the task pool.
func onThread<T: Sendable>(_ name: String, _ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try work() }) }
        thread.name = name
        thread.start()
    }
}
