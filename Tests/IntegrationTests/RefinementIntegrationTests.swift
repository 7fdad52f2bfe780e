#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Testing
import TestThreads
import SearchlightKit
import SearchlightWire

/// Background refinement (Docs/SemanticSearch.md, "Refinement") against the real daemon and the
/// real model: started by the idle trigger on a fake `--proc-root`, stopped by pressure written
/// there, resumed when the machine is idle again. Every bound is read from the daemon's own
/// counters (the throttle's sample count in `status` and in its log lines), never from a clock.
@Suite("Semantic refinement and the load", .onOwnThreads, .serialized)
struct RefinementIntegrationTests {
    /// Some hundreds, short: the debug daemon refines them on every core for tens of seconds
    /// while other integration suites run beside this one.
    static let itemCount = 200

    /// Items of a couple of dozen words each, all different.
    static func items(count: Int = itemCount) -> [String] {
        let subjects = ["music player", "chess engine", "mail server", "image editor", "text editor", "web browser", "backup tool",
                        "network monitor", "spreadsheet", "photo manager", "video converter", "password manager"]
        let verbs = ["plays", "organizes", "edits", "converts", "checks", "archives", "shares", "renders", "filters", "indexes"]
        let objects = ["audio files and playlists", "games against the computer", "electronic mail between servers", "pictures and drawings",
                       "source code with syntax highlighting", "pages on the internet", "files to remote disks", "traffic on the local network"]
        return (0..<count).map { i in
            let s = subjects[i % subjects.count], v = verbs[(i / 3) % verbs.count], o = objects[(i / 7) % objects.count]
            let text = "A \(s) that \(v) \(o), item \(i)."
            return #"{"uniqueIdentifier":"r\#(i)","attributeSet":{"title":"\#(s.capitalized) \#(i)","contentDescription":"\#(s) \#(i)","textContent":"\#(text)"}}"#
        }
    }

    static func status(_ daemon: DaemonProcess) async throws -> JSONValue {
        try JSONValue.parse(Array(try await runCLI(["status", "--json"], socket: daemon.socket).stdout.utf8))
    }

    static func refined(_ daemon: DaemonProcess) async throws -> (vectors: Int, refined: Int) {
        let index = try await status(daemon)["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        return (index?["vectors"]?.intValue ?? -1, index?["refined"]?.intValue ?? -1)
    }

    /// Polls `status` until `condition` holds (the daemon's state is the event waited on).
    static func until(_ what: String, timeout: TimeInterval, _ condition: () async throws -> Bool) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while try await !condition() {
            guard Date() < deadline else { throw HarnessError("not within \(Int(timeout)) s: \(what)") }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `name=123` in a log line (`name` preceded by a space, so `sample` is not `last_batch_sample`).
    static func field(_ line: String, _ name: String) -> Int? {
        guard let r = line.range(of: " \(name)=") else { return nil }
        return Int(line[r.upperBound...].prefix { $0.isNumber || $0 == "-" })
    }

    @Test("refinement stops with the batch in flight when the sampler sees pressure, refines nothing while paused, and resumes when idle")
    func yieldsAndResumes() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let proc = dir.path + "/proc"
        // Paused from the start: no maintenance while the items come in.
        try ThrottleIntegrationTests.writePSI(proc, cpu: 70)
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc, "--load-interval", "0.5",
            "--resume-after", "0.5", "--idle-after", "0.5", "--maintenance-interval", "1"], dir: dir)
        try await SemanticSearchTests.importItems(Self.items(), bundle: "com.example.refine", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        let start = try await Self.refined(daemon)
        #expect(start.vectors == Self.itemCount && start.refined == 0, "\(start)")

        // Idle: the idle trigger starts maintenance, which refines.
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        try await Self.until("refinement under way", timeout: 120) { try await Self.refined(daemon).refined > 0 }
        let mark = daemon.log.count
        try ThrottleIntegrationTests.writePSI(proc, cpu: 70)
        // Samples counted after the write: every sample after these began after it. (Counted
        // before the write, the test's own delay between the count and the write — a second and
        // more on a loaded machine — let samples with the old figures pass, and a correct daemon
        // failed the bound.)
        let written = try await #require(try Self.status(daemon)["throttle"]?["samples"]?.intValue)

        // The throttle sees it at the next sample (one taken while the file was being written may
        // have read the old figures: at most the one after).
        let paused = try await daemon.waitForLog("to=paused", after: mark)
        #expect(paused.contains("load throttle changed") && paused.contains("cpu=70.0"), "\(paused)")
        let pressureSample = try #require(Self.field(paused, "sample"), "\(paused)")
        #expect(pressureSample <= written + 2, "paused at sample \(pressureSample), the pressure written before sample \(written + 1)")
        // The batch in flight when pressure was sampled is the last one: the last batch began
        // before that sample.
        let stopped = try await daemon.waitForLog("vectors refined", after: mark, timeout: 120)
        #expect(stopped.contains("yielded=true"), "\(stopped)")
        let lastBatch = try #require(Self.field(stopped, "last_batch_sample"), "\(stopped)")
        #expect(lastBatch >= 0 && lastBatch < pressureSample, "last batch began at sample \(lastBatch); pressure seen at \(pressureSample)")
        try await daemon.waitForLog("maintenance yielded to load", after: mark)
        let atPause = try await Self.refined(daemon).refined
        #expect(atPause > 0 && atPause < Self.itemCount, "\(atPause) refined when it yielded")

        // Still paused two samples later: nothing refined meanwhile.
        try await Self.until("two more samples", timeout: 30) { try await Self.status(daemon)["throttle"]?["samples"]?.intValue ?? 0 >= pressureSample + 2 }
        try await Self.until("paused by the outside load", timeout: 30) { try await Self.status(daemon)["throttle"]?["state"]?.stringValue == "paused" }
        await #expect(try Self.refined(daemon).refined == atPause)

        // Idle again: a new run resumes where the unrefined vectors are, and finishes.
        let resumed = daemon.log.count
        try ThrottleIntegrationTests.writePSI(proc, cpu: 0)
        try await daemon.waitForLog("from=throttled to=normal", after: resumed)
        try await Self.until("every item refined", timeout: 300) { try await Self.refined(daemon).refined == Self.itemCount }
        let finished = try await daemon.waitForLog("vectors refined", after: resumed, timeout: 60)
        #expect(finished.contains("yielded=false") && Self.field(finished, "items") == Self.itemCount - atPause, "\(finished)")
        let search = try await runCLI(["search", "com.example.refine", "listen to songs", "--json"], socket: daemon.socket)
        #expect(search.status == 0, "\(search.stderr)")
    }

