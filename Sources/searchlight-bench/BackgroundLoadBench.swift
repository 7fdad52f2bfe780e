#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// "Query under background load" (issue 30, item 3): user queries on a 20 000-item index, first on
/// a quiet daemon, then while everything in the background runs at once with three CPU hogs
/// (busy loops started and killed here) on the machine's cores:
/// - a migration of the queried index by its extension (a reindex-all of 20 000 items into a
///   shadow, then the swap),
/// - a reindex-all of another bundle's 20 000 items,
/// - idle maintenance with transformer refinement (when the model is installed): the daemon reads
///   a fake `--proc-root` with no pressure, so its throttle sees an idle machine and holds
///   nothing back, the worst case for queries (the hogs are hidden from it).
/// Latency is the client's, through the socket: p50 and p99 of each phase, errors counted. With
/// `--compare-priority` the loaded phase runs again on a daemon started with
/// `SEARCHLIGHT_BACKGROUND_NICE=0` (background threads at the queries' priority), in the same run.
final class BackgroundLoadBench: @unchecked Sendable {
    static let queried = "org.searchlight.bench.load.query"
    static let other = "org.searchlight.bench.load.other"
    let dir: String
    let items: Int
    let queries: Int
    let hogs: Int

    struct Phase {
        var latencies: [Double] = []
        var errors: [String] = []
        var seconds = 0.0
        var notes: [String] = []
    }

    init(dir: String, items: Int = 20_000, queries: Int, hogs: Int = 3) {
        self.dir = dir
        self.items = items
        self.queries = queries
        self.hogs = hogs
    }

    var procRoot: String { dir + "/proc" }

    /// Quiet phase, loaded phase (the daemon's default priorities), and when `compare`, the loaded
    /// phase on a daemon whose background threads run at the normal priority.
    func run(compare: Bool) async throws -> (quiet: Phase, loaded: Phase, unlowered: Phase?) {
        var (quiet, loaded) = try await oneDaemon(environment: [:], measureQuiet: true)
        var unlowered: Phase?
        if compare {
            unlowered = try await oneDaemon(environment: ["SEARCHLIGHT_BACKGROUND_NICE": "0"], measureQuiet: false).loaded
        }
        quiet.notes.append("\(items) items")
        loaded.notes.append("\(hogs) CPU hogs")
        return (quiet, loaded, unlowered)
    }

