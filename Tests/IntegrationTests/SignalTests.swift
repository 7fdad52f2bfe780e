#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightWire
import Testing
import TestThreads

/// How the process under test is started: the ways systemd, a shell and a test harness start
/// it. Each starts it with no signal blocked and every action at its default, as a login shell,
/// systemd and Python's subprocess do (a test runner's own mask must not hide the fault: the
/// daemon's OpenBLAS threads, started before `main`, inherit whatever mask exec left).
enum StartedBy: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// posix_spawn of the program itself.
    case harness
    /// posix_spawn in a session of its own with `NOTIFY_SOCKET`, as a `Type=notify` service.
    case systemd
    /// `sh -c 'exec PROGRAM ARGS…'`.
    case shellExec
    /// `bash -c 'PROGRAM ARGS… & wait'`: a background job of a shell without job control, which
    /// starts it with SIGINT and SIGQUIT ignored.
    case bashBackground
    /// `bash -c 'set -m; PROGRAM ARGS… & wait'`: a job of its own process group.
    case bashJobControl

    var testDescription: String { rawValue }
}

/// A program started as `StartedBy` says, its stderr (and the shell's) in a file.
final class StartedProcess: @unchecked Sendable {
    /// The process waited for: the program, or the shell that runs it.
    let waited: pid_t
    /// The program's own pid (signalled).
    let pid: pid_t
    let logPath: String
    private var exited = false

