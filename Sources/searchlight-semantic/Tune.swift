import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// The hybrid ranking's settings measured on the debtags relevance set, in-process: the corpus
/// donated to an `IndexStore` with the static encoder, as the daemon keeps it (the items without
/// their debtags keywords, like `evaluate` and `searchlight-bench --scenarios semantic`), then each query through
/// `IndexStore.userQuery` with every combination of the settings given. It prints, per setting,
/// nDCG@10, recall@100 and the queries more than 0.1 nDCG@10 below the lexical ranking, so that
/// a setting is chosen with its neighbours in view.
func tune(_ options: ToolOptions) throws {
    let judgements = try loadJudgements(options["judgements"] ?? "Scripts/semantic/relevance/debtags-judgements.jsonl")
    let docs = try loadCorpus(options.corpusPath)
    let table = try StaticEncoder(file: options.staticTablePath)
    // --store FILE keeps the store (and reuses it when it exists): refining the whole corpus with
    // the transformer takes half an hour of both cores, tuning on it seconds per setting.
    let dir = NSTemporaryDirectory() + "sl-tune-\(getpid())"
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let storePath = options["store"] ?? dir + "/tune.sqlite"
    let reuse = options["store"] != nil && FileManager.default.fileExists(atPath: storePath)
    var storeOptions = StoreOptions()
    storeOptions.vectorEncoder = table
    storeOptions.rankedIndexBuilds = false  // the exhaustive ranking: the definition the ranked index equals
    if !reuse { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
    let store = try IndexStore(path: storePath, options: storeOptions)
    defer { store.close() }
    if reuse {
        progress("tune: \(judgements.count) queries, the store \(storePath) reused")
    } else {
        let donateTime = try time { try donate(docs, to: store, keywords: .withoutTags) }
        progress("tune: \(judgements.count) queries, \(docs.count) documents donated in \(format(donateTime, 1)) s")
    }
    // --refine: every vector replaced by the transformer's (as idle maintenance does in the
    // daemon), and the queries embedded by the transformer (as the daemon does once it is loaded).
    var transformer: TransformerEncoder?
    if options["refine"] != nil {
        let encoder = try TransformerEncoder(directory: options.modelDirectory)
        let threads = options.int("threads", 2)
        var embedded = 0
        let start = Date()
        let refined = try store.refineVectors(batch: 64, embed: { texts in
            let v = encoder.embed(texts, threads: threads)
            embedded += texts.count
            if embedded % 2048 < texts.count {
                progress("tune: \(embedded) embedded in \(format(Date().timeIntervalSince(start), 0)) s")
            }
            return v
        }, yieldNow: { false })
        let counts = try store.vectorCounts()
        progress("tune: refined \(refined) now, \(counts.refined) of \(counts.vectors) vectors refined")
        transformer = encoder
    }
    let vectors = judgements.map { transformer?.embed($0.query) ?? table.embed($0.query) }

    func run(_ semantic: SemanticRequest?, _ j: Judgement, _ vector: [Float]) throws -> [String] {
        var request = UserQueryRequest(text: j.query)
        request.maxResultCount = 100
        request.maxRankedResultCount = 0
        request.fetch = []
        request.semantic = semantic.map { var s = $0; s.vector = vector; return s }
        return try store.userQuery(request).items.compactMap { $0["uniqueIdentifier"]?.stringValue }
    }
    let lexical = try zip(judgements, vectors).map { j, v in try run(nil, j, v) }
    let lexicalNDCG = zip(lexical, judgements).map { ndcg($0, $1.relevant) }
    let lexicalRecall = zip(lexical, judgements).map { recall($0, $1.relevant) }
    print("setting                                   nDCG@10  recall@100  worse>0.1  (queries)")
    print("lexical                                   \(format(mean(lexicalNDCG)))    \(format(mean(lexicalRecall)))")

    let weights = options.doubles("weights", [0.3, 0.4, 0.5])
    let floors = options.doubles("floors", [0.3, 0.35, 0.4])
    let ks = options.doubles("ks", [60])
    let defaults = SemanticRequest(vector: [], weight: 0.5)
    let confidentHits = options.doubles("confident-hits", [Double(defaults.confidentHits ?? 0)]).map(Int.init)
    let confidentFactors = options.doubles("confident-factors", [defaults.confidentFactor])
    let exactFirst = options.doubles("exact-first", [0]).map { $0 != 0 }
    let verbose = options["verbose"] != nil
    var settings: [(String, SemanticRequest)] = []
    for w in weights { for floor in floors { for k in ks { for hits in confidentHits { for factor in confidentFactors { for first in exactFirst {
        if hits == 0 && factor != confidentFactors[0] { continue }
        var s = SemanticRequest(vector: [], weight: w, minimumSimilarity: Float(floor))
        s.rrfK = k
        s.confidentHits = hits > 0 ? hits : nil
        s.confidentFactor = factor
        s.exactFirst = first
        settings.append(("w \(format(w, 2)) floor \(format(floor, 2)) k \(Int(k))" + (hits > 0 ? " conf \(hits)×\(format(factor, 2))" : "")
            + (first ? " exact-first" : ""), s))
    } } } } } }
    do {
        do {
            for (name, s) in settings {
                var n: [Double] = [], r: [Double] = [], worse: [String] = []
                var elapsed = 0.0
                for (i, j) in judgements.enumerated() {
                    var ranking: [String] = []
                    elapsed += try time { ranking = try run(s, j, vectors[i]) }
                    n.append(ndcg(ranking, j.relevant))
                    r.append(recall(ranking, j.relevant))
                    if n[i] < lexicalNDCG[i] - 0.1 { worse.append("\(j.query) \(format(lexicalNDCG[i], 2))→\(format(n[i], 2))") }
                }
                print(name.padding(toLength: 56, withPad: " ", startingAt: 0)
                    + "\(format(mean(n)))    \(format(mean(r)))       \(worse.count)    \(format(elapsed / Double(judgements.count) * 1000, 2)) ms/query" + (verbose ? "  " + worse.joined(separator: "; ") : ""))
            }
        }
    }
}

private func mean(_ xs: [Double]) -> Double { xs.isEmpty ? 0 : xs.reduce(0, +) / Double(xs.count) }

extension ToolOptions {
    func doubles(_ name: String, _ fallback: [Double]) -> [Double] {
        guard let v = self[name] else { return fallback }
        return v.split(separator: ",").map { part -> Double in
            guard let x = Double(part) else { fail("--\(name): \(part) is not a number") }
            return x
        }
    }
}
