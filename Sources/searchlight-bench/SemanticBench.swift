import Foundation
import SearchlightKit
import SearchlightSemantic
import SearchlightWire

/// Semantic search through the daemon (Docs/SemanticSearch.md, "Through the daemon"): what the
/// static vectors cost donations (a daemon without the model against one with the static table,
/// alternated, 4 clients), user query latency with semantic search on and off at the corpus's
/// size and at `--sizes`' largest (a synthetic corpus, where the vector side prefilters), and the debtags relevance set (nDCG@10, recall@100) lexical against hybrid, with the
/// corpus indexed without its tag keywords.
struct SemanticBench {
    let options: Options
    let corpus: Corpus
    let dir: String

    static let staticTable = "Models/all-MiniLM-L6-v2-static.bin"

    func run() async throws -> [Row] {
        guard FileManager.default.fileExists(atPath: Self.staticTable) else {
            progress("semantic: skipped, no \(Self.staticTable) (run from the repository root)")
            return []
        }
        let empty = dir + "/no-model", model = dir + "/model"
        for d in [empty, model] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        try? FileManager.default.removeItem(atPath: model + "/static-table.bin")
        try FileManager.default.createSymbolicLink(atPath: model + "/static-table.bin",
            withDestinationPath: FileManager.default.currentDirectoryPath + "/" + Self.staticTable)
        let lexicalDaemon = try Daemon(dir: dir + "/lexical", arguments: ["--model-dir", empty])
        let semanticDaemon = try Daemon(dir: dir + "/semantic", arguments: ["--model-dir", model])
        defer {
            lexicalDaemon.stop(remove: true)
            semanticDaemon.stop(remove: true)
        }
        var rows: [Row] = []
        let items = corpus.entries.map(\.searchableItem)
        var without: [Double] = [], with: [Double] = [], ratios: [Double] = []
        var queryBundle = ""
        for run in 0..<options.runs {
            let a = try await donate(items, socket: lexicalDaemon.socket, bundle: "bench.lexical.r\(run)", clients: 4, batch: options.batch)
            queryBundle = "bench.semantic.r\(run)"
            let b = try await donate(items, socket: semanticDaemon.socket, bundle: queryBundle, clients: 4, batch: options.batch)
            let a2 = try await donate(items, socket: lexicalDaemon.socket, bundle: "bench.lexical.r\(run)b", clients: 4, batch: options.batch)
            without += [a, a2]
            with.append(b)
            ratios.append(b / ((a + a2) / 2))
            progress(String(format: "semantic donation run %d: without vectors %.0f, with static vectors %.0f, %.0f items/s (%.2f×)", run + 1, a, b, a2, ratios.last!))
        }
        let baseline = Figure(without)
        rows.append(Row(scenario: "donation, 4 clients, without the model (no vectors)", figure: baseline, unit: "items/s",
            higherIsBetter: true, size: items.count))
        var row = Row(scenario: "donation, 4 clients, with static vectors", figure: Figure(with), unit: "items/s", baseline: baseline,
            higherIsBetter: true, size: items.count, pairedRatios: ratios)
        row.target = "≥ 0.80× without"
        row.met = (row.ratio ?? 0) >= 0.8
        rows.append(row)

        rows += Self.queryEmbedding()
        let judged = try Self.loadJudgements(options)
        rows += try await queryLatency(texts: judged.map(\.query) + [corpus.userText], bundle: queryBundle, socket: semanticDaemon.socket,
                                       size: items.count, target: 2)
        // The large size (`--sizes`' largest, 1M by default): a synthetic corpus donated to the
        // semantic daemon, so that the vector side prefilters (1-bit codes, then int8 rescoring).
        if let large = options.sizes.max(), large > items.count {
            let synthetic = Corpus.synthetic(count: large)
            let bundle = "bench.semantic.large"
            let rate = try await donate(synthetic.entries.map(\.searchableItem), socket: semanticDaemon.socket, bundle: bundle, clients: 4,
                                        batch: options.batch)
            progress(String(format: "semantic: %@ synthetic items donated with static vectors, %.0f items/s", sizeLabel(large), rate))
            rows += try await queryLatency(texts: RankedBench.queries(synthetic), bundle: bundle,
                                           socket: semanticDaemon.socket, size: large, target: nil, p99Target: 20)
        }

        if !judged.isEmpty {
            rows += try await quality(judged, socket: semanticDaemon.socket)
        } else {
            progress("semantic: no relevance set at \(options.judgements); quality skipped")
        }
        // Background refinement through the daemon: throughput, pause and resume (`RefineBench`;
        // the whole corpus and its relevance: `--scenarios refined`).
        rows += try await RefineBench(options: options, corpus: corpus, dir: dir + "/refine", count: 2000, full: false).run()
        return rows
    }

