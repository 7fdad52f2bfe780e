#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads

/// systemd integration without systemd (the model: go-systemd's tests): the test binds the
/// `NOTIFY_SOCKET` datagram socket and the socket-activation listener itself, and runs the real
/// searchlightd against them.

/// A datagram socket standing in for systemd's notification socket: a path, or an abstract `@name`.
final class NotifySocket: @unchecked Sendable {
    let address: String
    let fd: Int32

    init(_ address: String) throws {
        self.address = address
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(address.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard rc == 0 else { throw HarnessError("bind \(address): errno \(errno)") }
    }
    deinit { close(fd) }

    /// The next notification, or nil when none came before `deadline`.
    func receive(until deadline: Date) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return nil }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(min(left, 60) * 1000) + 1)
            if ready <= 0 { continue }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n > 0 { return String(decoding: buffer[0..<n], as: UTF8.self) }
        }
    }

    /// Notifications until one contains `text` (returned last), or throws at the deadline.
    func receive(until text: String, timeout: TimeInterval = 60) throws -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [String] = []
        while let m = receive(until: deadline) {
            seen.append(m)
            if m.contains(text) { return seen }
        }
        throw HarnessError("no notification containing \(text) within \(timeout)s; got \(seen)")
    }
}

/// searchlightd started with posix_spawn: a given environment and, for socket activation, a
/// descriptor placed at fd 3 (Foundation's Process would not pass it). stderr goes to `log`.
private final class SpawnedDaemon: @unchecked Sendable {
    let pid: pid_t
    let logPath: String
    private var exited = false

    init(executable: String, arguments: [String], environment: [String: String], fd3: Int32? = nil, logPath: String) throws {
        self.logPath = logPath
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, logPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        if let fd3 { posix_spawn_file_actions_adddup2(&actions, fd3, 3) }
        SpawnActions.closeFrom(&actions, fd3 == nil ? 3 : 4)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, nil, argv, envp)
        guard rc == 0 else { throw HarnessError("posix_spawn \(executable): \(rc)") }
        self.pid = pid
    }

    /// Waits for the exit; the exit status, or -signal.
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        exited = true
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : -(status & 0x7f)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        if !exited {
            kill(pid, SIGKILL)
            _ = wait()
        }
    }
}

/// The environment a daemon under test gets: the runner's, minus anything systemd-ish it may
/// have inherited, plus `extra`.
private func daemonEnvironment(_ extra: [String: String]) -> [String: String] {
    var env = ProcessInfo.processInfo.environment
    for k in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "JOURNAL_STREAM"] {
        env[k] = nil
    }
    return env.merging(extra) { $1 }
}

private func daemonArguments(_ dir: TempDir, socket: String? = nil) -> [String] {
    ["--socket", socket ?? dir.path + "/d.sock", "--state-dir", dir.path + "/state", "--units-dir", dir.path + "/no-units",
     "--model-dir", dir.path + "/no-model", "--log-level", "debug"]
}

private func connects(_ path: String) -> Bool {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
    return withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    } == 0
}

/// A listening AF_UNIX stream socket at `path`, as systemd's socket unit creates it.
private func listeningSocket(_ path: String) throws -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
    let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0, listen(fd, 16) == 0 else { throw HarnessError("listen \(path): errno \(errno)") }
    return fd
}