    /// A daemon whose idle maintenance never runs (pressure from the start) and whose low-priority
    /// share refines the `count` items imported; `dir` must outlive it.
    static func shareDaemon(model: String, count: Int, dir: TempDir) async throws -> DaemonProcess {
        let proc = dir.path + "/proc"
        try ThrottleIntegrationTests.writePSI(proc, cpu: 70)  // busy: idle maintenance never runs
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc, "--load-interval", "0.5",
            "--refine-share-items", "10000", "--refine-share-after", "1"], dir: dir)
        try await SemanticSearchTests.importItems(Self.items(count: count), bundle: "com.example.refine", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        return daemon
    }

    /// Four clients each ask a long user query (embedded by the transformer on the query threads,
    /// once the share has loaded it) over and over, while `watch` runs; they stop when it returns
    /// or throws. Returns the queries' counters.
    @discardableResult
    static func flood(_ daemon: DaemonProcess, while watch: @escaping @Sendable (Flood) async throws -> Void) async throws -> Flood {
        let text = Array(repeating: "a music player that organizes audio files and playlists", count: 20).joined(separator: " ")
        let flood = Flood()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    let index = daemon.index("com.example.refine")
                    defer { Task { await index.close() } }
                    while !flood.stop.load(ordering: .relaxed) {
                        _ = try await UserQuery(userQueryString: text, userQueryContext: UserQueryContext(), index: index).run()
                        flood.answered.add(1, ordering: .relaxed)
                    }
                }
            }
            group.addTask {
                defer { flood.stop.store(true, ordering: .relaxed) }
                try await watch(flood)
            }
            try await group.waitForAll()
        }
        return flood
    }

    @Test("the low-priority share waits for user queries on the transformer's threads, and goes on once they stop")
    func shareWaitsForQueries() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        // Enough that the share is still refining when the queries begin, on a fast machine.
        let count = 3000
        let daemon = try await Self.shareDaemon(model: model, count: count, dir: dir)
        // Four clients one after another each ask a long query from the start: the share's batches wait.
        let flood = try await Self.flood(daemon) { _ in
            try await Self.until("a batch of the share waited for a query", timeout: 300) {
                let status = try await Self.status(daemon)
                if status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["refined"]?.intValue == count {
                    throw HarnessError("every item refined before a batch waited for a query: use more items")
                }
                return status["refinementShare"]?["queryWaits"]?.intValue ?? 0 >= 1
            }
        }
        #expect(flood.answered.load(ordering: .relaxed) > 0)
        // The queries gone, it goes on.
        let after = try await Self.refined(daemon).refined
        try await Self.until("refinement going on once the queries stopped", timeout: 300) { try await Self.refined(daemon).refined > after }
    }

    @Test("a steady stream of user queries on the transformer slows the share but does not hold it")
    func queryStreamDoesNotHoldShare() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let count = 3000
        let daemon = try await Self.shareDaemon(model: model, count: count, dir: dir)
        try await Self.flood(daemon) { flood in
            // The stream holds a batch first (the share waited), then the share goes on under it.
            try await Self.until("a batch of the share waited for a query", timeout: 300) {
                try await Self.status(daemon)["refinementShare"]?["queryWaits"]?.intValue ?? 0 >= 1
            }
            let (before, answeredBefore) = (try await Self.refined(daemon).refined, flood.answered.load(ordering: .relaxed))
            try await Self.until("two batches refined while the queries kept coming", timeout: 300) {
                let now = try await Self.refined(daemon).refined
                if now == count { throw HarnessError("every item refined: use more items") }
                return now >= before + 16
            }
            #expect(flood.answered.load(ordering: .relaxed) > answeredBefore + 4, "the queries kept coming meanwhile")
        }
    }

    @Test("without PSI: refinement is not stopped by its own threads in the load average, and pauses at the next sample when an outside load shows in it")
    func loadAverageWithoutPSI() async throws {
        guard let model = SemanticSearchTests.transformerModel else { return }
        let dir = TempDir()
        let proc = dir.path + "/proc"
        try FileManager.default.createDirectory(atPath: proc, withIntermediateDirectories: true)  // no pressure/
        let cpus = Double(ProcessInfo.processInfo.activeProcessorCount)
        // 75 % of every CPU from outside: paused from the start, no maintenance while items come in.
        try LoadAverageMirror.write(proc, load: 0.75 * cpus)
        // Throttle marks 2 % (the load average stands for cpu and io): refinement's own threads
        // pass it within seconds. The test is about the throttle's accounting of the daemon's own
        // load, so that load must reach the mark whatever else runs: with a mark of 10 % and the
        // refinement thread at nice 10 (its background priority), a machine busy with the rest of
        // the suite gave the thread less than 11 % of the CPUs and the own load never reached the
        // mark (the test waited 180 s). So the mark is low and the daemon's background threads run
        // at the normal priority here (SEARCHLIGHT_BACKGROUND_NICE=0): one thread among 20
        // runnable on 2 CPUs still gets 10 %, five times the mark.
        let mark = 2.0
        let daemon = try await DaemonProcess(arguments: ["--model-dir", model, "--proc-root", proc, "--load-interval", "0.5",
            "--resume-after", "0.5", "--idle-after", "0.5", "--maintenance-interval", "1",
            "--throttle-cpu", "\(mark)", "--throttle-io", "\(mark)"], dir: dir, environment: ["SEARCHLIGHT_BACKGROUND_NICE": "0"])
        // Enough for refinement to outlast the wait below on a fast machine.
        let count = 4000
        try await SemanticSearchTests.importItems(Self.items(count: count), bundle: "com.example.refine", daemon: daemon, dir: dir) {
            try await runCLI($0, socket: daemon.socket)
        }
        let pid = try #require(daemon.process?.processIdentifier)
        try await Self.until("paused by the outside load", timeout: 30) { try await Self.status(daemon)["throttle"]?["state"]?.stringValue == "paused" }

        // Idle: refinement starts. From its first refined vectors on, the fake load average is what
        // the kernel's would be with no other process running: the daemon's own CPU time (real,
        // from /proc/PID/stat), averaged over a minute as the kernel does.
        try LoadAverageMirror.write(proc, load: 0)
        let quiet = daemon.log.count
        try await Self.until("refinement under way", timeout: 120) { try await Self.refined(daemon).refined > 0 }
        let mirror = try LoadAverageMirror(proc: proc, pid: pid)
        defer { mirror.stop() }
        // The daemon's own load alone is past the throttle mark (by a tenth), refinement still going.
        try await Self.until("the daemon's own load past the throttle mark", timeout: 180) {
            guard mirror.own / cpus * 100 < mark * 1.1 else { return true }
            let status = try await Self.status(daemon)
            if let throttle = status["throttle"], throttle["state"]?.stringValue != "normal" {
                throw HarnessError("the daemon throttled itself on its own load (\(mirror.own) threads): \(throttle)")
            }
            let r = status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["refined"]?.intValue ?? -1
            if r == count { throw HarnessError("every item refined before the own load (\(mirror.own)) reached the mark: use more items") }
            try await Task.sleep(for: .milliseconds(200))
            return false
        }
        let going = try await Self.refined(daemon).refined
        let throttle = try await #require(try Self.status(daemon)["throttle"])
        #expect(throttle["state"]?.stringValue == "normal", "\(throttle)")
        #expect(throttle["source"]?.stringValue == "loadavg", "\(throttle)")
        #expect(throttle["ownLoad"]?.doubleValue ?? 0 > 0, "\(throttle)")
        #expect(!daemon.log.dropFirst(quiet).contains { $0.contains("load throttle changed") && $0.contains("from=normal") },
                "the daemon throttled itself")
        #expect(!daemon.log.dropFirst(quiet).contains { $0.contains("vectors refined") }, "refinement stopped early")
        try await Self.until("more refined", timeout: 120) { try await Self.refined(daemon).refined > going }

        // An outside load of 75 % of the CPUs on top: paused at the next sample.
        let pressure = daemon.log.count
        try await mirror.set(outside: 0.75 * cpus)
        let written = try await #require(try Self.status(daemon)["throttle"]?["samples"]?.intValue)
        let paused = try await daemon.waitForLog("to=paused", after: pressure)
        #expect(paused.contains("source=loadavg"), "\(paused)")
        let pressureSample = try #require(Self.field(paused, "sample"), "\(paused)")
        #expect(pressureSample <= written + 2, "paused at sample \(pressureSample), the load written before sample \(written + 1)")
        let stopped = try await daemon.waitForLog("vectors refined", after: pressure, timeout: 120)
        #expect(stopped.contains("yielded=true"), "\(stopped)")
        let lastBatch = try #require(Self.field(stopped, "last_batch_sample"), "\(stopped)")
        #expect(lastBatch >= 0 && lastBatch < pressureSample, "last batch began at sample \(lastBatch); pressure seen at \(pressureSample)")
        let atPause = try await Self.refined(daemon).refined
        #expect(atPause > going && atPause < count, "\(atPause) refined when it yielded")
    }
}

