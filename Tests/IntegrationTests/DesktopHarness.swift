#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// A real session bus for a test (Docs/Desktop.md): `dbus-daemon --session` listening on a socket
/// in a temp dir, whose XDG data home holds what `make install` installs, rewritten to the built
/// products: the provider's D-Bus service file (so the provider starts by D-Bus activation, from
/// the shipped file) and desktop files. `gdbus call` (GLib's client, which nobody on the project
/// wrote) is the client. With `uid`, the bus, the provider it activates and the client all run as
/// that user (`setpriv`), as IsolationTests do.
final class SessionBusHarness: @unchecked Sendable {
    static let providerName = "org.searchlight.Searchlight.SearchProvider"
    static let providerPath = "/org/searchlight/Searchlight/SearchProvider"
    static let krunnerPath = "/org/searchlight/Searchlight/KRunner"
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    static let missingTools: String? = {
        for tool in ["/usr/bin/dbus-daemon", "/usr/bin/gdbus", "/usr/bin/gio"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing (Debian: apt-get install dbus-daemon libglib2.0-bin; `make test` installs them)"
        }
        return nil
    }()

    let dir: TempDir
    let uid: UInt32?
    let busSocket: String
    let dataHome: String
    let configHome: String
    /// What the bus, and so the provider it starts, and the clients run with.
    let environment: [String: String]
    private var process: Process?
    private var notificationServer: FakeNotificationServer?

    /// `providerArguments`: appended to the provider's command in its service file;
    /// `environment` overrides: what the bus, the provider and the clients run with (`PATH`).
    ///
    /// The provider's query deadline is `contentDeadline` unless `providerArguments` sets one: its
    /// 1 s default is the shell's UI budget (answer empty rather than late), and a test of what the
    /// results hold is not a test of that budget. On the two cores a parallel debug suite shares,
    /// one query crosses gdbus, dbus-daemon, the provider and the daemon (four debug processes
    /// among dozens runnable): past 1 s there the provider answered empty and a check of the
    /// results saw none (StaleResultsTests, 3 of 4 runs beside ten other suites). Tests of the
    /// deadline itself pass `--query-timeout 1` (DesktopSearchTests `daemonDown`).
    static let contentDeadline = ["--query-timeout", "30"]

    init(daemonSocket: String, uid: UInt32? = nil, providerArguments: [String] = [], environment overrides: [String: String] = [:]) throws {
        let providerArguments = providerArguments.contains("--query-timeout") ? providerArguments : Self.contentDeadline + providerArguments
        if let missing = Self.missingTools { throw HarnessError(missing) }
        dir = TempDir("slbus")
        self.uid = uid
        busSocket = dir.path + "/bus"
        dataHome = dir.path + "/data"
        configHome = dir.path + "/config"
        let fm = FileManager.default
        for d in [dataHome + "/dbus-1/services", dataHome + "/applications", configHome, dir.path + "/share", dir.path + "/runtime"] {
            try fm.createDirectory(atPath: d, withIntermediateDirectories: true)
        }
        chmod(dir.path + "/runtime", 0o700)
        var env = ProcessInfo.processInfo.environment
        for key in ["DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "SEARCHLIGHT_SOCKET"] { env[key] = nil }
        env["XDG_DATA_HOME"] = dataHome
        env["XDG_CONFIG_HOME"] = configHome
        env["XDG_DATA_DIRS"] = dir.path + "/share"
        env["XDG_RUNTIME_DIR"] = dir.path + "/runtime"
        env["HOME"] = dir.path
        env["SEARCHLIGHT_SOCKET"] = daemonSocket
        env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=" + busSocket
        env.merge(overrides) { $1 }
        environment = env
        // The service file as shipped, its Exec at the built provider (what `make install` does with BINDIR).
        let shipped = try String(contentsOfFile: Self.repository + "/launchd-like-units/desktop/\(Self.providerName).service", encoding: .utf8)
        try shipped.replacingOccurrences(of: "/usr/local/bin/searchlight-desktop",
                                                        with: ([Products.path("searchlight-desktop")] + providerArguments).joined(separator: " "))
            .write(toFile: dataHome + "/dbus-1/services/\(Self.providerName).service", atomically: true, encoding: .utf8)
        if let uid {
            chmod(dir.path, 0o755)
            try chownTree(dir.path, uid)
        }
        try start()
    }

    deinit { stop() }

    /// The command prefix that runs a program as the harness's user.
    private func asUser(_ command: [String]) -> (String, [String]) {
        guard let uid else { return (command[0], Array(command.dropFirst())) }
        return ("/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--"] + command)
    }

