import Foundation
import Testing
import TestThreads
@testable import SearchlightSemantic

@Suite("Safetensors reader", .onOwnThreads)
struct SafetensorsTests {
    /// A file of one header and its data, built by hand.
    static func file(header: String, data: [UInt8]) -> Data {
        var bytes: [UInt8] = []
        var n = UInt64(header.utf8.count)
        for _ in 0..<8 { bytes.append(UInt8(n & 0xFF)); n >>= 8 }
        return Data(bytes + Array(header.utf8) + data)
    }

    @Test("reads a float32 tensor by name and shape")
    func reads() throws {
        let floats: [Float] = [1, -2.5, 3, 4]
        let raw = floats.withUnsafeBytes { Array($0) }
        let f = try SafetensorsFile(data: Self.file(
            header: #"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#, data: raw))
        #expect(try f.floats("w", shape: [2, 2]) == floats)
        #expect(throws: SemanticError.self) { try f.floats("w", shape: [4]) }
        #expect(throws: SemanticError.self) { try f.floats("missing", shape: [2, 2]) }
    }

    @Test("offsets past the end, a shape that does not fill its bytes, or a huge header are refused")
    func hostile() {
        let cases = [
            Self.file(header: #"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,64]}}"#, data: [0, 0, 0, 0, 0, 0, 0, 0]),
            Self.file(header: #"{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, data: [0, 0, 0, 0, 0, 0, 0, 0]),
            Self.file(header: #"{"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}}"#, data: [0, 0, 0, 0, 0, 0, 0, 0]),
            Self.file(header: #"[1,2]"#, data: []),
            Data([0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x7B]),
            Data([1, 2, 3]),
        ]
        for data in cases {
            #expect(throws: SemanticError.self) { try SafetensorsFile(data: data) }
        }
    }
}