    init(_ program: String, _ arguments: [String], environment: [String: String], startedBy: StartedBy, dir: String) throws {
        logPath = dir + "/log-\(UUID().uuidString.prefix(8))"
        let pidFile = logPath + ".pid"
        let argv: [String]
        switch startedBy {
        case .harness, .systemd: argv = [program] + arguments
        case .shellExec: argv = ["/bin/sh", "-c", #"exec "$0" "$@""#, program] + arguments
        case .bashBackground:
            argv = ["/bin/bash", "-c", #""$0" "$@" & echo $! > "\#(pidFile)"; wait $!"#, program] + arguments
        case .bashJobControl:
            argv = ["/bin/bash", "-c", #"set -m; "$0" "$@" & echo $! > "\#(pidFile)"; wait $!"#, program] + arguments
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, logPath, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        SpawnActions.closeFrom(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigdefault(&attributes, &all)
        // POSIX_SPAWN_SETSID (0x80, glibc): systemd starts a service as a session leader.
        let flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) | (startedBy == .systemd ? 0x80 : 0)
        posix_spawnattr_setflags(&attributes, Int16(flags))
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in cArgs + cEnv { free(p) } }
        var child: pid_t = 0
        let rc = posix_spawn(&child, argv[0], &actions, &attributes, cArgs, cEnv)
        guard rc == 0 else { throw HarnessError("posix_spawn \(argv[0]): \(rc)") }
        waited = child
        switch startedBy {
        case .harness, .systemd, .shellExec: pid = child
        case .bashBackground, .bashJobControl:
            // The shell writes the job's pid before it waits: an event, waited for.
            let deadline = Date().addingTimeInterval(30)
            var found: pid_t?
            while found == nil, Date() < deadline {
                found = (try? String(contentsOfFile: pidFile, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                if found == nil { usleep(10_000) }
            }
            guard let found else { throw HarnessError("the shell wrote no job pid within 30 s") }
            pid = found
        }
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    var lineCount: Int { log.split(separator: "\n").count }

    /// Waits until a line after the first `after` contains every part; fails when the process
    /// exits first or at the deadline.
    @discardableResult
    func waitForLine(_ parts: [String], after: Int = 0, timeout: TimeInterval = 60) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let lines = log.split(separator: "\n").dropFirst(after)
            if let line = lines.first(where: { line in parts.allSatisfy { line.contains($0) } }) { return String(line) }
            if !exited, !processExists(pid) || isZombie(pid) {
                throw HarnessError("the process ended before logging \(parts):\n\(log.suffix(4000))")
            }
            guard Date() < deadline else { throw HarnessError("no line with \(parts) within \(timeout) s:\n\(log.suffix(4000))") }
            usleep(20_000)
        }
    }

    /// Waits for the exit of the process started (the shell, for the bash starts): its exit
    /// status, or minus the signal that killed it.
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(waited, &status, 0) < 0 && errno == EINTR {}
        exited = true
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -(status & 0x7f)
    }

    /// `wait()` with a deadline: nil when the process still runs at `timeout` (it is then killed
    /// and reaped, so that a hung stop fails the test instead of holding it).
    func wait(timeout: TimeInterval) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        var status: Int32 = 0
        while true {
            let r = waitpid(waited, &status, WNOHANG)
            if r == waited { break }
            if r < 0 && errno != EINTR { return nil }
            if Date() >= deadline {
                kill(pid, SIGKILL)
                if waited != pid { kill(waited, SIGKILL) }
                _ = wait()
                return nil
            }
            usleep(10_000)
        }
        exited = true
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -(status & 0x7f)
    }

    private func isZombie(_ pid: pid_t) -> Bool { ShutdownTests.isZombie(pid) }

    deinit {
        if !exited {
            kill(pid, SIGKILL)
            if waited != pid { kill(waited, SIGKILL) }
            _ = wait()
        }
    }
}

/// Signals to the real built programs, started the ways they are started in the field, with the
/// semantic model installed so that OpenBLAS (whose worker threads start before `main`, with
/// every signal unblocked) is loaded: SIGTERM and SIGINT stop searchlightd gracefully (exit 0,
/// `STOPPING=1`, the stop logged, its extensions asked to exit), SIGHUP reloads its units; the
/// same for searchlight-desktop and the CLI's waits.
///
/// Every test is async and every wait (a log line, a notification, a process's exit) runs on a
/// thread of its own (`blocking`), never on the cooperative pool, and has a deadline.
@Suite("Signals", .onOwnThreads, .serialized)
struct SignalTests {
    /// The installed model (`make test-model`); without it the daemon is still tested, with
    /// OpenBLAS loaded all the same (it is linked; its threads start at load).
    static var modelDirectory: String? { SemanticSearchTests.transformerModel }

    /// The daemons' `--stop-timeout`: a graceful stop must end well within it.
    static let stopTimeout: TimeInterval = 20

    /// A daemon on a temp socket and state, started as `startedBy` says, with a notify socket.
    struct Daemon: Sendable {
        let dir: TempDir
        let process: StartedProcess
        let notify: NotifySocket
        let startedBy: StartedBy
        var socket: String { dir.path + "/d.sock" }
        var unitsDir: String { dir.path + "/units" }

        /// Starts a daemon, waiting (off the pool) for `READY=1` and its ready line. `restarting`:
        /// the directory (state, units) and notify socket of a daemon that has stopped.
        static func start(_ startedBy: StartedBy, arguments: [String] = [], environment: [String: String] = [:],
            restarting previous: Daemon? = nil, prepare: @escaping @Sendable (TempDir) throws -> Void = { _ in }) async throws -> Daemon {
            try await blocking { try startBlocking(startedBy, arguments: arguments, environment: environment, restarting: previous, prepare: prepare) }
        }

        private static func startBlocking(_ startedBy: StartedBy, arguments: [String], environment: [String: String],
            restarting previous: Daemon?, prepare: (TempDir) throws -> Void) throws -> Daemon {
            let dir: TempDir
            let notify: NotifySocket
            if let previous {
                (dir, notify) = (previous.dir, previous.notify)
            } else {
                dir = TempDir("sls")
                try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
                try prepare(dir)
                notify = try NotifySocket(dir.path + "/notify")
            }
            var env = ProcessInfo.processInfo.environment
            for k in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "OPENBLAS_NUM_THREADS",
                      "GOTO_NUM_THREADS", "OMP_NUM_THREADS"] {
                env[k] = nil
            }
            env["NOTIFY_SOCKET"] = notify.address
            env.merge(environment) { $1 }
            let model = modelDirectory.map { ["--model-dir", $0] } ?? []
            let process = try StartedProcess(Products.path("searchlightd"),
                ["--socket", dir.path + "/d.sock", "--state-dir", dir.path + "/state", "--units-dir", dir.path + "/units",
                 "--proc-root", dir.path + "/no-proc", "--power-supply-root", dir.path + "/no-power", "--log-level", "debug", "--backoff", "0.2",
                 "--stop-timeout", "\(Int(SignalTests.stopTimeout))"] + model + arguments,
                environment: env, startedBy: startedBy, dir: dir.path)
            _ = try notify.receive(until: "READY=1")
            try process.waitForLine(["searchlightd ready"])
            return Daemon(dir: dir, process: process, notify: notify, startedBy: startedBy)
        }

        /// Sends `signal` and checks a graceful stop: STOPPING=1, the stop logged, exit status 0
        /// within `--stop-timeout` (not forced), the index stores closed. Returns the log lines
        /// written since the signal. The waits run off the pool; the checks here, in the test's task.
        @discardableResult
        func stopGracefully(_ signal: Int32, _ name: String, comment: String) async throws -> [Substring] {
            let stop = try await blocking { try stopBlocking(signal) }
            #expect(stop.notifications.last?.contains("STOPPING=1") == true, "\(comment)")
            #expect(stop.status == 0, "\(comment): exit status \(stop.status.map(String.init) ?? "none: still running, killed")\n\(stop.log.suffix(3000))")
            #expect(stop.after.contains { $0.contains("stop requested by=\(name)") }, "\(comment)\n\(stop.log.suffix(3000))")
            // Within --stop-timeout and not forced, by the daemon's own clock: the time from its
            // "stopping" to its "stopped" (the test's wall time from kill to the reaped exit adds
            // the signal's delivery and the process's exit on a loaded machine, which are not the
            // stop's). It was `stop.elapsed < stopTimeout` on that wall time.
            let stopped = stop.after.last { $0.contains("searchlightd stopped") }
            #expect(stopped?.contains("forced=false") == true, "\(comment): \(stopped ?? "no 'searchlightd stopped' line")")
            let took = stopped.flatMap { ExtensionBench.field("elapsed_s", in: String($0)).flatMap(Double.init) }
            #expect(took.map { $0 < SignalTests.stopTimeout } == true,
                    "\(comment): the stop took \(took.map { "\($0) s" } ?? "?") by the daemon's clock (\(stop.elapsed) s from the signal to the exit)")
            #expect(!stop.after.contains { $0.contains("graceful stop did not finish in time") }, "\(comment)")
            // The index stores and the request journal (supervisor.sqlite) were closed: SQLite
            // removes a database's WAL when its last connection closes (checkpointed into the
            // file first, synced), and leaves it behind a process that exits with it open.
            #expect(stop.walLeft.isEmpty, "\(comment): index stores or the journal left open: \(stop.walLeft)")
            return stop.after
        }

        struct Stop: Sendable {
            var notifications: [String]
            var status: Int32?
            var elapsed: TimeInterval
            var log: String
            var after: [Substring]
            var walLeft: [String]
        }

        private func stopBlocking(_ signal: Int32) throws -> Stop {
            let mark = process.lineCount
            let sent = Date()
            kill(process.pid, signal)
            let seen = try notify.receive(until: "STOPPING=1")
            let status = process.wait(timeout: SignalTests.stopTimeout + 15)
            let elapsed = Date().timeIntervalSince(sent)
            let log = process.log
            let indexes = dir.path + "/state/indexes"
            var left = ((FileManager.default.enumerator(atPath: indexes)?.allObjects as? [String]) ?? []).filter { $0.hasSuffix("-wal") }
            if FileManager.default.fileExists(atPath: dir.path + "/state/supervisor.sqlite-wal") { left.append("supervisor.sqlite-wal") }
            return Stop(notifications: seen, status: status, elapsed: elapsed, log: log,
                after: Array(log.split(separator: "\n").dropFirst(mark)), walLeft: left)
        }

        /// Sends SIGHUP and checks the daemon reloads its units and goes on running.
        func hangUp(comment: String) async throws {
            try await blocking {
                let mark = process.lineCount
                kill(process.pid, SIGHUP)
                try process.waitForLine(["units reload requested by=SIGHUP"], after: mark)
                try process.waitForLine(["units reload done by=SIGHUP"], after: mark)
            }
            #expect(processExists(process.pid) && !ShutdownTests.isZombie(process.pid), "SIGHUP ended the daemon, \(comment)")
        }
    }

