import Foundation
import SearchlightKit
import Testing
import TestThreads

/// The CLI half of index extensions (`reindex`, `units`, `requests`, `monitor`, `mdutil -cr`),
/// in what it decides on its own: argument errors, offline unit checks, an absent daemon.
/// Build first: `swift build` builds `searchlight`; `swift test` does not.
@Suite(.onOwnThreads)
struct CLIExtensionTests {
    /// A socket path where no daemon listens: the commands below must not need one.
    static let nowhere = "/nonexistent/searchlightd.sock"

    static func unitFile(label: String, bundle: String?, disabled: Bool = false) -> String {
        """
        <?xml version="1.0" encoding="UTF-8"?>
        <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
        <plist version="1.0">
        <dict>
            <key>Label</key><string>\(label)</string>
        \(bundle.map { "    <key>BundleIdentifier</key><string>\($0)</string>" } ?? "")
            <key>Program</key><string>/bin/true</string>
        \(disabled ? "    <key>Disabled</key><true/>" : "")
        </dict>
        </plist>

        """
    }

    /// Writes a unit file named `<label>.plist` into `dir` and returns its path.
    func writeUnit(_ dir: TempDir, label: String, bundle: String?) throws -> String {
        let path = dir.path + "/" + label + ".plist"
        try Self.unitFile(label: label, bundle: bundle).write(toFile: path, atomically: false, encoding: .utf8)
        return path
    }

    // MARK: - reindex arguments

    @Test("reindex without a target, without a selection or with two selections is a usage error")
    func reindexUsage() async throws {
        let cases: [([String], String)] = [
            (["reindex"], "missing LABEL|BUNDLE"),
            (["reindex", "org.example.notes"], "say what to rebuild"),
            (["reindex", "org.example.notes", "--all", "--identifiers", "a"], "give only one of"),
            (["reindex", "org.example.notes", "--identifiers"], "--identifiers needs at least one value"),
            (["reindex", "org.example.notes", "a", "--all"], "unexpected argument 'a'"),
        ]
        for (args, message) in cases {
            let r = try await runCLI(args, socket: Self.nowhere)
            #expect(r.status == 2, "\(args): \(r.stderr)")
            #expect(r.stderr.contains(message), "\(args): \(r.stderr)")
            #expect(r.stderr.contains("Usage: searchlight reindex"), "\(args)")
        }
    }

    @Test("reindex --timeout must be a number of seconds up to a week (1e308 once trapped in Duration), and means nothing with --no-wait")
    func reindexTimeoutUsage() async throws {
        for value in ["0", "abc", "-3", "inf", "1e308", "1e-320", "604801"] {
            let r = try await runCLI(["reindex", "org.example.notes", "--all", "--timeout=\(value)"], socket: Self.nowhere)
            #expect(r.status == 2, "\(value): \(r.stderr)")
            #expect(r.stderr.contains("--timeout must be a number of seconds from 0.001 to 604800"), "\(value): \(r.stderr)")
        }
        let r = try await runCLI(["reindex", "org.example.notes", "--all", "--no-wait", "--timeout", "5"], socket: Self.nowhere)
        #expect(r.status == 2)
        #expect(r.stderr.contains("it does nothing with --no-wait"), "\(r.stderr)")
    }

    @Test("reindex --identifiers-from an empty file fails before asking the daemon")
    func reindexEmptyIdentifierFile() async throws {
        let dir = TempDir()
        let file = dir.path + "/ids.txt"
        try "\n  \n".write(toFile: file, atomically: false, encoding: .utf8)
        let r = try await runCLI(["reindex", "org.example.notes", "--identifiers-from", file], socket: Self.nowhere)
        #expect(r.status == 1)
        #expect(r.stderr.contains("has no identifiers; put one per line"), "\(r.stderr)")
    }