    /// `--scenarios relevance`: the quality rows of `run()` alone, on a daemon given the static
    /// table and no transformer (so the query is embedded by the table too): the static tier's
    /// figures through the socket without the donation and latency runs.
    func relevanceOnly() async throws -> [Row] {
        guard FileManager.default.fileExists(atPath: Self.staticTable) else {
            progress("relevance: skipped, no \(Self.staticTable) (run from the repository root)")
            return []
        }
        let judged = try Self.loadJudgements(options)
        guard !judged.isEmpty else {
            progress("relevance: no relevance set at \(options.judgements); skipped")
            return []
        }
        let model = dir + "/model"
        try FileManager.default.createDirectory(atPath: model, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: model + "/static-table.bin")
        try FileManager.default.createSymbolicLink(atPath: model + "/static-table.bin",
            withDestinationPath: FileManager.default.currentDirectoryPath + "/" + Self.staticTable)
        let daemon = try Daemon(dir: dir + "/semantic", arguments: ["--model-dir", model])
        defer { daemon.stop(remove: true) }
        return try await quality(judged, socket: daemon.socket)
    }

    /// The transformer's query embedding in this process, one thread (as the daemon embeds a
    /// query), for queries of 8, 16 and 32 ids: CPU time of the thread, 200 times each after a
    /// warm-up. Skipped without the model files (`make model`).
    static func queryEmbedding() -> [Row] {
        let directory = ModelDirectory.resolve(systemMode: false)
        guard directory.hasTransformer, let encoder = try? TransformerEncoder(directory: directory, queryThreads: 1) else {
            progress("semantic: query embedding skipped, no model in \(directory.path) (make model)")
            return []
        }
        func threadCPU() -> Double {
            var t = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
            return Double(t.tv_sec) * 1000 + Double(t.tv_nsec) / 1e6
        }
        let words = encoder.tokenizer.encode(String(repeating: "fast json parser library for reading configuration files ", count: 8))
        var rows: [Row] = []
        for n in [8, 16, 32] {
            let ids = Array(words.prefix(n - 1)) + [encoder.tokenizer.sepID]
            for _ in 0..<10 { _ = encoder.embed(tokenIDs: [ids]) }
            var cpu: [Double] = [], wall: [Double] = []
            for _ in 0..<200 {
                let c = threadCPU()
                wall.append(milliseconds { _ = encoder.embed(tokenIDs: [ids]) })
                cpu.append(threadCPU() - c)
            }
            let form = TransformerEncoder.packedKernelAvailable ? "packed float16" : "OpenBLAS float32"
            var row = Row(scenario: "query embedding, transformer (\(form)), \(n) tokens, CPU p50", figure: Figure([Figure(cpu).percentile(0.5)]),
                unit: "ms", higherIsBetter: false)
            if n == 16 {
                row.target = "≤ 5 ms"
                row.met = row.figure.median <= 5
            }
            progress(String(format: "query embedding, %d tokens: CPU p50 %.2f ms, wall p50 %.2f ms", n, Figure(cpu).percentile(0.5),
                Figure(wall).percentile(0.5)))
            rows.append(row)
        }
        return rows
    }

