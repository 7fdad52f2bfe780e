#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// Where the built executables are: next to the test bundle (`.build/<config>/`).
enum Products {
    static let directory: String = {
        if let dir = ProcessInfo.processInfo.environment["SEARCHLIGHT_PRODUCTS"] { return dir }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (exe as NSString).deletingLastPathComponent
    }()
    static func path(_ name: String) -> String { directory + "/" + name }
    /// The shared Debian corpus (DESIGN §9), if present.
    static let corpus: String? = {
        let candidates = [ProcessInfo.processInfo.environment["SEARCHLIGHT_CORPUS"], "../shared/corpus/debian-packages.jsonl.gz"]
            .compactMap { $0 }
        return candidates.first { FileManager.default.fileExists(atPath: $0) }
    }()
}

/// A temporary directory removed when the value goes away.
final class TempDir: @unchecked Sendable {
    let path: String
    init(_ prefix: String = "sl") {
        // Short: socket paths are limited to 107 bytes.
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Reads `handle` on a thread of its own until its end, handing each whole line (without its
/// newline) to `line`, which returns false to stop reading; then calls `done`. The log readers
/// of the daemon and of the sample processes the tests run.
func readLines(_ handle: FileHandle, done: @escaping @Sendable () -> Void = {}, _ line: @escaping @Sendable (String) -> Bool) {
    Thread.detachNewThread {
        defer { done() }
        var pending = Data()
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty { return }
            pending.append(chunk)
            while let nl = pending.firstIndex(of: 0x0A) {
                let text = String(decoding: pending[pending.startIndex..<nl], as: UTF8.self)
                pending = Data(pending[(nl + 1)...])
                guard line(text) else { return }
            }
        }
    }
}

/// A real `searchlightd` process on a temp socket and state directory.
final class DaemonProcess: @unchecked Sendable {
    let dir: TempDir
    let socket: String
    let stateDir: String
    let extraArguments: [String]
    /// A command the daemon is started through (e.g. `setpriv … --`), its path appended last.
    let launcher: [String]
    /// Variables added to the daemon's environment (and so to its extensions').
    let environment: [String: String]
    private(set) var process: Process?
    private let lock = NSCondition()
    private var logLines: [String] = []
    private var logDrained: DispatchSemaphore?

    private init(arguments: [String], dir: TempDir, launcher: [String], environment: [String: String], starting: ()) {
        self.dir = dir
        socket = dir.path + "/d.sock"
        stateDir = dir.path + "/state"
        extraArguments = arguments
        self.launcher = launcher
        self.environment = environment
    }

    /// Starts the daemon and waits until it is ready, from an async test: the wait is on a thread
    /// of its own (`blocking`), not one of the pool's (see `runCLI`).
    convenience init(arguments: [String] = [], dir: TempDir = TempDir(), launcher: [String] = [], environment: [String: String] = [:]) async throws {
        self.init(arguments: arguments, dir: dir, launcher: launcher, environment: environment, starting: ())
        try await blocking { [self] in try start() }
    }

    /// The same, blocking the calling thread.
    convenience init(arguments: [String] = [], dir: TempDir = TempDir(), launcher: [String] = [], environment: [String: String] = [:]) throws {
        self.init(arguments: arguments, dir: dir, launcher: launcher, environment: environment, starting: ())
        try start()
    }

    deinit { stop(signal: SIGKILL) }

    var log: [String] { lock.withLock { logLines } }

    /// Starts the daemon and waits for its "ready" line (generous deadline for loaded CI machines).
    /// `waitForReady: false` returns once the process runs (a test that kills it while it starts).
    func start(waitForReady: Bool = true) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Products.path("searchlightd"))
        // Never the runner's own unit directories: an empty one unless the test names its own.
        let units = extraArguments.contains("--units-dir") ? [] : ["--units-dir", dir.path + "/no-units"]
        // A quiet machine unless the test fakes its own load: the runner's real pressure (other
        // builds) must not pause a test's background requests.
        let proc = extraArguments.contains("--proc-root") ? [] : ["--proc-root", dir.path + "/no-proc"]
        // Nor the runner's power: a laptop on battery would defer every background request.
        let power = extraArguments.contains("--power-supply-root") ? [] : ["--power-supply-root", dir.path + "/no-power"]
        // No semantic model unless a test names one: the tests must not depend on whether `make
        // model` filled this machine's default folder (SemanticSearchTests pass --model-dir).
        let model = extraArguments.contains("--model-dir") ? [] : ["--model-dir", dir.path + "/no-model"]
        // Refinement only when a test asks for it (idle maintenance, `simulate idle`), unless it
        // tests the low-priority share itself: the tests of the static tier and of the idle rule
        // count refined vectors.
        let share = extraArguments.contains("--refine-share-items") ? [] : ["--refine-share-items", "0"]
        p.arguments = ["--socket", socket, "--state-dir", stateDir, "--log-level", "debug"] + units + proc + power + model + share + extraArguments
        if let command = launcher.first {
            p.arguments = launcher.dropFirst() + [Products.path("searchlightd")] + (p.arguments ?? [])
            p.executableURL = URL(fileURLWithPath: command)
        }
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let pipe = Pipe()
        p.standardError = pipe
        p.standardOutput = FileHandle.nullDevice
        let handle = pipe.fileHandleForReading
        let generation = lock.withLock { logLines.count }
        // Signalled once this process's stderr is read to its end: `stop` waits for it, so a line
        // of a stopped daemon (its "ready", say) can never arrive after the next start began
        // watching for its own.
        let drained = DispatchSemaphore(value: 0)
        lock.withLock { logDrained = drained }
        readLines(handle, done: { drained.signal() }) { [weak self] line in
            guard let self else { return false }
            self.lock.withLock {
                self.logLines.append(line)
                self.lock.broadcast()
            }
            return true
        }
        try p.run()
        process = p
        if waitForReady { try waitForLog("searchlightd ready", after: generation, timeout: 60) }
    }

