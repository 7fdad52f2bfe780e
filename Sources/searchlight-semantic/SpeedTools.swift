import Foundation
import SearchlightSemantic
import SearchlightStore
import SearchlightWire

/// The static encoder's documents/s on one core (this thread), and, given transformer
/// embeddings of held-out documents (`--held-out-embeddings F.f32 --held-out-ids F.txt`), the
/// cosine between its vectors and the transformer's.
func staticSpeed(_ options: ToolOptions) throws {
    let table = try StaticEncoder(file: options.staticTablePath)
    let docs = try loadCorpus(options.corpusPath)
    print("static table \(options.staticTablePath): \(table.tokenizer.vocabulary.count) tokens × \(table.reducedDimension) → \(table.dimension)\n")
    print("| documents | count | avg pieces | wall docs/s | CPU docs/s (one thread) |")
    print("|---|---|---|---|---|")
    for (name, texts) in [("short (title. synopsis)", docs.map { "\($0.title). \($0.synopsis)" }), ("full (title. synopsis. description)", docs.map(\.text))] {
        let pieces = texts.prefix(2000).map { table.tokenizer.tokenize($0).count }.reduce(0, +) / 2000
        var walls: [Double] = [], cpus: [Double] = []
        for _ in 0..<3 {
            var sink: Float = 0
            var wall = 0.0
            cpus.append(cpuTime { wall = time { for t in texts { sink += table.embed(t)[0] } } })
            walls.append(wall)
            if sink.isNaN { print("") }
        }
        print("| \(name) | \(texts.count) | \(pieces) | \(format(Double(texts.count) / median(walls), 0)) | \(format(Double(texts.count) / median(cpus), 0)) |")
    }
    // As a donation embeds them: `quantizedVectors` on 500 texts per call (the map on 32 at a time).
    let texts = docs.map(\.text)
    var walls: [Double] = [], cpus: [Double] = []
    for _ in 0..<5 {
        var wall = 0.0, sink = 0
        cpus.append(cpuTime { wall = time {
            var start = 0
            while start < texts.count {
                sink &+= Int(table.quantizedVectors(of: Array(texts[start..<min(texts.count, start + 500)]))[0].codes[0])
                start += 500
            }
        } })
        walls.append(wall)
        if sink == .min { print("") }
    }
    print("| full, in donation batches of 500 (quantised) | \(texts.count) | | \(format(Double(texts.count) / median(walls), 0)) | "
        + "\(format(Double(texts.count) / median(cpus), 0)) (\(format(median(cpus) / Double(texts.count) * 1e6, 2)) µs each; min \(format(cpus.min()! / Double(texts.count) * 1e6, 2))) |")
    if let embeddings = options["held-out-embeddings"], let idsFile = options["held-out-ids"] {
        let ids = try String(contentsOfFile: idsFile, encoding: .utf8).split(separator: "\n").map(String.init)
        let floats = try readFloats(embeddings)
        let count = min(options.int("held-out", 1000), ids.count)
        let byID = Dictionary(uniqueKeysWithValues: docs.map { ($0.id, $0) })
        var cosines: [Double] = []
        for i in 0..<count {
            guard let d = byID[ids[i]] else { continue }
            let s = table.embed(d.text)
            var dot: Float = 0
            for j in 0..<384 { dot += s[j] * floats[i * 384 + j] }
            cosines.append(Double(dot))
        }
        print("\ncosine(static, transformer) on \(cosines.count) held-out documents: mean \(format(cosines.reduce(0, +) / Double(cosines.count))), "
            + "median \(format(median(cosines))), p10 \(format(percentile(cosines, 0.1))), min \(format(cosines.min() ?? 0))")
    }
}

