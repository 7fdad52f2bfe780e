#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightUnits
import SearchlightWire

/// One extension unit's process and its connection (DESIGN §5, §6): launched on demand with the
/// socketpair on fd 3, one live connection at a time (spawned, or attached by hand for debugging),
/// `ThrottleInterval` between launches, crash-loop backoff, idle exit after `TimeOut`, and
/// SIGTERM then SIGKILL after `ExitTimeOut` for one that hangs.
final class ExtensionHost: @unchecked Sendable {
    /// The live connection to the extension.
    struct Link: @unchecked Sendable {
        let connection: RPCConnection
        let session: ClientSession
        /// nil when the extension was started by hand and attached through the daemon socket.
        let child: ChildProcess?
        let since: Date
        var pid: Int32 { child?.pid ?? session.peer.pid }
    }

    enum State {
        case idle
        /// Decided to launch, fork/exec under way: other callers wait for the handshake.
        case spawning
        case launching(ChildProcess, RPCConnection)
        case running(Link)
        case stopping(ChildProcess, RPCConnection)
    }

    /// Thrown by `link()` when no launch may happen before `retryAt`.
    struct NotAvailable: Error {
        var retryAt: Date
        var reason: String
    }

    /// The unit as last loaded; replaced on reload (read it through `unit`, or `_unit` under the lock).
    private var _unit: ExtensionUnit
    var unit: ExtensionUnit { lock.withLock { _unit } }
    let label: String
    let context: ServiceContext
    /// Called whenever the host becomes available or a request should be reconsidered.
    let wake: @Sendable () -> Void
    private let lock = NSLock()
    private var state: State = .idle
    private var waiters: [CheckedContinuation<Link, any Error>] = []
    private var lastLaunch: Date?
    private var backoffUntil: Date?
    private var crashStreak = 0
    private var lastActivity = Date()
    private var inFlight = 0
    /// Children we asked to stop: their exit is not a crash.
    private var stopRequested: Set<Int32> = []
    private(set) var launches = 0
    private(set) var crashes = 0
    /// How the last launch ended, and who waits to hear how a launch ends (`exitReport(of:)`).
    private var lastExit: ExtensionExit?
    private var exitWaiters: [Int32: [CheckedContinuation<ExtensionExit?, Never>]] = [:]
    /// Children stopped because they hung: their exit says so.
    private var stoppedAsHung: Set<Int32> = []
    /// The running launch's last stderr lines.
    private var stderrTail = StderrTail()
    /// The program file as last launched (device, inode, modification time, size): a rebuild is
    /// noticed at the next launch, and `units` says when the running copy is out of date.
    private var launchedProgram: ProgramIdentity?
    /// Why the last launch could not even start (nil once one started).
    private var launchFailure: String?

    /// A crash streak is forgiven after this long without trouble.
    static let healthyReset: TimeInterval = 600
    static let maximumBackoff: TimeInterval = 300

    init(unit: ExtensionUnit, context: ServiceContext, wake: @escaping @Sendable () -> Void) {
        _unit = unit
        label = unit.label
        self.context = context
        self.wake = wake
    }

    var log: Logger { context.log }

    func update(_ unit: ExtensionUnit) { lock.withLock { if _unit != unit { _unit = unit } } }

    // MARK: - Availability

    /// When a request could be sent: nil means now; otherwise the earliest time (distantFuture
    /// while the extension is stopping; its exit wakes the scheduler).
    func availableAt(_ now: Date) -> Date? {
        lock.withLock {
            switch state {
            case .running, .launching, .spawning: return nil
            case .stopping: return .distantFuture
            case .idle:
                let throttle = lastLaunch.map { $0.addingTimeInterval(_unit.throttleInterval) } ?? .distantPast
                let earliest = max(throttle, backoffUntil ?? .distantPast)
                return earliest > now ? earliest : nil
            }
        }
    }

    /// When the running extension should be asked to exit for being idle, if it is running.
    func idleDeadline() -> Date? {
        lock.withLock {
            guard case .running(let link) = state, link.child != nil, inFlight == 0 else { return nil }
            return lastActivity.addingTimeInterval(_unit.timeOut)
        }
    }

