#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// A test-client process (`searchlight-test-client MODE`) run as another uid through `setpriv`,
/// whose first line of output is its report.
final class UIDClient: @unchecked Sendable {
    let process = Process()
    private let input = Pipe(), output = Pipe()
    /// The client's first line (`key=value …`).
    let report: String

    init(as uid: UInt32, _ mode: String, socket: String, count: Int, bundle: String) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight-test-client"),
            mode, socket, String(count), bundle]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data([0x0A]) { break }
            line.append(byte)
        }
        report = String(decoding: line, as: UTF8.self)
    }

    /// `key=value` of the report, as a number.
    func value(_ key: String) -> Int? {
        for field in report.split(separator: " ") where field.hasPrefix(key + "=") { return Int(field.dropFirst(key.count + 1)) }
        return nil
    }

    /// Closes the client's stdin (a flood reports and exits, its sockets closed by the kernel),
    /// waits for it and returns the line it printed then, if any.
    @discardableResult
    func finish() -> String {
        try? input.fileHandleForWriting.close()
        let rest = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: rest, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `key=value` of a report line, as a number.
    static func value(_ key: String, in line: String) -> Int? {
        for field in line.split(separator: " ") where field.hasPrefix(key + "=") { return Int(field.dropFirst(key.count + 1)) }
        return nil
    }

    deinit {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }
}

/// CPU seconds (user + system) a process has used so far, from /proc/PID/stat.
func cpuSeconds(pid: Int32) -> Double? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return nil }
    // After "pid (comm)": state is field 3, utime 14, stime 15.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Issue 29, D2: one uid flooding `query.user` with long CJK texts after `query.prepare` (the
/// transformer loaded) neither starves another uid's queries nor leaves the daemon computing for
/// nobody once its connections close. Real uids (`setpriv`), a real system-mode daemon.
@Suite("One user's semantic queries do not starve another's", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct QueryFairnessTests {
    func cli(as uid: UInt32, _ arguments: [String], socket: String) async throws -> CLIResult {
        try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket] + arguments,
            socket: nil, executable: "/usr/bin/setpriv")
    }

    @Test("during a flood of 60 KB CJK queries on 32 connections, another uid's one-word query is answered; when the flood leaves, the CPU drops")
    func floodDoesNotStarve() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }  // says SKIPPED and why
        let dir = TempDir()
        chmod(dir.path, 0o755)
        // A 2 s query limit: the flood's 64 queued embeddings (about 0.2 s of CPU each) outlast it.
        let daemon = try await DaemonProcess(arguments: ["--system", "--model-dir", model, "--query-timeout", "2"], dir: dir)
        let pid = try #require(daemon.process?.processIdentifier)
        try await SemanticSearchTests.importItems(SemanticSearchTests.items, bundle: "com.bob.apps", daemon: daemon, dir: dir) {
            try await cli(as: IsolationTests.bob, $0, socket: daemon.socket)
        }
        try await SemanticSearchTests.importItems(Array(SemanticSearchTests.items.prefix(1)), bundle: "com.alice.flood", daemon: daemon, dir: dir) {
            try await cli(as: IsolationTests.alice, $0, socket: daemon.socket)
        }
        let flood = try await blocking {
            try UIDClient(as: IsolationTests.alice, "flood", socket: daemon.socket, count: 32, bundle: "com.alice.flood")
        }
        #expect(flood.value("flooding") == 32, "\(flood.report)")
        // While it floods, the attacker's uid holds one compute thread: the daemon uses about one
        // core, not every core (before: 1.9 of 2 cores, 32 threads in the transformer at once).
        if ProcessInfo.processInfo.activeProcessorCount >= 2 {
            let before = try #require(cpuSeconds(pid: pid))
            try await Task.sleep(for: .seconds(3))
            let during = (try #require(cpuSeconds(pid: pid)) - before) / 3
            print("daemon CPU during the flood: \(String(format: "%.2f", during)) cores")
            #expect(during < 1.5, "one uid's flood takes \(during) cores")
        }
        // The victim's queries, one after the other, during the flood (each waited for 30 s at most:
        // before the fix none was answered in 60 s, and none was cancelled at the 10 s deadline).
        let victim = try await blocking {
            try UIDClient(as: IsolationTests.bob, "ask", socket: daemon.socket, count: 10, bundle: "com.bob.apps")
        }
        print("victim during the flood: \(victim.report)")
        #expect(victim.value("answered") == 10, "\(victim.report)")
        // The flood still ran while the victim asked: its client is alive and its queries queue.
        #expect(flood.process.isRunning)

        let tally = flood.finish()
        print("attacker's answers: \(tally)")
        // Its queries past the 2 s limit, waiting behind its own, answered `cancelled` (before:
        // none: the embedding ran outside the query's budget, however long it waited).
        #expect((UIDClient.value("cancelled", in: tally) ?? 0) > 0, "\(tally)")
        // The attacker's sockets are closed: its queued embeddings are withdrawn and the running
        // one stops at its next layer, so the daemon stops burning CPU. Waited for: a 2 s window
        // under a third of a core, within 30 s (before the fix: 200 % for minutes).
        let left = Date()
        var window: Double = .infinity
        while Date().timeIntervalSince(left) < 30 {
            let before = try #require(cpuSeconds(pid: pid))
            try await Task.sleep(for: .seconds(2))
            let after = try #require(cpuSeconds(pid: pid))
            window = (after - before) / 2
            if window < 0.33 { break }
        }
        print("daemon CPU after the flood left: \(String(format: "%.2f", window)) cores, \(String(format: "%.1f", Date().timeIntervalSince(left))) s after")
        #expect(window < 0.33, "the daemon still uses \(window) cores 30 s after the attacker left")
        // And 10 s after the attacker left (the figure of issue 29's closing note).
        let wait = 10 - Date().timeIntervalSince(left)
        if wait > 0 { try await Task.sleep(for: .seconds(wait)) }
        let before = try #require(cpuSeconds(pid: pid))
        try await Task.sleep(for: .seconds(2))
        let tenAfter = (try #require(cpuSeconds(pid: pid)) - before) / 2
        print("daemon CPU 10 s after the flood left: \(String(format: "%.3f", tenAfter)) cores")
        #expect(tenAfter < 0.33)
        // The victim's queries still work.
        let again = try await blocking {
            try UIDClient(as: IsolationTests.bob, "ask", socket: daemon.socket, count: 3, bundle: "com.bob.apps")
        }
        #expect(again.value("answered") == 3, "\(again.report)")
        try HostileClientTests.expectHealthy(daemon)
    }
}
