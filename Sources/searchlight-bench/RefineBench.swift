#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightKit
import SearchlightSemantic
import SearchlightWire

/// Background refinement through the real daemon (issue 18; Docs/SemanticSearch.md,
/// "Refinement"): the transformer replacing the static vectors as idle maintenance, with the
/// model `make model` installed.
///
/// The daemon reads a fake `--proc-root` (as `ThrottleBench`): the bench holds it paused (cpu
/// pressure over the pause mark) while the items are donated, then makes the machine idle, so the
/// idle trigger starts maintenance and refinement (`--idle-after 1`, `--maintenance-interval 1`,
/// `--resume-after 1`; the sampling period stays the default `--load-interval 2`). Measured:
///
/// - **throughput**, items/s, from `admin.status`'s `refined` count, polled, over the stretches in
///   which refinement ran undisturbed, and per CPU-second of the daemon;
/// - **pause latency**: pressure written at a random phase of the sampling period while a batch
///   is under way, to the `maintenance.finished` event with `yielded` (the refinement stopped and
///   the run gave way). The bound is one sampling period plus the batch in flight;
/// - **resume**: pressure gone to the count rising again (the throttle steps down twice after
///   `--resume-after`, then `--idle-after` of quiet: about 4 s here, by design, not a reaction time).
///
/// `full` refines the whole corpus (indexed without its debtags keywords) and runs the relevance
/// set before (lexical, hybrid with the static table) and after (hybrid with the transformer on
/// both sides): `--scenarios refined`. Otherwise `count` items and no relevance: part of
/// `--scenarios semantic`.
struct RefineBench {
    let options: Options
    let corpus: Corpus
    let dir: String
    let count: Int
    let full: Bool
    /// Keep `dir` (the daemon's indexes) at the end, and reuse it when it holds the same items
    /// fully refined: `--keep-state DIR`.
    var keep = false

    var procRoot: String { dir + "/proc" }
    let bundle = "bench.refine"

    func writePressure(cpu: Double) throws { try writeFakePressure(procRoot: procRoot, cpu: cpu) }