    /// Sends a notification (`didThrottle`, …) to the extension if it is running; off the
    /// caller's thread, since an extension that stops reading would block the write.
    func notifyIfRunning(_ method: String) {
        let connection: RPCConnection? = lock.withLock {
            if case .running(let link) = state { return link.connection }
            return nil
        }
        guard let connection else { return }
        DispatchQueue.global().async { [log, label] in
            do {
                try connection.notify(method)
            } catch {
                log.info("cannot notify the extension", ["label": label, "method": method, "error": "\(error)"])
            }
        }
    }

    /// A donation, progress report or answer from the extension: the inactivity timer restarts.
    func noteActivity() { lock.withLock { lastActivity = Date() } }

    var lastActivityDate: Date { lock.withLock { lastActivity } }

    /// The journaled request being sent to the extension, if any: the only one it may report
    /// progress on.
    private var currentRequest: Int64?
    /// Whether `currentRequest` is background work (its donations are paced while throttled).
    private var currentIsBackground = false

    func beginRequest(_ request: Int64?, background: Bool = false) {
        lock.withLock {
            inFlight += 1
            lastActivity = Date()
            if let request {
                currentRequest = request
                currentIsBackground = background
            }
        }
    }

    /// True while the extension works on a background request: what it donates then is background work.
    var servesBackgroundRequest: Bool { lock.withLock { currentRequest != nil && currentIsBackground } }

    /// Index calls delayed by donation pacing since the daemon started (status: `pacedCalls`).
    private var pacedCalls = 0
    func notePaced() { lock.withLock { pacedCalls += 1 } }

    func isCurrentRequest(_ id: Int64) -> Bool { lock.withLock { currentRequest == id } }

    /// A manual request for the running background request `id`: its donations are no longer
    /// paced. True when it was the current background request.
    func stopPacing(_ id: Int64) -> Bool {
        lock.withLock {
            guard currentRequest == id, currentIsBackground else { return false }
            currentIsBackground = false
            return true
        }
    }

    /// A request asked for by hand may launch the extension now: the crash backoff and
    /// `ThrottleInterval` are waived for the next launch (the crash streak stays, so a relaunch
    /// that crashes again backs off longer). Says what was waived, nil when nothing was.
    func waiveLaunchDelay(_ now: Date) -> String? {
        lock.withLock {
            guard case .idle = state else { return nil }
            var waived: String?
            if let until = backoffUntil, until > now {
                let crashes = crashStreak == 1 ? "1 failed launch" : "\(crashStreak) failed launches in a row"
                waived = "the extension's launch backoff after \(crashes) (next launch was in \(DurationText.of(seconds: until.timeIntervalSince(now)))) is waived"
            } else if let last = lastLaunch, last.addingTimeInterval(_unit.throttleInterval) > now {
                waived = "ThrottleInterval (\(DurationText.of(seconds: _unit.throttleInterval)) between launches) is waived"
            }
            backoffUntil = nil
            lastLaunch = nil
            return waived
        }
    }
    func endRequest(_ request: Int64?) {
        let idle = lock.withLock {
            inFlight -= 1
            lastActivity = Date()
            if let request, currentRequest == request { currentRequest = nil }
            return inFlight == 0
        }
        if idle { wake() }  // its idle deadline starts now
    }

    // MARK: - Launch and handshake

    /// The live connection, launching the extension and waiting for its handshake if needed.
    func link() async throws -> Link {
        enum Next { case ready(Link), wait, launch, unavailable(NotAvailable) }
        let now = Date()
        let next: Next = lock.withLock {
            switch state {
            case .running(let link): return .ready(link)
            case .launching, .spawning: return .wait
            case .stopping: return .unavailable(NotAvailable(retryAt: now.addingTimeInterval(1), reason: "the extension is stopping"))
            case .idle:
                let throttle = lastLaunch.map { $0.addingTimeInterval(_unit.throttleInterval) } ?? .distantPast
                let earliest = max(throttle, backoffUntil ?? .distantPast)
                if earliest > now {
                    let why = (backoffUntil ?? .distantPast) > now ? "it is backing off after \(crashStreak) failed launch(es)" : "ThrottleInterval \(_unit.throttleInterval) s"
                    return .unavailable(NotAvailable(retryAt: earliest, reason: why))
                }
                // Decided under the lock: a concurrent caller waits for this launch, never starts a second.
                state = .spawning
                lastLaunch = now
                return .launch
            }
        }
        switch next {
        case .ready(let link): return link
        case .unavailable(let e): throw e
        case .launch: try launch()
        case .wait: break
        }
        return try await withCheckedThrowingContinuation { continuation in
            enum Outcome { case ready(Link), queued, gone }
            let outcome: Outcome = lock.withLock {
                switch state {
                case .running(let link): return .ready(link)
                case .launching, .spawning:
                    waiters.append(continuation)
                    return .queued
                default: return .gone
                }
            }
            switch outcome {
            case .ready(let link): continuation.resume(returning: link)
            case .queued: break
            case .gone: continuation.resume(throwing: SearchlightError(.extensionFailed, "\(label) exited before its handshake"))
            }
        }
    }

