import Foundation
import SearchlightWire

/// A read-only safetensors file (the Hugging Face weights format): an 8-byte little-endian header
/// length, a JSON header `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": …}`,
/// then the tensors' bytes. Every offset, shape and size is checked before use: a damaged or
/// hostile file is refused with what is wrong, never read out of bounds.
public struct SafetensorsFile: Sendable {
    public struct TensorInfo: Sendable, Equatable {
        public var dtype: String
        public var shape: [Int]
        /// Byte range in the data section (after the header).
        public var range: Range<Int>
    }

    public let path: String
    public let tensors: [String: TensorInfo]
    private let data: Data
    private let dataStart: Int

    /// Header size limit: the real header is 11 KB; a bigger one is a damaged or hostile file.
    static let maxHeaderBytes = 16 << 20

    public init(path: String) throws(SemanticError) {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
        } catch {
            throw SemanticError(.modelMissing, "cannot read \(path) (\(error.localizedDescription)); run `make model` to fetch the model files")
        }
        try self.init(data: data, path: path)
    }

    public init(data: Data, path: String = "(memory)") throws(SemanticError) {
        func bad(_ why: String) -> SemanticError {
            SemanticError(.badFormat, "\(path) is not a usable safetensors file: \(why); run `make model` to fetch it again")
        }
        guard data.count >= 8 else { throw bad("it is \(data.count) bytes long") }
        var headerLength: UInt64 = 0
        for i in (0..<8).reversed() { headerLength = headerLength << 8 | UInt64(data[data.startIndex + i]) }
        guard headerLength <= UInt64(Self.maxHeaderBytes), Int(headerLength) <= data.count - 8 else {
            throw bad("its header length \(headerLength) exceeds the file or \(Self.maxHeaderBytes) bytes")
        }
        let headerBytes = Array(data[(data.startIndex + 8)..<(data.startIndex + 8 + Int(headerLength))])
        guard let header = try? JSONValue.parse(headerBytes), case .object(let entries) = header else {
            throw bad("its header is not a JSON object")
        }
        let dataStart = 8 + Int(headerLength)
        let dataCount = data.count - dataStart
        var tensors: [String: TensorInfo] = [:]
        for (name, value) in entries where name != "__metadata__" {
            guard let dtype = value["dtype"]?.stringValue,
                  let shapeValues = value["shape"]?.arrayValue,
                  let offsets = value["data_offsets"]?.arrayValue, offsets.count == 2 else {
                throw bad("tensor \(name) lacks dtype, shape or data_offsets")
            }
            let shape = shapeValues.compactMap { $0.doubleValue.flatMap { $0 >= 0 && $0 <= 1e9 && $0 == $0.rounded() ? Int($0) : nil } }
            let bounds = offsets.compactMap { $0.doubleValue.flatMap { $0 >= 0 && $0 <= Double(Int.max / 2) && $0 == $0.rounded() ? Int($0) : nil } }
            guard shape.count == shapeValues.count, bounds.count == 2, bounds[0] <= bounds[1], bounds[1] <= dataCount else {
                throw bad("tensor \(name) has a bad shape or offsets outside the file")
            }
            let elementSize: Int? = switch dtype {
            case "F32", "I32", "U32": 4
            case "F16", "BF16", "I16": 2
            case "F64", "I64": 8
            case "I8", "U8", "BOOL": 1
            default: nil
            }
            var count = 1
            for d in shape {
                let (p, overflow) = count.multipliedReportingOverflow(by: d)
                guard !overflow else { throw bad("tensor \(name) has an impossible shape \(shape)") }
                count = p
            }
            if let elementSize, count * elementSize != bounds[1] - bounds[0] {
                throw bad("tensor \(name) of shape \(shape) and type \(dtype) does not fill its \(bounds[1] - bounds[0]) bytes")
            }
            tensors[name] = TensorInfo(dtype: dtype, shape: shape, range: bounds[0]..<bounds[1])
        }
        self.path = path
        self.data = data
        self.dataStart = dataStart
        self.tensors = tensors
    }

    /// The values of a float32 tensor, which must have `shape`.
    public func floats(_ name: String, shape: [Int]) throws(SemanticError) -> [Float] {
        guard let t = tensors[name] else {
            throw SemanticError(.badFormat, "\(path) has no tensor \(name); is it all-MiniLM-L6-v2's model.safetensors?")
        }
        guard t.dtype == "F32", t.shape == shape else {
            throw SemanticError(.badFormat, "\(path): tensor \(name) is \(t.dtype) \(t.shape), expected F32 \(shape)")
        }
        let count = t.range.count / 4
        var out = [Float](repeating: 0, count: count)
        let start = data.startIndex + dataStart + t.range.lowerBound
        out.withUnsafeMutableBytes { dst in
            data.copyBytes(to: dst.bindMemory(to: UInt8.self), from: start..<(start + t.range.count))
        }
        // The format is little-endian; so is every machine this runs on, which this keeps honest.
        if UInt32(littleEndian: 1) != 1 { out = out.map { Float(bitPattern: $0.bitPattern.byteSwapped) } }
        return out
    }
}
