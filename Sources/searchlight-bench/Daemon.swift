#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A release-build `searchlightd` (next to this executable) on a socket in a temp directory,
/// timed from spawn to its "searchlightd ready" log line.
final class Daemon: @unchecked Sendable {
    let dir: String
    let socket: String
    let stateDir: String
    let unitsDir: String
    private let process = Process()
    /// Seconds from `run()` to the ready line.
    private(set) var readySeconds = 0.0
    private let lines = LogTail()

    static var executableDirectory: String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (exe as NSString).deletingLastPathComponent
    }

    /// Starts a daemon on `dir` (a fresh temp directory when nil; an existing one keeps its state).
    /// `arguments` are added to the daemon's flags (a `--proc-root` there replaces the quiet default).
    /// `environment` is added to this process's for the daemon.
    init(dir existing: String? = nil, arguments extra: [String] = [], environment added: [String: String] = [:]) throws {
        dir = existing ?? "/tmp/slbench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        socket = dir + "/d.sock"
        stateDir = dir + "/state"
        unitsDir = dir + "/units"
        try FileManager.default.createDirectory(atPath: unitsDir, withIntermediateDirectories: true)
        process.executableURL = URL(fileURLWithPath: Self.executableDirectory + "/searchlightd")
        // No load throttling: the bench measures indexing, not the machine's other work
        // (a --proc-root without pressure files reads as unknown load, never throttled), nor the
        // battery (a --power-supply-root without supplies reads as a desktop).
        process.arguments = ["--socket", socket, "--state-dir", stateDir, "--units-dir", unitsDir, "--log-level", "notice"]
            + (extra.contains("--proc-root") ? [] : ["--proc-root", dir + "/no-proc"])
            + (extra.contains("--power-supply-root") ? [] : ["--power-supply-root", dir + "/no-power"]) + extra
        var environment = ProcessInfo.processInfo.environment
        environment["JOURNAL_STREAM"] = nil
        environment.merge(added) { $1 }
        process.environment = environment
        let pipe = Pipe()
        process.standardError = pipe
        let start = now()
        try process.run()
        let reader = pipe.fileHandleForReading
        let tail = lines
        let thread = Thread {
            // Drains the daemon's log for its whole life, so it never blocks on a full pipe.
            var pending = Data()
            while true {
                let chunk = reader.availableData
                if chunk.isEmpty { tail.closed(); return }
                pending.append(chunk)
                while let nl = pending.firstIndex(of: 0x0A) {
                    tail.add(String(decoding: pending[pending.startIndex..<nl], as: UTF8.self), at: now())
                    pending.removeSubrange(pending.startIndex...nl)
                }
            }
        }
        thread.start()
        guard let ready = tail.waitFor("searchlightd ready", timeout: 60) else {
            fatal("searchlightd did not get ready; its last lines:\n\(tail.last(20).joined(separator: "\n"))")
        }
        readySeconds = ready - start
    }

    var pid: Int32 { process.processIdentifier }

    /// See `LogTail.takeQueryCPU`.
    func takeQueryCPU(count: Int) -> [QueryCPU] { lines.takeQueryCPU(count: count) }

    /// `--refine-boost`: the environment that keeps the daemon's background threads at the nice
    /// they start with (`Options.refineBoost` says why).
    static func boostEnvironment(_ options: Options) -> [String: String] {
        options.refineBoost == nil ? [:] : ["SEARCHLIGHT_BACKGROUND_NICE": "0"]
    }

    /// `--refine-boost NICE`: the daemon's session (autogroup) at that nice.
    func boost(_ options: Options) {
        guard let nice = options.refineBoost else { return }
        let path = "/proc/\(pid)/autogroup"
        if (try? "\(nice)\n".write(toFile: path, atomically: false, encoding: .utf8)) != nil {
            progress("--refine-boost: \(path) at nice \(nice), the daemon's background threads at its own nice")
        } else {
            progress("--refine-boost: cannot write \(path) (root only, kernels with autogroups): the daemon's share is the default")
        }
    }

    /// Stops the daemon (SIGTERM, graceful) and waits for it; `remove` deletes its directory.
    func stop(remove: Bool = true) {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        if remove { try? FileManager.default.removeItem(atPath: dir) }
    }

    /// The path of an index file in this daemon's state.
    func indexPath(bundle: String) -> String { "\(stateDir)/indexes/\(bundle)/_default.sqlite" }

    /// The daemon's recent log lines (for a failure message).
    func lastLines(_ n: Int) -> [String] { lines.last(n) }
}

/// One `query cpu` line, in ms: the query's thread CPU and wall time inside the daemon, the time
/// its thread waited on the run queue meanwhile, and how often it went to sleep (a lock, I/O).
struct QueryCPU {
    var cpu: Double
    var wall: Double
    var runQueue: Double
    var voluntary: Int
    /// The thread's run-queue wait since its previous query ended (its wake-up for this one).
    var runQueueBefore: Double
}