    /// Starts the unit's program; called in state `.spawning` (set by `link()` under the lock).
    private func launch() throws {
        let unit = self.unit
        let child: ChildProcess
        let connection: RPCConnection
        let outputs: ExtensionOutput
        let tail = StderrTail()
        noticeRebuiltProgram(unit)
        do {
            // The program is checked again now, not only when the unit loaded: a folder made
            // unsafe or a program swapped since then is refused. A binary then runs through the
            // descriptor this check opened and verified; a script by its checked physical path.
            let program = try LaunchProgram(unit: unit, system: context.config.system)
            defer { program.close() }
            var config = try spawnConfiguration(unit)
            if let descriptor = program.descriptor { config.executableDescriptor = descriptor } else { config.executable = program.path }
            let (mine, theirs) = try UnixSocket.pair()
            do {
                outputs = try ExtensionOutput(unit: unit, log: log, stderrTail: tail)
            } catch {
                mine.close()
                theirs.closeDescriptor()
                throw error
            }
            let cgroup: ExtensionCgroup?
            do {
                (child, cgroup) = try spawn(config, socket: theirs.fd, outputs: outputs)
            } catch {
                theirs.closeDescriptor()
                mine.close()
                outputs.closeChildEnds()
                throw error
            }
            theirs.closeDescriptor()
            outputs.closeChildEnds()
            // Once it has exited, what it started dies with its cgroup (or, without one, with its
            // session), and the daemon's ends of its output pipes are closed: a process that left
            // the session could otherwise hold them, and a reader thread, for ever.
            let cgroups = context.cgroups
            child.onExit { [label] _ in
                if let cgroup {
                    cgroups?.retire(cgroup, label: label)
                } else {
                    SessionProcesses.kill(child.pid)
                }
                outputs.finish()
            }
            // An extension that stops reading must not block a write (and the timeouts) forever.
            mine.setSendTimeout(seconds: 10)
            let limits = context.config.limits
            connection = RPCConnection(socket: mine, maxFrameBytes: limits.maxFrameBytes, maxDepth: limits.maxJSONDepth)
        } catch {
            lock.withLock {
                if case .spawning = state { state = .idle }
                noteCrashLocked(Date())
                launchFailure = "could not start: \(error)"
            }
            failWaiters("\(label) could not start: \(error)")
            log.error("extension could not start", ["label": label, "error": "\(error)"])
            context.events.emit("extension.failed", ["label": .string(label), "message": .string("\(error)")])
            throw SearchlightError(.extensionFailed, "\(label) could not start: \(error)")
        }
        let peer = PeerCredentials(pid: child.pid, uid: unitUID, gid: 0)
        let session = ClientSession(context: context, connection: connection, peer: peer, spawnedFor: self)
        // A hand-started copy may have attached meanwhile: then this one is not wanted.
        let superseded: Bool = lock.withLock {
            launches += 1
            stderrTail = tail
            launchFailure = nil
            guard case .spawning = state else { return true }
            state = .launching(child, connection)
            lastActivity = Date()
            return false
        }
        log.info("extension launched", ["label": label, "pid": child.pid])
        context.events.emit("extension.launched", ["label": .string(label), "pid": .number(Double(child.pid))])
        connection.start(name: "ext-\(child.pid)", onMessage: { _, message in session.handle(message) }) { [weak self] _, reason in
            self?.connectionClosed(connection, reason: reason)
        }
        Task { [weak self] in
            let termination = await child.waitForExit()
            // Its last words first: what it wrote just before dying may still be in the pipe.
            await outputs.waitUntilRead(timeout: 0.5)
            self?.childExited(child, termination)
        }
        if superseded {
            lock.withLock { _ = stopRequested.insert(child.pid) }
            child.signal(SIGTERM)
            return
        }
        // An extension that never completes its handshake is treated like one that hangs.
        let handshakeTimeout = unit.indexExtension.acknowledgementTimeout
        Task { [weak self] in
            try? await Task.sleep(for: .seconds(handshakeTimeout))
            guard let self else { return }
            let stuck = lock.withLock { if case .launching(let c, _) = state, c.pid == child.pid { return true } else { return false } }
            if stuck {
                log.warning("extension did not complete its handshake", ["label": label, "pid": child.pid, "timeout_s": handshakeTimeout])
                terminate(hung: true)
            }
        }
    }

