#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire

/// The daemon's launcher: the unit's program checked again (`LaunchProgram`), started by
/// `ProcessSpawner` in a cgroup of its own where the daemon has them, its output to the log.
struct ProcessLauncher: ExtensionLauncher {
    /// System mode: who may have written the program is checked at every launch.
    let system: Bool
    let cgroups: ExtensionCgroups?
    let log: Logger
    /// The daemon's socket, handed to the extension as `SEARCHLIGHT_SOCKET` (its own is dropped:
    /// a runner's must never leak in): an extension that also acts as an app (the recent-files
    /// sample saves activities of other apps) reaches this daemon, not the user's default one.
    /// Never to one a system daemon runs as root: as an app, root may write to any bundle, so a
    /// root extension that reads untrusted input must not be pointed at the daemon as a client.
    var daemonSocket: String? = nil

    /// Environment variables that belong to the daemon's own relationship with systemd.
    static let strippedEnvironment: Set<String> = ["NOTIFY_SOCKET", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES",
                                                   "WATCHDOG_USEC", "WATCHDOG_PID", "SEARCHLIGHT_SOCKET"]

    func launch(_ unit: ExtensionUnit, stderrTail: StderrTail) throws -> (process: any ExtensionProcess, socket: UnixSocket) {
        // The program is checked again now, not only when the unit loaded: a folder made unsafe
        // or a program swapped since then is refused. A binary then runs through the descriptor
        // this check opened and verified; a script by its checked physical path.
        let program = try LaunchProgram(unit: unit, system: system)
        defer { program.close() }
        var config = try spawnConfiguration(unit)
        if let descriptor = program.descriptor { config.executableDescriptor = descriptor } else { config.executable = program.path }
        let (mine, theirs) = try UnixSocket.pair()
        let outputs: ExtensionOutput
        do {
            outputs = try ExtensionOutput(unit: unit, log: log, stderrTail: stderrTail)
        } catch {
            mine.close()
            theirs.closeDescriptor()
            throw error
        }
        let child: ChildProcess
        let cgroup: ExtensionCgroup?
        do {
            (child, cgroup) = try spawn(config, label: unit.label, socket: theirs.fd, outputs: outputs)
        } catch {
            theirs.closeDescriptor()
            mine.close()
            outputs.closeChildEnds()
            throw error
        }
        theirs.closeDescriptor()
        outputs.closeChildEnds()
        // Once it has exited, what it started dies with its cgroup (or, without one, with its
        // session), and the daemon's ends of its output pipes are closed: a process that left the
        // session could otherwise hold them, and a reader thread, for ever.
        child.onExit { [cgroups, label = unit.label] _ in
            if let cgroup {
                cgroups?.retire(cgroup, label: label)
            } else {
                SessionProcesses.kill(child.pid)
            }
            outputs.finish()
        }
        return (SpawnedExtension(child: child, outputs: outputs), mine)
    }

    /// Starts `config` in a cgroup of its own when the daemon has them. A child that cannot move
    /// into its cgroup turns cgroups off for later launches and is started again without.
    private func spawn(_ config: SpawnConfiguration, label: String, socket: Int32, outputs: ExtensionOutput) throws -> (ChildProcess, ExtensionCgroup?) {
        var config = config
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

    /// How to start the unit's program (DESIGN §5): its argv and environment, the priority of its
    /// `ProcessType`, its resource limits, and its user when the daemon is root.
    func spawnConfiguration(_ unit: ExtensionUnit) throws -> SpawnConfiguration {
        var env = ProcessInfo.processInfo.environment.filter { !Self.strippedEnvironment.contains($0.key) }
        for (k, v) in unit.environment { env[k] = v }
        env[ExtensionEnvironment.fd] = String(ExtensionEnvironment.descriptor)
        env[ExtensionEnvironment.label] = unit.label
        env[ExtensionEnvironment.bundleIdentifier] = unit.bundleIdentifier
        var config = SpawnConfiguration(executable: unit.executable, arguments: unit.arguments, environment: env)
        config.workingDirectory = unit.workingDirectory
        config.standardOutputPath = unit.standardOutPath
        config.standardErrorPath = unit.standardErrorPath
        config.umask = unit.umask
        config.nice = unit.nice
        config.lowPriorityIO = unit.lowPriorityIO
        for (name, value) in unit.softLimits { if let r = ResourceLimit(rawValue: name) { config.softLimits[r] = value } }
        for (name, value) in unit.hardLimits { if let r = ResourceLimit(rawValue: name) { config.hardLimits[r] = value } }
        if getuid() == 0, unit.userName != nil || unit.groupName != nil {
            var uid = getuid(), gid = getgid()
            var groups: [gid_t] = []
            if let name = unit.userName {
                guard let ids = Self.userIDs(name) else {
                    throw SearchlightError(.extensionFailed, "UserName \(name) of \(unit.label) does not exist; create the user or fix the unit")
                }
                (uid, gid, groups) = (ids.uid, ids.gid, ids.groups)
            }
            if let group = unit.groupName {
                guard let g = Self.groupID(group) else {
                    throw SearchlightError(.extensionFailed, "GroupName \(group) of \(unit.label) does not exist; create the group or fix the unit")
                }
                gid = g
                if !groups.contains(g) { groups.append(g) }
            }
            config.user = (uid: uid, gid: gid, groups: groups)
            env["HOME"] = Self.home(uid) ?? env["HOME"]
            env["USER"] = unit.userName ?? env["USER"]
        }
        // Not to an extension a system daemon runs as root (see `daemonSocket`). A user daemon's
        // extensions run as its own user, who owns the socket and its bundles already (the tests'
        // root-run user daemons included). A unit's own `EnvironmentVariables` still wins, as
        // before (its file is the administrator's).
        let root = system && (config.user?.uid ?? getuid()) == 0
        if let daemonSocket, !root, unit.environment["SEARCHLIGHT_SOCKET"] == nil {
            env["SEARCHLIGHT_SOCKET"] = daemonSocket
        }
        config.environment = env
        return config
    }

    /// uid, primary gid and supplementary groups of a user name (getpwnam_r: thread-safe).
    static func userIDs(_ name: String) -> (uid: uid_t, gid: gid_t, groups: [gid_t])? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &pw, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        var count: Int32 = 256
        var groups = [gid_t](repeating: 0, count: 256)
        if getgrouplist(name, pw.pw_gid, &groups, &count) == -1 { count = 0 }
        return (pw.pw_uid, pw.pw_gid, Array(groups.prefix(Int(count))))
    }

