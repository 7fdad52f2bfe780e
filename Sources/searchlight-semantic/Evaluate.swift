import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// One query of the relevance set and the documents that answer it.
struct Judgement {
    var tag: String
    var query: String
    var relevant: Set<String>
    /// "tuning" or "held-out" (Scripts/semantic/make-debtags-judgements.py), nil in older files.
    var split: String? = nil
}

/// The full set (tuning and held-out halves): the tools' default.
let defaultJudgements = "Scripts/semantic/relevance/debtags-all.jsonl"

func loadJudgements(_ path: String) throws -> [Judgement] {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return data.split(separator: 0x0A).compactMap { line in
        guard let o = try? JSONValue.parse(Array(line)), let q = o["query"]?.stringValue else { return nil }
        return Judgement(tag: o["tag"]?.stringValue ?? "", query: q,
                         relevant: Set(o["relevant"]?.arrayValue?.compactMap(\.stringValue) ?? []), split: o["split"]?.stringValue)
    }
}

/// nDCG@k with binary relevance.
func ndcg(_ ranking: [String], _ relevant: Set<String>, k: Int = 10) -> Double {
    var dcg = 0.0
    for (i, id) in ranking.prefix(k).enumerated() where relevant.contains(id) { dcg += 1 / log2(Double(i) + 2) }
    var ideal = 0.0
    for i in 0..<min(k, relevant.count) { ideal += 1 / log2(Double(i) + 2) }
    return ideal > 0 ? dcg / ideal : 0
}

func recall(_ ranking: [String], _ relevant: Set<String>, k: Int = 100) -> Double {
    relevant.isEmpty ? 0 : Double(ranking.prefix(k).filter(relevant.contains).count) / Double(relevant.count)
}

/// Reciprocal rank fusion: score = Σ 1 / (k + rank), ranks from 1.
func fuse(_ lists: [[String]], k: Double = 60, limit: Int = 100) -> [String] {
    var score: [String: Double] = [:]
    for list in lists {
        for (i, id) in list.enumerated() { score[id, default: 0] += 1 / (k + Double(i + 1)) }
    }
    return score.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.prefix(limit).map(\.key)
}

/// The debtags relevance evaluation: the corpus indexed without its tag keywords (title,
/// synopsis, description, section only), each tag description run as a user query, and the
/// rankings of BM25 (the store's `userQuery`), the vector side, and their fusion scored.
func evaluate(_ options: ToolOptions) throws {
    let judgements = try loadJudgements(options["judgements"] ?? defaultJudgements)
    let docs = try loadCorpus(options.corpusPath)
    let table = try StaticEncoder(file: options.staticTablePath)
    progress("evaluate: \(judgements.count) queries, \(docs.count) documents")

    // The lexical side: an IndexStore as the daemon keeps it, items without the debtags keywords.
    let dir = NSTemporaryDirectory() + "sl-eval-\(getpid())"
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let store = try IndexStore(path: dir + "/eval.sqlite")
    defer { store.close() }
    try donate(docs, to: store, keywords: .withoutTags)
    func lexical(_ text: String, among allowed: Set<String>? = nil) throws -> [String] {
        var request = UserQueryRequest(text: text)
        request.maxResultCount = allowed == nil ? 100 : 1000
        request.maxRankedResultCount = 0
        request.fetch = []
        let ids = try store.userQuery(request).items.compactMap { $0["uniqueIdentifier"]?.stringValue }
        return Array((allowed.map { a in ids.filter(a.contains) } ?? ids).prefix(100))
    }

    // The vector side, static tier: every document's static vector, int8, exact search.
    var index = VectorIndex(dimension: table.dimension)
    let encodeTime = try time {
        for (i, d) in docs.enumerated() { try index.set(Int64(i), QuantizedVector(table.embed(d.text))) }
    }
    progress("static vectors for \(docs.count) documents in \(format(encodeTime, 1)) s")
    var float32 = docs.map { _ in [Float]() }
    if options["float32"] != nil { for (i, d) in docs.enumerated() { float32[i] = table.embed(d.text) } }

    var rows: [String: [(Double, Double)]] = [:]
    func score(_ name: String, _ ranking: [String], _ j: Judgement) {
        rows[name, default: []].append((ndcg(ranking, j.relevant), recall(ranking, j.relevant)))
    }
    var worst: [(String, Double)] = []
    for j in judgements {
        let bm25 = try lexical(j.query)
        let vector = index.search(table.embed(j.query), k: 100, mode: .exact).map { docs[Int($0.rowid)].id }
        score("BM25 (IndexStore.userQuery)", bm25, j)
        score("static vectors only (int8)", vector, j)
        let hybrid = fuse([bm25, vector])
        score("hybrid BM25 + static (RRF k=60)", hybrid, j)
        worst.append((j.tag, ndcg(hybrid, j.relevant) - ndcg(bm25, j.relevant)))
        if options["float32"] != nil {
            let q = table.embed(j.query)
            let exact = float32.indices.map { i in (i, zip(q, float32[i]).reduce(Float(0)) { $0 + $1.0 * $1.1 }) }
                .sorted { $0.1 > $1.1 }.prefix(100).map { docs[$0.0].id }
            score("static vectors only (float32)", Array(exact), j)
        }
    }
    print("Full corpus (\(docs.count) documents, \(judgements.count) queries):\n")
    printTable(rows, order: ["BM25 (IndexStore.userQuery)", "static vectors only (int8)", "static vectors only (float32)", "hybrid BM25 + static (RRF k=60)"])
    let drops = worst.filter { $0.1 < -0.1 }
    print("\nqueries where hybrid static loses > 0.1 nDCG@10 to BM25: \(drops.count)"
        + (drops.isEmpty ? "" : " (\(drops.map { "\($0.0) \(format($0.1, 2))" }.joined(separator: ", ")))"))

    if let embeddings = options["transformer-embeddings"], let idsFile = options["transformer-ids"] {
        try evaluateSubset(judgements: judgements, docs: docs, table: table, index: index, embeddingsFile: embeddings,
                           idsFile: idsFile, options: options, lexical: lexical)
    }
}

