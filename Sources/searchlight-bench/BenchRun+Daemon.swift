#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightWire

/// The scenarios that need the daemon's own processes: reindex-all through the Packages
/// extension, and the daemon's own cost (start, idle, memory).
extension BenchRun {
    // MARK: - 2. Reindex-all

    /// Reindex-all at every size, ascending; the index of the largest stays for the daemon-cost
    /// figures. Queries run on each size's index too (charted; the largest also in the table).
    func reindexAll() async throws {
        guard let reindex else { return }
        var rates: [Int: Figure] = [:]
        for size in options.sizes {
            if options.daemonState != nil, size == options.sizes.last,
                (try? reindex.indexedCount(path: daemon.indexPath(bundle: ReindexBench.label))) == size
            {
                // A kept directory already holds this size (--daemon-state): the daemon has just
                // started on it, so its rows are those of a restart.
                progress("reindex-all \(sizeLabel(size)): reused the index in \(dir) (no reindex rows)")
                if options.scenarios.contains(.query) {
                    try await queries(bundle: ReindexBench.label, size: size, inTable: size > 200_000)
                }
                continue
            }
            try reindex.writeStatusFile(count: size)
            var values: [Double] = []
            for run in 0..<(size > 100_000 ? options.largeRuns : options.runs) {
                let seconds = try await reindex.reindexAll(socket: daemon.socket)
                let indexed = try reindex.indexedCount(path: daemon.indexPath(bundle: ReindexBench.label))
                guard indexed == size else {
                    fatal("reindex-all of \(size) packages left \(indexed) items; the daemon's last lines:\n"
                        + daemon.lastLines(20).joined(separator: "\n"))
                }
                values.append(Double(size) / seconds)
                progress(String(format: "reindex-all %@ run %d: %.2f s, %@ items/s", sizeLabel(size), run + 1, seconds,
                    Report.number(values.last!, unit: itemsPerSecond)))
            }
            let f = Figure(values)
            rates[size] = f
            rows.append(Row(scenario: "reindex-all through the Packages extension, \(sizeLabel(size)) packages", figure: f,
                unit: itemsPerSecond, higherIsBetter: true, size: size, series: "reindex-all (extension process)",
                target: "≥ 15 000 items/s", met: f.median >= 15_000))
            if options.scenarios.contains(.query) {
                try await queries(bundle: ReindexBench.label, size: size, inTable: size == options.sizes.last && size > 200_000)
            }
        }
        if let first = options.sizes.first, let last = options.sizes.last, last > first,
            let small = rates[first]?.median, let large = rates[last]?.median
        {
            // Linear cost means a constant rate: the ratio of the largest size's rate to the smallest's.
            rows.append(Row(scenario: "reindex-all linearity: items/s at \(sizeLabel(last)) ÷ at \(sizeLabel(first))",
                figure: Figure([large / small]), unit: "ratio", higherIsBetter: true, target: "≈ 1 (linear cost)", met: large / small >= 0.7))
        }
    }

    // MARK: - 4. Daemon cost

    /// Waits until no open index builds its vector partition or its ranked index (admin.status);
    /// returns the seconds waited.
    static func awaitNoBuild(socket: String) async throws -> Double {
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        defer { Task { await admin.close() } }
        let start = now()
        while true {
            let status = try await admin.call("admin.status", [:])
            let open = (status["bundles"]?.arrayValue ?? []).flatMap { $0["indexes"]?.arrayValue ?? [] }.filter { $0["open"]?.boolValue == true }
            let busy = open.contains {
                $0["memory"]?["partitionBuilding"]?.boolValue == true || ($0["rankedIndex"]?["pending"]?.intValue ?? 0) > 0
            }
            if !busy { return now() - start }
            if now() - start > 900 { fatal("a build in the daemon did not end within 15 minutes") }
            try await Task.sleep(nanoseconds: 250_000_000)
        }
    }

