import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightDesktop
import SearchlightStore

/// Search across apps in-process (`--scenarios apps`): the corpus (its debtags keywords removed,
/// as in the relevance set) split over six apps' indexes and, beside them, in one index; then
///
/// - the debtags relevance set (nDCG@10) on the one index and across the six (one ranking:
///   `FederatedUserQuery`), lexical and hybrid (static table, weight 0.5);
/// - the latency of a user query across the six against the same query on the one index;
/// - corrections on a public list of common misspellings (codespell's `dictionary.txt`,
///   `--misspellings`), restricted to pairs whose correction is a word of the corpus: precision
///   and recall across the six apps as the daemon suggested before (each app correcting the
///   words missing from its own index, the lists merged) and now (only words no app holds),
///   and on the one index.
struct AppsBench {
    let options: Options
    let corpus: Corpus
    let dir: String
    static let apps = 6

    func run() throws -> [Row] {
        guard let stores = try InProcessStores(scenario: "apps") else { return [] }
        let (encoder, storeOptions) = (stores.encoder, stores.options)
        // `--keep-state DIR`: the indexes are kept in DIR, and reused when an earlier run left them there.
        let dir = options.keepState ?? self.dir
        let reuse = options.keepState != nil && FileManager.default.fileExists(atPath: dir + "/complete")
        if !reuse { try? FileManager.default.removeItem(atPath: dir) }
        defer { if options.keepState == nil { try? FileManager.default.removeItem(atPath: dir) } }
        let union = try IndexStore(path: dir + "/union/_default.sqlite", options: storeOptions)
        let shards = try (0..<Self.apps).map { try IndexStore(path: dir + "/app\($0)/_default.sqlite", options: storeOptions) }
        defer { for s in shards + [union] { s.close() } }
        let items = corpus.untaggedItems
        if !reuse {
            for start in stride(from: 0, to: items.count, by: options.batch) {
                let batch = Array(items[start..<min(start + options.batch, items.count)])
                _ = try union.applySync([.items(batch)])
                for a in 0..<Self.apps {
                    let mine = batch.indices.filter { (start + $0) % Self.apps == a }.map { batch[$0] }
                    _ = try shards[a].applySync([.items(mine)])
                }
            }
            for s in shards + [union] { _ = try s.buildRankedIndex() }
            if options.keepState != nil { _ = FileManager.default.createFile(atPath: dir + "/complete", contents: Data()) }
        }
        for s in shards + [union] { try s.loadVectors() }
        progress("apps: \(items.count) items in one index and over \(Self.apps) apps")
        var rows: [Row] = []
        if options.appsParts.contains("relevance") { rows += try relevance(union: union, shards: shards, encoder: encoder) }
        if options.appsParts.contains("latency") { rows += try latency(union: union, shards: shards, encoder: encoder) }
        if options.appsParts.contains("corrections") { rows += try corrections(union: union, shards: shards) }
        return rows
    }

    // MARK: - The two ways of asking

    static func request(_ text: String, semantic encoder: StaticEncoder?, limit: Int, suggestions: Int = 0, rare: Bool = true) -> UserQueryRequest {
        var r = UserQueryRequest(text: text)
        r.rareCorrections = rare
        r.maxResultCount = limit
        r.maxSuggestionCount = suggestions
        if let encoder { r.semantic = SemanticRequest(vector: encoder.embed(text), weight: 0.5) }
        return r
    }

    /// One index's answer: identifiers best first, and the suggestions.
    static func single(_ r: UserQueryRequest, _ store: IndexStore) throws -> (ids: [String], suggestions: [Suggestion]) {
        // Checked once and the words kept for the stores, as the daemon does (`BundleCalls.userQuery`).
        var r = r
        try r.check(limits: store.options.limits)
        let answer = try store.userQuery(r)
        return (answer.items.compactMap { $0["uniqueIdentifier"]?.stringValue }, answer.suggestions)
    }