    /// Starts `config` in a cgroup of its own when the daemon has them. A child that cannot move
    /// into its cgroup turns cgroups off for later launches and is started again without.
    private func spawn(_ config: SpawnConfiguration, socket: Int32, outputs: ExtensionOutput) throws -> (ChildProcess, ExtensionCgroup?) {
        var config = config
        let cgroups = context.cgroups
        let cgroup = cgroups?.create(label: label)
        config.cgroupProcsDescriptor = cgroup?.procsDescriptor
        do {
            let child = try ProcessSpawner.spawn(config, extensionSocket: socket, stdout: outputs.stdout, stderr: outputs.stderr)
            cgroup?.closeDescriptor()
            return (child, cgroup)
        } catch {
            if let cgroup { cgroups?.retire(cgroup, label: label) }
            guard error.step == .cgroup, let cgroup else { throw error }
            cgroups?.disable("\(label) could not move into \(cgroup.path): \(String(cString: strerror(error.errno)))")
            config.cgroupProcsDescriptor = nil
            return (try ProcessSpawner.spawn(config, extensionSocket: socket, stdout: outputs.stdout, stderr: outputs.stderr), nil)
        }
    }

    /// The uid the extension's indexes belong to: its unit's user in system mode, else ours.
    var unitUID: UInt32 {
        if getuid() == 0, let name = unit.userName, let ids = ExtensionHost.userIDs(name) { return ids.uid }
        return getuid()
    }

    /// The spawned extension said `initialize`: requests may flow.
    func handshakeCompleted(_ session: ClientSession) {
        let ready: (Link, [CheckedContinuation<Link, any Error>])? = lock.withLock {
            guard case .launching(let child, let connection) = state, connection === session.connection else { return nil }
            let link = Link(connection: connection, session: session, child: child, since: Date())
            state = .running(link)
            lastActivity = Date()
            defer { waiters.removeAll() }
            return (link, waiters)
        }
        guard let (link, waiting) = ready else { return }
        let startup = lock.withLock { lastLaunch.map { Date().timeIntervalSince($0) } } ?? 0
        log.info("extension ready", ["label": label, "pid": link.pid, "startup_ms": String(format: "%.1f", startup * 1000)])
        for w in waiting { w.resume(returning: link) }
        // Launched while the machine is busy: it learns at once, as the running ones did.
        if let scheduler = context.scheduler, scheduler.throttle.state != .normal { notifyIfRunning(Method.extensionDidThrottle) }
        wake()
    }

    /// A hand-started extension attached under this unit's label: requests go to it from now on.
    func attach(_ session: ClientSession) {
        // The spawned copy it replaces, with its connection: `stop` can no longer find that in `state`.
        let replaced: (ChildProcess, RPCConnection)? = lock.withLock {
            var old: (ChildProcess, RPCConnection)?
            switch state {
            case .running(let link):
                if let child = link.child { old = (child, link.connection) } else { link.connection.close() }
            case .launching(let child, let connection): old = (child, connection)
            default: break
            }
            state = .running(Link(connection: session.connection, session: session, child: nil, since: Date()))
            lastActivity = Date()
            backoffUntil = nil
            crashStreak = 0
            if let old { stopRequested.insert(old.0.pid) }
            return old
        }
        if let (child, connection) = replaced { stop(child, graceful: true, expected: true, connection: connection) }
        log.notice("extension attached", ["label": label, "pid": session.peer.pid, "uid": session.peer.uid])
        context.events.emit("extension.attached", ["label": .string(label), "pid": .number(Double(session.peer.pid))])
        let waiting = lock.withLock { defer { waiters.removeAll() }; return waiters }
        if case .running(let link) = lock.withLock({ state }) { for w in waiting { w.resume(returning: link) } }
        wake()
    }

