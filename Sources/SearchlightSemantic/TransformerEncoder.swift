import COpenBLAS
import CSemanticKernels
import Foundation
import Synchronization

/// all-MiniLM-L6-v2 in Swift: embeddings and LayerNorm, 6 layers of 12-head self-attention and a
/// GELU feed-forward, mean pooling, L2 normalisation; the 384-dimensional sentence embedding of
/// sentence-transformers. The linear layers run on packed half-precision weights with AVX-512
/// where the CPU has it (`LinearWeight`, `CSemanticKernels`: a 16-token query in ~3.6 ms of CPU
/// instead of ~10.5 ms with OpenBLAS), else on OpenBLAS (`cblas_sgemm`), which also computes
/// attention's small per-head products.
///
/// A batch is *packed*: the tokens of all its texts are the rows of one matrix, so every linear
/// layer is one product over the whole batch and no row is padding. Attention runs per text
/// over that text's rows only, which is exactly what the reference's padding plus attention mask
/// computes (a masked position gets weight 0), without the wasted work on pad rows; mean pooling
/// likewise averages each text's own rows (the mask's ones).
///
/// Immutable after loading; `embed` may be called from several threads at once (each call has
/// its own scratch memory).
public final class TransformerEncoder: Sendable {
    public let tokenizer: WordPieceTokenizer
    /// Token limit per text, `[CLS]` and `[SEP]` included (sentence-transformers' max_seq_length).
    public let maxLength: Int
    let weights: MiniLMWeights

    public var dimension: Int { weights.configuration.hidden }
    /// The AVX-512 kernels (`CSemanticKernels`: packed linear layers, GELU) are in use.
    let usesVectorKernels: Bool

    /// Threads that share one short text's products (a query): OpenBLAS and the packed kernel run
    /// a product of a few rows on one thread, so the encoder splits its output columns itself.
    /// 1 turns it off.
    public let queryThreads: Int
    /// Up to this many rows a pass counts as short.
    static let shortPassRows = 48

    /// Rows per forward pass: a bigger batch is cut into passes of at most this many tokens, which
    /// bounds the scratch memory (the feed-forward's rows are 1536 floats each).
    static let maxRowsPerPass = 4096

    /// Whether the linear layers run on the packed half-precision kernel on this CPU (AVX-512 and
    /// F16C; `LinearWeight`), else on OpenBLAS in single precision.
    public static var packedKernelAvailable: Bool { LinearWeight.usesPackedKernel }

    /// `packedWeights`: the packed half-precision kernel where the CPU has it (the default); false
    /// keeps single-precision weights and OpenBLAS (to compare the two, or to rule one out).
    public convenience init(directory: ModelDirectory, maxLength: Int = 256, queryThreads: Int = 2,
                            packedWeights: Bool = TransformerEncoder.packedKernelAvailable) throws(SemanticError) {
        try self.init(weightsFile: directory.weightsFile, vocabularyFile: directory.vocabularyFile, maxLength: maxLength,
                      queryThreads: queryThreads, packedWeights: packedWeights)
    }

    public init(weightsFile: String, vocabularyFile: String, maxLength: Int = 256, queryThreads: Int = 2,
                packedWeights: Bool = TransformerEncoder.packedKernelAvailable) throws(SemanticError) {
        let c = MiniLMConfiguration.allMiniLML6v2
        guard (3...c.maxPositions).contains(maxLength) else {
            throw SemanticError(.invalidArgument, "maxLength \(maxLength) is outside 3…\(c.maxPositions)")
        }
        tokenizer = try WordPieceTokenizer(vocabularyFile: vocabularyFile)
        guard tokenizer.vocabulary.count == c.vocabularySize else {
            throw SemanticError(.badFormat, "\(vocabularyFile) has \(tokenizer.vocabulary.count) tokens, expected \(c.vocabularySize); run `make model`")
        }
        weights = try MiniLMWeights(file: SafetensorsFile(path: weightsFile), configuration: c,
                                    packed: packedWeights && LinearWeight.usesPackedKernel)
        self.maxLength = maxLength
        usesVectorKernels = packedWeights && LinearWeight.usesPackedKernel
        self.queryThreads = max(1, min(queryThreads, 8))
    }