/// The query flood of `shareWaitsForQueries`: when to stop, and the queries answered.
final class Flood: Sendable {
    let stop = Atomic<Bool>(false)
    let answered = Atomic<Int>(0)
}

/// A fake kernel's `loadavg` for a fake `/proc` without PSI: every 100 ms, the daemon's CPU time
/// (its real `/proc/PID/stat`) as a rate, averaged with the kernel's 1-minute time constant (the
/// runnable threads of a machine where nothing else waits for a CPU), plus a chosen outside load.
final class LoadAverageMirror: @unchecked Sendable {
    // @unchecked: the thread is joined through `done` before the object goes.
    private struct State {
        var outside = 0.0
        var own = 0.0
        var writes = 0
        var stopping = false
    }

    private let state = Mutex(State())
    private let done = DispatchSemaphore(value: 0)
    let proc: String
    let pid: Int32

    static func write(_ proc: String, load: Double) throws {
        try String(format: "%.2f 0.00 0.00 1/300 4242\n", load).write(toFile: proc + "/loadavg", atomically: true, encoding: .utf8)
    }

    /// utime + stime of `pid`, in seconds.
    static func cpuSeconds(_ pid: Int32) throws -> Double {
        let text = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        guard let close = text.lastIndex(of: ")") else { throw HarnessError("unreadable /proc/\(pid)/stat") }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the name: state is field 3, utime 14 and stime 15 (fields[0] is the state).
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
            throw HarnessError("unreadable /proc/\(pid)/stat")
        }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    init(proc: String, pid: Int32) throws {
        self.proc = proc
        self.pid = pid
        let first = try Self.cpuSeconds(pid), start = Date()
        let thread = Thread { [self] in
            var last = first, at = start
            while !state.withLock({ $0.stopping }) {
                usleep(100_000)
                guard let now = try? Self.cpuSeconds(pid) else { break }
                let t = Date(), dt = t.timeIntervalSince(at)
                let decay = exp(-dt / 60)
                let (own, outside) = state.withLock { s in
                    s.own = s.own * decay + max(0, now - last) / dt * (1 - decay)
                    return (s.own, s.outside)
                }
                last = now
                at = t
                try? Self.write(proc, load: own + outside)
                state.withLock { $0.writes += 1 }
            }
            done.signal()
        }
        thread.start()
    }

    /// The daemon's own load as last written.
    var own: Double { state.withLock { $0.own } }

    /// Sets the outside load and returns once a file with it is written.
    func set(outside: Double) async throws {
        let before = state.withLock { s in
            s.outside = outside
            return s.writes
        }
        let deadline = Date().addingTimeInterval(30)
        while state.withLock({ $0.writes }) < before + 2 {
            guard Date() < deadline else { throw HarnessError("the load average mirror stopped writing") }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func stop() {
        guard !state.withLock({ s in defer { s.stopping = true }; return s.stopping }) else { return }
        done.wait()
    }
}
