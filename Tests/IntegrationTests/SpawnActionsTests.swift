#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads

/// The harness's own `posix_spawn` calls (SpawnActions) hand no descriptor of the test process to
/// the processes they start. What would make it fail: a bare `posix_spawn`, whose child inherits
/// every descriptor opened without `O_CLOEXEC`. A desktop test in CI waited 15 s for a recorder
/// script that `gio launch` could not run: a daemon another test had started held the script open
/// for writing (ETXTBSY).
@Suite("The harness's spawned processes", .onOwnThreads)
struct SpawnActionsTests {
    /// A script written through a descriptor without `O_CLOEXEC`, left open while `start` runs.
    private static func withOpenScript(_ dir: TempDir, _ start: () throws -> Void) throws -> String {
        let script = dir.path + "/record.sh"
        let fd = open(script, O_WRONLY | O_CREAT | O_TRUNC, 0o755)
        #expect(fd >= 0)
        let body = "#!/bin/sh\nexit 0\n"
        _ = body.withCString { write(fd, $0, strlen($0)) }
        try start()
        close(fd)
        return script
    }

    /// The descriptors of `pid` that name `path`.
    private static func descriptors(of pid: pid_t, naming path: String) -> [String] {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? []
        return fds.filter { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\($0)")) == path }
    }

    /// Runs `script` and returns its exit status (126 and a "Text file busy" message when another
    /// process holds it open for writing).
    private static func run(_ script: String) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: script)
        let err = Pipe()
        process.standardError = err
        do { try process.run() } catch { return (126, "\(error)") }
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
    }

    @Test("a process started as systemd or a shell would holds no descriptor of the test process; a script written meanwhile runs",
          arguments: StartedBy.allCases)
    func startedProcess(_ startedBy: StartedBy) throws {
        let dir = TempDir()
        var started: StartedProcess?
        let script = try Self.withOpenScript(dir) {
            started = try StartedProcess("/bin/sleep", ["60"], environment: ["PATH": "/usr/bin:/bin"], startedBy: startedBy, dir: dir.path)
        }
        let process = try #require(started)
        defer { kill(process.pid, SIGKILL); _ = process.wait(timeout: 10) }
        #expect(Self.descriptors(of: process.pid, naming: script).isEmpty)
        if process.waited != process.pid { #expect(Self.descriptors(of: process.waited, naming: script).isEmpty) }
        let (status, message) = try Self.run(script)
        #expect(status == 0, "\(message)")
    }

    @Test("a CPU hog holds no descriptor of the test process")
    func hog() throws {
        let dir = TempDir()
        var hogs: CPUHogs?
        let script = try Self.withOpenScript(dir) { hogs = CPUHogs(1) }
        let running = try #require(hogs)
        defer { running.stop() }
        #expect(running.count == 1)
        for pid in running.pids { #expect(Self.descriptors(of: pid, naming: script).isEmpty) }
        let (status, message) = try Self.run(script)
        #expect(status == 0, "\(message)")
    }
}
