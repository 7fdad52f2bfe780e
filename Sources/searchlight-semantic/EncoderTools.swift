import Foundation
import SearchlightSemantic
import SearchlightStore

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

/// Query embedding time (wall and CPU) for queries of 8, 16 and 32 tokens, and documents/s, for
/// each form of the weights (packed half precision where the CPU has it; OpenBLAS single
/// precision) and each thread count.
func encoderSpeed(_ options: ToolOptions) throws {
    let docs = try loadCorpus(options.corpusPath)
    var forms: [(String, Bool)] = [("OpenBLAS float32", false)]
    if TransformerEncoder.packedKernelAvailable { forms.append(("packed float16", true)) }
    let lengths = options.counts("tokens", [8, 16, 32])
    let count = options.int("documents", 256)
    // Short documents: title and synopsis, as items are donated with a title and a short description.
    let short = docs.prefix(count).map { "\($0.title). \($0.synopsis)" }
    let long = docs.prefix(count / 4).map(\.text)
    var header = "| weights | threads |"
    for n in lengths { header += " query \(n) tokens wall p50 | CPU p50 |" }
    print(header + " short docs/s | per CPU-second | corpus docs/s |")
    print("|---|---|" + String(repeating: "---|---|", count: lengths.count) + "---|---|---|")
    for (name, packed) in forms {
        for threads in options.counts("threads", [1, 2]) {
            // 1: everything on one thread; 2: OpenBLAS's two threads for batches, and a query's
            // products split over two threads by the encoder.
            TransformerEncoder.setThreads(threads)
            let encoder = try TransformerEncoder(directory: options.modelDirectory, queryThreads: threads, packedWeights: packed)
            let words = docs.prefix(200).flatMap { $0.text.split(separator: " ") }.map(String.init)
            let shortTokens = short.map { encoder.tokenizer.encode($0).count }.reduce(0, +) / max(1, short.count)
            let longTokens = long.map { encoder.tokenizer.encode($0).count }.reduce(0, +) / max(1, long.count)
            var line = "| \(name) | \(threads) |"
            for n in lengths {
                // A query of exactly n ids: [CLS], n − 2 word pieces of corpus text, [SEP].
                let ids = Array(encoder.tokenizer.encode(words.joined(separator: " ")).prefix(n - 1)) + [encoder.tokenizer.sepID]
                for _ in 0..<5 { _ = encoder.embed(tokenIDs: [ids]) }
                var times: [Double] = [], cpu: [Double] = []
                for _ in 0..<options.int("repeats", 200) {
                    var wall = 0.0
                    cpu.append(cpuTime { wall = time { _ = encoder.embed(tokenIDs: [ids]) } })
                    times.append(wall)
                }
                line += " \(format(median(times) * 1000, 2)) ms | \(format(median(cpu) * 1000, 2)) ms |"
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
            print(line + " \(format(Double(short.count) / median(batches), 0)) (\(shortTokens) tokens) | "
                + "\(format(Double(short.count) / median(batchCPU), 0)) | \(format(Double(long.count) / longTime, 1)) (\(longTokens) tokens) |")
        }
    }
}

/// A 60 KB CJK query (20 000 ideographs, no whitespace: issue 29, D2): the tokenizer's cost for
/// the whole text (`tokenize`, every character normalised: what `encode` cost before it stopped
/// at the model's 256 pieces), `encode`'s (cut at 256), and the transformer's whole embedding.
func longQuerySpeed(_ options: ToolOptions) throws {
    TransformerEncoder.setThreads(1)
    let encoder = try TransformerEncoder(directory: options.modelDirectory, queryThreads: 1)
    let text = String((0..<20_000).map { Character(Unicode.Scalar(0x4E00 + UInt32(($0 * 7919) % 20_000))!) })
    let repeats = options.int("repeats", 20)
    func p50(_ body: () -> Void) -> Double {
        body()
        var times: [Double] = []
        for _ in 0..<repeats { times.append(cpuTime(body)) }
        return times.sorted()[times.count / 2] * 1000
    }
    let whole = p50 { _ = encoder.tokenizer.tokenize(text) }
    // What `encode` normalised before it worked a window at a time: the whole text's NFD.
    let nfd = p50 { _ = (" " + text).decomposedStringWithCanonicalMapping.unicodeScalars.count }
    let cut = p50 { _ = encoder.tokenizer.encode(text, maxLength: encoder.maxLength) }
    let embed = p50 { _ = encoder.embed(text) }
    print("60 KB CJK text (\(text.utf8.count) bytes): tokenize whole \(String(format: "%.1f", whole)) ms CPU, "
        + "NFD of the whole text \(String(format: "%.1f", nfd)) ms CPU, encode to 256 \(String(format: "%.2f", cut)) ms CPU, embed \(String(format: "%.1f", embed)) ms CPU (p50 of \(repeats))")
}

/// What loading the transformer adds to the heap (mallinfo2's bytes in use) and resident memory,
/// and a 16-token query's CPU and wall time (p50, p90). With SEARCHLIGHT_WORD_TABLE_ON_HEAP=1 the
/// word-embedding table is copied to the heap (as before it was read from the file).
func wordTableCost(_ options: ToolOptions) throws {
    TransformerEncoder.setThreads(1)
    let before = ProcessMemory.current()
    let encoder = try TransformerEncoder(directory: options.modelDirectory, queryThreads: 1)
    let after = ProcessMemory.current()
    let ids = [encoder.tokenizer.clsID] + (0..<14).map { Int32(2000 + $0 * 1777) } + [encoder.tokenizer.sepID]
    let repeats = options.int("repeats", 200)
    for _ in 0..<10 { _ = encoder.embed(tokenIDs: [ids]) }
    var cpu: [Double] = [], walls: [Double] = []
    for _ in 0..<repeats {
        var wall = 0.0
        cpu.append(cpuTime { wall = time { _ = encoder.embed(tokenIDs: [ids]) } })
        walls.append(wall)
    }
    cpu.sort()
    walls.sort()
    let mib = { (b: Int) in String(format: "%.1f", Double(b) / 1_048_576) }
    let ms = { (s: Double) in String(format: "%.3f", s * 1000) }
    let heap = ProcessInfo.processInfo.environment["SEARCHLIGHT_WORD_TABLE_ON_HEAP"] == "1" ? "heap" : "file"
    print("word table \(heap): malloc in use +\(mib(after.mallocInUseBytes - before.mallocInUseBytes)) MiB "
        + "(\(mib(after.mallocInUseBytes)) MiB), RSS +\(mib(after.residentBytes - before.residentBytes)) MiB, anon +\(mib(after.anonymousBytes - before.anonymousBytes)) MiB; "
        + "16 tokens CPU p50 \(ms(cpu[repeats / 2])) p90 \(ms(cpu[repeats * 9 / 10])) ms, wall p50 \(ms(walls[repeats / 2])) p90 \(ms(walls[repeats * 9 / 10])) ms")
}
