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
    let qkv: LinearWeight
    let attentionOut: LinearWeight
    let attentionNormWeight, attentionNormBias: FloatTensor
    let intermediate: LinearWeight
    let output: LinearWeight
    let outputNormWeight, outputNormBias: FloatTensor
}

struct MiniLMWeights: Sendable {
    let configuration: MiniLMConfiguration
    /// 30 522 × 384 floats (47 MB), of which a query reads a few rows: read from the model file
    /// as needed (`TensorRows`), not kept on the heap.
    let wordEmbeddings: TensorRows
    let positionEmbeddings, tokenTypeEmbeddings: FloatTensor
    let embeddingNormWeight, embeddingNormBias: FloatTensor
    let layers: [MiniLMLayer]

    /// `packed`: the linear layers in the packed half-precision form when this CPU can run it
    /// (`LinearWeight`); false keeps them in single precision for OpenBLAS.
    init(file: SafetensorsFile, configuration c: MiniLMConfiguration, packed: Bool = LinearWeight.usesPackedKernel) throws(SemanticError) {
        configuration = c
        let h = c.hidden
        func t(_ name: String, _ shape: [Int]) throws(SemanticError) -> FloatTensor {
            FloatTensor(try file.floats(name, shape: shape))
        }
        func linear(_ name: String, outputs: Int, inputs: Int) throws(SemanticError) -> LinearWeight {
            LinearWeight(weight: try file.floats(name + ".weight", shape: [outputs, inputs]), bias: try file.floats(name + ".bias", shape: [outputs]),
                         outputs: outputs, inputs: inputs, packed: packed)
        }
        wordEmbeddings = try file.rows("embeddings.word_embeddings.weight", shape: [c.vocabularySize, h])
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
                qkv: LinearWeight(weight: q + k + v, bias: qb + kb + vb, outputs: 3 * h, inputs: h, packed: packed),
                attentionOut: try linear(p + "attention.output.dense", outputs: h, inputs: h),
                attentionNormWeight: try t(p + "attention.output.LayerNorm.weight", [h]),
                attentionNormBias: try t(p + "attention.output.LayerNorm.bias", [h]),
                intermediate: try linear(p + "intermediate.dense", outputs: c.intermediate, inputs: h),
                output: try linear(p + "output.dense", outputs: h, inputs: c.intermediate),
                outputNormWeight: try t(p + "output.LayerNorm.weight", [h]),
                outputNormBias: try t(p + "output.LayerNorm.bias", [h])))
        }
        self.layers = layers
    }
}