@Suite("systemd integration", .onOwnThreads)
struct SystemdTests {
    @Test("READY=1 comes once the socket accepts connections, with STATUS= and MAINPID=; WATCHDOG=1 every half WATCHDOG_USEC; STOPPING=1 on SIGTERM before exit")
    func notifyLifecycle() throws {
        let dir = TempDir()
        let notify = try NotifySocket(dir.path + "/notify")
        let started = Date()
        let daemon = try SpawnedDaemon(
            executable: Products.path("searchlightd"), arguments: daemonArguments(dir),
            environment: daemonEnvironment(["NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "400000"]), logPath: dir.path + "/log")
        let first = try notify.receive(until: "READY=1")
        let readyAfter = Date().timeIntervalSince(started)
        // The socket listened before READY=1 was sent: a connection succeeds now, with no retry.
        #expect(connects(dir.path + "/d.sock"), "READY=1 before the socket listened:\n\(daemon.log)")
        let ready = first.last ?? ""
        #expect(ready.contains("STATUS=0 indexes in 0 bundles"))
        #expect(ready.contains("load normal"), "the throttle's state is missing from the status line: \(ready)")
        #expect(ready.contains("MAINPID=\(daemon.pid)"))
        #expect(!first.dropLast().contains { $0.contains("WATCHDOG=1") }, "a watchdog ping came before READY=1: \(first)")
        print("systemd: READY=1 \(Int(readyAfter * 1000)) ms after exec")

        // 200 ms cadence: over 3 s about 15 pings. Generous bounds: a loaded machine delays
        // pings, never multiplies them.
        let window = Date().addingTimeInterval(3)
        var pings = 0
        while let m = notify.receive(until: window) { if m.contains("WATCHDOG=1") { pings += 1 } }
        #expect(pings >= 3 && pings <= 20, "\(pings) WATCHDOG=1 in 3 s at WATCHDOG_USEC=400000")
        // Both loops are checked: the pings above mean each went round between two checks (the
        // accept loop by the daemon's own knock on its socket).
        #expect(daemon.log.contains("watchdog_loops=scheduler,accept"), "\(daemon.log)")

        kill(daemon.pid, SIGTERM)
        let rest = try notify.receive(until: "STOPPING=1")
        #expect(rest.last?.contains("STOPPING=1") == true)
        #expect(daemon.wait() == 0, "\(daemon.log)")
        #expect(daemon.log.contains("searchlightd stopped"))
    }

    @Test("STATUS= follows the daemon: an index under corruption recovery shows as recovering until its refill is acknowledged")
    func statusFollowsRecovery() async throws {
        let dir = TempDir()
        let notify = try NotifySocket(dir.path + "/notify")
        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        var unit = TestUnit("org.example.test.status", bundle: "org.example.status")
        unit.acknowledgementTimeout = 2
        let control = try ExtensionBench.write(unit, in: dir)
        let daemon = try SpawnedDaemon(
            executable: Products.path("searchlightd"),
            arguments: ["--socket", dir.path + "/d.sock", "--state-dir", dir.path + "/state", "--units-dir", dir.path + "/units",
                        "--proc-root", dir.path + "/no-proc", "--power-supply-root", dir.path + "/no-power", "--model-dir", dir.path + "/no-model", "--backoff", "0.2", "--log-level", "debug"],
            environment: daemonEnvironment(["NOTIFY_SOCKET": notify.address]), logPath: dir.path + "/log")
        _ = try notify.receive(until: "READY=1")
        // The initial reindex-all is acknowledged: one index in one bundle.
        _ = try notify.receive(until: "1 indexes in 1 bundles")
        // The refill after the simulated corruption is never acknowledged: recovering it stays.
        try control.setMode("noack")
        let simulated = try await runCLI(["simulate", "corruption", unit.bundle], socket: dir.path + "/d.sock")
        #expect(simulated.status == 0, "\(simulated.stderr)\n\(daemon.log)")
        let seen = try notify.receive(until: "1 recovering")
        #expect(seen.last?.hasPrefix("STATUS=") == true, "\(seen)")
        // Acknowledged on a retry (after AcknowledgementTimeout): the part goes away.
        try control.setMode("ok")
        let deadline = Date().addingTimeInterval(60)
        var recovered: String?
        while recovered == nil, let m = notify.receive(until: deadline) {
            if m.hasPrefix("STATUS="), !m.contains("recovering") { recovered = m }
        }
        #expect(recovered?.contains("1 indexes in 1 bundles") == true, "still recovering after 60 s:\n\(daemon.log)")
        kill(daemon.pid, SIGTERM)
        _ = try notify.receive(until: "STOPPING=1")
        #expect(daemon.wait() == 0, "\(daemon.log)")
    }

    @Test("An abstract NOTIFY_SOCKET (@name) gets READY=1; no WATCHDOG=1 when WATCHDOG_PID is another process's")
    func abstractSocketAndForeignWatchdog() throws {
        let dir = TempDir()
        let notify = try NotifySocket("@searchlight-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let daemon = try SpawnedDaemon(
            executable: Products.path("searchlightd"), arguments: daemonArguments(dir),
            environment: daemonEnvironment(["NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1"]),
            logPath: dir.path + "/log")
        _ = try notify.receive(until: "READY=1")
        // At 100 ms a ping would have come ten times over in this second.
        let window = Date().addingTimeInterval(1)
        var pings = 0
        while let m = notify.receive(until: window) { if m.contains("WATCHDOG=1") { pings += 1 } }
        #expect(pings == 0)
        kill(daemon.pid, SIGTERM)
        _ = try notify.receive(until: "STOPPING=1")
        #expect(daemon.wait() == 0, "\(daemon.log)")
    }

    @Test("Socket activation: the listener passed as fd 3 with LISTEN_PID of the daemon serves clients, and its file stays at stop")
    func socketActivation() async throws {
        let dir = TempDir()
        let path = dir.path + "/activated.sock"
        let listener = try listeningSocket(path)
        defer { close(listener) }
        let notify = try NotifySocket(dir.path + "/notify")
        // LISTEN_PID must be the daemon's pid: the shell exports its own, then execs the daemon.
        let daemon = try SpawnedDaemon(
            executable: "/bin/sh",
            arguments: ["-c", "LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=searchlightd.socket; export LISTEN_PID LISTEN_FDS LISTEN_FDNAMES; exec \"$0\" \"$@\"",
                        Products.path("searchlightd")] + daemonArguments(dir, socket: dir.path + "/unused.sock"),
            environment: daemonEnvironment(["NOTIFY_SOCKET": notify.address]), fd3: listener, logPath: dir.path + "/log")
        _ = try notify.receive(until: "READY=1")
        let status = try await runCLI(["status", "--json"], socket: path)
        #expect(status.status == 0, "\(status.stderr)\n\(daemon.log)")
        #expect(status.stdout.contains("\"pid\" : \(daemon.pid)") || status.stdout.contains("\"pid\":\(daemon.pid)"), "\(status.stdout)")
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/unused.sock"), "bound its own socket too")
        #expect(daemon.log.contains("socket activation"), "\(daemon.log)")
        kill(daemon.pid, SIGTERM)
        #expect(daemon.wait() == 0, "\(daemon.log)")
        #expect(FileManager.default.fileExists(atPath: path), "removed the socket file systemd owns")
    }

    @Test("LISTEN_FDS with another process's LISTEN_PID is ignored: the daemon binds its own socket")
    func foreignListenPID() async throws {
        let dir = TempDir()
        let listener = try listeningSocket(dir.path + "/activated.sock")
        defer { close(listener) }
        let notify = try NotifySocket(dir.path + "/notify")
        let daemon = try SpawnedDaemon(
            executable: Products.path("searchlightd"), arguments: daemonArguments(dir),
            environment: daemonEnvironment(["NOTIFY_SOCKET": notify.address, "LISTEN_PID": "1", "LISTEN_FDS": "1"]),
            fd3: listener, logPath: dir.path + "/log")
        _ = try notify.receive(until: "READY=1")
        let status = try await runCLI(["status"], socket: dir.path + "/d.sock")
        #expect(status.status == 0, "\(status.stderr)\n\(daemon.log)")
        #expect(daemon.log.contains("LISTEN_FDS ignored"), "\(daemon.log)")
        kill(daemon.pid, SIGTERM)
        #expect(daemon.wait() == 0, "\(daemon.log)")
    }
}
