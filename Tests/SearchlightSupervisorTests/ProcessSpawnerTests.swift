#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire
import Synchronization
import Testing
import TestThreads
@testable import SearchlightSupervisor
import CSpawn

/// Every wait has this deadline: far beyond what a healthy run needs, so only a real hang fails.
private let deadline: Double = 30

struct DeadlineExceeded: Error {}

/// The value of `operation`, or DeadlineExceeded once `seconds` have passed without one.
func within<T: Sendable>(
    _ seconds: Double = deadline, _ operation: @escaping @Sendable () async -> T
) async throws -> T {
    let outcome = FirstOutcome<T>()
    let timer = Task {
        try? await Task.sleep(for: .seconds(seconds))
        outcome.settle(nil)
    }
    defer { timer.cancel() }
    Task { outcome.settle(await operation()) }
    guard let result = await outcome.value else { throw DeadlineExceeded() }
    return result
}

/// Whichever of a value and a timeout comes first (nil: the timeout).
final class FirstOutcome<T: Sendable>: Sendable {
    private let state = Mutex<(settled: T??, waiter: CheckedContinuation<T?, Never>?)>((nil, nil))

    func settle(_ value: T?) {
        let waiter = state.withLock { state -> CheckedContinuation<T?, Never>? in
            guard state.settled == nil else { return nil }
            state.settled = .some(value)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: value)
    }

    var value: T? {
        get async {
            await withCheckedContinuation { continuation in
                let settled = state.withLock { state -> T?? in
                    if state.settled == nil { state.waiter = continuation }
                    return state.settled
                }
                if let settled { continuation.resume(returning: settled) }
            }
        }
    }
}

/// Lines collected from a reader thread.
final class Lines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// A started child whose stdout and stderr are being collected, and the daemon's end of its fd 3.
struct Started {
    var child: ChildProcess
    var stdout: Lines, stderr: Lines
    var outReader: LineReader, errReader: LineReader
    /// The daemon's end of fd 3, closed when the last copy of this goes.
    var socket: UnixSocket

    /// Starts `config` the way the daemon does: a socket pair for fd 3, line readers for 1 and 2,
    /// and the parent's copies of the child's ends closed right after.
    init(_ config: SpawnConfiguration, onOutput: (@Sendable (String) -> Void)? = nil) throws {
        let stdout = Lines(), stderr = Lines()
        (self.stdout, self.stderr) = (stdout, stderr)
        outReader = try ProcessSpawner.lineReader(name: "test-stdout") { line in
            stdout.append(line)
            onOutput?(line)
        }
        errReader = try ProcessSpawner.lineReader(name: "test-stderr") { stderr.append($0) }
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw SystemError("socketpair")
        }
        let (outReader, errReader) = (self.outReader, self.errReader)
        defer {
            close(pair[1])  // not UnixSocket.close: its shutdown would cut the child's copy too
            outReader.closeWriteEnd()
            errReader.closeWriteEnd()
        }
        socket = UnixSocket(fd: pair[0])
        child = try ProcessSpawner.spawn(
            config, extensionSocket: pair[1], stdout: outReader.writeFD, stderr: errReader.writeFD)
    }

    /// Waits for the child to end and for both readers to reach end of file.
    func finish() async throws -> Termination {
        let child = child, outReader = outReader, errReader = errReader
        let termination = try await within { await child.waitForExit() }
        try await within { await outReader.waitUntilFinished() }
        try await within { await errReader.waitUntilFinished() }
        return termination
    }
}

/// Runs `config` to its end; returns its stdout lines, expecting a clean exit.
func output(of config: SpawnConfiguration) async throws -> [String] {
    let started = try Started(config)
    let termination = try await started.finish()
    #expect(termination == .exited(0), "stderr: \(started.stderr.all)")
    return started.stdout.all
}

func sh(_ script: String) -> SpawnConfiguration {
    SpawnConfiguration(executable: "/bin/sh", arguments: ["sh", "-c", script])
}

/// The fields of /proc/<pid>/stat after the command name, which may itself contain spaces.
func statFields(_ line: String) -> [Substring] {
    line[line.index(after: line.lastIndex(of: ")")!)...].split(separator: " ")
}