    /// User query latency through the socket, semantic search off and on (static table),
    /// alternated query by query so that neither gets the quieter moments of the machine.
    func queryLatency(texts: [String], bundle: String, socket: String, size: Int, target: Double?, p99Target: Double? = nil) async throws -> [Row] {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        func context(_ semantic: Bool) -> UserQueryContext {
            var c = UserQueryContext()
            c.maxResultCount = 20
            c.semanticSearch = semantic
            return c
        }
        // Warm up both paths (the ranked index is built after the first queries, the vectors loaded
        // on the first semantic one) until a whole pass answers every query within `settled` ms:
        // at 1M, while the ranked index is still being built, a frequent word takes seconds (or
        // passes the daemon's 10 s limit for one query), which is the build's cost, not a query's.
        let started = now()
        let settled = size > 100_000 ? 100.0 : 1000.0
        var passes = 0
        while true {
            var failed = 0
            for t in texts {
                for s in [false, true] {
                    do {
                        let ms = try await milliseconds { _ = try await UserQuery(userQueryString: t, userQueryContext: context(s), index: index).run() }
                        if ms > settled { failed += 1 }
                    } catch { failed += 1 }
                }
            }
            passes += 1
            if failed == 0 && passes >= 2 { break }
            guard now() - started < 600 else { fatal("semantic: user queries at \(sizeLabel(size)) still fail or take over \(Int(settled)) ms after 10 minutes of warm-up") }
            try await Task.sleep(for: .seconds(size > 100_000 ? 15 : 3))
        }
        var p50: [Bool: [Double]] = [:], p99: [Bool: [Double]] = [:]
        var byText: [String: [Bool: [Double]]] = [:]
        for _ in 0..<options.runs {
            var times: [Bool: [Double]] = [:]
            for q in 0..<options.queries {
                let t = texts[q % texts.count]
                for s in [false, true] {
                    let ms = try await milliseconds {
                        _ = try await UserQuery(userQueryString: t, userQueryContext: context(s), index: index).run()
                    }
                    times[s, default: []].append(ms)
                    byText[t, default: [:]][s, default: []].append(ms)
                }
            }
            for s in [false, true] {
                p50[s, default: []].append(Figure(times[s]!).percentile(0.5))
                p99[s, default: []].append(Figure(times[s]!).percentile(0.99))
            }
        }
        await index.close()
        // Per text, so that a slow tail can be traced to the query that makes it.
        if texts.count <= 10 {
            for t in texts {
                guard let m = byText[t], let off = m[false], let on = m[true] else { continue }
                progress(String(format: "  \"%@\" at %@: lexical p50 %.2f ms max %.1f ms; hybrid p50 %.2f ms max %.1f ms", t, sizeLabel(size),
                    Figure(off).percentile(0.5), off.max() ?? 0, Figure(on).percentile(0.5), on.max() ?? 0))
            }
        }
        var rows: [Row] = []
        for semantic in [false, true] {
            let name = semantic ? "user query, semantic on (hybrid, static table)" : "user query, semantic off (lexical)"
            var r50 = Row(scenario: "\(name) p50, \(sizeLabel(size)) items", figure: Figure(p50[semantic]!), unit: "ms", higherIsBetter: false,
                size: size)
            var r99 = Row(scenario: "\(name) p99, \(sizeLabel(size)) items", figure: Figure(p99[semantic]!), unit: "ms",
                higherIsBetter: false, size: size)
            if semantic, let target {
                r50.target = "≤ \(Int(target)) ms"
                r50.met = r50.figure.median <= target
            }
            if semantic, let p99Target {
                r99.target = "≤ \(Int(p99Target)) ms"
                r99.met = r99.figure.median <= p99Target
            }
            progress(String(format: "%@ at %@: p50 %.2f ms, p99 %.2f ms", name, sizeLabel(size), r50.figure.median, r99.figure.median))
            rows += [r50, r99]
        }
        return rows
    }

    struct Judgement {
        var tag: String
        var query: String
        var relevant: Set<String>
        /// "tuning" or "held-out" (Scripts/semantic/make-debtags-judgements.py); nil in an older file.
        var split: String?
    }

    /// The relevance set of `--judgements`. The default file missing (a checkout without
    /// Scripts/): none, and the quality rows are skipped with a message; a file given that cannot
    /// be read, or that holds no judgement: the bench stops and says so.
    static func loadJudgements(_ options: Options) throws -> [Judgement] {
        let path = options.judgements
        guard let data = FileManager.default.contents(atPath: path) else {
            if path == Options.defaultJudgements { return [] }
            fatal("--judgements: cannot read \(path)")
        }
        let judged: [Judgement] = data.split(separator: 0x0A).compactMap { line in
            guard let o = try? JSONValue.parse(Array(line)), let q = o["query"]?.stringValue, let tag = o["tag"]?.stringValue else { return nil }
            return Judgement(tag: tag, query: q, relevant: Set((o["relevant"]?.arrayValue ?? []).compactMap(\.stringValue)),
                             split: o["split"]?.stringValue)
        }
        if judged.isEmpty { fatal("--judgements: \(path) holds no judgement (JSON lines with tag, query, relevant)") }
        return judged
    }

