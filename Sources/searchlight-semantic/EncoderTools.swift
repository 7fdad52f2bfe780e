import Foundation
import SearchlightSemantic

/// Each vocabulary token through the transformer alone (`[CLS] token [SEP]`), float32 rows.
func embedVocabulary(_ options: ToolOptions) throws {
    guard let output = options["output"] else { fail("embed-vocabulary needs --output FILE.f32") }
    let encoder = try TransformerEncoder(directory: options.modelDirectory)
    let tokenizer = encoder.tokenizer
    let n = tokenizer.vocabulary.count
    var out: [Float] = []
    out.reserveCapacity(n * encoder.dimension)
    var start = 0
    let elapsed = time {
        while start < n {
            let end = min(n, start + 512)
            let batch = (start..<end).map { [tokenizer.clsID, Int32($0), tokenizer.sepID] }
            for v in encoder.embed(tokenIDs: batch) { out += v }
            start = end
        }
    }
    try writeFloats(out, to: output)
    progress("embed-vocabulary: \(n) tokens × \(encoder.dimension) in \(format(elapsed, 1)) s -> \(output)")
}

/// Query embedding time for a 16-token query, and documents/s for short corpus documents, on
/// each thread count.
func encoderSpeed(_ options: ToolOptions) throws {
    let split = try TransformerEncoder(directory: options.modelDirectory, queryThreads: 2)
    let single = try TransformerEncoder(directory: options.modelDirectory, queryThreads: 1)
    let docs = try loadCorpus(options.corpusPath)
    let query = "fast json parser library for reading configuration files written in c"
    let encoder = single
    let ids = encoder.tokenizer.encode(query)
    let count = options.int("documents", 256)
    // Short documents: title and synopsis, as items are donated with a title and a short description.
    let short = docs.prefix(count).map { "\($0.title). \($0.synopsis)" }
    let long = docs.prefix(count / 4).map(\.text)
    let shortTokens = short.map { encoder.tokenizer.encode($0).count }.reduce(0, +) / max(1, short.count)
    let longTokens = long.map { encoder.tokenizer.encode($0).count }.reduce(0, +) / max(1, long.count)
    print("| threads | query (\(ids.count) tokens) p50 | p90 | query CPU p50 | short docs/s (\(shortTokens) tokens avg) | per CPU-second | corpus docs/s (\(longTokens) tokens avg) |")
    print("|---|---|---|---|---|---|---|")
    for threads in options.counts("threads", [1, 2]) {
        // 1: everything on one thread; 2: OpenBLAS's two threads for batches, and the query's
        // products split over two threads by the encoder.
        TransformerEncoder.setThreads(threads)
        let encoder = threads > 1 ? split : single
        _ = encoder.embed(tokenIDs: [ids])
        var times: [Double] = [], cpu: [Double] = []
        for _ in 0..<200 {
            var wall = 0.0
            cpu.append(cpuTime { wall = time { _ = encoder.embed(tokenIDs: [ids]) } })
            times.append(wall)
        }
        var batches: [Double] = [], batchCPU: [Double] = []
        for _ in 0..<3 {
            var wall = 0.0
            batchCPU.append(cpuTime {
                wall = time {
                    var i = 0
                    while i < short.count {
                        _ = encoder.embed(Array(short[i..<min(short.count, i + 32)]))
                        i += 32
                    }
                }
            })
            batches.append(wall)
        }
        let longTime = time {
            var i = 0
            while i < long.count {
                _ = encoder.embed(Array(long[i..<min(long.count, i + 16)]))
                i += 16
            }
        }
        print("| \(threads) | \(format(median(times) * 1000, 2)) ms | \(format(percentile(times, 0.9) * 1000, 2)) ms | "
            + "\(format(median(cpu) * 1000, 2)) ms | \(format(Double(short.count) / median(batches), 0)) | "
            + "\(format(Double(short.count) / median(batchCPU), 0)) | \(format(Double(long.count) / longTime, 1)) |")
    }
}