    private func start() throws {
        let p = Process()
        let (exe, args) = asUser(["/usr/bin/dbus-daemon", "--session", "--nofork", "--address=unix:path=\(busSocket)", "--print-address=1"])
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        p.environment = environment
        let out = Pipe()
        p.standardOutput = out
        // The bus's log, and the provider's (an activated service writes to the bus's stderr).
        _ = FileManager.default.createFile(atPath: dir.path + "/bus.log", contents: nil)
        p.standardError = FileHandle(forWritingAtPath: dir.path + "/bus.log")
        try p.run()
        process = p
        // The address line is printed once the bus listens.
        let line = out.fileHandleForReading.availableData
        guard String(decoding: line, as: UTF8.self).hasPrefix("unix:") else {
            throw HarnessError("dbus-daemon did not start: \(busLog)")
        }
    }

    var busLog: String { (try? String(contentsOfFile: dir.path + "/bus.log", encoding: .utf8)) ?? "" }

    /// Lines in the bus's log so far (a mark for `answeredMilliseconds`).
    var busLogLines: Int { busLog.split(separator: "\n").count }

    /// The provider's own time for the last call it answered after line `after` of the bus's log,
    /// from receiving the call to its answer (`elapsed_ms` of its `--debug` lines "search answered"
    /// and "match answered"): what the Shell waits for, without the test's `gdbus` start.
    func answeredMilliseconds(_ message: String, after: Int) -> Double? {
        busLog.split(separator: "\n").dropFirst(after).last { $0.contains("searchlight-desktop: \(message)") }
            .flatMap { ExtensionBench.field("elapsed_ms", in: String($0)).flatMap(Double.init) }
    }

    /// Owns `org.freedesktop.Notifications` on this bus with a fake server that records what the
    /// user is told (stopped with the bus).
    func serveNotifications() throws -> FakeNotificationServer {
        if let notificationServer { return notificationServer }
        let server = try FakeNotificationServer(address: environment["DBUS_SESSION_BUS_ADDRESS"]!)
        notificationServer = server
        return server
    }

    /// Installs the Searchlight app as shipped (`searchlight.desktop`, `Terminal=true`), its Exec
    /// at the built provider (what `make install` does).
    func installSearchlightApp() throws {
        let shipped = try String(contentsOfFile: Self.repository + "/launchd-like-units/desktop/searchlight.desktop", encoding: .utf8)
        try shipped.replacingOccurrences(of: "/usr/local/bin/searchlight-desktop", with: Products.path("searchlight-desktop"))
            .write(toFile: dataHome + "/applications/searchlight.desktop", atomically: true, encoding: .utf8)
        if let uid { try chownTree(dir.path, uid) }
    }

    /// Stops the bus; the provider it started sees the connection go and exits (waited for).
    func stop() {
        notificationServer?.stop()
        guard let p = process else { return }
        process = nil
        let provider = providerPID()
        // SIGKILL: the bus has nothing to save, and it inherits this test process's blocked
        // signals (SIGTERM among them), so it would never see a SIGTERM.
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
        if let provider {
            let deadline = Date().addingTimeInterval(10)
            while kill(provider, 0) == 0, Date() < deadline { usleep(20_000) }
            if kill(provider, 0) == 0 { kill(provider, SIGKILL) }
        }
    }

    struct CallResult {
        var status: Int32
        var stdout: String
        var stderr: String
        var seconds: Double
        var ok: Bool { status == 0 }
    }