    private func oneDaemon(environment: [String: String], measureQuiet: Bool) async throws -> (quiet: Phase, loaded: Phase) {
        try? FileManager.default.removeItem(atPath: dir)
        // Quiet pressure while the indexes fill; paused (so idle maintenance waits) for the quiet phase.
        try writeFakePressure(procRoot: procRoot, cpu: 0)
        try writeUnit(Self.queried, control: dir + "/control-query")
        try writeUnit(Self.other, control: dir + "/control-other")
        let daemon = try Daemon(dir: dir, arguments: ["--proc-root", procRoot, "--load-interval", "0.5", "--resume-after", "0.5",
            "--idle-after", "1", "--maintenance-interval", "1", "--log-level", "info"], environment: environment)
        defer { daemon.stop() }
        let admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        try await drained(admin, timeout: 300, daemon: daemon)
        try writeFakePressure(procRoot: procRoot, cpu: 95)
        try await Task.sleep(for: .seconds(2))  // two load samples: the throttle pauses, maintenance yields

        let client = SearchlightConnection(role: .app(bundleIdentifier: Self.queried), socketPath: daemon.socket)
        // Warm: the vectors loaded, the ranked index asked for and built.
        for k in 0..<20 { _ = try? await query(client, k) }
        try await Task.sleep(for: .seconds(3))
        var quiet = Phase()
        if measureQuiet {
            let t0 = now()
            for k in 0..<queries { await measure(client, k, into: &quiet) }
            quiet.seconds = now() - t0
        }

        // Loaded: hogs, then every kind of background work at once, queries all along.
        let hogPids = startHogs()
        defer { for pid in hogPids { kill(pid, SIGKILL); var s: Int32 = 0; waitpid(pid, &s, 0) } }
        try writeFakePressure(procRoot: procRoot, cpu: 0)
        let migration = try await admin.call("admin.simulate", ["event": "migration", "bundle": .string(Self.queried)])
        _ = try await admin.call("admin.reindex", ["target": .string(Self.other), "all": true, "wait": false])
        var loaded = Phase()
        loaded.notes.append("migration path \(migration["started"]?.arrayValue?.first?["path"]?.stringValue ?? "?")")
        let t0 = now()
        var k = 0, sawMigrating = false, done = false
        while !done {
            for _ in 0..<10 {
                await measure(client, k, into: &loaded)
                k += 1
            }
            let state = try await indexState(admin, Self.queried)
            if state == "migrating" { sawMigrating = true }
            let requests = try await admin.call("admin.requests")["requests"]?.arrayValue?.count ?? 0
            let elapsed = now() - t0
            // Until the migration swapped and the reindex-all ended, and at least 30 s (refinement
            // meanwhile) and `queries` queries; never past 300 s.
            done = (state == "ready" && requests == 0 && elapsed >= 30 && loaded.latencies.count >= queries) || elapsed > 300
        }
        loaded.seconds = now() - t0
        let maintenance = try? await admin.call("admin.status")["maintenance"]
        let log = daemon.lastLines(200)
        for line in log where line.contains("maintenance") || line.contains("throttle") || line.contains("refine") || line.contains("migration")
            || line.contains("reindex request") {
            progress("  daemon: " + line)
        }
        // Refinement of 40 000 items takes minutes: the idle run started in this phase is usually still running at its end.
        let started = log.contains { $0.contains("maintenance started") && $0.contains("trigger=idle") }
        let refined = log.filter { $0.contains("vectors refined") }
            .compactMap { line in line.split(separator: " ").first { $0.hasPrefix("items=") }.map { Int($0.dropFirst(6)) ?? 0 } }
        loaded.notes.append("migration seen \(sawMigrating ? "yes" : "no"), idle maintenance started \(started ? "yes" : "no"), "
            + "running at the end \(maintenance?["running"]?.boolValue == true ? "yes" : "no"), refined \(refined.reduce(0, +)) reported")
        if log.contains(where: { $0.contains("migration finished") || $0.contains("index file replaced") }) { loaded.notes.append("swapped") }
        await client.close()
        await admin.close()
        return (quiet, loaded)
    }

    private func query(_ client: SearchlightConnection, _ k: Int) async throws -> Int {
        let n = (k * 7919) % items
        let answer = try await client.call("query.user", ["text": .string("numbered \(n)"), "context": ["maxResultCount": 20]])
        return answer["items"]?.arrayValue?.count ?? 0
    }

    private func measure(_ client: SearchlightConnection, _ k: Int, into phase: inout Phase) async {
        let t = now()
        do {
            _ = try await query(client, k)
            phase.latencies.append((now() - t) * 1000)
        } catch {
            phase.errors.append("\(error)")
        }
    }