    /// OpenBLAS's thread count for every encoder in the process (it is a library-wide setting).
    public static func setThreads(_ count: Int) {
        openblas_set_num_threads(Int32(max(1, count)))
    }

    public func embed(_ text: String) -> [Float] {
        embed([text])[0]
    }

    /// One text's unit vector, or nil when `shouldStop` said stop (asked before each of the six
    /// layers: a 256-token text stops within a layer's time, tens of milliseconds). The text
    /// costs at most `maxLength` tokens however long it is (`WordPieceTokenizer.encode` stops there).
    /// Throws when the model file cannot be read (it changed after loading: the word embeddings
    /// are read from it as needed).
    public func embed(_ text: String, shouldStop: () -> Bool) throws(SemanticError) -> [Float]? {
        if shouldStop() { return nil }
        return try forward([tokenizer.encode(text, maxLength: maxLength)], shouldStop: shouldStop)?[0]
    }

    /// One unit vector per text, in order.
    public func embed(_ texts: [String]) -> [[Float]] {
        embed(tokenIDs: texts.map { tokenizer.encode($0, maxLength: maxLength) })
    }

    /// One unit vector per text, in order, the texts shared out over up to `threads` threads in
    /// contiguous parts of about equal token counts (each part its own packed passes). For
    /// background refinement, which runs only while the machine is idle: the parts are
    /// independent, so two threads on two cores do nearly twice the work (splitting each product's
    /// columns, as a query does, would synchronise six times per layer).
    ///
    /// `meter` counts the CPU time of every thread taking part (the caller's included), live.
    public func embed(_ texts: [String], threads: Int, meter: WorkMeter? = nil) -> [[Float]] {
        (try? embedding(texts, threads: threads, meter: meter)) ?? texts.map { _ in failedVector }
    }

    /// `embed(_:threads:meter:)`, throwing when the model file cannot be read (it changed after
    /// loading).
    public func embedding(_ texts: [String], threads: Int, meter: WorkMeter? = nil) throws(SemanticError) -> [[Float]] {
        @Sendable func measured<R>(_ body: () -> R) -> R { meter.map { $0.measure(body) } ?? body() }
        let ids = measured { texts.map { tokenizer.encode($0, maxLength: maxLength) } }
        let parts = max(1, min(threads, ids.count))
        if parts == 1 { return try measured { Result { () throws(SemanticError) in try embedding(tokenIDs: ids) } }.get() }
        // Cut where the running token count passes each part's share.
        let total = ids.reduce(0) { $0 + $1.count }
        var bounds = [0], running = 0
        for (i, s) in ids.enumerated() {
            running += s.count
            if bounds.count < parts, running * parts >= total * bounds.count, i + 1 < ids.count { bounds.append(i + 1) }
        }
        bounds.append(ids.count)
        let cuts = bounds
        let results = Mutex<[Int: Result<[[Float]], SemanticError>]>([:])
        DispatchQueue.concurrentPerform(iterations: cuts.count - 1) { p in
            let out = measured { Result { () throws(SemanticError) in try embedding(tokenIDs: Array(ids[cuts[p]..<cuts[p + 1]])) } }
            results.withLock { $0[p] = out }
        }
        let done = results.withLock { $0 }
        var out: [[Float]] = []
        for p in 0..<(cuts.count - 1) { out += try done[p]!.get() }
        return out
    }

    /// What the non-throwing forms give for a text when the model file cannot be read: the zero
    /// vector (nearest to nothing), never rows of a damaged file.
    private var failedVector: [Float] { [Float](repeating: 0, count: dimension) }

    /// One unit vector per sequence of ids (as `WordPieceTokenizer.encode` makes them). Ids outside
    /// the vocabulary count as `[UNK]`; a sequence longer than `maxLength` is cut to it.
    /// When the model file cannot be read (it changed after loading), every vector is the zero
    /// vector: `embedding(tokenIDs:)` says why.
    public func embed(tokenIDs: [[Int32]]) -> [[Float]] {
        (try? embedding(tokenIDs: tokenIDs)) ?? tokenIDs.map { _ in failedVector }
    }