    /// `gdbus call` on the provider's name; `arguments` in GVariant text form.
    func call(_ path: String, _ method: String, _ arguments: [String], dest: String = providerName, timeout: Int = 25) throws -> CallResult {
        let (exe, args) = asUser(["/usr/bin/gdbus", "call", "--session", "--timeout", String(timeout), "--dest", dest,
                                  "--object-path", path, "--method", method] + arguments)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe)
        p.arguments = args
        p.environment = environment
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        let started = Date()
        try p.run()
        nonisolated(unsafe) var errData = Data()
        let group = DispatchGroup()
        group.enter()
        // A thread of its own, not Dispatch's pool (Swift's cooperative pool on Linux; see `runCLI`).
        Thread.detachNewThread {
            errData = err.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        p.waitUntilExit()
        return CallResult(status: p.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self), seconds: Date().timeIntervalSince(started))
    }

    func provider(_ method: String, _ arguments: [String] = []) throws -> CallResult {
        try call(Self.providerPath, "org.gnome.Shell.SearchProvider2." + method, arguments)
    }

    func krunner(_ method: String, _ arguments: [String] = []) throws -> CallResult {
        try call(Self.krunnerPath, "org.kde.krunner1." + method, arguments)
    }

    /// GetInitialResultSet's ids.
    func initialResults(_ terms: [String]) throws -> [String] {
        let r = try provider("GetInitialResultSet", [Self.stringArray(terms)])
        guard r.ok else { throw HarnessError("GetInitialResultSet failed: \(r.stderr)\n\(busLog)") }
        return Self.quotedStrings(r.stdout)
    }

    func nameHasOwner(_ name: String = providerName) throws -> Bool {
        let r = try call("/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", ["'\(name)'"], dest: "org.freedesktop.DBus")
        return r.stdout.contains("true")
    }

    func providerPID() -> pid_t? {
        guard let r = try? call("/org/freedesktop/DBus", "org.freedesktop.DBus.GetConnectionUnixProcessID", ["'\(Self.providerName)'"],
                                dest: "org.freedesktop.DBus", timeout: 5), r.ok else { return nil }
        // "(uint32 1234,)"
        guard let range = r.stdout.range(of: "uint32 ") else { return nil }
        return pid_t(String(r.stdout[range.upperBound...].prefix { $0.isNumber }))
    }

    /// A GVariant `as` literal.
    static func stringArray(_ list: [String]) -> String {
        "[" + list.map { "'" + $0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'") + "'" }
            .joined(separator: ", ") + "]"
    }

    /// The single-quoted strings of gdbus's output, in order (ids here have no quotes in them).
    static func quotedStrings(_ text: String) -> [String] {
        var out: [String] = []
        var current: String?
        var escaped = false
        for c in text {
            if var s = current {
                if escaped { s.append(c); escaped = false; current = s; continue }
                if c == "\\" { escaped = true; continue }
                if c == "'" { out.append(s); current = nil; continue }
                s.append(c)
                current = s
            } else if c == "'" {
                current = ""
            }
        }
        return out
    }

    /// Installs a desktop file whose Exec records its arguments, one per line, in `record`.
    /// Returns the record file's path.
    @discardableResult
    func installRecorder(_ desktopID: String, name: String = "Recorder", mimeTypes: [String] = []) throws -> String {
        let record = dir.path + "/\(desktopID).record"
        let script = dir.path + "/\(desktopID).sh"
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '\(record)'\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        var entry = "[Desktop Entry]\nType=Application\nName=\(name)\nIcon=accessories-text-editor\nExec=\(script) %u\n"
        if !mimeTypes.isEmpty { entry += "MimeType=\(mimeTypes.joined(separator: ";"));\n" }
        try entry.write(toFile: dataHome + "/applications/" + desktopID, atomically: true, encoding: .utf8)
        if let uid { try chownTree(dir.path, uid) }
        return record
    }

    /// Makes `desktopID` the default handler of `mimeType` (mimeapps.list, which gio open reads).
    func setDefaultHandler(_ mimeType: String, _ desktopID: String) throws {
        try "[Default Applications]\n\(mimeType)=\(desktopID)\n".write(toFile: configHome + "/mimeapps.list", atomically: true, encoding: .utf8)
        if let uid { try chownTree(dir.path, uid) }
    }

    /// Waits until the record file has `count` lines.
    func recorded(_ record: String, count: Int = 1, timeout: TimeInterval = 15) throws -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            let lines = ((try? String(contentsOfFile: record, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            if lines.count >= count { return lines }
            if Date() >= deadline { throw HarnessError("\(record) has \(lines.count) lines, not \(count), after \(timeout)s\n\(busLog)") }
            usleep(20_000)
        }
    }

    private func chownTree(_ path: String, _ uid: UInt32) throws {
        _ = lchown(path, uid, uid)
        for child in (FileManager.default.enumerator(atPath: path)?.allObjects as? [String]) ?? [] {
            _ = lchown(path + "/" + child, uid, uid)
        }
    }
}

/// Items for desktop tests, imported through the CLI (as root unless `asUID`).
func importItems(_ bundle: String, _ lines: [String], socket: String, asUID uid: UInt32? = nil, dir: TempDir) async throws {
    let file = dir.path + "/\(bundle)-\(UUID().uuidString.prefix(8)).jsonl"
    try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
    chmod(file, 0o644)
    let r: CLIResult
    if let uid {
        r = try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket,
                        "import", bundle, file], socket: nil, executable: "/usr/bin/setpriv")
    } else {
        r = try await runCLI(["import", bundle, file], socket: socket)
    }
    guard r.status == 0 else { throw HarnessError("import into \(bundle) failed: \(r.stderr)") }
}
