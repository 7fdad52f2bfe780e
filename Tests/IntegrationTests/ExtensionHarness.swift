#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// One `searchlight-test-extension` unit: what its unit file says, and the control directory that
/// steers the fake (`mode`) and records what it was asked (`received.jsonl`).
struct TestUnit: Sendable {
    var label: String
    var bundle: String
    /// The fake's mode at launch: ok, crash, hang, garbage, noack, nack, flood, exit-at-launch, slow, poison:ID.
    var mode = "ok"
    /// `IndexExtension.AcknowledgementTimeout`; nil keeps the default (60 s).
    var acknowledgementTimeout: Double?
    /// `TimeOut` (idle exit); nil keeps the default (60 s).
    var timeOut: Double?
    var exitTimeOut: Double = 2
    /// `UserName`: the user the extension runs as (the daemon must be root).
    var userName: String?
    /// `HardResourceLimits.NumberOfProcesses` (and the same soft limit).
    var processLimit: Int?
    /// Extra `EnvironmentVariables` (`TEST_EXTENSION_CONTROL` is always set).
    var environment: [String: String] = [:]
    /// `IndexExtension.IndexVersion`; nil keeps the default (1).
    var indexVersion: Int?
    /// `Program`; nil is the test extension.
    var program: String?
    /// `StandardOutPath` / `StandardErrorPath`.
    var standardOutPath: String?
    var standardErrorPath: String?
    /// `OpenWith`: the desktop file the bundle's items open with (desktop search).
    var openWith: String?
    /// `ContinuesSearch`: the `OpenWith` app continues the desktop's searches.
    var continuesSearch = false

    init(_ label: String, bundle: String, mode: String = "ok") {
        self.label = label
        self.bundle = bundle
        self.mode = mode
    }

    static var program: String { Products.path("searchlight-test-extension") }