    /// Waits until a log line (after index `after`) contains `text`, from an async test: on a
    /// thread of its own (`blocking`), not one of the pool's two (see `runCLI`).
    @discardableResult
    func waitForLog(_ text: String, after: Int = 0, timeout: TimeInterval = 30) async throws -> String {
        try await blocking { [self] in try waitForLog(text, after: after, timeout: timeout) }
    }

    /// The same, blocking the calling thread.
    @discardableResult
    func waitForLog(_ text: String, after: Int = 0, timeout: TimeInterval = 30) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock()
        defer { lock.unlock() }
        while true {
            if let line = logLines.dropFirst(after).first(where: { $0.contains(text) }) { return line }
            if let p = process, !p.isRunning, text.contains("ready") {
                throw HarnessError("searchlightd exited (\(p.terminationStatus)) before logging \"\(text)\":\n" + logLines.joined(separator: "\n"))
            }
            if !lock.wait(until: min(deadline, Date().addingTimeInterval(0.5))), Date() >= deadline {
                throw HarnessError("no log line containing \"\(text)\" within \(timeout)s:\n" + logLines.suffix(30).joined(separator: "\n"))
            }
        }
    }

    /// Sends a signal and waits for the process to end.
    func stop(signal sig: Int32 = SIGTERM) {
        guard let p = process else { return }
        if p.isRunning { kill(p.processIdentifier, sig) }
        p.waitUntilExit()
        // Its last lines are in `log` before the next start (bounded: a child holding the pipe).
        _ = lock.withLock { logDrained }?.wait(timeout: .now() + 10)
        process = nil
    }

    func restart() throws {
        stop(signal: SIGTERM)
        try start()
    }

    /// `restart`, `start` and `stop` from an async test, on a thread of their own.
    func restart() async throws { try await blocking { [self] in try restart() } }
    func start(waitForReady: Bool = true) async throws { try await blocking { [self] in try start(waitForReady: waitForReady) } }
    func stop(signal sig: Int32 = SIGTERM) async { _ = try? await blocking { [self] in stop(signal: sig) } }

    func index(_ bundle: String, name: String = "") -> SearchableIndex {
        SearchableIndex(name: name, bundleIdentifier: bundle, socketPath: socket)
    }

    func admin() -> SearchlightConnection { SearchlightConnection(role: .admin, socketPath: socket) }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Runs the `searchlight` CLI against a daemon and captures its output.
struct CLIResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs a program to its end, from an async test: the wait is on a thread of its own (`blocking`).
/// On Linux, Swift's tasks and Dispatch's global queues share one pool as wide as the machine (2
/// threads here); a test blocked in `waitUntilExit` there holds one of them for the process's
/// life, and with dozens of suites doing so at once, in-process work (the store delegate's
/// tasks, SDK replies) waited tens of seconds on a loaded machine.
func runCLI(_ arguments: [String], socket: String?, stdin: String? = nil, executable: String = "searchlight") async throws -> CLIResult {
    try await blocking { try runCLI(arguments, socket: socket, stdin: stdin, executable: executable) }
}

/// The same, blocking the calling thread: for synchronous code (already off the pool).
func runCLI(_ arguments: [String], socket: String?, stdin: String? = nil, executable: String = "searchlight") throws -> CLIResult {
    let p = Process()
    // A bare name is one of our products; an absolute path is any program (e.g. setpriv).
    p.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : Products.path(executable))
    p.arguments = (socket.map { ["--socket", $0] } ?? []) + arguments
    var env = ProcessInfo.processInfo.environment
    env.removeValue(forKey: "SEARCHLIGHT_SOCKET")
    p.environment = env
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    if let stdin {
        let input = Pipe()
        p.standardInput = input
        try p.run()
        input.fileHandleForWriting.write(Data(stdin.utf8))
        try input.fileHandleForWriting.close()
    } else {
        p.standardInput = FileHandle.nullDevice
        try p.run()
    }
    let (stdout, stderr) = readToEnd(p, out: out, err: err)
    return CLIResult(status: p.terminationStatus, stdout: stdout, stderr: stderr)
}

/// A started process's two pipes read to their ends, then its exit waited for.
///
/// Both pipes are read fully before waiting, so a chatty child never blocks on a full pipe. The
/// second reader is a thread of its own, not Dispatch's pool: a pool thread waiting here for
/// another pool thread stalled when every pool thread was waiting alike.
func readToEnd(_ p: Process, out: Pipe, err: Pipe) -> (stdout: String, stderr: String) {
    let done = DispatchSemaphore(value: 0)
    nonisolated(unsafe) var errData = Data()
    Thread.detachNewThread {
        errData = err.fileHandleForReading.readDataToEndOfFile()
        done.signal()
    }
    let outData = out.fileHandleForReading.readDataToEndOfFile()
    done.wait()
    p.waitUntilExit()
    return (String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
}