    @Test("extension commands exit 3 when no daemon listens")
    func unreachable() async throws {
        for args in [["reindex", "org.example.notes", "--all"], ["reindex", "x", "--identifiers", "a", "--no-wait"],
                     ["units"], ["requests"], ["monitor"]] {
            let r = try await runCLI(args, socket: Self.nowhere)
            #expect(r.status == 3, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("cannot reach searchlightd"), "\(args): \(r.stderr)")
        }
    }

    // MARK: - units --verify

    @Test("units --verify accepts a good unit file without the daemon")
    func verifyGoodUnit() async throws {
        let dir = TempDir()
        let file = try writeUnit(dir, label: "org.example.ok", bundle: "org.example.notes")
        let r = try await runCLI(["units", "--verify", file], socket: Self.nowhere)
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout == "\(file): ok (org.example.ok for org.example.notes)\n")
    }

    @Test("units --verify names the file, the key and the fix of a bad unit, checks the others, and exits 1")
    func verifyBadUnit() async throws {
        let dir = TempDir()
        let good = try writeUnit(dir, label: "org.example.ok", bundle: "org.example.notes")
        let bad = try writeUnit(dir, label: "org.example.bad", bundle: nil)
        let r = try await runCLI(["units", "--verify", bad, good], socket: Self.nowhere)
        #expect(r.status == 1)
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2, "\(r.stdout)")
        #expect(lines.first?.hasPrefix("\(bad): key BundleIdentifier: ") == true, "\(r.stdout)")
        #expect(lines.first?.contains("<key>BundleIdentifier</key>") == true, "the fix is named: \(r.stdout)")
        #expect(lines.last == "\(good): ok (org.example.ok for org.example.notes)")
        #expect(r.stderr.contains("1 of 2 unit files have problems"), "\(r.stderr)")
    }

    @Test("units --verify of a missing file says it cannot be opened")
    func verifyMissingUnit() async throws {
        let dir = TempDir()
        let r = try await runCLI(["units", "--verify", dir.path + "/org.example.absent.plist"], socket: Self.nowhere)
        #expect(r.status == 1)
        #expect(r.stdout.contains("org.example.absent.plist"), "\(r.stdout)")
    }

    @Test("units --verify --json prints one object per file")
    func verifyJSON() async throws {
        let dir = TempDir()
        let good = try writeUnit(dir, label: "org.example.ok", bundle: "org.example.notes")
        let bad = try writeUnit(dir, label: "org.example.bad", bundle: nil)
        let r = try await runCLI(["units", "--verify", good, bad, "--json"], socket: Self.nowhere)
        #expect(r.status == 1)
        let objects = try r.stdout.split(separator: "\n").map { try JSONValue.parse(String($0)) }
        #expect(objects.count == 2)
        #expect(objects.first?["ok"]?.boolValue == true)
        #expect(objects.first?["label"]?.stringValue == "org.example.ok")
        #expect(objects.first?["bundleIdentifier"]?.stringValue == "org.example.notes")
        #expect(objects.last?["ok"]?.boolValue == false)
        #expect(objects.last?["key"]?.stringValue == "BundleIdentifier")
        #expect(objects.last?["fix"]?.stringValue?.isEmpty == false)
    }

    // MARK: - against a daemon without a working extension

    /// A daemon whose unit directory holds a disabled unit and a refused one.
    func daemonWithUnits() throws -> (DaemonProcess, units: String) {
        let dir = TempDir()
        let units = dir.path + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: false)
        let disabled = Self.unitFile(label: "org.example.off", bundle: "org.example.notes", disabled: true)
        try disabled.write(toFile: units + "/org.example.off.plist", atomically: false, encoding: .utf8)
        try Self.unitFile(label: "org.example.bad", bundle: nil)
            .write(toFile: units + "/org.example.bad.plist", atomically: false, encoding: .utf8)
        return (try DaemonProcess(arguments: ["--units-dir", units], dir: dir), units)
    }

    /// A new (disabled) unit, loaded by `units`: an event that needs no extension process.
    func addUnitAndReload(_ daemon: DaemonProcess, _ units: String) async throws {
        let unit = Self.unitFile(label: "org.example.more", bundle: "org.example.more", disabled: true)
        try unit.write(toFile: units + "/org.example.more.plist", atomically: false, encoding: .utf8)
        let r = try await runCLI(["units"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
    }

    @Test("reindex of a target no unit serves exits 1 with unknownExtension")
    func reindexUnknownTarget() async throws {
        let (daemon, _) = try daemonWithUnits()
        for args in [["reindex", "org.example.nobody", "--all"], ["reindex", "org.example.nobody", "--identifiers", "a", "--no-wait"]] {
            let r = try await runCLI(args, socket: daemon.socket)
            #expect(r.status == 1, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("(unknownExtension)"), "\(args): \(r.stderr)")
            #expect(r.stdout.isEmpty)
        }
    }

    @Test("units lists each unit with its state, then each refused file with its key")
    func unitsTable() async throws {
        let (daemon, units) = try daemonWithUnits()
        let r = try await runCLI(["units"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "units from \(units)")
        #expect(lines.contains { $0.hasPrefix("LABEL") && $0.contains("BUNDLE") && $0.contains("STATE") && $0.contains("CRASHES") })
        #expect(lines.contains { $0.hasPrefix("org.example.off") && $0.contains("org.example.notes") && $0.contains("disabled") })
        #expect(lines.contains { $0.hasPrefix(units + "/org.example.bad.plist: BundleIdentifier: ") }, "\(r.stdout)")

        let json = try JSONValue.parse(try await runCLI(["units", "--json"], socket: daemon.socket).stdout)
        #expect(json["units"]?.arrayValue?.first?["label"]?.stringValue == "org.example.off")
        #expect(json["problems"]?.arrayValue?.first?["key"]?.stringValue == "BundleIdentifier")
    }

    @Test("status adds the extensions and the request counts; requests says when the journal is empty")
    func statusAndRequests() async throws {
        let (daemon, _) = try daemonWithUnits()
        let status = try await runCLI(["status"], socket: daemon.socket)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("reindex requests: 0 pending, 0 running, 0 failed, 0 poisoned identifiers"), "\(status.stdout)")

        let requests = try await runCLI(["requests"], socket: daemon.socket)
        #expect(requests.status == 0, "\(requests.stderr)")
        #expect(requests.stdout == "no reindex requests are journaled\n")
        let json = try JSONValue.parse(try await runCLI(["requests", "--json"], socket: daemon.socket).stdout)
        #expect(json["requests"]?.arrayValue?.isEmpty == true)
        #expect(json["poisoned"]?.arrayValue?.isEmpty == true)
    }

    @Test("monitor prints one line per event and exits 0 on SIGINT")
    func monitorUntilInterrupted() async throws {
        let (daemon, units) = try daemonWithUnits()
        let monitor = try BackgroundCLI(["monitor"], socket: daemon.socket)
        try monitor.waitForStderr("press Ctrl-C to stop")
        try await addUnitAndReload(daemon, units)
        let line = try monitor.waitForStdout("units.reloaded")
        #expect(line.range(of: #"^\d\d:\d\d:\d\d units\.reloaded "#, options: .regularExpression) != nil, "\(line)")
        #expect(line.contains("problems=1"), "\(line)")
        #expect(monitor.interruptAndWait() == 0)
    }

    @Test("monitor --json prints each event as a JSON object, and exits 3 when the daemon goes away")
    func monitorDaemonGone() async throws {
        let (daemon, units) = try daemonWithUnits()
        let monitor = try BackgroundCLI(["monitor", "--json"], socket: daemon.socket)
        try monitor.waitForStderr("press Ctrl-C to stop")
        try await addUnitAndReload(daemon, units)
        let event = try JSONValue.parse(try monitor.waitForStdout("units.reloaded"))
        #expect(event["event"]?.stringValue == "units.reloaded")
        #expect(event["time"]?.stringValue.flatMap(ISO8601.parse) != nil)
        await daemon.stop()
        #expect(monitor.wait() == 3)
        #expect(monitor.stderr.contains("searchlightd went away"), "\(monitor.stderr)")
    }

    // MARK: - mdutil -cr

    @Test("mdutil -cr LABEL is reindex --all; it takes one label, and global options may follow it")
    func mdutilReindex() async throws {
        let links = TempDir()
        let mdutil = links.path + "/mdutil"
        try FileManager.default.createSymbolicLink(atPath: mdutil, withDestinationPath: Products.path("searchlight"))

        let missing = try await runCLI(["-cr"], socket: Self.nowhere, executable: mdutil)
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("-cr takes one LABEL or BUNDLE"), "\(missing.stderr)")
        #expect(missing.stderr.contains("Usage: mdutil"))

        // Translated and sent: it gets as far as the (absent) daemon.
        let sent = try await runCLI(["-cr", "org.example.notes-indexer", "--json"], socket: Self.nowhere, executable: mdutil)
        #expect(sent.status == 3, "\(sent.stderr)")
        #expect(sent.stderr.contains("cannot reach searchlightd"), "\(sent.stderr)")
    }
}

