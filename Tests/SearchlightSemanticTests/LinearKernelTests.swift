import CSemanticKernels
import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

/// The AVX-512 kernels against plain single-precision arithmetic, on shapes and row counts that
/// reach every block size (1 … 8 rows), the 64-row chunks and the two-thread split.
@Suite("Packed linear kernel and GELU (AVX-512)", .onOwnThreads, .enabled(if: TransformerEncoder.packedKernelAvailable,
       "this CPU has no AVX-512/F16C: the encoder uses OpenBLAS only (its form is tested against the reference)"))
struct LinearKernelTests {
    static func random(_ n: Int, _ state: inout UInt64, scale: Float = 1) -> [Float] {
        (0..<n).map { _ in
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return (Float(state >> 40) / Float(1 << 24) - 0.5) * 2 * scale
        }
    }

    @Test("packed half-precision products equal the float product within half-precision rounding, for 1 to 70 rows and split over 2 threads")
    func packedProducts() throws {
        var state: UInt64 = 18
        for (outputs, inputs) in [(96, 40), (192, 384), (48, 1536)] {
            let w = Self.random(outputs * inputs, &state, scale: 0.1), b = Self.random(outputs, &state)
            let packed = LinearWeight(weight: w, bias: b, outputs: outputs, inputs: inputs, packed: true)
            let plain = LinearWeight(weight: w, bias: b, outputs: outputs, inputs: inputs, packed: false)
            for rows in [1, 2, 3, 5, 7, 8, 9, 16, 17, 33, 70] {
                let x = Self.random(rows * inputs, &state)
                var got = [Float](repeating: .nan, count: rows * outputs), split = got, want = got
                var input = x
                input.withUnsafeMutableBufferPointer { xp in
                    got.withUnsafeMutableBufferPointer { packed.apply(xp.baseAddress!, rows: rows, into: $0.baseAddress!, parts: 1) }
                    split.withUnsafeMutableBufferPointer { packed.apply(xp.baseAddress!, rows: rows, into: $0.baseAddress!, parts: 2) }
                    want.withUnsafeMutableBufferPointer { plain.apply(xp.baseAddress!, rows: rows, into: $0.baseAddress!, parts: 1) }
                }
                let same = got == split
                #expect(same, "\(rows) rows: the two-thread split differs")
                // Half precision keeps 11 significant bits of each weight: a dot product is off by at
                // most about 2^-11 · Σ|x·w| (with single-precision rounding on top).
                var violations = 0
                for r in 0..<rows {
                    for j in 0..<outputs {
                        var bound: Float = 0
                        for k in 0..<inputs { bound += abs(x[r * inputs + k] * w[j * inputs + k]) }
                        if abs(got[r * outputs + j] - want[r * outputs + j]) > bound * 1e-3 + 1e-5 { violations += 1 }
                    }
                }
                #expect(violations == 0, "\(outputs)×\(inputs), \(rows) rows: \(violations) outputs beyond half-precision rounding")
                #expect(!got.contains { $0.isNaN }, "\(rows) rows: an output was not written")
            }
        }
    }

    @Test("the vector GELU is within 2e-7 · (1 + |x|) of 0.5·x·(1 + erf(x/√2)) from −40 to 40, tails included")
    func gelu() {
        var xs = stride(from: Float(-40), through: 40, by: 0.001).map { $0 }
        xs += [0, -0, 1e-30, -1e-30, .leastNormalMagnitude, 1e6, -1e6]
        var got = xs
        got.withUnsafeMutableBufferPointer { sl_gelu($0.baseAddress!, $0.count) }
        var worst: Double = 0
        for (i, x) in xs.enumerated() {
            let want = 0.5 * Double(x) * (1 + erf(Double(x) / 2.0.squareRoot()))
            worst = max(worst, abs(Double(got[i]) - want) / (1 + abs(Double(x))))
        }
        #expect(worst <= 2e-7 * 4, "worst scaled error \(worst)")
        // A length that is not a multiple of 16 leaves the values after it alone.
        var tail: [Float] = Array(repeating: 1, count: 21)
        tail.withUnsafeMutableBufferPointer { sl_gelu($0.baseAddress!, 19) }
        #expect(tail[19] == 1 && tail[20] == 1)
        #expect(abs(tail[0] - 0.841_344_7) < 1e-6)
    }
}

/// The vector index's POPCNT and AVX-512BW scans against the portable arithmetic they replace.
@Suite("Vector scan kernels (POPCNT, AVX-512BW)", .onOwnThreads, .enabled(if: VectorIndex.usesKernels,
       "this CPU has no POPCNT/AVX-512BW: the vector index uses its portable loops"))
struct VectorKernelTests {
    @Test("int8 dot products equal the plain sum for lengths 0 to 400, extreme values included")
    func dots() {
        var state: UInt64 = 7
        func next() -> Int8 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int8(truncatingIfNeeded: state >> 56)
        }
        for n in Array(0...70) + [383, 384, 385, 400] {
            let a = (0..<n).map { _ in next() }, b = (0..<n).map { _ in next() }
            let want = zip(a, b).reduce(Int32(0)) { $0 + Int32($1.0) * Int32($1.1) }
            #expect(sl_dot_i8(a, b, n) == want, "length \(n)")
        }
        let low = [Int8](repeating: -128, count: 384)
        #expect(sl_dot_i8(low, low, 384) == 384 * 128 * 128)
    }

    @Test("Hamming distances equal XOR-popcount for 6 words (384 dimensions) and for other widths")
    func hamming() {
        var state: UInt64 = 11
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state ^ (state >> 29)
        }
        for words in [1, 6, 7] {
            let count = 257
            let codes = (0..<(count * words)).map { _ in next() }, query = (0..<words).map { _ in next() }
            var got = [UInt16](repeating: 9999, count: count)
            sl_hamming(codes, count, words, query, &got)
            for i in 0..<count {
                let want = (0..<words).reduce(0) { $0 + (codes[i * words + $1] ^ query[$1]).nonzeroBitCount }
                #expect(Int(got[i]) == want, "item \(i), \(words) words")
            }
        }
    }
}