    // MARK: - Exit

    /// The connection of a hand-started extension closed (the client server reads it, not the
    /// host): requests stop going to it, and the next one launches the unit's program again.
    func attachedConnectionClosed(_ connection: RPCConnection, reason: RPCConnection.CloseReason) {
        let detached: Bool = lock.withLock {
            guard case .running(let link) = state, link.child == nil, link.connection === connection else { return false }
            state = .idle
            return true
        }
        guard detached else { return }
        log.notice("extension detached", ["label": label, "reason": reason])
        context.events.emit("extension.detached", ["label": .string(label)])
        failWaiters("\(label) closed its connection")
        wake()
    }

    /// The connection of a launched extension closed. After its exit that is expected (the exit
    /// was handled); before it, the extension closed its socket but lives on.
    private func connectionClosed(_ connection: RPCConnection, reason: RPCConnection.CloseReason) {
        let child: ChildProcess? = lock.withLock {
            switch state {
            case .running(let link) where link.connection === connection: return link.child
            case .launching(let c, let conn) where conn === connection: return c
            default: return nil
            }
        }
        guard let child else { return }
        log.warning("extension connection closed; stopping the extension", ["label": label, "pid": child.pid, "reason": reason])
        stop(child, graceful: false, expected: false)
    }

    private func childExited(_ child: ChildProcess, _ termination: Termination) {
        let now = Date()
        var deadConnection: RPCConnection?
        var report: ExtensionExit?
        var reportWaiters: [CheckedContinuation<ExtensionExit?, Never>] = []
        let crashed: Bool = lock.withLock {
            let asked = stopRequested.remove(child.pid) != nil
            let hung = stoppedAsHung.remove(child.pid) != nil
            var ours = false
            switch state {
            case .launching(let c, _) where c.pid == child.pid: ours = true
            case .running(let link) where link.child?.pid == child.pid: ours = true
            case .stopping(let c, _) where c.pid == child.pid: ours = true
            default: break
            }
            if ours {
                if case .running(let link) = state { deadConnection = link.connection }
                if case .launching(_, let connection) = state { deadConnection = connection }
                if case .stopping(_, let connection) = state { deadConnection = connection }
                state = .idle
            }
            let crashed = !asked || termination != .exited(0)
            if crashed && !asked {
                noteCrashLocked(now)
            } else if !crashed {
                if let since = lastLaunch, now.timeIntervalSince(since) >= Self.healthyReset { crashStreak = 0 }
            }
            let exit = ExtensionExit(pid: child.pid, termination: termination, expected: asked, stoppedAsHung: hung,
                lastStderr: stderrTail.snapshot, stderrPath: _unit.standardErrorPath,
                nextLaunch: backoffUntil.flatMap { $0 > now ? $0 : nil }, crashStreak: crashStreak, at: now)
            lastExit = exit
            report = exit
            reportWaiters = exitWaiters.removeValue(forKey: child.pid) ?? []
            return crashed && !asked
        }
        for waiter in reportWaiters { waiter.resume(returning: report) }
        if crashed, let report {
            log.warning("extension exited unexpectedly", ["label": label, "pid": child.pid, "status": report.summary,
                "stderr": report.lastStderr.last ?? "-"])
        } else {
            log.info("extension exited", ["label": label, "pid": child.pid, "status": termination])
        }
        context.events.emit("extension.exited", [
            "label": .string(label), "pid": .number(Double(child.pid)), "status": .string(termination.description), "crashed": .bool(crashed),
        ])
        failWaiters("\(label) exited (\(termination)) before its handshake")
        // Outstanding calls fail now, even if something the extension started still holds fd 3;
        // and what it started dies with it (its process group: a pgid in use is never reused).
        deadConnection?.close()
        kill(-child.pid, SIGKILL)
        wake()
    }