    /// Waits for the daemon's next heap trim after reads went quiet (admin.status's
    /// `memory.malloc.quietTrims` growing): the resident set a user's idle daemon has between
    /// searches. A status reads the index's summary too (a read), so it is asked 2.5 s apart.
    static func awaitQuietTrim(socket: String) async throws -> Double {
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        defer { Task { await admin.close() } }
        let start = now()
        func trims() async throws -> Int? { try await admin.call("admin.status", [:])["memory"]?["malloc"]?["quietTrims"]?.intValue }
        guard let before = try await trims() else { return 0 }  // a daemon without the trimmer
        while now() - start < 60 {
            try await Task.sleep(nanoseconds: 2_500_000_000)
            if let n = try await trims(), n > before { break }
        }
        return now() - start
    }

    /// admin.status's memory figures in one line: the heap and SQLite's share, and per open index
    /// its readers' caches and vector heap (MiB).
    static func memoryStatus(socket: String) async throws -> String {
        let admin = SearchlightConnection(role: .admin, socketPath: socket)
        defer { Task { await admin.close() } }
        let status = try await admin.call("admin.status", [:])
        func mib(_ v: JSONValue?) -> String { String(format: "%.1f", (v?.doubleValue ?? 0) / 1_048_576) }
        let m = status["memory"]
        var parts = ["malloc in use \(mib(m?["malloc"]?["inUseBytes"])) free \(mib(m?["malloc"]?["freeBytes"]))",
            "SQLite \(mib(m?["sqlite"]?["usedBytes"])) (page caches \(mib(m?["sqlite"]?["pageCacheBytes"])))"]
        for b in status["bundles"]?.arrayValue ?? [] {
            for i in b["indexes"]?.arrayValue ?? [] where i["open"]?.boolValue == true {
                let x = i["memory"]
                parts.append("\(b["bundle"]?.stringValue ?? "?"): \(x?["readers"]?.intValue ?? 0) readers, "
                    + "vector heap \(mib(x?["vectorHeapBytes"])), union scratch \(mib(x?["unionScratchBytes"])), "
                    + "posting lists \(mib(x?["postingCacheBytes"]))")
            }
        }
        return "MiB: " + parts.joined(separator: "; ")
    }