    /// The daemon's query across apps (`BundleCalls.federatedUserQuery`), in-process.
    static func across(_ r: UserQueryRequest, _ shards: [IndexStore]) throws -> (ids: [String], suggestions: [Suggestion]) {
        // Checked once and the words kept for every store, as the daemon does: each store parsed
        // the text again at each of its calls (5 % of the query's samples, perf).
        var r = r
        try r.check(limits: shards[0].options.limits)
        // One snapshot per index, as the daemon reads them (`SEARCHLIGHT_BENCH_SNAPSHOTS=0`: a read
        // per phase, as before issue 31's fix).
        let snapshots = try shards.map { snapshotsOn ? try $0.openSnapshot(semantic: r.semantic != nil) : nil }
        defer { for s in snapshots { s?.close() } }
        var statistics = CorpusStatistics()
        for (s, snapshot) in zip(shards, snapshots) { statistics.add(try s.corpusStatistics(r, snapshot: snapshot)) }
        let tuning = FederatedUserQuery.tuning(r.semantic, statistics: statistics)
        var candidates: [ShardCandidates] = []
        for (s, snapshot) in zip(shards, snapshots) {
            candidates.append(try s.userQueryCandidates(r, statistics: statistics, tuning: tuning,
                completions: FederatedUserQuery.wantsCompletions(candidates, request: r),
                vectorCut: FederatedUserQuery.vectorCut(candidates, request: r), snapshot: snapshot))
        }
        if FederatedUserQuery.needsTail(candidates, request: r) {
            for i in shards.indices {
                candidates[i].tail = try shards[i].userQueryTail(r, statistics: statistics, after: candidates[i].lexical, snapshot: snapshots[i])
            }
        }
        let suggestions = FederatedUserQuery.suggestions(candidates, request: r)
        let hits = try FederatedUserQuery.rank(candidates, semantic: r.semantic, tuning: tuning, limit: r.maxResultCount) {
            (shard, rowids) throws(SearchlightError) -> Set<Int64> in try shards[shard].exactHits(r, among: rowids, snapshot: snapshots[shard])
        }
        var ids: [String] = []
        for (s, shard) in shards.enumerated() {
            let mine = hits.filter { $0.shard == s }
            guard !mine.isEmpty else { continue }
            var items = EncodedItems()
            _ = try shard.writeUserQueryItems(mine.map(\.candidate.rowID), fetch: ["title"], into: &items, snapshot: snapshots[s])
            _ = items
        }
        for s in snapshots { s?.close() }
        // Identifiers in rank order (read apart: the timing above includes writing the items, as the daemon does).
        for h in hits {
            let id = try shards[h.shard].read { db in
                try db.rows("SELECT uid FROM items WHERE rowid = ?", [.integer(h.candidate.rowID)]).first?.string(0)
            }
            if let id { ids.append(id) }
        }
        return (ids, suggestions)
    }

    static let snapshotsOn = ProcessInfo.processInfo.environment["SEARCHLIGHT_BENCH_SNAPSHOTS"] != "0"

    /// The suggestions across apps as the daemon gave them before one ranking: each app's own,
    /// merged in app order.
    static func perAppSuggestions(_ r: UserQueryRequest, _ shards: [IndexStore]) throws -> [Suggestion] {
        var suggestions: [Suggestion] = []
        for s in shards {
            for x in try s.userQuery(r).suggestions where !suggestions.contains(where: { $0.text == x.text }) { suggestions.append(x) }
        }
        return suggestions
    }

    // MARK: - Relevance

    func relevance(union: IndexStore, shards: [IndexStore], encoder: StaticEncoder) throws -> [Row] {
        let judged = try SemanticBench.loadJudgements(options)
        guard !judged.isEmpty else {
            progress("apps: relevance skipped, no \(options.judgements)")
            return []
        }
        var rows: [Row] = []
        for (name, semantic) in [("lexical", nil), ("hybrid, static table, weight 0.5", encoder)] as [(String, StaticEncoder?)] {
            var one: [Double] = [], apps: [Double] = []
            for j in judged {
                let r = Self.request(j.query, semantic: semantic, limit: 100)
                one.append(SemanticBench.ndcg(try Self.single(r, union).ids, j.relevant))
                apps.append(SemanticBench.ndcg(try Self.across(r, shards).ids, j.relevant))
            }
            let mean = { (l: [Double]) in l.reduce(0, +) / Double(max(1, l.count)) }
            progress(String(format: "apps: debtags nDCG@10, %@: one index %.4f, across %d apps %.4f (%+.4f)", name, mean(one), Self.apps,
                mean(apps), mean(apps) - mean(one)))
            rows.append(Row(scenario: "debtags nDCG@10, \(name), one index", figure: Figure([mean(one)]), unit: "", higherIsBetter: true))
            rows.append(Row(scenario: "debtags nDCG@10, \(name), across \(Self.apps) apps", figure: Figure([mean(apps)]), unit: "",
                higherIsBetter: true))
        }
        return rows
    }

    // MARK: - Latency