/// The last lines a daemon logged, and a wait for one of them.
final class LogTail: @unchecked Sendable {
    private let condition = NSCondition()
    private var lines: [(String, Double)] = []
    private var isClosed = false

    /// The daemon's `query cpu` lines (`SEARCHLIGHT_QUERY_CPU_LOG=1`): thread-CPU and wall ms per
    /// `query.user`, in the order answered.
    private var queryCPU: [QueryCPU] = []

    func add(_ line: String, at time: Double) {
        if line.contains(" query cpu "), let cpu = Self.field("cpu_us", line), let wall = Self.field("wall_us", line) {
            let q = QueryCPU(cpu: cpu / 1000, wall: wall / 1000, runQueue: (Self.field("runq_us", line) ?? 0) / 1000,
                             voluntary: Int(Self.field("vcs", line) ?? 0), runQueueBefore: (Self.field("runq_before_us", line) ?? 0) / 1000)
            condition.withLock { queryCPU.append(q); condition.broadcast() }
            return
        }
        condition.withLock {
            lines.append((line, time))
            if lines.count > 200 { lines.removeFirst(100) }
            condition.broadcast()
        }
    }

    func closed() { condition.withLock { isClosed = true; condition.broadcast() } }

    /// The time the first line containing `text` arrived, waiting up to `timeout` seconds.
    func waitFor(_ text: String, timeout: Double) -> Double? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        return condition.withLock {
            while true {
                if let hit = lines.first(where: { $0.0.contains(text) }) { return hit.1 }
                if isClosed || !condition.wait(until: deadline) { return nil }
            }
        }
    }

    private static func field(_ key: String, _ line: String) -> Double? {
        guard let r = line.range(of: " \(key)=") else { return nil }
        return Double(line[r.upperBound...].prefix { $0.isNumber })
    }

    /// The `query cpu` figures received so far (waiting up to 2 s for `count` of them), removed.
    func takeQueryCPU(count: Int) -> [QueryCPU] {
        let deadline = Date(timeIntervalSinceNow: 2)
        return condition.withLock {
            while queryCPU.count < count, !isClosed, condition.wait(until: deadline) {}
            defer { queryCPU.removeAll() }
            return queryCPU
        }
    }

    func last(_ n: Int) -> [String] { condition.withLock { lines.suffix(n).map(\.0) } }
}

/// What /proc says about a process: CPU time, context switches (wakeups) and resident memory.
struct ProcessSample {
    /// utime + stime, seconds.
    var cpuSeconds: Double
    /// voluntary + nonvoluntary context switches summed over every thread.
    var contextSwitches: Int
    /// The same per thread (task id): a thread that ended between two samples takes its count
    /// with it, so a difference is taken over the threads in both (`switches(since:)`).
    var switchesByTask: [String: Int] = [:]
    /// VmRSS, bytes.
    var residentBytes: Int
    var threads = 0
    /// RssAnon and RssFile, bytes.
    var anonymousBytes = 0
    var fileBytes = 0
    /// RssAnon, RssFile and RssShmem of /proc/PID/status and the thread count, for a progress line.
    var memoryBreakdown = ""

    /// Context switches since `earlier`: of the threads in both samples, plus every switch of a
    /// thread that started after it.
    func switches(since earlier: ProcessSample) -> Int {
        switchesByTask.reduce(0) { $0 + $1.value - (earlier.switchesByTask[$1.key] ?? 0) }
    }

    init?(pid: Int32) {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // After "pid (comm) ": state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        guard fields.count > 13, let utime = Double(fields[11]), let stime = Double(fields[12]) else { return nil }
        cpuSeconds = (utime + stime) / Double(sysconf(Int32(_SC_CLK_TCK)))
        contextSwitches = 0
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        threads = tasks.count
        for task in tasks {
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8) else { continue }
            for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches") || line.hasPrefix("nonvoluntary_ctxt_switches") {
                let n = Int(line.split(separator: "\t").last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "") ?? 0
                contextSwitches += n
                switchesByTask[task, default: 0] += n
            }
        }
        residentBytes = 0
        if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        {
            residentBytes = (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
            func kib(_ key: String) -> Int {
                guard let l = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }) else { return 0 }
                return (Int(l.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? 0) * 1024
            }
            anonymousBytes = kib("RssAnon:")
            fileBytes = kib("RssFile:")
            memoryBreakdown = status.split(separator: "\n").filter { $0.hasPrefix("Rss") }
                .map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).joined(separator: " ") }.joined(separator: ", ")
                + ", \(threads) threads"
        }
    }
}