@Suite("ProcessSpawner", .onOwnThreads)
struct ProcessSpawnerTests {
    @Test("the extension socket is the child's fd 3, in both directions")
    func extensionSocketIsFD3() async throws {
        let started = try Started(sh(#"read line <&3; echo "got $line" >&3"#))
        try started.socket.writeAll(Array("ping\n".utf8))
        #expect(try await started.finish() == .exited(0))
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64)
        // Every other copy of the child's end is closed by now, so this read ends at EOF.
        while case let count = try buffer.withUnsafeMutableBytes({ try started.socket.read(into: $0) }), count > 0 {
            reply += buffer[0..<count]
        }
        #expect(String(decoding: reply, as: UTF8.self) == "got ping\n")
    }

    @Test("no other descriptor of the daemon reaches the child, even one without close-on-exec")
    func otherDescriptorsAreClosed() async throws {
        let devNull = open("/dev/null", O_RDONLY)
        let leaky = fcntl(devNull, F_DUPFD, 100)  // F_DUPFD leaves FD_CLOEXEC clear
        close(devNull)
        defer { close(leaky) }
        let fds = Set(try await output(of: SpawnConfiguration(executable: "/usr/bin/ls", arguments: ["ls", "/proc/self/fd"])))
        #expect(fds.isSuperset(of: ["0", "1", "2", "3"]))
        #expect(!fds.contains(String(leaky)))
        #expect(fds.subtracting(["0", "1", "2", "3"]).count <= 1, "only ls's own directory: \(fds.sorted())")
    }

    @Test("concurrent launches do not leak their descriptors into each other's children")
    func concurrentLaunchesStayApart() async throws {
        let listings = try await withThrowingTaskGroup(of: Set<String>.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    Set(try await output(of: SpawnConfiguration(executable: "/usr/bin/ls", arguments: ["ls", "/proc/self/fd"])))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        for fds in listings {
            #expect(fds.subtracting(["0", "1", "2", "3"]).count <= 1, "\(fds.sorted())")
        }
    }

    @Test("the environment is exactly the configured one, nothing inherited from the daemon")
    func environmentIsExact() async throws {
        var config = SpawnConfiguration(executable: "/usr/bin/env", arguments: ["env"])
        config.environment = ["SEARCHLIGHT_EXTENSION_FD": "3", "SPACED": "two words"]
        #expect(try await output(of: config).sorted() == ["SEARCHLIGHT_EXTENSION_FD=3", "SPACED=two words"])
    }

    @Test("the nice value is applied")
    func niceIsApplied() async throws {
        var config = SpawnConfiguration(executable: "/usr/bin/cat", arguments: ["cat", "/proc/self/stat"])
        config.nice = 7
        let fields = statFields(try #require(try await output(of: config).first))
        #expect(fields[16] == "7")
    }

    @Test("the child leads its own process group, in a new session without a controlling terminal")
    func ownProcessGroup() async throws {
        let started = try Started(SpawnConfiguration(executable: "/usr/bin/cat", arguments: ["cat", "/proc/self/stat"]))
        #expect(try await started.finish() == .exited(0))
        let fields = statFields(try #require(started.stdout.all.first))
        #expect(fields[2] == "\(started.child.pid)")
        #expect(fields[3] == "\(started.child.pid)")
        #expect(fields[4] == "0")
    }

    @Test("lowPriorityIO selects the idle or the best-effort I/O class",
          arguments: [(true, "idle"), (false, "best-effort: prio 4")])
    func ioClass(lowPriorityIO: Bool, shown: String) async throws {
        var config = SpawnConfiguration(executable: "/usr/bin/ionice", arguments: ["ionice"])
        config.lowPriorityIO = lowPriorityIO
        #expect(try await output(of: config) == [shown])
    }

    @Test("a soft NumberOfFiles limit is applied and the daemon's hard limit kept")
    func softLimitKeepsHard() async throws {
        var current = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &current)
        var config = sh("ulimit -Sn; ulimit -Hn")
        config.softLimits[.numberOfFiles] = 123
        let hard = current.rlim_max == rlim_t.max ? "unlimited" : "\(current.rlim_max)"
        #expect(try await output(of: config) == ["123", hard])
    }

    @Test("a soft limit above the hard one is lowered to it")
    func softLimitIsClamped() async throws {
        var config = sh("ulimit -Sn; ulimit -Hn")
        config.softLimits[.numberOfFiles] = 1000
        config.hardLimits[.numberOfFiles] = 200
        #expect(try await output(of: config) == ["200", "200"])
    }

    @Test("the umask is applied")
    func umaskIsApplied() async throws {
        var config = sh("umask")
        config.umask = 0o027
        #expect(try await output(of: config) == ["0027"])
    }

    @Test("the working directory is applied")
    func workingDirectoryIsApplied() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("spawn-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var config = SpawnConfiguration(executable: "/usr/bin/pwd", arguments: ["pwd", "-P"])
        config.workingDirectory = directory
        #expect(try await output(of: config) == [URL(fileURLWithPath: directory).resolvingSymlinksInPath().path])
    }

    @Test("an exit status and a death by signal are told apart",
          arguments: [("exit 3", Termination.exited(3)), ("kill -9 $$", .signaled(SIGKILL, coreDumped: false))])
    func terminationKinds(script: String, expected: Termination) async throws {
        #expect(try await Started(sh(script)).finish() == expected)
    }

    @Test("terminations read as operators expect")
    func terminationDescriptions() {
        #expect(Termination.exited(3).description == "exit status 3")
        #expect(Termination.signaled(SIGKILL, coreDumped: false).description == "killed by signal 9 (SIGKILL)")
        #expect(Termination.signaled(SIGSEGV, coreDumped: true).description == "killed by signal 11 (SIGSEGV), core dumped")
    }

    @Test("a missing executable is an exec error with ENOENT that names the file and the fix")
    func missingExecutable() throws {
        let error = #expect(throws: SpawnError.self) {
            try Started(SpawnConfiguration(executable: "/nonexistent/indexer"))
        }
        #expect(error?.step == .exec)
        #expect(error?.errno == ENOENT)
        #expect(error?.description
            == "cannot execute /nonexistent/indexer: No such file or directory (exec); check Program in the unit")
    }

    @Test("a missing working directory is a chdir error")
    func missingWorkingDirectory() throws {
        var config = sh("true")
        config.workingDirectory = "/nonexistent/dir"
        let error = #expect(throws: SpawnError.self) { try Started(config) }
        #expect(error?.step == .chdir)
        #expect(error?.errno == ENOENT)
    }

    @Test("a NUL byte in an argument is refused before anything starts")
    func nulInArgument() throws {
        let error = #expect(throws: SpawnError.self) { try Started(sh("echo a\0b")) }
        #expect(error?.step == .arguments)
    }

    @Test("the child starts with an empty signal mask and no ignored signals")
    func signalStateIsReset() async throws {
        // The daemon ignores SIGPIPE and blocks SIGHUP (among others) for sigwait.
        signal(SIGPIPE, SIG_IGN)
        var blocked = sigset_t(), previous = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGHUP)
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        let started = Result { try Started(SpawnConfiguration(executable: "/usr/bin/grep", arguments: ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])) }
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        let child = try started.get()
        #expect(try await child.finish() == .exited(0))
        #expect(child.stdout.all == ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"])
    }

    @Test("a signal to the child reaches the processes it started")
    func signalReachesProcessGroup() async throws {
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        let started = try Started(sh("sleep 1000 & echo $!; wait"), onOutput: { continuation.yield($0) })
        let grandchild = try await within { await lines.first { _ in true } }
        #expect(grandchild != nil)
        #expect(started.child.signal(SIGTERM))
        // The grandchild holds the stdout pipe too: the reader's end of file means it is gone.
        #expect(try await started.finish() == .signaled(SIGTERM, coreDumped: false))
    }

    @Test("a child that has ended is never signalled")
    func noSignalAfterExit() async throws {
        let started = try Started(sh("exit 0"))
        #expect(try await started.finish() == .exited(0))
        #expect(started.child.hasExited)
        #expect(!started.child.signal(SIGKILL))
        #expect(try await within { await started.child.waitForExit() } == .exited(0))
    }

    @Test("stderr reaches the line reader line by line, an unterminated last line included")
    func stderrLines() async throws {
        let started = try Started(sh(#"echo one >&2; printf 'two\nthree' >&2"#))
        #expect(try await started.finish() == .exited(0))
        #expect(started.stderr.all == ["one", "two", "three"])
    }

    @Test("a line longer than 4 KiB is split, and not inside a UTF-8 character")
    func longLinesAreSplit() {
        var pending = Array(repeating: UInt8(ascii: "a"), count: 4095) + Array("é".utf8) + Array("bc\nrest".utf8)
        var lines: [String] = []
        LineReader.deliverLines(&pending) { lines.append($0) }
        #expect(lines == [String(repeating: "a", count: 4095), "ébc"])
        #expect(pending == Array("rest".utf8))
    }

    @Test("invalid UTF-8 is replaced, not dropped")
    func invalidUTF8() {
        var pending: [UInt8] = [0x66, 0xFF, 0x6F, 0x0A]
        var lines: [String] = []
        LineReader.deliverLines(&pending) { lines.append($0) }
        #expect(lines == ["f\u{FFFD}o"])
    }

    @Test("as root, the child runs as the configured user and groups", .enabled(if: getuid() == 0))
    func runsAsUser() async throws {
        var config = sh("id -u; id -g; id -G")
        config.user = (uid: 65534, gid: 65534, groups: [65534])
        config.workingDirectory = "/"
        #expect(try await output(of: config) == ["65534", "65534", "65534"])
    }

    @Test("without root, changing user is a setgroups error naming the unit keys", .enabled(if: getuid() != 0))
    func changingUserNeedsRoot() throws {
        var config = sh("true")
        config.user = (uid: 65534, gid: 65534, groups: [])
        let error = #expect(throws: SpawnError.self) { try Started(config) }
        #expect(error?.step == .setgroups)
        #expect(error?.errno == EPERM)
        #expect(error?.description.contains("check UserName and GroupName") == true)
    }

    // MARK: - Launch hardening (issue 13)

    @Test("a program run through its descriptor is the file that was opened, even if another is renamed over its path")
    func executesTheOpenedFile() async throws {
        let dir = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.copyItem(atPath: "/usr/bin/true", toPath: dir + "/program")
        try FileManager.default.copyItem(atPath: "/usr/bin/false", toPath: dir + "/swapped")
        let fd = sl_open_path(dir + "/program")
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(rename(dir + "/swapped", dir + "/program") == 0)
        var config = SpawnConfiguration(executable: dir + "/program")
        config.executableDescriptor = fd
        #expect(try await Started(config).finish() == .exited(0))
        config.executableDescriptor = nil
        #expect(try await Started(config).finish() == .exited(1))
    }

    @Test("output paths are opened by the child: appended to, never through a symbolic link, never waiting for a FIFO's reader")
    func outputPaths() async throws {
        let dir = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = sh("echo out; echo err >&2")
        config.standardOutputPath = dir + "/out.log"
        config.standardErrorPath = dir + "/out.log"
        try "before\n".write(toFile: dir + "/out.log", atomically: false, encoding: .utf8)
        #expect(try await Started(config).finish() == .exited(0))
        #expect(try String(contentsOfFile: dir + "/out.log", encoding: .utf8) == "before\nout\nerr\n")

        try FileManager.default.createSymbolicLink(atPath: dir + "/link", withDestinationPath: dir + "/out.log")
        config.standardOutputPath = dir + "/link"
        let loop = #expect(throws: SpawnError.self) { try Started(config) }
        #expect(loop?.step == .standardOutPath && loop?.errno == ELOOP && loop?.path == dir + "/link")
        #expect(loop?.description.contains("(open StandardOutPath \(dir)/link); StandardOutPath is a symbolic link, which is never followed") == true)

        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        config.standardOutputPath = nil
        config.standardErrorPath = dir + "/fifo"
        let fifo = #expect(throws: SpawnError.self) { try Started(config) }
        #expect(fifo?.step == .standardErrorPath && fifo?.errno == ENXIO)
        #expect(fifo?.description.contains("is a FIFO with no reader") == true)
    }

    @Test("as root, an output file is opened with the child's user's rights, after the identity change", .enabled(if: getuid() == 0))
    func outputOpenedAsUser() async throws {
        let dir = try temporaryFolder()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o755)
        var config = sh("echo out")
        config.user = (uid: 65534, gid: 65534, groups: [])
        config.workingDirectory = "/"
        config.standardOutputPath = dir + "/created-by-root-before"
        let denied = #expect(throws: SpawnError.self) { try Started(config) }
        #expect(denied?.step == .standardOutPath && denied?.errno == EACCES)
        #expect(!FileManager.default.fileExists(atPath: dir + "/created-by-root-before"))
        chown(dir, 65534, 65534)
        #expect(try await Started(config).finish() == .exited(0))
        var st = stat()
        #expect(stat(dir + "/created-by-root-before", &st) == 0 && st.st_uid == 65534)
    }

    @Test("finish ends a line reader whose write end another process keeps open, after handing over what was written")
    func finishWithoutEndOfFile() async throws {
        let lines = Lines()
        let reader = try ProcessSpawner.lineReader(name: "test-finish") { lines.append($0) }
        // A copy of the write end that is never closed: the grandchild that outlives its extension.
        let kept = dup(reader.writeFD)
        defer { close(kept) }
        reader.closeWriteEnd()
        _ = "written before the exit\nunterminated".withCString { write(kept, $0, strlen($0)) }
        reader.finish()
        try await within { await reader.waitUntilFinished() }
        #expect(lines.all == ["written before the exit", "unterminated"])
        reader.finish()  // idempotent, and never writes to a closed descriptor
    }
}

/// A fresh folder under /tmp.
func temporaryFolder() throws -> String {
    var template = Array("/tmp/sl-spawn-XXXXXX".utf8CString)
    guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else { throw SystemError("mkdtemp") }
    return String(cString: made)
}