    /// `embed(tokenIDs:)`, throwing when the model file cannot be read.
    public func embedding(tokenIDs: [[Int32]]) throws(SemanticError) -> [[Float]] {
        var out: [[Float]] = []
        out.reserveCapacity(tokenIDs.count)
        var start = 0
        while start < tokenIDs.count {
            var end = start
            var rows = 0
            while end < tokenIDs.count {
                let n = max(1, min(tokenIDs[end].count, maxLength))
                if end > start && rows + n > Self.maxRowsPerPass { break }
                rows += n
                end += 1
            }
            out += try forward(Array(tokenIDs[start..<end]), shouldStop: { false })!
            start = end
        }
        return out
    }

    private func forward(_ batch: [[Int32]], shouldStop: () -> Bool) throws(SemanticError) -> [[Float]]? {
        let c = weights.configuration
        let h = c.hidden
        let vocabulary = Int32(c.vocabularySize)
        let sequences = batch.map { ids -> [Int32] in
            let cut = ids.isEmpty ? [tokenizer.clsID] : Array(ids.prefix(maxLength))
            return cut.map { $0 >= 0 && $0 < vocabulary ? $0 : tokenizer.unkID }
        }
        var offsets: [Int] = []
        var rows = 0
        for s in sequences {
            offsets.append(rows)
            rows += s.count
        }
        let longest = sequences.map(\.count).max() ?? 1
        let scratch = Scratch(rows: rows, configuration: c, longest: longest)
        defer { scratch.free() }

        try embedTokens(sequences, into: scratch.x)
        for layer in weights.layers {
            if shouldStop() { return nil }
            attention(layer, sequences: sequences, offsets: offsets, rows: rows, scratch: scratch)
            feedForward(layer, rows: rows, scratch: scratch)
        }
        return sequences.indices.map { i in
            var v = [Float](repeating: 0, count: h)
            let n = sequences[i].count
            for r in offsets[i]..<(offsets[i] + n) {
                let row = scratch.x + r * h
                for j in 0..<h { v[j] += row[j] }
            }
            var norm: Float = 0
            for j in 0..<h {
                v[j] /= Float(n)
                norm += v[j] * v[j]
            }
            let scale = 1 / max(norm.squareRoot(), 1e-12)
            for j in 0..<h { v[j] *= scale }
            return v
        }
    }

    /// Word + position + token-type (0) embeddings, then LayerNorm, one row per token.
    private func embedTokens(_ sequences: [[Int32]], into x: UnsafeMutablePointer<Float>) throws(SemanticError) {
        let c = weights.configuration
        let h = c.hidden
        var row = 0
        for s in sequences {
            for (position, id) in s.enumerated() {
                let out = x + row * h
                try weights.wordEmbeddings.read(Int(id), into: out)
                let pos = weights.positionEmbeddings.pointer + position * h
                let type = weights.tokenTypeEmbeddings.pointer
                for j in 0..<h { out[j] = out[j] + pos[j] + type[j] }
                row += 1
            }
        }
        layerNorm(x, rows: row, weight: weights.embeddingNormWeight, bias: weights.embeddingNormBias)
    }