    /// The queries each relevance figure is reported over: all of them, then each split the
    /// file names (tuning, held-out) when there is more than one.
    static func groups(_ judged: [Judgement]) -> [(name: String, queries: [Int])] {
        var groups = [("all", Array(judged.indices))]
        let splits: [String] = ["tuning", "held-out"].filter { s in judged.contains { $0.split == s } }
        if splits.count > 1 {
            for s in splits { groups.append(("\(s) half", judged.indices.filter { judged[$0].split == s })) }
        }
        return groups
    }

    /// One ranking's relevance over each group: a progress line and an nDCG@10 and a recall@100
    /// row per group (`scenario` gets the group's name), the queries more than 0.1 below `lexical`
    /// named in the line.
    static func relevanceRows(_ judged: [Judgement], ndcg n: [Double], recall r: [Double], lexical: [Double], scenario: String,
                              label: String) -> [Row] {
        var rows: [Row] = []
        for (group, queries) in groups(judged) {
            let mean = queries.map { n[$0] }.reduce(0, +) / Double(max(1, queries.count))
            let recall = queries.map { r[$0] }.reduce(0, +) / Double(max(1, queries.count))
            var worse = ""
            if !lexical.isEmpty {
                let losers = queries.filter { n[$0] < lexical[$0] - 0.1 }
                worse = ", \(losers.count) queries more than 0.1 below lexical"
                    + (losers.isEmpty ? "" : ": " + losers.map { String(format: "%@ %.3f → %.3f", judged[$0].tag, lexical[$0], n[$0]) }
                        .joined(separator: ", "))
            }
            progress(String(format: "%@ (%@, %d queries): nDCG@10 %.3f, recall@100 %.3f%@", label, group, queries.count, mean, recall, worse))
            let suffix = group == "all" ? "" : ", \(group)"
            rows.append(Row(scenario: "debtags nDCG@10\(scenario)\(suffix)", figure: Figure([mean]), unit: "", higherIsBetter: true))
            rows.append(Row(scenario: "debtags recall@100\(scenario)\(suffix)", figure: Figure([recall]), unit: "", higherIsBetter: true))
        }
        return rows
    }

    /// nDCG@10 with binary relevance, and recall@100.
    static func ndcg(_ ranking: [String], _ relevant: Set<String>, k: Int = 10) -> Double {
        var dcg = 0.0
        for (i, id) in ranking.prefix(k).enumerated() where relevant.contains(id) { dcg += 1 / log2(Double(i + 2)) }
        let ideal = (0..<min(k, relevant.count)).reduce(0.0) { $0 + 1 / log2(Double($1 + 2)) }
        return ideal > 0 ? dcg / ideal : 0
    }

    static func recall(_ ranking: [String], _ relevant: Set<String>) -> Double {
        relevant.isEmpty ? 0 : Double(ranking.prefix(100).filter(relevant.contains).count) / Double(relevant.count)
    }

    /// The corpus without its debtags keywords (`a::b`: the tags are the answer; the section
    /// stays, as in `searchlight-semantic evaluate` and `tune`) in a bundle of its own; each
    /// judgement's query through `query.user`, top 100, lexical and hybrid.
    func quality(_ judged: [Judgement], socket: String) async throws -> [Row] {
        let items = corpus.untaggedItems
        let bundle = "bench.semantic.relevance"
        _ = try await donate(items, socket: socket, bundle: bundle, clients: 4, batch: options.batch)
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        defer { Task { await index.close() } }
        var rows: [Row] = []
        var lexicalNDCG: [Double] = []
        for (name, semantic, weight) in [("lexical", false, 0.5), ("hybrid, static table, weight 0.5", true, 0.5),
                                         ("hybrid, static table, weight 0.3", true, 0.3), ("vectors only (weight 1)", true, 1.0)] {
            var c = UserQueryContext()
            c.maxResultCount = 100
            c.semanticSearch = semantic
            c.semanticWeight = weight
            var n: [Double] = [], r: [Double] = []
            for j in judged {
                let answer = try await UserQuery(userQueryString: j.query, userQueryContext: c, index: index).run()
                let ranking = answer.items.map(\.uniqueIdentifier)
                n.append(Self.ndcg(ranking, j.relevant))
                r.append(Self.recall(ranking, j.relevant))
            }
            if !semantic { lexicalNDCG = n }
            rows += Self.relevanceRows(judged, ndcg: n, recall: r, lexical: semantic ? lexicalNDCG : [], scenario: ", \(name)",
                                       label: "relevance, \(name)")
        }
        return rows
    }
}