/// Vector search time and the prefilter's recall@10 against exact search. The 64k index holds
/// the corpus's static vectors; larger ones add mixtures of two corpus vectors plus noise
/// (normalize(a + 0.3·b + 0.05·g)), so that they keep the corpus's clustering.
func indexSpeed(_ options: ToolOptions) throws {
    if options["index"] != nil, options["sizes"] != nil {
        fail("--sizes and --index do not go together: --index measures the index file's own vectors")
    }
    let table = try StaticEncoder(file: options.staticTablePath)
    let docs = try loadCorpus(options.corpusPath)
    let judgements = (try? loadJudgements(defaultJudgements)) ?? []
    var base: [[Float]] = docs.map { table.embed($0.text) }
    let queries = judgements.map { table.embed($0.query) } + docs.suffix(200).map { table.embed("\($0.title) \($0.synopsis)") }
    base.removeLast(200)
    var random = SplitMix(state: 18)
    print("| index size | mode | wall p50 | wall p99 | CPU p50 | CPU p99 | recall@10 vs exact |")
    print("|---|---|---|---|---|---|---|")
    // --index FILE: a store's own vectors (a daemon's index file), loaded as the daemon loads
    // them after a restart (their files beside it), with the partition saved beside it when it is there.
    let sizes = options["index"] != nil ? [0] : options.counts("sizes", [64_000, 1_000_000]).sorted()
    for size in sizes {
        var index = VectorIndex(dimension: table.dimension)
        index.buildsPartition = options["grow-partition"] != nil
        if let file = options["index"] {
            let db = try Database(path: file, readOnly: true)
            var loadedCPU = 0.0
            defer { db.close() }
            var loadError: Error?
            let directory = (file as NSString).deletingLastPathComponent
            let loaded = time { loadedCPU = cpuTime {
                do { index = try VectorTable().load(dimension: table.dimension, directory: directory, partitioned: false, from: db).index }
                catch { loadError = error }
            } }
            if let loadError { fail("cannot load the vectors of \(file): \(loadError)") }
            var restore = PartitionRestore.ignored("")
            let restored = time { restore = index.restorePartition(from: file + IndexStore.partitionFileSuffix) }
            print("<!-- \(file): \(index.count) vectors loaded in \(format(loaded, 2)) s wall, \(format(loadedCPU, 2)) s CPU; "
                + "saved partition: \(restore) in \(format(restored * 1000, 1)) ms -->")
        }
        for i in 0..<size {
            let v: [Float]
            if i < base.count {
                v = base[i]
            } else {
                let a = base[Int(random.next() % UInt64(base.count))], b = base[Int(random.next() % UInt64(base.count))]
                var m = a.indices.map { a[$0] + 0.3 * b[$0] + 0.05 * random.gaussian() }
                let n = m.reduce(0) { $0 + $1 * $1 }.squareRoot()
                for j in m.indices { m[j] /= n }
                v = m
            }
            try index.set(Int64(i), QuantizedVector(v))
        }
        index.buildsPartition = true
        // The build as the store runs it (off the lock): --train-sample N (0: 48 a list), --train-iterations N.
        var builtCPU = 0.0
        let built = time {
            builtCPU = cpuTime {
                if let build = index.beginPartitionBuild(sampleSize: options.counts("train-sample", [0])[0],
                    iterations: options.counts("train-iterations", [8])[0]) {
                    build.run()
                    index.finishPartitionBuild(build)
                }
            }
        }
        print("<!-- \(index.count): partition of \(index.partitionLists) lists, built in \(format(built, 2)) s wall, \(format(builtCPU, 2)) s CPU (0: restored) -->")
        let exact = queries.map { index.search($0, k: 10, mode: .exact) }
        var modes: [(String, VectorIndex.Mode, Int?)] = [("exact", .exact, nil), ("automatic, no partition", .automatic, nil)]
        // What an automatic search of the partition rescores (`VectorIndex.automaticCandidates`).
        var partitioned = index
        partitioned.usesPartition = true
        let automaticDepth = partitioned.automaticCandidates(count: index.count) ?? index.count
        for p in options.counts("probes", [index.probes]) {
            modes.append(("automatic, \(p) probes", .automatic, p))
            // --depths N,…: the partitioned search rescoring N candidates instead.
            for d in options.counts("depths", []) where d != automaticDepth {
                modes.append(("\(p) probes, rescoring \(d)", .prefiltered(candidates: d), p))
            }
        }
        for c in options.counts("candidates", []) { modes.append(("prefilter \(c)", .prefiltered(candidates: c), nil)) }
        for (name, mode, probes) in modes {
            index.usesPartition = probes != nil
            if let probes { index.probes = probes }
            var times: [Double] = [], cpus: [Double] = []
            var found = 0
            for (qi, q) in queries.enumerated() {
                var hits: [VectorMatch] = []
                var wall = 0.0
                cpus.append(cpuTime { wall = time { hits = index.search(q, k: 10, mode: mode) } })
                times.append(wall)
                let truth = Set(exact[qi].map(\.rowid))
                found += hits.filter { truth.contains($0.rowid) }.count
            }
            print("| \(index.count) | \(name) | \(format(median(times) * 1000, 2)) ms | \(format(percentile(times, 0.99) * 1000, 2)) ms | "
                + "\(format(median(cpus) * 1000, 2)) ms | \(format(percentile(cpus, 0.99) * 1000, 2)) ms | "
                + "\(format(Double(found) / Double(queries.count * 10))) |")
        }
        // The fold of near-duplicates (`VectorIndex.nearDuplicates`) on each query's 100 nearest:
        // the refined tier's top 5 (`FusionTuning.refinedVectors`), and every hit as the worst case.
        let fold = FusionTuning.refinedVectors.fold ?? VectorFold(similarity: 0.8, depth: 5, demotion: .damped(0))
        for depth in [fold.depth, 100] {
            var times: [Double] = [], cpus: [Double] = []
            for q in queries {
                let hits = index.search(q, k: 100).map(\.rowid)
                var wall = 0.0
                cpus.append(cpuTime { wall = time { _ = index.nearDuplicates(hits, threshold: fold.similarity, depth: depth) } })
                times.append(wall)
            }
            print("| \(index.count) | fold, top \(depth) of 100 | \(format(median(times) * 1e6, 1)) µs | \(format(percentile(times, 0.99) * 1e6, 1)) µs | "
                + "\(format(median(cpus) * 1e6, 1)) µs | \(format(percentile(cpus, 0.99) * 1e6, 1)) µs | |")
        }
    }
}