    private func indexState(_ admin: SearchlightConnection, _ bundle: String) async throws -> String? {
        let s = try await admin.call("admin.status", ["bundle": .string(bundle)])
        return s["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["state"]?.stringValue
    }

    private func drained(_ admin: SearchlightConnection, timeout: Double, daemon: Daemon) async throws {
        let deadline = now() + timeout
        while now() < deadline {
            let requests = try await admin.call("admin.requests")["requests"]?.arrayValue?.count ?? 0
            let a = try await admin.call("admin.status", ["bundle": .string(Self.queried)])
            let count = a["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["items"]?.intValue ?? 0
            if requests == 0, count == items { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        fatal("background load bench: the initial reindex-alls did not end within \(Int(timeout)) s; last lines:\n"
            + daemon.lastLines(20).joined(separator: "\n"))
    }

    /// Busy loops in processes of their own (`/bin/sh`), killed by the caller.
    private func startHogs() -> [pid_t] {
        (0..<hogs).compactMap { _ in
            var pid: pid_t = 0
            let args = ["/bin/sh", "-c", "while :; do :; done"]
            var argv: [UnsafeMutablePointer<CChar>?] = args.map { strdup($0) } + [nil]
            defer { for a in argv { free(a) } }
            return posix_spawn(&pid, "/bin/sh", nil, nil, &argv, environ) == 0 ? pid : nil
        }
    }

    private func writeUnit(_ label: String, control: String) throws {
        try FileManager.default.createDirectory(atPath: control, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/units", withIntermediateDirectories: true)
        try Data("ok".utf8).write(to: URL(fileURLWithPath: control + "/mode"))
        let unit = """
            <?xml version="1.0" encoding="UTF-8"?>
            <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
            <plist version="1.0">
            <dict>
                <key>Label</key><string>\(label)</string>
                <key>BundleIdentifier</key><string>\(label)</string>
                <key>Program</key><string>\(ThrottleBench.extensionPath)</string>
                <key>ProcessType</key><string>Standard</string>
                <key>ThrottleInterval</key><integer>0</integer>
                <key>TimeOut</key><integer>600</integer>
                <key>EnvironmentVariables</key>
                <dict><key>TEST_EXTENSION_CONTROL</key><string>\(control)</string><key>TEST_EXTENSION_ITEMS</key><string>\(items)</string></dict>
            </dict>
            </plist>
            """
        try Data(unit.utf8).write(to: URL(fileURLWithPath: dir + "/units/\(label).plist"))
    }
}

extension BenchRun {
    // MARK: - Query under background load

    func backgroundLoad() async throws {
        guard FileManager.default.isExecutableFile(atPath: ThrottleBench.extensionPath) else {
            progress("background load: skipped, no test extension at \(ThrottleBench.extensionPath) (built by `swift build -c release`)")
            return
        }
        let bench = BackgroundLoadBench(dir: dir + "-background", queries: max(200, options.queries))
        let (quiet, loaded, unlowered) = try await bench.run(compare: options.comparePriority)
        func report(_ name: String, _ p: BackgroundLoadBench.Phase, target: Bool) {
            let f = Figure(p.latencies)
            progress(String(format: "%@: %d queries in %.1f s, p50 %.2f ms, p99 %.2f ms, max %.1f ms, %d errors (%@)%@", name,
                p.latencies.count, p.seconds, f.percentile(0.5), f.percentile(0.99), f.max, p.errors.count,
                p.notes.joined(separator: ", "), p.errors.isEmpty ? "" : " first: \(p.errors[0])"))
            var p50 = Row(scenario: "\(name) at 20k, p50", figure: Figure([f.percentile(0.5)]), unit: "ms", higherIsBetter: false)
            var p99 = Row(scenario: "\(name) at 20k, p99", figure: Figure([f.percentile(0.99)]), unit: "ms", higherIsBetter: false)
            p99.detail = "\(p.latencies.count) queries, \(p.errors.count) errors; \(p.notes.joined(separator: ", "))"
            p50.detail = p99.detail
            if target {
                p99.target = "≤ 100 ms, no error"
                p99.met = f.percentile(0.99) <= 100 && p.errors.isEmpty
            }
            rows.append(p50)
            rows.append(p99)
        }
        report("query quiet (user query top 20, hybrid)", quiet, target: false)
        report("query under background load (migration + reindex-all + maintenance/refinement + 3 CPU hogs)", loaded, target: true)
        if let unlowered {
            report("query under background load, background threads at normal priority (SEARCHLIGHT_BACKGROUND_NICE=0)", unlowered, target: false)
        }
    }
}