/// A `searchlight` process left running (for `monitor`), whose output is read as it comes.
final class BackgroundCLI: @unchecked Sendable {
    private let process = Process()
    private let lock = NSCondition()
    private var out = "", err = ""
    private var open = 2

    init(_ arguments: [String], socket: String) throws {
        process.executableURL = URL(fileURLWithPath: Products.path("searchlight"))
        process.arguments = ["--socket", socket] + arguments
        process.standardInput = FileHandle.nullDevice
        let outPipe = Pipe(), errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = errPipe
        try process.run()
        read(outPipe.fileHandleForReading) { $0.out += $1 }
        read(errPipe.fileHandleForReading) { $0.err += $1 }
    }

    deinit {
        if process.isRunning { process.terminate() }
    }

    var stderr: String { lock.withLock { err } }

    private func read(_ handle: FileHandle, into append: @escaping @Sendable (BackgroundCLI, String) -> Void) {
        Thread.detachNewThread { [self] in
            while true {
                let chunk = handle.availableData
                lock.withLock {
                    if chunk.isEmpty { open -= 1 } else { append(self, String(decoding: chunk, as: UTF8.self)) }
                    lock.broadcast()
                }
                if chunk.isEmpty { return }
            }
        }
    }

    /// Waits for a whole line of stdout containing `text`, and returns it.
    @discardableResult
    func waitForStdout(_ text: String, timeout: TimeInterval = 30) throws -> String {
        try waitFor(timeout, "stdout line containing \"\(text)\"") {
            $0.out.split(separator: "\n").first { $0.contains(text) }.map(String.init)
        }
    }

    func waitForStderr(_ text: String, timeout: TimeInterval = 30) throws {
        _ = try waitFor(timeout, "stderr containing \"\(text)\"") { $0.err.contains(text) ? "" : nil }
    }

    private func waitFor(_ timeout: TimeInterval, _ what: String, _ found: (BackgroundCLI) -> String?) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while true {
            if let hit = found(self) { return hit }
            if open == 0 || !lock.wait(until: deadline) {
                throw HarnessError("no \(what) within \(timeout)s; stdout: \(out) stderr: \(err)")
            }
        }
    }

    /// Sends SIGINT and returns the exit status.
    func interruptAndWait() -> Int32 {
        process.interrupt()
        return wait()
    }

    /// Waits for the process and for the end of its output; returns the exit status.
    func wait() -> Int32 {
        process.waitUntilExit()
        lock.withLock { while open > 0 { lock.wait() } }
        return process.terminationStatus
    }
}