    /// How the launch `pid` ended, once the host has handled its exit (its backoff decided, its
    /// stderr read); nil if that does not happen within `timeout`. For the message of a request
    /// that failed because the extension went away.
    func exitReport(of pid: Int32, timeout: TimeInterval) async -> ExtensionExit? {
        await withCheckedContinuation { (continuation: CheckedContinuation<ExtensionExit?, Never>) in
            let known: ExtensionExit?? = lock.withLock {
                if let lastExit, lastExit.pid == pid { return .some(lastExit) }
                exitWaiters[pid, default: []].append(continuation)
                return .none
            }
            if let known { continuation.resume(returning: known); return }
            Task { [weak self] in
                try? await Task.sleep(for: .seconds(timeout))
                guard let self else { return }
                let waiting = lock.withLock { exitWaiters.removeValue(forKey: pid) ?? [] }
                for waiter in waiting { waiter.resume(returning: nil) }
            }
        }
    }

    /// When the extension may be launched again after its last failure; nil when it may now.
    var nextLaunch: Date? {
        lock.withLock { backoffUntil.flatMap { $0 > Date() ? $0 : nil } }
    }

    /// A program rebuilt since the last launch is a new program: it is logged, and the crash
    /// streak of the old one no longer counts against it.
    private func noticeRebuiltProgram(_ unit: ExtensionUnit) {
        let now = ProgramIdentity(path: unit.executable)
        let previous: ProgramIdentity? = lock.withLock {
            defer { launchedProgram = now }
            return launchedProgram
        }
        guard let previous, let now, previous != now else { return }
        let streak = lock.withLock { defer { crashStreak = 0 }; return crashStreak }
        log.notice("extension program changed since its last launch", ["label": label, "program": unit.executable,
            "modified": ISO8601.format(now.modified), "crash_streak_forgiven": streak])
    }

    /// Whether the program file differs from the one the running copy was started from.
    var programChangedSinceLaunch: Bool {
        let launched = lock.withLock { () -> ProgramIdentity? in
            if case .running(let link) = state, link.child != nil { return launchedProgram }
            return nil
        }
        guard let launched, let now = ProgramIdentity(path: unit.executable) else { return false }
        return launched != now
    }

    /// Called with the lock held: one more failure in a row lengthens the wait before the next launch.
    private func noteCrashLocked(_ now: Date) {
        if let since = lastLaunch, now.timeIntervalSince(since) >= Self.healthyReset { crashStreak = 0 }
        crashStreak += 1
        crashes += 1
        let delay = Backoff.delay(attempt: crashStreak, base: context.config.backoffBase, cap: Self.maximumBackoff)
        backoffUntil = now.addingTimeInterval(max(delay, _unit.throttleInterval))
    }

    private func failWaiters(_ message: String) {
        let waiting = lock.withLock { defer { waiters.removeAll() }; return waiters }
        for w in waiting { w.resume(throwing: SearchlightError(.extensionFailed, message)) }
    }

    /// Stops the extension: `hung` sends SIGTERM at once; otherwise it is asked with
    /// `extension.shutdown`. Either way SIGKILL follows after `ExitTimeOut`.
    func terminate(hung: Bool) {
        let target: ChildProcess? = lock.withLock {
            switch state {
            case .running(let link):
                if link.child == nil { link.connection.close(); state = .idle; return nil }
                return link.child
            case .launching(let c, _): return c
            case .stopping(let c, _): return c
            case .idle, .spawning: return nil
            }
        }
        // A hung extension's end counts as a failure (crash backoff); an asked-for exit does not.
        if let target {
            if hung { lock.withLock { _ = stoppedAsHung.insert(target.pid) } }
            stop(target, graceful: !hung, expected: !hung)
        }
    }

    /// `expected`: its exit is ours to ask for (idle, shutdown, replaced), not a failure.
    /// `connection`: the child's, when it is no longer in `state` (replaced by an attached extension).
    private func stop(_ child: ChildProcess, graceful: Bool, expected: Bool, connection known: RPCConnection? = nil) {
        let connection: RPCConnection? = lock.withLock {
            if expected { stopRequested.insert(child.pid) }
            var conn = known
            switch state {
            case .running(let link) where link.child?.pid == child.pid: conn = link.connection; state = .stopping(child, link.connection)
            case .launching(let c, let cn) where c.pid == child.pid: conn = cn; state = .stopping(child, cn)
            default: break
            }
            return conn
        }
        if graceful, let connection {
            try? connection.notify(Method.extensionShutdown)
        } else {
            child.signal(SIGTERM)
        }
        let exitTimeOut = unit.exitTimeOut
        Task {
            try? await Task.sleep(for: .seconds(exitTimeOut))
            if !child.hasExited {
                log.warning("extension did not exit in time; killing it", ["label": label, "pid": child.pid, "after_s": exitTimeOut])
                child.signal(SIGKILL)
            }
        }
    }

