/// The shape of a BERT encoder. all-MiniLM-L6-v2's values are fixed here (its config.json is not
/// one of the verified files); every tensor read is checked against them.
public struct MiniLMConfiguration: Sendable, Equatable {
    public var vocabularySize = 30522
    public var hidden = 384
    public var layers = 6
    public var heads = 12
    public var intermediate = 1536
    public var maxPositions = 512
    public var layerNormEpsilon: Float = 1e-12

    public static let allMiniLML6v2 = MiniLMConfiguration()
    public var headDimension: Int { hidden / heads }
}

/// Weights, read once and immutable: a contiguous float buffer per tensor.
final class FloatTensor: @unchecked Sendable {
    // @unchecked: written only in init, then only read, from any thread.
    let pointer: UnsafeMutablePointer<Float>
    let count: Int

    init(_ values: [Float]) {
        count = values.count
        pointer = .allocate(capacity: max(1, values.count))
        values.withUnsafeBufferPointer { pointer.initialize(from: $0.baseAddress!, count: values.count) }
    }

    deinit { pointer.deallocate() }
}

/// One transformer layer's weights. `qkv` is the query, key and value projections stacked into one
/// [3·hidden × hidden] matrix so that one product computes all three.
struct MiniLMLayer: Sendable {
    let qkvWeight, qkvBias: FloatTensor
    let attentionOutWeight, attentionOutBias: FloatTensor
    let attentionNormWeight, attentionNormBias: FloatTensor
    let intermediateWeight, intermediateBias: FloatTensor
    let outputWeight, outputBias: FloatTensor
    let outputNormWeight, outputNormBias: FloatTensor
}

struct MiniLMWeights: Sendable {
    let configuration: MiniLMConfiguration
    let wordEmbeddings, positionEmbeddings, tokenTypeEmbeddings: FloatTensor
    let embeddingNormWeight, embeddingNormBias: FloatTensor
    let layers: [MiniLMLayer]

    init(file: SafetensorsFile, configuration c: MiniLMConfiguration) throws(SemanticError) {
        configuration = c
        let h = c.hidden
        func t(_ name: String, _ shape: [Int]) throws(SemanticError) -> FloatTensor {
            FloatTensor(try file.floats(name, shape: shape))
        }
        wordEmbeddings = try t("embeddings.word_embeddings.weight", [c.vocabularySize, h])
        positionEmbeddings = try t("embeddings.position_embeddings.weight", [c.maxPositions, h])
        tokenTypeEmbeddings = try t("embeddings.token_type_embeddings.weight", [2, h])
        embeddingNormWeight = try t("embeddings.LayerNorm.weight", [h])
        embeddingNormBias = try t("embeddings.LayerNorm.bias", [h])
        var layers: [MiniLMLayer] = []
        for i in 0..<c.layers {
            let p = "encoder.layer.\(i)."
            let q = try file.floats(p + "attention.self.query.weight", shape: [h, h])
            let k = try file.floats(p + "attention.self.key.weight", shape: [h, h])
            let v = try file.floats(p + "attention.self.value.weight", shape: [h, h])
            let qb = try file.floats(p + "attention.self.query.bias", shape: [h])
            let kb = try file.floats(p + "attention.self.key.bias", shape: [h])
            let vb = try file.floats(p + "attention.self.value.bias", shape: [h])
            layers.append(MiniLMLayer(
                qkvWeight: FloatTensor(q + k + v), qkvBias: FloatTensor(qb + kb + vb),
                attentionOutWeight: try t(p + "attention.output.dense.weight", [h, h]),
                attentionOutBias: try t(p + "attention.output.dense.bias", [h]),
                attentionNormWeight: try t(p + "attention.output.LayerNorm.weight", [h]),
                attentionNormBias: try t(p + "attention.output.LayerNorm.bias", [h]),
                intermediateWeight: try t(p + "intermediate.dense.weight", [c.intermediate, h]),
                intermediateBias: try t(p + "intermediate.dense.bias", [c.intermediate]),
                outputWeight: try t(p + "output.dense.weight", [h, c.intermediate]),
                outputBias: try t(p + "output.dense.bias", [h]),
                outputNormWeight: try t(p + "output.LayerNorm.weight", [h]),
                outputNormBias: try t(p + "output.LayerNorm.bias", [h])))
        }
        self.layers = layers
    }
}