    func run() async throws -> [Row] {
        let model = ModelDirectory.resolve(systemMode: false)
        guard model.hasTransformer, FileManager.default.fileExists(atPath: model.staticTableFile) else {
            progress("semantic refinement: skipped, no model in \(model.path) (make model)")
            return []
        }
        // The items as `searchlight-semantic tune` and the semantic bench's relevance rows donate
        // them: without the debtags tags (`a::b`, the relevance set's answer), the section kept.
        let items = Array(corpus.untaggedItems.prefix(count))
        // A kept directory from an earlier run: reused when it holds these items, all refined;
        // resumed when it holds them partly refined (a run stopped before the end).
        let kept = keep && FileManager.default.fileExists(atPath: dir + "/daemon/state")
        if !kept { try? FileManager.default.removeItem(atPath: dir) }
        try writePressure(cpu: 70)
        func startDaemon() throws -> Daemon {
            let d = try Daemon(dir: dir + "/daemon", arguments: ["--model-dir", model.path, "--proc-root", procRoot,
                "--resume-after", "1", "--idle-after", "1", "--maintenance-interval", "1", "--model-idle", "10",
                // Idle maintenance refines here (it is what the pauses measure), not the share of small indexes.
                "--refine-share-items", "0"], environment: Daemon.boostEnvironment(options))
            d.boost(options)
            return d
        }
        var daemon = try startDaemon()
        defer {
            daemon.stop(remove: !keep)
            if keep { progress("semantic refinement: the daemon's directory kept in \(dir)") } else { try? FileManager.default.removeItem(atPath: dir) }
        }
        var admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        func counts() async throws -> (vectors: Int, refined: Int) {
            let status = try await admin.call("admin.status")
            let entry = status["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == bundle }?["indexes"]?.arrayValue?.first
            return (entry?["vectors"]?.intValue ?? 0, entry?["refined"]?.intValue ?? 0)
        }
        let judged = full ? Self.restrict(try SemanticBench.loadJudgements(options), to: items) : []
        var rows: [Row] = []
        var resumed = false
        if kept {
            let (vectors, refined) = try await counts()
            if vectors == items.count && refined == vectors {
                progress("semantic refinement: \(dir) reused, \(refined) of \(vectors) vectors refined: relevance only")
                let index = SearchableIndex(bundleIdentifier: bundle, socketPath: daemon.socket)
                if !judged.isEmpty {
                    let lexical = try await relevance(judged, index: index, name: "lexical", semantic: false, lexical: [], into: &rows)
                    rows += loadStaticRows()
                    try await refinedRelevance(judged, index: index, lexical: lexical, into: &rows)
                    try await staticQueryRelevance(judged, index: index, lexical: lexical, admin: admin, into: &rows)
                }
                await index.close()
                await admin.close()
                return rows
            }
            if vectors == items.count && FileManager.default.fileExists(atPath: staticRowsFile) {
                progress("semantic refinement: \(dir) holds \(refined) of \(vectors) vectors refined: resuming the refinement")
                resumed = true
            } else {
                progress("semantic refinement: \(dir) holds \(refined) of \(vectors) vectors refined, not the \(items.count) items: "
                    + "starting over")
                await admin.close()
                daemon.stop(remove: true)
                try? FileManager.default.removeItem(atPath: dir)
                try writePressure(cpu: 70)
                daemon = try startDaemon()
                admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
            }
        }
        let events = EventLog()
        let monitor = SearchlightConnection(role: .admin, socketPath: daemon.socket, onNotification: { events.record($0, $1) })
        _ = try await monitor.call("admin.monitor")
        defer { Task { [admin] in await monitor.close(); await admin.close() } }

        if !resumed { _ = try await donate(Array(items), socket: daemon.socket, bundle: bundle, clients: 4, batch: options.batch) }
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: daemon.socket)
        var lexical: [Double] = []
        if !judged.isEmpty {
            lexical = try await relevance(judged, index: index, name: "lexical", semantic: false, lexical: [], into: &rows)
            if resumed {
                // The static states were measured by the run that donated (the index is partly refined now).
                rows += loadStaticRows()
            } else {
                var states: [Row] = []
                // Before any refinement, the transformer not loaded: static vectors, static query.
                _ = try await relevance(judged, index: index, name: "hybrid, static table", semantic: true, lexical: lexical, into: &states)
                // The second of the four states (issue 37): the static index with the transformer's
                // query, as after `prepare()` before refinement ran.
                let prepared = try await UserQuery.prepare(index: index)
                if prepared.state != "loaded" { fatal("semantic refinement: the transformer is not loaded (\(prepared))") }
                _ = try await relevance(judged, index: index, name: "hybrid, static index, transformer query", semantic: true,
                    lexical: lexical, into: &states)
                rows += states
                if keep { saveStaticRows(states) }
            }
        }

        let total = try await counts().vectors
        progress("semantic refinement: \(total) items donated with static vectors; the machine made idle")

        // Undisturbed stretches: (seconds, items, daemon CPU seconds).
        var stretches: [(Double, Int, Double)] = []
        var pauses: [Double] = [], resumes: [Double] = [], bounds: [Double] = []
        /// Polls until refinement has run `items` more (or is done); returns the stretch measured
        /// from the first rise of the count, so the start-up (throttle, idle wait, model load) is out.
        func runFor(_ items: Int) async throws -> Int {
            var first: (t: Double, n: Int, cpu: Double)?
            var last = try await counts().refined
            let deadline = now() + (full ? 4 * 3600 : 900)
            var reported = now()
            while now() < deadline {
                if now() - reported >= 60 {
                    reported = now()
                    progress("semantic refinement: \(last) of \(total) refined")
                }
                try await Task.sleep(for: .milliseconds(500))
                let n = try await counts().refined
                let t = now(), cpu = ProcessSample(pid: daemon.pid)?.cpuSeconds ?? 0
                if first == nil, n > last { first = (t, n, cpu) }
                last = n
                if let f = first, n - f.n >= items || n >= total {
                    if n > f.n { stretches.append((t - f.t, n - f.n, cpu - f.cpu)) }
                    return n
                }
                if n >= total { return n }  // finished before a rise was seen
            }
            fatal("semantic refinement: \(last) of \(total) refined after the deadline; last lines:\n" + daemon.lastLines(20).joined(separator: "\n"))
        }

        try writePressure(cpu: 0)
        let resumeT0 = now()
        var refined = try await runFor(0)
        progress(String(format: "semantic refinement: started %.1f s after the machine became idle (throttle steps, --idle-after, the model's load)", now() - resumeT0))
        for run in 1...max(3, options.runs) where refined < total {
            // A steady stretch, then pressure at a random phase of the 2 s sampling period.
            refined = try await runFor(full ? min(2000, max(150, total / 8)) : 150)
            guard refined < total else { break }
            try await Task.sleep(for: .seconds(Double.random(in: 0..<2)))
            let t0 = now()
            try writePressure(cpu: 70)
            guard let stopped = await events.first("maintenance.finished", after: t0, timeout: 30, where: { $0["yielded"]?.boolValue == true }) else {
                fatal("semantic refinement: no yielded maintenance run within 30 s of the pressure; last lines:\n"
                    + daemon.lastLines(20).joined(separator: "\n"))
            }
            pauses.append(stopped - t0)
            // The bound: one sampling period, then the batch in flight, at the rate just measured.
            if let s = stretches.last, s.1 > 0 { bounds.append(2 + 16 * s.0 / Double(s.1)) }
            let atPause = try await counts().refined
            try await Task.sleep(for: .seconds(3))
            let still = try await counts().refined
            if still != atPause { fatal("semantic refinement: \(still - atPause) items refined while paused") }
            let t1 = now()
            try writePressure(cpu: 0)
            var n = still
            while n == still {
                try await Task.sleep(for: .milliseconds(100))
                n = try await counts().refined
                if now() - t1 > 60 { fatal("semantic refinement: did not resume within 60 s of the load falling") }
            }
            resumes.append(now() - t1)
            refined = n
            progress(String(format: "semantic refinement run %d: paused %.2f s after the pressure write (sampling period 2 s), resumed %.1f s after it fell",
                run, pauses.last!, resumes.last!))
        }
        if full {
            refined = try await runFor(total)
            progress("semantic refinement: all \(refined) of \(total) refined")
        }
        let seconds = stretches.map(\.0).reduce(0, +), done = stretches.map(\.1).reduce(0, +), cpu = stretches.map(\.2).reduce(0, +)
        let rate = Double(done) / max(seconds, 0.001), perCPU = Double(done) / max(cpu, 0.001)
        progress(String(format: "semantic refinement: %d items in %.0f s of undisturbed stretches: %.1f items/s wall, %.1f per CPU-second of the daemon",
            done, seconds, rate, perCPU))
        let size = items.count
        rows.append(Row(scenario: "refinement through the daemon (idle maintenance, transformer), wall", figure: Figure([rate]),
            unit: "items/s", higherIsBetter: true, size: size))
        rows.append(Row(scenario: "refinement through the daemon, per CPU-second of the daemon", figure: Figure([perCPU]),
            unit: "items/s", higherIsBetter: true, size: size))
        // Each pause against its own bound (a batch is 0.2 s on an idle machine, seconds on a loaded one).
        let within = zip(pauses, bounds).allSatisfy { $0 <= $1 } && bounds.count == pauses.count
        var pauseRow = Row(scenario: "refinement: pressure over the pause mark to the run yielded (--load-interval 2 s)", figure: Figure(pauses),
            unit: "s", higherIsBetter: false, size: size, target: "≤ 2 s + the batch in flight", met: within)
        pauseRow.detail = "bounds: " + bounds.map { String(format: "%.2f s", $0) }.joined(separator: ", ")
        progress("semantic refinement: pauses " + pauses.map { String(format: "%.2f", $0) }.joined(separator: ", ") + " s; " + pauseRow.detail!)
        rows.append(pauseRow)
        rows.append(Row(scenario: "refinement: load gone to refinement resumed (--resume-after 1 ×2, --idle-after 1)", figure: Figure(resumes),
            unit: "s", higherIsBetter: false, size: size))

        if !judged.isEmpty {
            try await refinedRelevance(judged, index: index, lexical: lexical, into: &rows)
            try await staticQueryRelevance(judged, index: index, lexical: lexical, admin: admin, into: &rows)
        }
        await index.close()
        return rows
    }