struct SplitMix {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func gaussian() -> Float {
        let u = max(Float(next() >> 40) / Float(1 << 24), 1e-7), v = Float(next() >> 40) / Float(1 << 24)
        return (-2 * logf(u)).squareRoot() * cosf(2 * .pi * v)
    }
}

/// What the static vectors cost a donation, in-process: the corpus donated to a fresh
/// `IndexStore` by `--clients` threads (batches of `--batch`), without and with the encoder,
/// alternated `--runs` times; wall items/s and the process's CPU time per item. Run under
/// `valgrind --tool=callgrind` or `perf record` to see where the difference goes.
func donateSpeed(_ options: ToolOptions) throws {
    let docs = try loadCorpus(options.corpusPath)
    let table = try StaticEncoder(file: options.staticTablePath)
    let clients = options.int("clients", 4), batch = options.int("batch", 500), runs = options.int("runs", 2)
    let count = min(options.int("count", docs.count), docs.count)
    let items = docs.prefix(count).map { $0.item(keywords: .all) }
    let only = options["only"]  // "with" or "without": one side (for a profiler)
    print("| run | encoder | wall items/s | CPU µs/item |")
    print("|---|---|---|---|")
    for run in 0..<runs {
        for withEncoder in [false, true] {
            if let only, (only == "with") != withEncoder { continue }
            let dir = NSTemporaryDirectory() + "sl-donate-\(getpid())-\(run)-\(withEncoder)"
            defer { try? FileManager.default.removeItem(atPath: dir) }
            var o = StoreOptions()
            o.vectorEncoder = withEncoder ? table : nil
            o.rankedIndexBuilds = false
            let store = try IndexStore(path: dir + "/d.sqlite", options: o)
            var wall = 0.0
            let cpu = cpuTime {
                wall = time {
                    DispatchQueue.concurrentPerform(iterations: clients) { c in
                        var start = c * batch
                        while start < items.count {
                            _ = try? store.applySync([.items(Array(items[start..<min(items.count, start + batch)]))])
                            start += clients * batch
                        }
                    }
                }
            }
            store.close()
            print("| \(run + 1) | \(withEncoder ? "static" : "none") | \(format(Double(count) / wall, 0)) | \(format(cpu / Double(count) * 1e6, 1)) |")
        }
    }
}

