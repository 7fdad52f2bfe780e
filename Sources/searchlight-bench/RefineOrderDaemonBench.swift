import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// Refinement where users look first through the real daemon (issue 32 item 3;
/// `--scenarios refine-order-daemon`, not in the default set): the corpus (debtags keywords
/// removed) donated to a daemon whose fake `--proc-root` reads busy, so nothing refines yet; a
/// user session through the SDK (the relevance set's even queries as hybrid user queries, the
/// first two results of each opened with `userEngaged`); then the machine made idle for
/// `--refine-minutes` (the figure is 10), so the daemon's own idle maintenance refines
/// in the order it chooses; then busy again. Measured:
///
/// - refined items/s over the idle window, from `admin.status`, and per CPU-second of the daemon;
/// - the share of the top 10 hits that are refined, the daemon answering the session's queries
///   ("seen") and the odd queries, never run before ("unseen"); which hits are refined is read
///   from the index file once the daemon has stopped.
struct RefineOrderDaemonBench {
    let options: Options
    let corpus: Corpus
    let dir: String
    let bundle = "bench.refine-order"

    func run() async throws -> [Row] {
        let model = ModelDirectory.resolve(systemMode: false)
        guard model.hasTransformer else {
            progress("refinement order through the daemon: skipped, no model in \(model.path) (make model)")
            return []
        }
        guard let stores = try InProcessStores(scenario: "refinement order through the daemon") else { return [] }
        let judged = try SemanticBench.loadJudgements(options)
        guard !judged.isEmpty else {
            progress("refinement order through the daemon: skipped, no relevance set (\(options.judgements)) for the user session")
            return []
        }
        let procRoot = dir + "/proc"
        try? FileManager.default.removeItem(atPath: dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try writeFakePressure(procRoot: procRoot, cpu: 70)  // busy: no maintenance while donating and during the session
        let daemon = try Daemon(dir: dir + "/daemon", arguments: ["--model-dir", model.path, "--proc-root", procRoot,
            "--resume-after", "1", "--idle-after", "1", "--maintenance-interval", "1", "--model-idle", "3600",
            // The idle maintenance's order is measured, not the small-index share.
            "--refine-share-items", "0"], environment: Daemon.boostEnvironment(options))
        daemon.boost(options)
        var stopped = false
        defer { if !stopped { daemon.stop() } }
        let admin = SearchlightConnection(role: .admin, socketPath: daemon.socket)
        func refined() async throws -> Int {
            let status = try await admin.call("admin.status")
            let entry = status["bundles"]?.arrayValue?.first { $0["bundle"]?.stringValue == bundle }?["indexes"]?.arrayValue?.first
            return entry?["refined"]?.intValue ?? 0
        }
        let items = corpus.untaggedItems
        _ = try await donate(items, socket: daemon.socket, bundle: bundle, clients: 4, batch: options.batch)
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: daemon.socket)
        var context = UserQueryContext()
        context.maxResultCount = 10
        context.semanticSearch = true
        func top10(_ q: String) async throws -> (UserQuery, [SearchableItem]) {
            let query = UserQuery(userQueryString: q, userQueryContext: context, index: index)
            return (query, try await query.run().items)
        }
        let seen = judged.indices.filter { $0 % 2 == 0 }.map { judged[$0].query }
        let unseen = judged.indices.filter { $0 % 2 == 1 }.map { judged[$0].query }
        // The user's session: each query's results looked at, the first two opened.
        for q in seen {
            let (query, hits) = try await top10(q)
            for item in hits.prefix(2) { try await query.userEngaged(item) }
        }
        let seconds = options.refineMinutes * 60
        progress("refinement order through the daemon: \(items.count) items donated, \(seen.count) queries run and opened; "
            + String(format: "the machine idle for %.1f min", options.refineMinutes))
        let before = try await refined()
        try writeFakePressure(procRoot: procRoot, cpu: 0)
        let t0 = now(), cpu0 = ProcessSample(pid: daemon.pid)?.cpuSeconds ?? 0
        var reported = t0
        while now() - t0 < seconds {
            try await Task.sleep(for: .seconds(1))
            if now() - reported >= 60 {
                reported = now()
                progress(String(format: "refinement order through the daemon: %d refined after %.0f s", try await refined(), now() - t0))
            }
        }
        try writeFakePressure(procRoot: procRoot, cpu: 70)
        let elapsed = now() - t0, cpu = (ProcessSample(pid: daemon.pid)?.cpuSeconds ?? 0) - cpu0
        // The batch in flight finishes; the count settles within a sampling period or two.
        try await Task.sleep(for: .seconds(5))
        let done = try await refined() - before
        // The daemon's answers now (the user coming back), then which of those hits are refined.
        var seenIDs: [[String]] = [], unseenIDs: [[String]] = []
        for q in seen { seenIDs.append(try await top10(q).1.map(\.uniqueIdentifier)) }
        for q in unseen { unseenIDs.append(try await top10(q).1.map(\.uniqueIdentifier)) }
        await index.close()
        await admin.close()
        daemon.stop(remove: false)
        stopped = true
        let store = try IndexStore(path: daemon.indexPath(bundle: bundle), options: stores.options)
        defer { store.close() }
        func share(_ lists: [[String]]) throws -> Double {
            var vectors = 0, r = 0
            for ids in lists {
                let c = try store.refinedCount(identifiers: ids)
                vectors += c.vectors
                r += c.refined
            }
            return Double(r) / Double(max(vectors, 1))
        }
        let (s, u) = (try share(seenIDs), try share(unseenIDs))
        let rate = Double(done) / max(elapsed, 0.001), perCPU = Double(done) / max(cpu, 0.001)
        let minutes = String(format: options.refineMinutes < 1 ? "%.1f" : "%.0f", options.refineMinutes)
        progress(String(format: "refinement order through the daemon: %d items in %.0f s idle (%.1f items/s, %.1f per CPU-second of the daemon); "
            + "top-10 hits refined: %.1f %% of the session's queries, %.1f %% of the others", done, elapsed, rate, perCPU, s * 100, u * 100))
        return [
            Row(scenario: "refinement through the daemon's idle maintenance: items/s", figure: Figure([rate]), unit: "items/s",
                higherIsBetter: true, size: items.count),
            Row(scenario: "refinement through the daemon's idle maintenance: items per CPU-second", figure: Figure([perCPU]), unit: "items/s",
                higherIsBetter: true, size: items.count),
            Row(scenario: "refinement through the daemon: share of top-10 hits refined after \(minutes) min idle, queries the user ran",
                figure: Figure([s * 100]), unit: "%", higherIsBetter: true, size: items.count),
            Row(scenario: "refinement through the daemon: share of top-10 hits refined after \(minutes) min idle, other queries",
                figure: Figure([u * 100]), unit: "%", higherIsBetter: true, size: items.count),
        ]
    }
}
