#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// The daemon as a library: loads state, listens on the socket, serves clients until stopped.
/// Shaped like a swift-service-lifecycle `Service`: one `run()`, and `stop()` for a graceful end.
public final class Supervisor: @unchecked Sendable {
    public let config: Configuration
    let log: Logger
    private let lock = NSLock()
    private var stopRequested = false
    private let stopped = DispatchSemaphore(value: 0)
    private var scheduler: RequestScheduler?
    private var systemd: SystemdAgent?
    /// `$NOTIFY_SOCKET` and the watchdog, read (and removed from the environment) at init.
    let notifier = SystemdNotifier.fromEnvironment()

    public init(config: Configuration) {
        self.config = config
        self.log = Logger(label: "searchlightd", level: config.logLevel)
    }

    /// Runs until `stop()`; throws when the daemon cannot start (state or socket unusable).
    public func run() throws {
        signal(SIGPIPE, SIG_IGN)
        let context = try ServiceContext(config: config, log: log)
        context.cgroups = ExtensionCgroups.make(mode: config.extensionCgroups, log: log)
        // Before anything opens an index: a set-aside the last run was killed in is finished.
        context.recovery.finishSetAsides(registry: context.registry)
        let scheduler = RequestScheduler(context: context, journal: context.journal, catalog: context.catalog)
        context.scheduler = scheduler
        let maintenance = try Maintenance(context: context)
        context.maintenance = maintenance
        scheduler.maintenance = maintenance
        lock.withLock { self.scheduler = scheduler }
        scheduler.observeOutcomes { [recovery = context.recovery] request, outcome in recovery.requestFinished(request, outcome) }
        scheduler.observeOutcomes { [fill = context.initialFill] request, outcome in fill.requestFinished(request, outcome) }
        context.initialFill.resume()
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
        scheduler.start()
        // The loops the watchdog checks: the scheduler's (woken), and the accept loop (a
        // connection of our own, closed at once, makes it go round).
        var probes: [WatchdogHealth.Probe] = [.init(name: "scheduler", turns: { scheduler.turns }, poke: { scheduler.wake() })]
        if socketPath.hasPrefix("/") {
            probes.append(.init(name: "accept", turns: { server.turns }, poke: { WatchdogHealth.knock(socketPath) }))
        }
        let agent = SystemdAgent(notifier: notifier, log: log, status: { StatusLine.make(context) }, health: WatchdogHealth(probes: probes))
        lock.withLock { systemd = agent }
        let status = agent.ready()
        context.events.observe { _ in agent.statusChanged() }
        log.notice("searchlightd ready", [
            "version": Version.string, "mode": config.system ? "system" : "user", "socket": socketPath,
            "activated": activated != nil, "state": config.stateDirectory, "pid": getpid(),
            "units": context.catalog.units.filter { !$0.disabled }.count, "notify": notifier.isEnabled,
            "watchdog_s": notifier.watchdogInterval.map { "\($0 * 2)" } ?? "off",
            "watchdog_loops": probes.map(\.name).joined(separator: ","), "max_open_indexes": context.registry.maxOpen,
            "max_connections": config.maxConnections, "max_connections_per_user": config.maxConnectionsPerUser,
            "idle_timeout_s": config.idleTimeout, "status": status,
        ])
        stopped.wait()
        log.notice("searchlightd stopping")
        agent.stopping()
        scheduler.stop()
        // What the extensions left running dies with their cgroups.
        context.cgroups?.removeAll()
        server.stop()
        migrator.drain()
        context.registry.closeAll()
        if activated == nil { unlink(config.socketPath) }
        log.notice("searchlightd stopped")
    }

    /// Re-reads the unit files (SIGHUP).
    public func reloadUnits() {
        lock.withLock { scheduler }?.reloadUnits()
    }

    /// Asks `run()` to stop gracefully: client calls in flight finish and commit; extensions are
    /// asked to exit (their requests stay journaled, resumed at the next start); then close. Idempotent.
    public func stop() {
        let first = lock.withLock {
            defer { stopRequested = true }
            return !stopRequested
        }
        if first { stopped.signal() }
    }

    /// User mode: the socket's directory is private (0700) and ours. System mode: world-searchable,
    /// since every request is checked against SO_PEERCRED.
    private func prepareSocketDirectory() throws {
        let dir = (config.socketPath as NSString).deletingLastPathComponent
        let mode: mode_t = config.system ? 0o755 : 0o700
        if mkdir(dir, mode) != 0 && errno != EEXIST { throw SystemError("mkdir(\(dir))") }
        var st = stat()
        guard lstat(dir, &st) == 0 else { throw SystemError("stat(\(dir))") }
        guard (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid() else {
            throw SystemError("socket directory \(dir) is not a directory owned by uid \(getuid()); remove it", errno: EPERM)
        }
        if !config.system, (st.st_mode & 0o077) != 0 { chmod(dir, 0o700) }
    }
}