    /// `searchlight units restart LABEL` (launchctl's `kickstart -k`), for an author who rebuilt the
    /// extension: the running copy is asked to exit (`extension.shutdown`, SIGKILL after
    /// `ExitTimeOut`), which counts as no crash, and a request it was serving is interrupted, not
    /// failed; then the program is launched at once, whatever its backoff or `ThrottleInterval`
    /// say. Returns the pids once the new copy has completed its handshake.
    func restart() async throws -> (previous: Int32?, pid: Int32) {
        let previous: ChildProcess? = try lock.withLock {
            let running: ChildProcess?
            switch state {
            case .running(let link) where link.child == nil:
                throw SearchlightError(.invalidRequest,
                    "\(label) is attached by hand (pid \(link.pid)): restart that process yourself; the daemon does not stop an attached extension")
            case .running(let link): running = link.child
            case .launching(let child, _), .stopping(let child, _): running = child
            case .idle, .spawning: running = nil
            }
            return running
        }
        if let previous {
            log.notice("extension restart requested", ["label": label, "pid": previous.pid])
            terminate(hung: false)
            _ = await exitReport(of: previous.pid, timeout: unit.exitTimeOut + 5)
        }
        lock.withLock {
            backoffUntil = nil
            lastLaunch = nil
        }
        let link = try await link()
        return (previous?.pid, link.pid)
    }

    /// The daemon is stopping: ask every extension to exit, kill what is left after `deadline`.
    func shutdown(deadline: TimeInterval) async {
        let child: ChildProcess? = lock.withLock {
            if case .running(let link) = state { return link.child }
            if case .launching(let c, _) = state { return c }
            if case .stopping(let c, _) = state { return c }
            return nil
        }
        terminate(hung: false)
        guard let child else { return }
        // Whichever comes first: the child's exit, or the deadline (then SIGKILL).
        let exited = DispatchSemaphore(value: 0)
        child.onExit { _ in exited.signal() }
        let wait = min(deadline, unit.exitTimeOut)
        let inTime = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: exited.wait(timeout: .now() + wait) == .success) }
        }
        if !inTime { child.signal(SIGKILL) }
    }

    // MARK: - Reporting

    var stateName: String {
        lock.withLock {
            switch state {
            case .idle: (backoffUntil ?? .distantPast) > Date() ? "backoff" : "idle"
            case .launching, .spawning: "launching"
            case .running(let link): link.child == nil ? "attached" : "running"
            case .stopping: "stopping"
            }
        }
    }

    var statusJSON: JSONValue {
        let u = unit
        var o: [String: JSONValue] = [
            "label": .string(u.label), "bundleIdentifier": .string(u.bundleIdentifier), "path": .string(u.path),
            "executable": .string(u.executable), "disabled": .bool(u.disabled), "state": .string(stateName),
            "indexNames": .array(u.indexExtension.indexNames.map(JSONValue.string)),
            "indexVersion": .number(Double(u.indexExtension.indexVersion)),
        ]
        lock.withLock {
            o["launches"] = .number(Double(launches))
            o["crashes"] = .number(Double(crashes))
            o["pacedCalls"] = .number(Double(pacedCalls))
            if let launchFailure {
                o["lastExit"] = .string(launchFailure)
            } else if let lastExit {
                o["lastExit"] = .string(lastExit.summary)
                o["lastExitAt"] = .string(ISO8601.format(lastExit.at))
                if !lastExit.lastStderr.isEmpty { o["lastStderr"] = .array(lastExit.lastStderr.map(JSONValue.string)) }
            }
            if let backoffUntil, backoffUntil > Date() {
                o["nextLaunch"] = .string(ISO8601.format(backoffUntil))
                o["crashStreak"] = .number(Double(crashStreak))
            }
            switch state {
            case .running(let link): o["pid"] = .number(Double(link.pid))
            case .launching(let c, _), .stopping(let c, _): o["pid"] = .number(Double(c.pid))
            case .idle, .spawning: break
            }
        }
        if programChangedSinceLaunch { o["programChanged"] = true }
        return .object(o)
    }
}