    /// The two static-index states' rows, kept beside the daemon's directory (`--keep-state`), so
    /// that a run resuming or reusing a refined index reports all four states.
    var staticRowsFile: String { dir + "/static-states.tsv" }

    func saveStaticRows(_ rows: [Row]) {
        let text = rows.map { "\($0.scenario)\t\($0.figure.values.first ?? 0)" }.joined(separator: "\n") + "\n"
        _ = FileManager.default.createFile(atPath: staticRowsFile, contents: Data(text.utf8))
    }

    func loadStaticRows() -> [Row] {
        guard let text = try? String(contentsOfFile: staticRowsFile, encoding: .utf8) else {
            progress("semantic refinement: no \(staticRowsFile): the static-index states are not reported")
            return []
        }
        return text.split(separator: "\n").compactMap { line -> Row? in
            let parts = line.split(separator: "\t", maxSplits: 1)
            guard parts.count == 2, let value = Double(parts[1]) else { return nil }
            progress(String(format: "semantic refinement, measured before refinement: %@ %.3f", String(parts[0]), value))
            return Row(scenario: String(parts[0]), figure: Figure([value]), unit: "", higherIsBetter: true)
        }
    }

    /// The judgements on a subset of the corpus (`--refine-items N`): each query's relevant items
    /// cut to those donated, and the queries left with none dropped, so that every state is
    /// scored against what the index can hold.
    static func restrict(_ judged: [SemanticBench.Judgement], to items: [SearchableItem]) -> [SemanticBench.Judgement] {
        let ids = Set(items.map(\.uniqueIdentifier))
        let kept = judged.compactMap { j -> SemanticBench.Judgement? in
            var j = j
            j.relevant.formIntersection(ids)
            return j.relevant.isEmpty ? nil : j
        }
        if kept.count != judged.count || kept.map(\.relevant.count).reduce(0, +) != judged.map(\.relevant.count).reduce(0, +) {
            progress("semantic refinement: judgements cut to the \(items.count) items donated: \(kept.count) of \(judged.count) queries keep a relevant item, "
                + "\(kept.map(\.relevant.count).reduce(0, +)) of \(judged.map(\.relevant.count).reduce(0, +)) relevant pairs")
        }
        return kept
    }