    func latency(union: IndexStore, shards: [IndexStore], encoder: StaticEncoder) throws -> [Row] {
        let texts = RankedBench.queries(corpus) + ["natural bridges", "read web feeds", "photo editing"]
        var rows: [Row] = []
        // The desktop's search (searchlight-desktop): hybrid, every word, 30 items (its 10 results
        // times 3, room for the per-app cap), no suggestions.
        for (name, semantic) in [("lexical", nil), ("hybrid", encoder), ("desktop", encoder)] as [(String, StaticEncoder?)]
            where options.appsModes.contains(name) {
            var one: [Double] = [], apps: [Double] = [], oneCPU: [Double] = [], appsCPU: [Double] = []
            // The desktop's stale-file check (issue 34) over each across-apps answer, as
            // searchlight-desktop runs it: each result a `file:` URL, here the package's
            // /usr/share/doc/ID/copyright (present for the packages installed here, gone for the others).
            var fileCheck = VanishedFileCheck(), checkTimes: [Double] = [], checked = 0, gone = 0
            for k in 0..<(options.queries + 10) {
                var r = Self.request(texts[k % texts.count], semantic: semantic, limit: name == "desktop" ? 30 : 20,
                    suggestions: name == "desktop" ? 0 : 3)
                r.allWords = name == "desktop"
                var c = threadCPUMilliseconds()
                let a = try milliseconds { _ = try Self.single(r, union) }
                let ac = threadCPUMilliseconds() - c
                c = threadCPUMilliseconds()
                var ids: [String] = []
                let b = try milliseconds { ids = try Self.across(r, shards).ids }
                let bc = threadCPUMilliseconds() - c
                if name == "desktop" {
                    let urls = ids.map { "file:///usr/share/doc/\($0)/copyright" }
                    var query = fileCheck.begin()
                    var n = 0
                    let t = milliseconds { for u in urls where fileCheck.isGone(u, in: &query) { n += 1 } }
                    if k >= 10 { checkTimes.append(t); checked += query.checked; gone += n }
                }
                if k >= 10 {
                    one.append(a)
                    apps.append(b)
                    oneCPU.append(ac)
                    appsCPU.append(bc)
                }
            }
            let f1 = Figure(one), f2 = Figure(apps)
            progress(String(format: "apps: user query (%@), in-process: one index p50 %.2f ms p99 %.2f ms; across %d apps p50 %.2f ms p99 %.2f ms",
                name, f1.percentile(0.5), f1.percentile(0.99), Self.apps, f2.percentile(0.5), f2.percentile(0.99)))
            // The thread's CPU time beside the wall clock: on a shared machine the wall clock counts other programs' turns too.
            let c1 = Figure(oneCPU), c2 = Figure(appsCPU)
            progress(String(format: "apps: user query (%@), thread CPU time: one index p50 %.2f ms p99 %.2f ms; across %d apps p50 %.2f ms p99 %.2f ms",
                name, c1.percentile(0.5), c1.percentile(0.99), Self.apps, c2.percentile(0.5), c2.percentile(0.99)))
            if name == "desktop", !checkTimes.isEmpty {
                let f = Figure(checkTimes)
                progress(String(format: "apps: the desktop's stale-file check after each across-apps query: p50 %.3f ms p99 %.3f ms (%.1f stats a query, %.1f gone)",
                    f.percentile(0.5), f.percentile(0.99), Double(checked) / Double(checkTimes.count), Double(gone) / Double(checkTimes.count)))
                rows.append(Row(scenario: "desktop stale-file check per query, p50", figure: Figure([f.percentile(0.5)]), unit: "ms", higherIsBetter: false))
                rows.append(Row(scenario: "desktop stale-file check per query, p99", figure: Figure([f.percentile(0.99)]), unit: "ms", higherIsBetter: false))
            }
            for (label, f) in [("one index", f1), ("across \(Self.apps) apps", f2)] {
                rows.append(Row(scenario: "user query \(name) in-process, \(label), p50", figure: Figure([f.percentile(0.5)]), unit: "ms", higherIsBetter: false))
                rows.append(Row(scenario: "user query \(name) in-process, \(label), p99", figure: Figure([f.percentile(0.99)]), unit: "ms", higherIsBetter: false))
            }
        }
        return rows
    }

    // MARK: - Corrections

