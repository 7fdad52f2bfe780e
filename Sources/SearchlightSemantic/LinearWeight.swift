import COpenBLAS
import CSemanticKernels
import Dispatch
import SearchlightWire

/// One Linear layer (PyTorch's: `weight` is [outputs × inputs], out = input · weightᵀ + bias), in
/// whichever form this CPU multiplies fastest:
///
/// - **packed half precision** (`CSemanticKernels`), when the CPU has AVX-512 and F16C: 48-column
///   panels converted to single precision as they are read. Half the memory of the float weights
///   and, for a query's few rows, about 2.6× faster than OpenBLAS, which spends most of a
///   short product repacking the weight (Docs/SemanticSearch.md, "Speed");
/// - **single precision** through OpenBLAS's `cblas_sgemm` otherwise.
///
/// Only one form is kept, so the loaded model is 21 MB smaller with the packed one.
final class LinearWeight: @unchecked Sendable {
    // @unchecked: written only in init, then only read, from any thread.
    let outputs: Int
    let inputs: Int
    let bias: FloatTensor
    private let full: FloatTensor?
    private let packed: UnsafeMutablePointer<UInt16>?

    /// Whether this process multiplies with the packed kernel (one answer per process).
    static let usesPackedKernel: Bool = sl_linear_available() != 0

    /// Rows per call of the packed kernel: the rows' inputs (up to 64 × 1536 floats, 384 KB)
    /// stay in the core's L2 cache while every panel of the weight streams past them.
    static let rowsPerChunk = 64

    init(weight: [Float], bias: [Float], outputs: Int, inputs: Int, packed usePacked: Bool = LinearWeight.usesPackedKernel) {
        precondition(weight.count == outputs * inputs && bias.count == outputs)
        self.outputs = outputs
        self.inputs = inputs
        self.bias = FloatTensor(bias)
        if usePacked && outputs % Int(SL_PANEL) == 0 {
            let p = UnsafeMutablePointer<UInt16>.allocate(capacity: outputs * inputs)
            weight.withUnsafeBufferPointer { sl_linear_pack($0.baseAddress!, outputs, inputs, p) }
            packed = p
            full = nil
        } else {
            packed = nil
            full = FloatTensor(weight)
        }
    }

    deinit { packed?.deallocate() }

    /// out[rows × outputs] = input[rows × inputs] · weightᵀ + bias. `parts` > 1 splits the output
    /// columns over that many threads (a query: a product of a few rows runs on one thread in
    /// OpenBLAS and in the packed kernel alike).
    func apply(_ input: UnsafeMutablePointer<Float>, rows: Int, into out: UnsafeMutablePointer<Float>, parts: Int) {
        let pointers = Pointers(input: input, out: out)
        if packed != nil {
            let panels = outputs / Int(SL_PANEL)
            let run: @Sendable (Int, Int) -> Void = { first, end in
                var r = 0
                while r < rows {
                    let n = min(Self.rowsPerChunk, rows - r)
                    sl_linear_f16(pointers.input + r * self.inputs, n, self.inputs, self.packed, self.bias.pointer, self.outputs,
                                  pointers.out + r * self.outputs, first, end)
                    r += n
                }
            }
            // A background thread (refinement) keeps its product to itself: the pool's threads run
            // at the normal priority and would compete with queries (BackgroundPriority).
            if parts <= 1 || BackgroundPriority.isCurrentThreadBackground {
                run(0, panels)
            } else {
                DispatchQueue.concurrentPerform(iterations: parts) { part in run(panels * part / parts, panels * (part + 1) / parts) }
            }
            return
        }
        guard let full else { return }
        for r in 0..<rows { (out + r * outputs).update(from: bias.pointer, count: outputs) }
        let sgemm: @Sendable (Int, Int) -> Void = { start, end in
            // Its columns of `out` (ldc stays `outputs`) from its rows of the weight.
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Int32(rows), Int32(end - start), Int32(self.inputs),
                        1, pointers.input, Int32(self.inputs), full.pointer + start * self.inputs, Int32(self.inputs), 1,
                        pointers.out + start, Int32(self.outputs))
        }
        if parts <= 1 || BackgroundPriority.isCurrentThreadBackground {
            sgemm(0, outputs)
        } else {
            DispatchQueue.concurrentPerform(iterations: parts) { part in sgemm(outputs * part / parts, outputs * (part + 1) / parts) }
        }
    }
}

/// Raw pointers handed to the threads of one split product: each writes disjoint columns.
private struct Pointers: @unchecked Sendable {
    let input: UnsafeMutablePointer<Float>
    let out: UnsafeMutablePointer<Float>
}
