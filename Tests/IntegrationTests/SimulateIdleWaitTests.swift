#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// `searchlight simulate idle` against the real daemon and the real model (issue 30 item 4): the
/// run is long (the transformer refines every item on one background thread), so what the CLI
/// does while it runs can be seen. Every wait is on an event: a line the CLI printed, the
/// daemon's `maintenance.finished` event, the process's exit.
@Suite("simulate idle: waiting, progress, --no-wait and Ctrl-C", .onOwnThreads)
struct SimulateIdleWaitTests {
    /// Enough for the refinement to take seconds on any machine this runs on (one thread at
    /// nice 10), so that progress lines are drawn (at most one a second off a terminal).
    static let itemCount = 300

    /// A daemon with the model, whose idle trigger does not start on its own, and `bundle` filled.
    static func daemon(_ bundle: String, dir: TempDir) async throws -> DaemonProcess? {
        guard let model = SemanticSearchTests.transformerModel else { return nil }
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--idle-after", "86400",
            "--maintenance-interval", "86400"], dir: dir)
        try await SemanticSearchTests.importItems(RefinementIntegrationTests.items(count: itemCount), bundle: bundle, daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        return daemon
    }

    @Test("simulate idle waits for the whole run, shows the index it is on and the refinement's progress, runs at background priority, and ends with the summary")
    func waitsWithProgress() async throws {
        let dir = TempDir()
        let bundle = "com.example.idlewait"
        guard let daemon = try await Self.daemon(bundle, dir: dir) else { return }
        let cli = try await WatchedCLI.start(["simulate", "idle", bundle], socket: daemon.socket, dir: dir)
        // A refinement progress line: the run is under way, and the client is told so.
        let line = try await cli.waitForStderr("refining \(bundle)/_default: ")
        #expect(line.contains("items"), "\(line)")
        // The run is on the maintenance's own thread at nice 10, as the idle trigger's run: not on
        // the client's connection thread at the normal priority.
        let pid = try #require(daemon.process?.processIdentifier)
        let threads = threadNiceValues(pid: pid)
        #expect(threads.contains { $0.name == "maintenance" && $0.nice == 10 }, "\(threads)")
        #expect(!threads.contains { $0.name.hasPrefix("client-") && $0.nice != 0 }, "\(threads)")

        let r = try await cli.finish()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("maintaining \(bundle)/_default (1 of 1)"), "\(r.stderr)")
        #expect(r.stdout.contains("maintenance (simulate): 1 indexes"), "\(r.stdout)")
        // Summary printed after the run: every item refined by then.
        let refined = try await RefinementIntegrationTests.refined(daemon)
        #expect(refined.refined == Self.itemCount, "\(refined)")
    }

    @Test("simulate idle --no-wait returns once the daemon accepted the run, which completes later")
    func noWait() async throws {
        let dir = TempDir()
        let bundle = "com.example.nowait"
        guard let daemon = try await Self.daemon(bundle, dir: dir) else { return }
        let events = try await MonitoredEvents(daemon)
        let r = try await runCLI(["simulate", "idle", bundle, "--no-wait"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("maintenance of \(bundle) started"), "\(r.stdout)")
        // Answered before the run ended (refining the items takes seconds; the answer does not wait).
        #expect(!events.seen("maintenance.finished"), "the CLI returned only after the run")
        let finished = try await events.wait(for: "maintenance.finished", timeout: 600)
        #expect(finished["trigger"]?.stringValue == "simulate" && finished["refined"]?.intValue == Self.itemCount, "\(finished)")
        #expect(try await RefinementIntegrationTests.refined(daemon).refined == Self.itemCount)
        await events.close()
    }

    @Test("Ctrl-C on a waiting simulate idle stops the wait (exit 130); the daemon's run goes on to its end")
    func interruptStopsWaitingOnly() async throws {
        let dir = TempDir()
        let bundle = "com.example.idleint"
        guard let daemon = try await Self.daemon(bundle, dir: dir) else { return }
        let events = try await MonitoredEvents(daemon)
        let cli = try await WatchedCLI.start(["simulate", "idle", bundle], socket: daemon.socket, dir: dir)
        _ = try await cli.waitForStderr("maintaining \(bundle)/_default")
        kill(cli.pid, SIGINT)
        let r = try await cli.finish()
        #expect(r.status == 130, "\(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("stopped waiting; the maintenance run goes on"), "\(r.stderr)")
        #expect(!events.seen("maintenance.finished"), "the run ended before the interrupt; the test proves nothing")
        let finished = try await events.wait(for: "maintenance.finished", timeout: 600)
        #expect(finished["refined"]?.intValue == Self.itemCount, "\(finished)")
        await events.close()
    }
}

/// The CLI started in the background, its stdout and stderr in files read while it runs.
struct WatchedCLI: Sendable {
    let pid: Int32
    let process: Process
    let out: String
    let err: String

    static func start(_ arguments: [String], socket: String, dir: TempDir) async throws -> WatchedCLI {
        let tag = UUID().uuidString.prefix(8)
        let out = dir.path + "/cli-\(tag).out", err = dir.path + "/cli-\(tag).err"
        return try await blocking {
            _ = FileManager.default.createFile(atPath: out, contents: nil)
            _ = FileManager.default.createFile(atPath: err, contents: nil)
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Products.path("searchlight"))
            p.arguments = ["--socket", socket] + arguments
            var env = ProcessInfo.processInfo.environment
            env.removeValue(forKey: "SEARCHLIGHT_SOCKET")
            p.environment = env
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = FileHandle(forWritingAtPath: out)
            p.standardError = FileHandle(forWritingAtPath: err)
            try p.run()
            return WatchedCLI(pid: p.processIdentifier, process: p, out: out, err: err)
        }
    }

    var stderr: String { (try? String(contentsOfFile: err, encoding: .utf8)) ?? "" }

    /// The first stderr line holding `text`, once the CLI printed it.
    func waitForStderr(_ text: String, timeout: TimeInterval = 300) async throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let line = stderr.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            guard process.isRunning else { throw HarnessError("the CLI exited (\(process.terminationStatus)) without printing \"\(text)\":\n\(stderr)") }
            guard Date() < deadline else { throw HarnessError("no \"\(text)\" within \(Int(timeout)) s:\n\(stderr)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Waits for the exit (on a thread of its own) and returns what it printed.
    func finish() async throws -> CLIResult {
        let p = process
        try await blocking { p.waitUntilExit() }
        return CLIResult(status: p.terminationStatus, stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "", stderr: stderr)
    }
}

/// The daemon's `admin.monitor` events, collected as they come.
final class MonitoredEvents: Sendable {
    private final class Received: Sendable {
        let events = Mutex<[JSONValue]>([])
    }
    private let connection: SearchlightConnection
    private let box = Received()

    init(_ daemon: DaemonProcess) async throws {
        let box = self.box
        connection = SearchlightConnection(role: .admin, socketPath: daemon.socket) { method, params in
            guard method == Method.adminEvent else { return }
            box.events.withLock { $0.append(params) }
        }
        _ = try await connection.call(Method.adminMonitor)
    }

    func seen(_ event: String) -> Bool { box.events.withLock { $0.contains { $0["event"]?.stringValue == event } } }

    /// The first `event` received, once it is.
    func wait(for event: String, timeout: TimeInterval) async throws -> JSONValue {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let e = box.events.withLock({ $0.first { $0["event"]?.stringValue == event } }) { return e }
            guard Date() < deadline else { throw HarnessError("no \(event) event within \(Int(timeout)) s") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    func close() async { await connection.close() }
}