    static let stopSignals: [(Int32, String)] = [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")]

    @Test("SIGTERM and SIGINT right after readiness stop searchlightd gracefully, however it was started", arguments: StartedBy.allCases)
    func stopRightAfterReady(_ startedBy: StartedBy) async throws {
        for (signal, name) in Self.stopSignals {
            let daemon = try await Daemon.start(startedBy)
            try await daemon.stopGracefully(signal, name, comment: "\(name), started by \(startedBy)")
        }
    }

    @Test("With OPENBLAS_NUM_THREADS unset and set to 4, SIGTERM still stops gracefully")
    func openBLASThreads() async throws {
        for threads in [nil, "4"] {
            let daemon = try await Daemon.start(.harness, environment: threads.map { ["OPENBLAS_NUM_THREADS": $0] } ?? [:])
            try await daemon.stopGracefully(SIGTERM, "SIGTERM", comment: "OPENBLAS_NUM_THREADS=\(threads ?? "unset")")
        }
    }

    @Test("SIGHUP re-reads the units: one added before it is loaded, and the daemon goes on serving", arguments: StartedBy.allCases)
    func hangupReloads(_ startedBy: StartedBy) async throws {
        let daemon = try await Daemon.start(startedBy)
        let mark = daemon.process.lineCount
        let unit = TestUnit("org.example.test.hup", bundle: "org.example.hup")
        _ = try ExtensionBench.write(unit, in: daemon.dir)
        kill(daemon.process.pid, SIGHUP)
        try await blocking {
            try daemon.process.waitForLine(["units reload requested by=SIGHUP"], after: mark)
            try daemon.process.waitForLine(["units loaded", "units=1"], after: mark)
            // systemd sees it too: the status line counts the new unit.
            _ = try daemon.notify.receive(until: "/1 extensions")
        }
        #expect(processExists(daemon.process.pid))
        let units = try await runCLI(["units", "--json"], socket: daemon.socket)
        #expect(units.status == 0 && units.stdout.contains(unit.label), "\(units.stderr)\n\(daemon.process.log.suffix(2000))")
        // Twice more: a signal taken is never a one-off.
        for _ in 0..<2 {
            try await daemon.hangUp(comment: "again, started by \(startedBy)")
        }
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.status == 0, "\(status.stderr)")
        try await daemon.stopGracefully(SIGTERM, "SIGTERM", comment: "after SIGHUP, started by \(startedBy)")
    }