    /// The fourth state (issue 37): the refined index with the static table's query, once the
    /// transformer is unloaded (`--model-idle 10`: queries and refinement keep it loaded until
    /// then).
    func staticQueryRelevance(_ judged: [SemanticBench.Judgement], index: SearchableIndex, lexical: [Double], admin: SearchlightConnection,
                              into rows: inout [Row]) async throws {
        let t0 = now()
        while try await admin.call("admin.status")["semantic"]?["state"]?.stringValue == "loaded" {
            if now() - t0 > 120 { fatal("semantic refinement: the transformer still loaded 120 s after the last query") }
            try await Task.sleep(for: .milliseconds(500))
        }
        _ = try await relevance(judged, index: index, name: "hybrid, refined index, static query", semantic: true, lexical: lexical, into: &rows)
    }

    /// The relevance rows of the refined index: the transformer embeds the queries (loaded by
    /// refinement or, on a reused directory, by `prepare`; prepare keeps it loaded).
    func refinedRelevance(_ judged: [SemanticBench.Judgement], index: SearchableIndex, lexical: [Double], into rows: inout [Row]) async throws {
        let state = try await UserQuery.prepare(index: index)
        if state.state != "loaded" { fatal("semantic refinement: the transformer is not loaded (\(state))") }
        _ = try await relevance(judged, index: index, name: "hybrid, refined (transformer)", semantic: true, lexical: lexical, into: &rows)
    }

    /// Every judgement's query through `query.user`, top 100; the rows and each query's nDCG@10.
    func relevance(_ judged: [SemanticBench.Judgement], index: SearchableIndex, name: String, semantic: Bool, lexical: [Double],
                   into rows: inout [Row]) async throws -> [Double] {
        var c = UserQueryContext()
        c.maxResultCount = 100
        c.semanticSearch = semantic
        var n: [Double] = [], r: [Double] = []
        for j in judged {
            let answer = try await UserQuery(userQueryString: j.query, userQueryContext: c, index: index).run()
            let ranking = answer.items.map(\.uniqueIdentifier)
            n.append(SemanticBench.ndcg(ranking, j.relevant))
            r.append(SemanticBench.recall(ranking, j.relevant))
        }
        rows += SemanticBench.relevanceRows(judged, ndcg: n, recall: r, lexical: lexical,
            scenario: " (\(sizeLabel(count)) items, refinement bench), \(name)", label: "relevance, \(sizeLabel(count)) items without tags, \(name)")
        return n
    }
}

/// The daemon's events (`admin.monitor`) with their arrival time.
private final class EventLog: Sendable {
    private let events = Mutex<[(name: String, params: JSONValue, time: Double)]>([])

    func record(_ method: String, _ params: JSONValue) {
        guard method == "admin.event", let name = params["event"]?.stringValue else { return }
        let t = now()
        events.withLock { $0.append((name, params, t)) }
    }

    /// The arrival time of the first `name` event after `t0` that `matches`, waiting up to `timeout`.
    func first(_ name: String, after t0: Double, timeout: Double, where matches: (JSONValue) -> Bool) async -> Double? {
        let deadline = now() + timeout
        while now() < deadline {
            if let hit = events.withLock({ $0.first { $0.name == name && $0.time >= t0 && matches($0.params) } }) { return hit.time }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return nil
    }
}