    static func groupID(_ name: String) -> gid_t? {
        var gr = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrnam_r(name, &gr, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return gr.gr_gid
    }

    static func home(_ uid: uid_t) -> String? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &pw, &buffer, buffer.count, &result) == 0, result != nil, let dir = pw.pw_dir else { return nil }
        return String(cString: dir)
    }
}

/// Where an extension's stdout and stderr go: the unit's `StandardOutPath` / `StandardErrorPath`
/// (opened by the child itself, as the extension's user: see `SpawnConfiguration`), else the
/// daemon's log, one line per event tagged with the label.
struct ExtensionOutput: Sendable {
    /// The write ends for the child, -1 for a stream that goes to a file.
    let stdout: Int32
    let stderr: Int32
    private let readers: [LineReader]

    /// `stderrTail` keeps the last stderr lines that go to the log, for the exit report.
    init(unit: ExtensionUnit, log: Logger, stderrTail: StderrTail? = nil) throws {
        var readers: [LineReader] = []
        func target(_ path: String?, stream: String) throws -> Int32 {
            if path != nil { return -1 }
            let label = unit.label
            let tail = stream == "stderr" ? stderrTail : nil
            let reader = try ProcessSpawner.lineReader(name: "\(stream)-\(label)") { line in
                log.info("extension output", ["label": label, "stream": stream, "line": line])
                tail?.append(line)
            }
            readers.append(reader)
            return reader.writeFD
        }
        do {
            stdout = try target(unit.standardOutPath, stream: "stdout")
            stderr = try target(unit.standardErrorPath, stream: "stderr")
        } catch {
            for r in readers { r.closeWriteEnd() }
            throw error
        }
        self.readers = readers
    }

    /// Waits (at most `timeout`) until everything written to the pipes was read: after the exit,
    /// so the last lines are in the log and the exit report. A process the extension started may
    /// hold the pipes open; then the wait ends at the timeout.
    func waitUntilRead(timeout: TimeInterval) async {
        let readers = self.readers
        guard !readers.isEmpty else { return }
        // Not a task group: it would wait for both children, and a reader's wait cannot be
        // cancelled. Whichever comes first resumes; the other finishes on its own later.
        let resumed = Mutex(false)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resume: @Sendable () -> Void = {
                if resumed.withLock({ done in defer { done = true }; return !done }) { continuation.resume() }
            }
            Task {
                for reader in readers { await reader.waitUntilFinished() }
                resume()
            }
            Task {
                try? await Task.sleep(for: .seconds(timeout))
                resume()
            }
        }
    }

    /// After the spawn: the child holds its copies; ours must go, or the readers never see EOF.
    func closeChildEnds() {
        for r in readers { r.closeWriteEnd() }
    }

    /// The extension has exited: what it wrote is read, and the daemon's ends are closed, without
    /// waiting for an end of file that a process it started (and that outlives it) may never give.
    func finish() {
        for r in readers { r.finish() }
    }
}

/// The fallback when an extension has no cgroup: the processes still in its session once it has
/// exited (started by it, and not gone off into a session of their own) are killed.
enum SessionProcesses {
    /// SIGKILLs every process whose session id is `sid`, found in /proc; returns how many. A
    /// session id stays allocated while any member lives, so it cannot name a stranger's session.
    @discardableResult
    static func kill(_ sid: pid_t) -> Int {
        var killed = 0
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = pid_t(entry), pid != sid,
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            // After "pid (comm) ": state ppid pgrp session …; comm may contain spaces and ')'.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 3, pid_t(fields[3]) == sid else { continue }
            if Glibc.kill(pid, SIGKILL) == 0 { killed += 1 }
        }
        return killed
    }
}