    /// The first reindex-all request `control`'s extension received from a pid other than `other`.
    static func reindexAll(_ control: ExtensionControl, notFrom other: Int32? = nil, timeout: TimeInterval = 60) async throws -> ExtensionControl.Received {
        try await blocking {
            let deadline = Date().addingTimeInterval(timeout)
            while true {
                if let r = control.received.first(where: { $0.kind == "all" && $0.pid != other }) { return r }
                guard Date() < deadline else { throw HarnessError("no reindex-all reached the extension within \(timeout) s: \(control.received)") }
                usleep(20_000)
            }
        }
    }

    @Test("SIGTERM or SIGINT during a reindex-all: the extension is asked to exit, its request stays journaled and is sent again after a restart, exit 0",
          arguments: StartedBy.allCases)
    func stopDuringReindex(_ startedBy: StartedBy) async throws {
        for (signal, name) in Self.stopSignals {
            var unit = TestUnit("org.example.test.sig", bundle: "org.example.sig", mode: "slow")
            unit.environment["TEST_EXTENSION_SLOW_MS"] = "60000"
            let written = unit
            let daemon = try await Daemon.start(startedBy) { dir in _ = try ExtensionBench.write(written, in: dir) }
            let control = ExtensionControl(path: daemon.dir.path + "/ctl-" + unit.label)
            _ = try await blocking { try daemon.process.waitForLine(["reindex request sent", "label=\(written.label)"]) }
            let extensionPID = try await Self.reindexAll(control).pid
            let comment = "\(name) during a reindex, started by \(startedBy)"
            // SIGHUP in the middle of it changes nothing for the request.
            try await daemon.hangUp(comment: comment)
            let after = try await daemon.stopGracefully(signal, name, comment: comment)
            #expect(after.contains { $0.contains("reindex request interrupted; it stays journaled") }, "\(daemon.process.log.suffix(3000))")
            // Asked to exit, not killed: it exited by itself, before the daemon did.
            #expect(after.contains { $0.contains("extension exited") && $0.contains("pid=\(extensionPID)") }, "\(comment)\n\(daemon.process.log.suffix(3000))")
            #expect(!after.contains { $0.contains("extension did not exit in time") }, "\(comment)")
            #expect(!processExists(extensionPID) || ShutdownTests.isZombie(extensionPID), "the extension outlived the daemon")

            // The journaled request reaches a new copy of the extension after a restart.
            let restarted = try await Daemon.start(startedBy, restarting: daemon)
            let again = try await Self.reindexAll(control, notFrom: extensionPID)
            #expect(again.pid != extensionPID)
            try await restarted.stopGracefully(SIGTERM, "SIGTERM", comment: "after the restart, \(comment)")
        }
    }