    /// Start-to-ready (empty state, and with the indexes of this run), resident memory with the
    /// largest index open, idle CPU and wakeups (the throttle reaction is ThrottleBench).
    func daemonCost() async throws {
        // Ready with an empty state directory: fresh daemons, one per run.
        for _ in 1..<max(2, options.runs) {
            let fresh = "\(dir)-fresh"
            try? FileManager.default.removeItem(atPath: fresh)
            let d = try Daemon(dir: fresh)
            readyEmpty.append(d.readySeconds)
            d.stop()
        }
        rows.append(Row(scenario: "daemon start to ready, empty state", figure: Figure(readyEmpty.map { $0 * 1000 }), unit: "ms",
            higherIsBetter: false, target: "< 200 ms", met: Figure(readyEmpty).median < 0.2))

        // Memory right after the work, then a restart on the same state (timed), queries, memory again.
        let largest = reindex != nil ? options.sizes.last! : corpus.entries.count
        let bundle = reindex != nil ? ReindexBench.label : queryBundle
        if let sample = ProcessSample(pid: daemon.pid) {
            rows.append(Row(scenario: "resident memory after the run's work (\(sizeLabel(largest)) items indexed last)",
                figure: Figure([Double(sample.residentBytes) / 1_048_576]), unit: "MiB", higherIsBetter: false))
        }
        var readyFull: [Double] = []
        for _ in 0..<options.runs {
            daemon.stop(remove: false)
            daemon = try Daemon(dir: dir)
            readyFull.append(daemon.readySeconds * 1000)
        }
        rows.append(Row(scenario: "daemon start to ready, state of this run (\(sizeLabel(largest))-item index and others)",
            figure: Figure(readyFull), unit: "ms", higherIsBetter: false, target: "< 200 ms", met: Figure(readyFull).median < 200))
        if let bundle {
            // Open the index and touch it the way users would, then read the resident set.
            var bench = QueryBench(corpus: corpus, queries: 50, userTexts: RankedBench.queries(corpus))
            bench.baselineLimit = 1  // the daemon's memory is measured, not the in-process baseline
            _ = try await bench.run(socket: daemon.socket, bundle: bundle, path: daemon.indexPath(bundle: bundle), runs: 1)
        }
        /// The daemon's resident set after the queries, against its target, with its anonymous and
        /// file-backed parts. Read once no background work that holds memory for a while runs (a
        /// vector partition build after the load, a ranked build): the issue's figure is the
        /// settled daemon's, not a build's peak.
        func memoryRow(_ suffix: String, target: String, limitMiB: Double, progressLabel: String) async throws {
            var waited = try await Self.awaitNoBuild(socket: daemon.socket)
            waited += try await Self.awaitQuietTrim(socket: daemon.socket)
            guard let sample = ProcessSample(pid: daemon.pid) else { return }
            let mib = Double(sample.residentBytes) / 1_048_576
            let scenario = "resident memory, restarted, \(sizeLabel(largest))-item index open and queried\(suffix)"
            rows.append(Row(scenario: scenario, figure: Figure([mib]), unit: "MiB", higherIsBetter: false, target: target, met: mib < limitMiB))
            rows.append(Row(scenario: scenario + ": anonymous", figure: Figure([Double(sample.anonymousBytes) / 1_048_576]), unit: "MiB",
                higherIsBetter: false))
            rows.append(Row(scenario: scenario + ": file-backed", figure: Figure([Double(sample.fileBytes) / 1_048_576]), unit: "MiB",
                higherIsBetter: false))
            progress(String(format: "%@: %@ (after waiting %.1f s for background builds and a quiet heap trim); %@", progressLabel, sample.memoryBreakdown, waited,
                try await Self.memoryStatus(socket: daemon.socket)))
        }
        try await memoryRow("", target: "< 100 MiB with semantic search (static tier; issue 32)", limitMiB: 100,
            progressLabel: "memory, restarted")
        if let bundle, ModelDirectory.resolve(systemMode: false).hasTransformer {
            // The same with the transformer loaded (as after a user's first query with it): its
            // hybrid queries embed with it.
            let prepared = try await UserQuery.prepare(index: SearchableIndex(bundleIdentifier: bundle, socketPath: daemon.socket))
            if prepared.state == "loaded" {
                var bench = QueryBench(corpus: corpus, queries: 50, userTexts: RankedBench.queries(corpus))
                bench.baselineLimit = 1
                _ = try await bench.run(socket: daemon.socket, bundle: bundle, path: daemon.indexPath(bundle: bundle), runs: 1)
                try await memoryRow(", transformer loaded", target: "< 160 MiB (issue 32)", limitMiB: 160,
                    progressLabel: "memory, transformer loaded")
            } else {
                progress("memory with the transformer: not loaded (\(prepared.state))")
            }
        }

        // Idle: nothing asked of the daemon for a measured window, after a short settling pause.
        try await Task.sleep(for: .seconds(2))
        guard let before = ProcessSample(pid: daemon.pid) else { return }
        let start = now()
        try await Task.sleep(for: .seconds(options.idleSeconds))
        guard let after = ProcessSample(pid: daemon.pid) else { return }
        let minutes = (now() - start) / 60
        let cpu = (after.cpuSeconds - before.cpuSeconds) / minutes
        progress(String(format: "idle: %.3f CPU-s/min, %.0f wakeups/min over %.0f s (%d context switches since start, %d threads)", cpu,
            Double(after.switches(since: before)) / minutes, options.idleSeconds, after.contextSwitches, after.threads))
        rows.append(Row(scenario: "idle daemon CPU (over \(Int(options.idleSeconds)) s, scaled)", figure: Figure([cpu]), unit: "CPU-s/min",
            higherIsBetter: false, target: "< 0.1", met: cpu < 0.1))
        rows.append(Row(scenario: "idle daemon wakeups (context switches, all threads)",
            figure: Figure([Double(after.switches(since: before)) / minutes]), unit: "wakeups/min", higherIsBetter: false))
    }
}