    private func attention(_ layer: MiniLMLayer, sequences: [[Int32]], offsets: [Int], rows: Int, scratch: Scratch) {
        let c = weights.configuration
        let h = c.hidden, dh = c.headDimension, stride = 3 * h
        linear(layer.qkv, scratch.x, rows: rows, into: scratch.qkv)
        let scale = 1 / Float(dh).squareRoot()
        for (s, sequence) in sequences.enumerated() {
            let n = sequence.count, o = offsets[s]
            for head in 0..<c.heads {
                let q = scratch.qkv + o * stride + head * dh
                let k = q + h
                let v = q + 2 * h
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(n), Int32(n), Int32(dh),
                            scale, q, Int32(stride), k, Int32(stride), 0, scratch.scores, Int32(n))
                for r in 0..<n { softmax(scratch.scores + r * n, count: n) }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Int32(n), Int32(dh), Int32(n),
                            1, scratch.scores, Int32(n), v, Int32(stride), 0, scratch.context + o * h + head * dh, Int32(h))
            }
        }
        linear(layer.attentionOut, scratch.context, rows: rows, into: scratch.sum)
        addAndNormalize(rows: rows, scratch: scratch, weight: layer.attentionNormWeight, bias: layer.attentionNormBias)
    }

    private func feedForward(_ layer: MiniLMLayer, rows: Int, scratch: Scratch) {
        let c = weights.configuration
        linear(layer.intermediate, scratch.x, rows: rows, into: scratch.intermediate)
        gelu(scratch.intermediate, count: rows * c.intermediate)
        linear(layer.output, scratch.intermediate, rows: rows, into: scratch.sum)
        addAndNormalize(rows: rows, scratch: scratch, weight: layer.outputNormWeight, bias: layer.outputNormBias)
    }

    /// out = input · weightᵀ + bias. A short pass (a query) splits the output columns over
    /// `queryThreads` threads.
    private func linear(_ weight: LinearWeight, _ input: UnsafeMutablePointer<Float>, rows: Int, into out: UnsafeMutablePointer<Float>) {
        weight.apply(input, rows: rows, into: out, parts: rows <= Self.shortPassRows ? queryThreads : 1)
    }

    /// x = LayerNorm(x + sum): the residual connection after attention and after the feed-forward.
    private func addAndNormalize(rows: Int, scratch: Scratch, weight: FloatTensor, bias: FloatTensor) {
        let count = rows * weights.configuration.hidden
        for i in 0..<count { scratch.x[i] += scratch.sum[i] }
        layerNorm(scratch.x, rows: rows, weight: weight, bias: bias)
    }

    private func layerNorm(_ x: UnsafeMutablePointer<Float>, rows: Int, weight: FloatTensor, bias: FloatTensor) {
        let h = weights.configuration.hidden
        let epsilon = weights.configuration.layerNormEpsilon
        for r in 0..<rows {
            let row = x + r * h
            var mean: Float = 0
            for j in 0..<h { mean += row[j] }
            mean /= Float(h)
            var variance: Float = 0
            for j in 0..<h {
                let d = row[j] - mean
                variance += d * d
            }
            variance /= Float(h)
            let inverse = 1 / (variance + epsilon).squareRoot()
            for j in 0..<h { row[j] = (row[j] - mean) * inverse * weight.pointer[j] + bias.pointer[j] }
        }
    }

    private func softmax(_ row: UnsafeMutablePointer<Float>, count: Int) {
        var top = -Float.infinity
        for j in 0..<count { top = max(top, row[j]) }
        var total: Float = 0
        for j in 0..<count {
            row[j] = expf(row[j] - top)
            total += row[j]
        }
        let inverse = 1 / total
        for j in 0..<count { row[j] *= inverse }
    }

    /// BERT's exact GELU: x · Φ(x) = 0.5 · x · (1 + erf(x / √2)).
    private func gelu(_ x: UnsafeMutablePointer<Float>, count: Int) {
        if usesVectorKernels {
            sl_gelu(x, count)
            return
        }
        let inverseRoot2: Float = 0.707_106_77
        for i in 0..<count { x[i] = 0.5 * x[i] * (1 + erff(x[i] * inverseRoot2)) }
    }
}

/// The working matrices of one forward pass.
private struct Scratch {
    let x, qkv, context, sum, intermediate, scores: UnsafeMutablePointer<Float>

    init(rows: Int, configuration c: MiniLMConfiguration, longest: Int) {
        x = .allocate(capacity: rows * c.hidden)
        qkv = .allocate(capacity: rows * 3 * c.hidden)
        context = .allocate(capacity: rows * c.hidden)
        sum = .allocate(capacity: rows * c.hidden)
        intermediate = .allocate(capacity: rows * c.intermediate)
        scores = .allocate(capacity: longest * longest)
    }

    func free() {
        for p in [x, qkv, context, sum, intermediate, scores] { p.deallocate() }
    }
}