    @Test("SIGTERM or SIGINT during a flood of queries the transformer embeds stops gracefully", arguments: StartedBy.allCases)
    func stopDuringQueryFlood(_ startedBy: StartedBy) async throws {
        for (signal, name) in Self.stopSignals {
            let daemon = try await Daemon.start(startedBy)
            let comment = "\(name) during a query flood, started by \(startedBy)"
            let file = daemon.dir.path + "/items.jsonl"
            try RefinementIntegrationTests.items(count: 200).joined(separator: "\n").write(toFile: file, atomically: false, encoding: .utf8)
            let imported = try await runCLI(["import", "com.example.flood", file], socket: daemon.socket)
            #expect(imported.status == 0, "\(imported.stderr)")
            if Self.modelDirectory != nil {
                // The transformer embeds the queries from now on (`query.prepare`, as an app does).
                let state = try await UserQuery.prepare(index: SearchableIndex(name: "", bundleIdentifier: "com.example.flood", socketPath: daemon.socket))
                #expect(state.state == "loaded", "\(state)")
            }
            let answered = Counter()
            let socket = daemon.socket
            let flood = Task {
                await withTaskGroup(of: Void.self) { group in
                    for client in 0..<4 {
                        group.addTask {
                            var i = 0
                            while !Task.isCancelled {
                                i += 1
                                let r = try? await runCLI(["search", "com.example.flood", "plays music number \(client) \(i)"], socket: socket)
                                guard r?.status == 0 else { return }  // the daemon stopped
                                answered.add()
                            }
                        }
                    }
                }
            }
            // Queries answered while they keep coming: then the signals.
            try await blocking { try answered.wait(atLeast: 8, timeout: 120) }
            try await daemon.hangUp(comment: comment)
            try await blocking { try answered.wait(atLeast: 12, timeout: 120) }
            try await daemon.stopGracefully(signal, name, comment: comment)
            flood.cancel()
            await flood.value
        }
    }

    @Test("SIGTERM or SIGINT while idle maintenance refines vectors with the transformer stops gracefully", arguments: StartedBy.allCases)
    func stopWhileRefining(_ startedBy: StartedBy) async throws {
        guard Self.modelDirectory != nil else { return }
        for (signal, name) in Self.stopSignals {
            let daemon = try await Daemon.start(startedBy)
            let comment = "\(name) while refining, started by \(startedBy)"
            let file = daemon.dir.path + "/items.jsonl"
            try RefinementIntegrationTests.items(count: 400).joined(separator: "\n").write(toFile: file, atomically: false, encoding: .utf8)
            let imported = try await runCLI(["import", "com.example.sigrefine", file], socket: daemon.socket)
            #expect(imported.status == 0, "\(imported.stderr)")
            let mark = daemon.process.lineCount
            let socket = daemon.socket
            // The run by hand answers when maintenance ends: it ends here with the daemon's stop.
            let simulate = Task { try? await runCLI(["simulate", "idle"], socket: socket) }
            // The transformer is loaded for refinement and the first batch went in.
            try await blocking {
                try daemon.process.waitForLine(["semantic model loaded"], after: mark, timeout: 120)
                try daemon.process.waitForLine(["refinement batch committed"], after: mark, timeout: 120)
            }
            try await daemon.hangUp(comment: comment)
            try await daemon.stopGracefully(signal, name, comment: comment)
            // The run by hand ended (gave way, or finished first) before the daemon stopped: a
            // run left going on over closing indexes, inside OpenBLAS, died at the exit (SIGSEGV).
            let lines = Array(daemon.process.log.split(separator: "\n").dropFirst(mark))
            let ended = lines.firstIndex {
                ($0.contains("maintenance gave way to the stop") || $0.contains("maintenance finished")) && $0.contains("trigger=simulate")
            }
            let stopped = lines.firstIndex { $0.contains("searchlightd stopped") }
            #expect(ended != nil && stopped != nil && ended! < stopped!, "\(comment): the maintenance run did not end before the stop\n\(lines.suffix(40).joined(separator: "\n"))")
            // The client's wait ends with the daemon (its connection closes), not at a timeout.
            _ = await simulate.value
        }
    }