/// Background refinement in-process, with the transformer: `--count` corpus documents donated
/// (static vectors), then `IndexStore.refineVectors` in batches of `--batch` (the daemon's 16):
/// items/s. Then the same on a fresh store, told to yield `--pause-after` seconds in (as the
/// throttle does when it sees pressure): how long refinement takes to stop after that, which
/// is at most one batch, to compare with the throttle's sampling period (`loadInterval`, 2 s).
/// `--threads`: a batch's texts shared over that many threads, as the daemon does
/// (`TransformerEncoder.embed(_:threads:)`, `SemanticEngine.refinementThreads`).
func refineSpeed(_ options: ToolOptions) throws {
    let docs = try loadCorpus(options.corpusPath)
    let table = try StaticEncoder(file: options.staticTablePath)
    let transformer = try TransformerEncoder(directory: options.modelDirectory, queryThreads: 1)
    let threads = options.int("threads", 1)
    let count = min(options.int("count", 256), docs.count), batch = options.int("batch", 16)
    let pauseAfter = Double(options["pause-after"] ?? "3") ?? 3
    func freshStore(_ name: String) throws -> (IndexStore, String) {
        let dir = NSTemporaryDirectory() + "sl-refine-\(getpid())-\(name)"
        var o = StoreOptions()
        o.vectorEncoder = table
        o.rankedIndexBuilds = false
        let store = try IndexStore(path: dir + "/r.sqlite", options: o)
        _ = try store.applySync([.items(docs.prefix(count).map { $0.item(keywords: .none) })])
        return (store, dir)
    }
    let (store, dir) = try freshStore("speed")
    var refined = 0
    var wall = 0.0
    let cpu = try cpuTime { wall = try time { refined = try store.refineVectors(batch: batch, embed: { transformer.embed($0, threads: threads) }, yieldNow: { false }) } }
    store.close()
    try? FileManager.default.removeItem(atPath: dir)
    print("refinement: \(refined) items in \(format(wall, 1)) s: \(format(Double(refined) / wall, 1)) items/s wall, "
        + "\(format(Double(refined) / cpu, 1)) per CPU-second (batches of \(batch), \(threads) threads, title. synopsis. description)")

    let (paused, pausedDir) = try freshStore("pause")
    let start = Date()
    var batchEnds: [Double] = []
    let n = try paused.refineVectors(batch: batch, embed: { texts in
        let v = transformer.embed(texts, threads: threads)
        batchEnds.append(Date().timeIntervalSince(start))
        return v
    }, yieldNow: { Date().timeIntervalSince(start) >= pauseAfter })
    let stopped = Date().timeIntervalSince(start)
    paused.close()
    try? FileManager.default.removeItem(atPath: pausedDir)
    let longest = zip(batchEnds, [0] + batchEnds).map { $0 - $1 }.max() ?? 0
    print("pause: told to yield at \(format(pauseAfter, 1)) s, stopped at \(format(stopped, 2)) s "
        + "(\(format(max(0, stopped - pauseAfter), 2)) s later; \(n) items refined; longest batch \(format(longest, 2)) s)")
}