/// The same comparison on the documents that have transformer embeddings (a subset: the
/// transformer embeds tens of documents per second here), the transformer side added.
private func evaluateSubset(judgements: [Judgement], docs: [Document], table: StaticEncoder, index: VectorIndex,
                            embeddingsFile: String, idsFile: String, options: ToolOptions,
                            lexical: (String, Set<String>?) throws -> [String]) throws {
    let ids = try String(contentsOfFile: idsFile, encoding: .utf8).split(separator: "\n").map(String.init)
    let floats = try readFloats(embeddingsFile)
    let dim = 384
    guard floats.count == ids.count * dim else { fail("\(embeddingsFile) holds \(floats.count / dim) vectors for \(ids.count) ids") }
    let subset = Set(ids)
    let row = Dictionary(uniqueKeysWithValues: docs.enumerated().map { ($1.id, $0) })
    var transformerIndex = VectorIndex(dimension: dim)
    var staticIndex = VectorIndex(dimension: dim)
    for (i, id) in ids.enumerated() {
        guard let r = row[id] else { continue }
        try transformerIndex.set(Int64(r), QuantizedVector(Array(floats[(i * dim)..<((i + 1) * dim)])))
        try staticIndex.set(Int64(r), index.vector(for: Int64(r))!)
    }
    let encoder = try TransformerEncoder(directory: options.modelDirectory)
    var rows: [String: [(Double, Double)]] = [:]
    var used = 0
    for j in judgements {
        let relevant = j.relevant.intersection(subset)
        guard relevant.count >= 3 else { continue }
        used += 1
        let judged = Judgement(tag: j.tag, query: j.query, relevant: relevant)
        let bm25 = try lexical(j.query, subset)
        let staticHits = staticIndex.search(table.embed(j.query), k: 100, mode: .exact).map { docs[Int($0.rowid)].id }
        let query = encoder.embed(j.query)
        let transformerHits = transformerIndex.search(query, k: 100, mode: .exact).map { docs[Int($0.rowid)].id }
        // The two tiers mixed: the query by the transformer (loaded), the documents still static.
        let mixedHits = staticIndex.search(query, k: 100, mode: .exact).map { docs[Int($0.rowid)].id }
        for (name, ranking) in [("BM25 (IndexStore.userQuery)", bm25), ("static vectors only", staticHits),
                                ("transformer vectors only", transformerHits),
                                ("transformer query × static documents", mixedHits),
                                ("hybrid BM25 + static (RRF k=60)", fuse([bm25, staticHits])),
                                ("hybrid BM25 + transformer (RRF k=60)", fuse([bm25, transformerHits]))] {
            rows[name, default: []].append((ndcg(ranking, judged.relevant), recall(ranking, judged.relevant)))
        }
    }
    print("\nSubset with transformer embeddings (\(transformerIndex.count) documents, \(used) queries with >= 3 relevant documents in it):\n")
    printTable(rows, order: ["BM25 (IndexStore.userQuery)", "static vectors only", "transformer vectors only",
                             "transformer query × static documents",
                             "hybrid BM25 + static (RRF k=60)", "hybrid BM25 + transformer (RRF k=60)"])
}

private func printTable(_ rows: [String: [(Double, Double)]], order: [String]) {
    print("| ranking | nDCG@10 | recall@100 |")
    print("|---|---|---|")
    for name in order {
        guard let r = rows[name], !r.isEmpty else { continue }
        let n = Double(r.count)
        print("| \(name) | \(format(r.map(\.0).reduce(0, +) / n)) | \(format(r.map(\.1).reduce(0, +) / n)) |")
    }
}