    @Test("searchlight-desktop: SIGTERM, SIGINT and SIGHUP end it cleanly (exit 0), however it was started",
          arguments: [StartedBy.harness, .shellExec, .bashBackground, .bashJobControl])
    func desktopSignals(_ startedBy: StartedBy) async throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/dbus-daemon") else { return }
        for (signal, name) in Self.stopSignals + [(SIGHUP, "SIGHUP")] {
            let dir = TempDir("sld")
            let bus = try await blocking { try SessionBusProcess(dir: dir.path) }
            var env = ProcessInfo.processInfo.environment
            env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
            let environment = env
            let desktop = try await blocking {
                try StartedProcess(Products.path("searchlight-desktop"), ["--socket", dir.path + "/none.sock", "--idle-exit", "0"],
                    environment: environment, startedBy: startedBy, dir: dir.path)
            }
            _ = try await blocking { try desktop.waitForLine(["searchlight-desktop ready"]) }
            let mark = desktop.lineCount
            kill(desktop.pid, signal)
            let status = try await blocking { desktop.wait(timeout: 30) }
            #expect(status == 0, "\(name), started by \(startedBy): exit status \(status.map(String.init) ?? "none: still running, killed")\n\(desktop.log)")
            let after = desktop.log.split(separator: "\n").dropFirst(mark)
            #expect(after.contains { $0.contains("stopping") && $0.contains(name) }, "\(desktop.log)")
            #expect(after.contains { $0.contains("searchlight-desktop stopped") }, "\(desktop.log)")
        }
    }

    @Test("searchlight monitor and reindex --wait: SIGINT and SIGTERM end the wait cleanly, however they were started",
          arguments: [StartedBy.harness, .shellExec, .bashBackground, .bashJobControl])
    func cliWaits(_ startedBy: StartedBy) async throws {
        var noack = TestUnit("org.example.test.cli", bundle: "org.example.cli", mode: "noack")
        noack.acknowledgementTimeout = 600
        let unit = noack
        let daemon = try await Daemon.start(startedBy) { dir in _ = try ExtensionBench.write(unit, in: dir) }
        let env = ProcessInfo.processInfo.environment.filter { $0.key != "SEARCHLIGHT_SOCKET" }
        for (signal, name) in Self.stopSignals {
            let monitor = try await blocking {
                try StartedProcess(Products.path("searchlight"), ["--socket", daemon.socket, "monitor"], environment: env,
                    startedBy: startedBy, dir: daemon.dir.path)
            }
            _ = try await blocking { try monitor.waitForLine(["following the events of searchlightd"]) }
            kill(monitor.pid, signal)
            let status = try await blocking { monitor.wait(timeout: 30) }
            #expect(status == 0, "monitor, \(name), started by \(startedBy): \(status.map(String.init) ?? "none: still running, killed")\n\(monitor.log)")

            let queued = daemon.process.lineCount
            let reindex = try await blocking {
                try StartedProcess(Products.path("searchlight"), ["--socket", daemon.socket, "reindex", unit.label, "--all"],
                    environment: env, startedBy: startedBy, dir: daemon.dir.path)
            }
            // Waiting: the request was sent to the extension, which never acknowledges it.
            _ = try await blocking { try daemon.process.waitForLine(["reindex request queued", "bundle=\(unit.bundle)", "reason=manual"], after: queued) }
            kill(reindex.pid, signal)
            let reindexStatus = try await blocking { reindex.wait(timeout: 30) }
            #expect(reindexStatus == 130, "reindex --wait, \(name), started by \(startedBy): \(reindexStatus.map(String.init) ?? "none: still running, killed")\n\(reindex.log)")
            #expect(reindex.log.contains("stopped waiting"), "\(reindex.log)")
        }
        try await daemon.stopGracefully(SIGTERM, "SIGTERM", comment: "after the CLI's waits")
    }
}

/// A count that tests wait on.
final class Counter: @unchecked Sendable {
    private let condition = NSCondition()
    private var value = 0

    func add() { condition.withLock { value += 1; condition.broadcast() } }

    func wait(atLeast n: Int, timeout: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(timeout)
        try condition.withLock {
            while value < n {
                if !condition.wait(until: deadline) { throw HarnessError("\(value) of \(n) within \(timeout) s") }
            }
        }
    }
}

/// A private session bus (`dbus-daemon --session`) for searchlight-desktop, started like the
/// programs under test (no signal blocked: Foundation's `Process` would pass on the blocked mask
/// of the pool thread that starts it, SIGTERM among them). Its address is its first line on
/// stderr (`--print-address=2`); it is killed (SIGKILL) and reaped when released.
final class SessionBusProcess: @unchecked Sendable {
    let process: StartedProcess
    let address: String

    init(dir: String) throws {
        process = try StartedProcess("/usr/bin/dbus-daemon", ["--session", "--nofork", "--print-address=2"],
            environment: ProcessInfo.processInfo.environment, startedBy: .harness, dir: dir)
        address = try process.waitForLine(["unix:"], timeout: 30).trimmingCharacters(in: .whitespaces)
    }
}