    /// codespell's `misspelling->correction[, correction…]` lines whose misspelling is one plain
    /// lower-case word and one of whose corrections is a word of the corpus.
    func misspellings(vocabulary: Set<String>) -> [(typo: String, fixes: [String])] {
        guard let text = try? String(contentsOfFile: options.misspellings, encoding: .utf8) else {
            progress("apps: corrections skipped, no \(options.misspellings) (apt-get install codespell, or --misspellings FILE)")
            return []
        }
        let plain = { (w: Substring) in w.count >= 3 && w.allSatisfy { $0 >= "a" && $0 <= "z" } }
        var pairs: [(String, [String])] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ">", maxSplits: 1)
            guard parts.count == 2, parts[0].hasSuffix("-") else { continue }
            let typo = parts[0].dropLast()
            let fixes = parts[1].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard plain(typo), fixes.contains(where: { plain(Substring($0)) && vocabulary.contains($0) }) else { continue }
            pairs.append((String(typo), fixes.filter { plain(Substring($0)) }))
        }
        return pairs
    }

    func corrections(union: IndexStore, shards: [IndexStore]) throws -> [Row] {
        // The corpus's words: the text columns' vocabulary of the one index.
        let vocabulary = Set(try union.read { db in
            try db.rows("SELECT term FROM fts_vocab_col WHERE col != 'aux' GROUP BY term").compactMap { $0.string(0) }
        })
        let all = misspellings(vocabulary: vocabulary)
        guard !all.isEmpty else { return [] }
        // An even sample (every n-th pair) bounds the run.
        let step = max(1, all.count / options.misspellingSample)
        let pairs = stride(from: 0, to: all.count, by: step).map { all[$0] }
        let absent = pairs.filter { !vocabulary.contains($0.typo) }.count
        progress("apps: \(all.count) codespell pairs with a correction in the corpus, \(pairs.count) measured "
            + "(\(absent) misspellings absent from the corpus, \(pairs.count - absent) present in it)")
        var rows: [Row] = []
        // `rare`: whether a word the index holds in a few texts is corrected when far rarer than its
        // nearest word (`IndexStore.farRarer`); off, only words no index holds are.
        let ways: [(String, Bool, (UserQueryRequest) throws -> [Suggestion])] = [
            ("one index, absent words only", false, { try Self.single($0, union).suggestions }),
            ("one index, and far rarer words", true, { try Self.single($0, union).suggestions }),
            ("across \(Self.apps) apps, each app's own", false, { try Self.perAppSuggestions($0, shards) }),
            ("across \(Self.apps) apps, one vocabulary, absent words only", false, { try Self.across($0, shards).suggestions }),
            ("across \(Self.apps) apps, one vocabulary, and far rarer words", true, { try Self.across($0, shards).suggestions }),
        ]
        for (name, rare, suggest) in ways {
            var right = 0, wrong = 0, falseOnCorrect = 0, correctWords = 0, rightPresent = 0
            for p in pairs {
                // A whole word, typed and followed by a space: only a correction can be suggested.
                let offered = try suggest(Self.request(p.typo + " ", semantic: nil, limit: 0, suggestions: 3, rare: rare)).filter { $0.kind == "correction" }
                if let first = offered.first {
                    if p.fixes.contains(first.text.trimmingCharacters(in: .whitespaces)) {
                        right += 1
                        if vocabulary.contains(p.typo) { rightPresent += 1 }
                    } else { wrong += 1 }
                }
                // The correct spelling: it has hits, so nothing should be corrected.
                if let fix = p.fixes.first(where: vocabulary.contains) {
                    correctWords += 1
                    let r = try suggest(Self.request(fix + " ", semantic: nil, limit: 0, suggestions: 3, rare: rare))
                    if r.contains(where: { $0.kind == "correction" }) { falseOnCorrect += 1 }
                }
            }
            let offered = right + wrong + falseOnCorrect
            let precision = offered == 0 ? 0 : Double(right) / Double(offered)
            let recall = Double(right) / Double(max(1, pairs.count))
            progress(String(format: "apps: corrections, %@: precision %.3f, recall %.3f (%d right, %d of them in the corpus, %d wrong of %d misspellings; %d corrections of %d correctly spelled words)",
                name, precision, recall, right, rightPresent, wrong, pairs.count, falseOnCorrect, correctWords))
            rows.append(Row(scenario: "codespell corrections precision, \(name)", figure: Figure([precision]), unit: "", higherIsBetter: true))
            rows.append(Row(scenario: "codespell corrections recall, \(name)", figure: Figure([recall]), unit: "", higherIsBetter: true))
        }
        return rows
    }
}
