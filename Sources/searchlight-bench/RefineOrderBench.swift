import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightStore

/// Refinement where users look first (issue 32 item 3; `--scenarios refine-order`), in-process:
/// the corpus (debtags keywords removed, as in the relevance set) donated once with static
/// vectors, then, on two copies of that file, the same user session and `--refine-minutes` of
/// refinement by the transformer (one thread, the daemon's idle run), one copy in
/// `RefinementOrder.whereUsersLook`, the other in rowid order (the order before). The session:
/// the relevance set's even queries run as hybrid user queries, the first two results of each
/// opened (`recordEngagement`). Measured, per order:
///
/// - refined items/s;
/// - the share of the top 10 hits that are refined afterwards, on the queries of the session
///   ("seen": a user coming back to what they searched) and on the odd queries, never run before
///   ("unseen": where only the newest-first walk can help).
struct RefineOrderBench {
    let options: Options
    let corpus: Corpus
    let dir: String

    func run() throws -> [Row] {
        let model = ModelDirectory.resolve(systemMode: false)
        guard model.hasTransformer else {
            progress("refinement order: skipped, no model in \(model.path) (make model)")
            return []
        }
        guard let stores = try InProcessStores(scenario: "refinement order") else { return [] }
        let judged = try SemanticBench.loadJudgements(options)
        guard !judged.isEmpty else {
            progress("refinement order: skipped, no relevance set (\(options.judgements)) for the user session")
            return []
        }
        let (encoder, storeOptions) = (stores.encoder, stores.options)
        try? FileManager.default.removeItem(atPath: dir)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let items = corpus.untaggedItems
        let base = try IndexStore(path: dir + "/base/_default.sqlite", options: storeOptions)
        for start in stride(from: 0, to: items.count, by: options.batch) {
            _ = try base.applySync([.items(Array(items[start..<min(start + options.batch, items.count)]))])
        }
        _ = try base.buildRankedIndex()
        base.close()
        let seconds = options.refineMinutes * 60
        progress("refinement order: \(items.count) items with static vectors; \(judged.count) queries, the even ones run and opened first; "
            + String(format: "%.1f", options.refineMinutes) + " min of refinement per order")
        let transformer = try TransformerEncoder(directory: model, queryThreads: 1)
        let seen = judged.indices.filter { $0 % 2 == 0 }.map { judged[$0].query }
        let unseen = judged.indices.filter { $0 % 2 == 1 }.map { judged[$0].query }
        var rows: [Row] = []
        let minutes = String(format: options.refineMinutes < 1 ? "%.1f" : "%.0f", options.refineMinutes)
        for (name, order) in [("where users look first", RefinementOrder.whereUsersLook), ("rowid order (before)", .rowid)] {
            let copy = dir + "/\(order == .rowid ? "rowid" : "users")"
            try FileManager.default.copyItem(atPath: dir + "/base", toPath: copy)
            let store = try IndexStore(path: copy + "/_default.sqlite", options: storeOptions)
            defer { store.close() }
            try store.loadVectors()
            // The user's session: each query's first results looked at, the first two opened.
            for q in seen {
                let ids = try AppsBench.single(AppsBench.request(q, semantic: encoder, limit: 10), store).ids
                for id in ids.prefix(2) { try store.recordEngagement(identifier: id, suggestion: nil, weight: 1) }
            }
            let start = now(), cpuStart = cpuSeconds()
            let refined = try store.refineVectors(order: order, embed: { transformer.embed($0, threads: 1) },
                yieldNow: { now() - start >= seconds })
            let elapsed = now() - start, cpu = cpuSeconds() - cpuStart
            func share(_ queries: [String]) throws -> Double {
                var vectors = 0, done = 0
                for q in queries {
                    let ids = try AppsBench.single(AppsBench.request(q, semantic: encoder, limit: 10), store).ids
                    let c = try store.refinedCount(identifiers: ids)
                    vectors += c.vectors
                    done += c.refined
                }
                return Double(done) / Double(max(vectors, 1))
            }
            let (s, u) = (try share(seen), try share(unseen))
            let rate = Double(refined) / max(elapsed, 0.001), perCPU = Double(refined) / max(cpu, 0.001)
            progress(String(format: "refinement order, %@: %d items in %.0f s (%.1f items/s, %.1f per CPU-second); top-10 hits refined: "
                + "%.1f %% of the session's queries, %.1f %% of the others", name, refined, elapsed, rate, perCPU, s * 100, u * 100))
            rows.append(Row(scenario: "refinement, \(name): items/s (transformer, 1 thread)", figure: Figure([rate]), unit: "items/s",
                higherIsBetter: true, size: items.count))
            // The wall rate follows the machine's load; per CPU-second compares the two orders' own cost.
            rows.append(Row(scenario: "refinement, \(name): items per CPU-second", figure: Figure([perCPU]), unit: "items/s",
                higherIsBetter: true, size: items.count))
            rows.append(Row(scenario: "refinement, \(name): share of top-10 hits refined after \(minutes) min, queries the user ran",
                figure: Figure([s * 100]), unit: "%", higherIsBetter: true, size: items.count))
            rows.append(Row(scenario: "refinement, \(name): share of top-10 hits refined after \(minutes) min, other queries",
                figure: Figure([u * 100]), unit: "%", higherIsBetter: true, size: items.count))
        }
        return rows
    }
}