    /// The unit file: launchd-style XML plist, launching the fake with no throttle between launches.
    func plist(control: String) -> String {
        var env = environment
        env["TEST_EXTENSION_CONTROL"] = control
        let variables = env.sorted { $0.key < $1.key }
            .map { "        <key>\(xml($0.key))</key><string>\(xml($0.value))</string>" }.joined(separator: "\n")
        var indexExtension = ""
        if let userName { indexExtension += "    <key>UserName</key><string>\(xml(userName))</string>\n" }
        if let standardOutPath { indexExtension += "    <key>StandardOutPath</key><string>\(xml(standardOutPath))</string>\n" }
        if let standardErrorPath { indexExtension += "    <key>StandardErrorPath</key><string>\(xml(standardErrorPath))</string>\n" }
        if let openWith { indexExtension += "    <key>OpenWith</key><string>\(xml(openWith))</string>\n" }
        if continuesSearch { indexExtension += "    <key>ContinuesSearch</key><true/>\n" }
        if let processLimit {
            for key in ["SoftResourceLimits", "HardResourceLimits"] {
                indexExtension += "    <key>\(key)</key><dict><key>NumberOfProcesses</key><integer>\(processLimit)</integer></dict>\n"
            }
        }
        var settings = ""
        if let acknowledgementTimeout { settings += "<key>AcknowledgementTimeout</key><real>\(acknowledgementTimeout)</real>" }
        if let indexVersion { settings += "<key>IndexVersion</key><integer>\(indexVersion)</integer>" }
        if !settings.isEmpty { indexExtension += "    <key>IndexExtension</key><dict>\(settings)</dict>\n" }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(xml(label))</string>
                <key>BundleIdentifier</key><string>\(xml(bundle))</string>
                <key>Program</key><string>\(xml(program ?? Self.program))</string>
                <key>ProcessType</key><string>Standard</string>
                <key>ThrottleInterval</key><integer>0</integer>
                <key>ExitTimeOut</key><real>\(exitTimeOut)</real>
            \(timeOut.map { "    <key>TimeOut</key><real>\($0)</real>\n" } ?? "")\(indexExtension)    <key>EnvironmentVariables</key>
                <dict>
            \(variables)
                </dict>
            </dict>
            </plist>

            """
    }

    private func xml(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}

/// The fake extension's control directory.
struct ExtensionControl: Sendable {
    let path: String

    /// One request the fake received.
    struct Received: Sendable {
        var kind: String
        var identifiers: [String]
        var mode: String?
        var pid: Int32
        var uid: UInt32
        var detail: JSONValue?
    }

    /// Read by the fake at launch and at every request.
    func setMode(_ mode: String) throws {
        try Data(mode.utf8).write(to: URL(fileURLWithPath: path + "/mode"))
        // Readable by an extension running as another user (a unit with UserName).
        chmod(path + "/mode", 0o644)
    }

    var received: [Received] {
        guard let text = try? String(contentsOfFile: path + "/received.jsonl", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard let v = try? JSONValue.parse(String(line)) else { return nil }
            return Received(kind: v["kind"]?.stringValue ?? "", identifiers: (v["detail"]?["identifiers"]?.arrayValue ?? []).compactMap(\.stringValue),
                mode: v["detail"]?["mode"]?.stringValue, pid: Int32(v["pid"]?.intValue ?? 0),
                uid: UInt32(v["uid"]?.intValue ?? 0), detail: v["detail"])
        }
    }
}

/// A real daemon whose unit directory holds test-extension units; every wait has a deadline.
final class ExtensionBench: @unchecked Sendable {
    let dir: TempDir
    let daemon: DaemonProcess
    var unitsDir: String { dir.path + "/units" }
    var socket: String { daemon.socket }

    /// Writes the units, then starts the daemon with a short backoff (off the cooperative pool:
    /// starting waits for the daemon's "ready" line).
    /// `shared`: the directory traversable and the control directories writable by every user,
    /// for units with a `UserName`.
    /// `launcher`: given the bench's directory, a command the daemon is started through.
    /// `prepare` runs on the directory before the daemon starts (e.g. to mount a file system on its `state`).
    static func start(_ units: [TestUnit], arguments: [String] = [], shared: Bool = false,
                      launcher: (@Sendable (String) -> [String])? = nil,
                      prepare: @Sendable (TempDir) throws -> Void = { _ in }) async throws -> ExtensionBench {
        let dir = TempDir("sle")
        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        try prepare(dir)
        for unit in units {
            let control = try write(unit, in: dir)
            if shared {
                chmod(control.path, 0o777)
            }
        }
        if shared { chmod(dir.path, 0o755) }
        let daemon = try await blocking {
            try DaemonProcess(arguments: ["--units-dir", dir.path + "/units", "--backoff", "0.2"] + arguments, dir: dir,
                              launcher: launcher?(dir.path) ?? [])
        }
        return ExtensionBench(dir: dir, daemon: daemon)
    }

    private init(dir: TempDir, daemon: DaemonProcess) {
        self.dir = dir
        self.daemon = daemon
    }

    deinit {
        // Signalled now; its graceful stop (extensions asked to exit) is waited for off the pool.
        if let pid = daemon.process?.processIdentifier { kill(pid, SIGTERM) }
        let daemon = self.daemon
        Thread.detachNewThread { daemon.stop(signal: SIGTERM) }
    }

    @discardableResult
    static func write(_ unit: TestUnit, in dir: TempDir) throws -> ExtensionControl {
        let control = ExtensionControl(path: dir.path + "/ctl-" + unit.label)
        try FileManager.default.createDirectory(atPath: control.path, withIntermediateDirectories: true)
        try control.setMode(unit.mode)
        try Data(unit.plist(control: control.path).utf8).write(to: URL(fileURLWithPath: dir.path + "/units/" + unit.label + ".plist"))
        return control
    }

    /// Adds (or rewrites) a unit file; the daemon sees it on SIGHUP or `admin.units`.
    @discardableResult
    func write(_ unit: TestUnit) throws -> ExtensionControl { try Self.write(unit, in: dir) }

    func control(_ label: String) -> ExtensionControl { ExtensionControl(path: dir.path + "/ctl-" + label) }

    /// Starts the fake extension by hand, as an author does under a debugger: no fd 3, so it
    /// attaches to the daemon under `label`. Its stderr goes to `manual-LABEL.err` in the bench.
    func startByHand(label: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: TestUnit.program)
        p.arguments = ["--label", label, "--socket", socket]
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("SEARCHLIGHT_") }
        env["TEST_EXTENSION_CONTROL"] = control(label).path
        p.environment = env
        let err = dir.path + "/manual-\(label).err"
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        p.standardError = FileHandle(forWritingAtPath: err)
        p.standardOutput = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    // MARK: - Talking to the daemon

    func admin(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        let connection = SearchlightConnection(role: .admin, socketPath: socket)
        let answer: Result<JSONValue, any Error>
        do { answer = .success(try await connection.call(method, params)) } catch { answer = .failure(error) }
        await connection.close()
        return try answer.get()
    }

    /// `admin.status`' entry for one extension.
    func extensionStatus(_ label: String) async throws -> JSONValue? {
        try await admin(Method.adminStatus)["extensions"]?.arrayValue?.first { $0["label"]?.stringValue == label }
    }

    /// `admin.requests`' journaled requests of one bundle.
    func requests(bundle: String) async throws -> [JSONValue] {
        (try await admin(Method.adminRequests)["requests"]?.arrayValue ?? []).filter { $0["bundle"]?.stringValue == bundle }
    }

    /// Runs the CLI against this daemon. Its output goes to files, and the wait is on a thread of
    /// its own: on Linux, Swift's tasks and Dispatch's global queues share one pool as wide as the
    /// machine, so a blocked pool thread can stall every test for the second Dispatch waits before
    /// adding a thread.
    func cli(_ arguments: [String]) async throws -> CLIResult {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Products.path("searchlight"))
        p.arguments = ["--socket", socket] + arguments
        p.environment = ProcessInfo.processInfo.environment.filter { $0.key != "SEARCHLIGHT_SOCKET" }
        let base = dir.path + "/cli-" + UUID().uuidString.prefix(8)
        for file in [".out", ".err"] { _ = FileManager.default.createFile(atPath: base + file, contents: nil) }
        p.standardOutput = FileHandle(forWritingAtPath: base + ".out")
        p.standardError = FileHandle(forWritingAtPath: base + ".err")
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return try await blocking {
            p.waitUntilExit()
            func text(_ file: String) -> String { (try? String(contentsOfFile: base + file, encoding: .utf8)) ?? "" }
            return CLIResult(status: p.terminationStatus, stdout: text(".out"), stderr: text(".err"))
        }
    }

    // MARK: - Waiting

    /// Where the log is now: later waits look only at lines after it.
    var mark: Int { daemon.log.count }

    /// The log lines after `after` that contain every one of `parts`.
    func lines(_ parts: String..., after: Int = 0) -> [String] { lines(parts, after: after) }

    func lines(_ parts: [String], after: Int) -> [String] {
        daemon.log.dropFirst(after).filter { line in parts.allSatisfy { line.contains($0) } }
    }

    /// Waits until `count` log lines after `after` contain every one of `parts`; returns them.
    @discardableResult
    func waitForLog(_ parts: String..., count: Int = 1, after: Int = 0, timeout: TimeInterval = 30) async throws -> [String] {
        var found: [String] = []
        try await until("\(count) log line(s) with \(parts)", timeout: timeout) {
            found = lines(parts, after: after)
            return found.count >= count
        }
        return found
    }

    /// Polls `condition` every 25 ms until it holds; fails with the log's tail after `timeout`.
    func until(_ what: String, timeout: TimeInterval = 30, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await !condition() {
            if Date() >= deadline {
                throw HarnessError("timed out after \(timeout)s waiting for \(what); log:\n" + daemon.log.suffix(40).joined(separator: "\n"))
            }
            try await Task.sleep(for: .milliseconds(25))
        }
    }

    /// Waits for the acknowledgement of the first request sent to `label` after `after`; returns its id.
    @discardableResult
    func waitForAcknowledgement(_ label: String, after: Int = 0, timeout: TimeInterval = 30) async throws -> String {
        let line = try await waitForLog("reindex request acknowledged", "label=\(label) ", after: after, timeout: timeout)[0]
        return Self.field("id", in: line) ?? ""
    }

    /// The value of `key=value` in a log line.
    static func field(_ key: String, in line: String) -> String? {
        guard let range = line.range(of: " \(key)=") else { return nil }
        let rest = line[range.upperBound...]
        if rest.hasPrefix("\"") { return String(rest.dropFirst().prefix { $0 != "\"" }) }
        return String(rest.prefix { $0 != " " })
    }

    /// The time stamp that starts a log line (ISO 8601 with milliseconds).
    static func time(of line: String) -> Date? {
        line.split(separator: " ").first.flatMap { ISO8601.parse(String($0)) }
    }
}

/// Runs blocking work (waiting for a process, a log line) on a thread of its own, never on the
/// pool that runs the tests' tasks (see `ExtensionBench.cli`).
func blocking<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
    }
}

/// The pids of the processes (and threads' leaders) whose real uid is `uid`, from /proc.
///
/// A task being released (state `X (dead)`) is left out: the kernel stops counting it against
/// RLIMIT_NPROC before it leaves /proc, so a fork may already have taken its place (seen: 49
/// processes of a user limited to 48). Zombies still count, and are counted.
func processes(ofUser uid: UInt32) -> [Int32] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap(Int32.init).filter { pid in
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return false }
        let lines = status.split(separator: "\n")
        guard let line = lines.first(where: { $0.hasPrefix("Uid:") }) else { return false }
        if lines.first(where: { $0.hasPrefix("State:") })?.contains("X (dead)") == true { return false }
        return line.split(whereSeparator: { $0 == "\t" || $0 == " " }).dropFirst().first.flatMap { UInt32($0) } == uid
    }
}

/// `prefix-` and 8 hex digits of this build's products folder (FNV-1a): a test user no other
/// checkout's concurrent test run uses.
func buildUserName(_ prefix: String) -> String {
    var hash: UInt32 = 2_166_136_261
    for byte in Products.directory.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
    return prefix + "-" + String(format: "%08x", hash)
}

/// A system user for the isolation tests, created with `useradd` if missing (idempotent); nil
/// when it cannot be (not root, no useradd).
func testUser(_ name: String) -> UInt32? {
    if let pw = getpwnam(name) { return pw.pointee.pw_uid }
    guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/sbin/useradd") else { return nil }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/sbin/useradd")
    p.arguments = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    guard (try? p.run()) != nil else { return nil }
    p.waitUntilExit()
    // Another test process may have created it at the same moment: look again either way.
    return getpwnam(name).map { $0.pointee.pw_uid }
}

/// Whether a process exists (not yet reaped counts as existing).
func processExists(_ pid: Int32) -> Bool { kill(pid, 0) == 0 || errno == EPERM }
