import Foundation
import Glibc
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
    /// The open file the header and tensors were read from (nil for `init(data:)`): the rows a
    /// `TensorRows` reads later come from this very file, never from a second open of `path`.
    private var file: OpenFile?

    /// Header size limit: the real header is 11 KB; a bigger one is a damaged or hostile file.
    static let maxHeaderBytes = 16 << 20

    /// Opens `path` once and maps it through that descriptor; the descriptor stays open for
    /// `rows(_:shape:)` (a file put in `path`'s place afterwards is never read).
    public init(path: String) throws(SemanticError) {
        // O_NONBLOCK: a FIFO in the file's place must not hang the open.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let why = String(cString: strerror(errno))
            throw SemanticError(.modelMissing, "cannot read \(path) (\(why)); run `make model` to fetch the model files")
        }
        let file = OpenFile(fd)
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            throw SemanticError(.badFormat, "\(path) is not a regular file; run `make model` to fetch it again")
        }
        let size = Int(st.st_size)
        let data: Data
        if size == 0 {
            data = Data()
        } else {
            guard let map = mmap(nil, size, PROT_READ, MAP_PRIVATE, fd, 0), map != MAP_FAILED else {
                let why = String(cString: strerror(errno))
                throw SemanticError(.modelMissing, "cannot map \(path) (\(why)); run `make model` to fetch the model files")
            }
            data = Data(bytesNoCopy: map, count: size, deallocator: .custom { p, n in munmap(p, n) })
        }
        try self.init(data: data, path: path)
        self.file = file
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
        self.file = nil
    }

    private func checked(_ name: String, shape: [Int]) throws(SemanticError) -> TensorInfo {
        guard let t = tensors[name] else {
            throw SemanticError(.badFormat, "\(path) has no tensor \(name); is it all-MiniLM-L6-v2's model.safetensors?")
        }
        guard t.dtype == "F32", t.shape == shape else {
            throw SemanticError(.badFormat, "\(path): tensor \(name) is \(t.dtype) \(t.shape), expected F32 \(shape)")
        }
        return t
    }

    /// A [rows × width] float32 tensor read a row at a time from the file with `pread` (the page
    /// cache holds what was read: reclaimable, not the process's resident memory), through a
    /// duplicate of the descriptor this file was validated through. From `init(data:)` (no
    /// file), the rows are copied to the heap.
    func rows(_ name: String, shape: [Int]) throws(SemanticError) -> TensorRows {
        guard shape.count == 2 else { throw SemanticError(.invalidArgument, "rows of \(name) need a 2-dimensional shape, not \(shape)") }
        let t = try checked(name, shape: shape)
        // SEARCHLIGHT_WORD_TABLE_ON_HEAP=1: the rows copied to the heap as before, to compare the two
        // (`searchlight-semantic word-table`).
        if file == nil || ProcessInfo.processInfo.environment["SEARCHLIGHT_WORD_TABLE_ON_HEAP"] == "1" {
            return TensorRows(path: path, values: FloatTensor(try floats(name, shape: shape)), rows: shape[0], width: shape[1])
        }
        guard let file else { preconditionFailure() }
        let copy = fcntl(file.fd, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else {
            throw SemanticError(.modelMissing, "cannot keep \(path) open (\(String(cString: strerror(errno))))")
        }
        return TensorRows(path: path, fd: copy, offset: dataStart + t.range.lowerBound, rows: shape[0], width: shape[1])
    }

    /// The values of a float32 tensor, which must have `shape`.
    public func floats(_ name: String, shape: [Int]) throws(SemanticError) -> [Float] {
        let t = try checked(name, shape: shape)
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

/// A file descriptor closed when the last holder lets go.
final class OpenFile: Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
    deinit { close(fd) }
}

/// The rows of a float32 matrix, read on demand from the model file (`SafetensorsFile.rows`), or
/// held in memory when there is no file. Reads may run on several threads at once.
final class TensorRows: Sendable {
    let path: String
    let rows: Int
    let width: Int
    private let fd: Int32
    /// Absolute file offset of row 0.
    private let offset: Int
    private let values: FloatTensor?

    init(path: String, fd: Int32, offset: Int, rows: Int, width: Int) {
        self.path = path
        self.fd = fd
        self.offset = offset
        self.rows = rows
        self.width = width
        values = nil
    }

    init(path: String, values: FloatTensor, rows: Int, width: Int) {
        precondition(values.count == rows * width)
        self.path = path
        self.fd = -1
        self.offset = 0
        self.rows = rows
        self.width = width
        self.values = values
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Bytes of the table on the heap: 0 when it is read from the file.
    var heapBytes: Int { values.map { $0.count * 4 } ?? 0 }

    /// Row `row` into `out` (`width` floats). A row outside the table, or a read that fails or
    /// comes up short (the file was truncated or damaged after loading), is an error: `out` is
    /// then not to be used.
    func read(_ row: Int, into out: UnsafeMutablePointer<Float>) throws(SemanticError) {
        guard row >= 0 && row < rows else {
            throw SemanticError(.invalidArgument, "row \(row) is outside the \(rows) rows of a table in \(path)")
        }
        if let values {
            out.update(from: values.pointer + row * width, count: width)
            return
        }
        let bytes = width * 4
        let start = offset + row * bytes
        var done = 0
        while done < bytes {
            let n = pread(fd, UnsafeMutableRawPointer(out) + done, bytes - done, off_t(start + done))
            if n > 0 {
                done += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                let why = n == 0 ? "the file ends early" : String(cString: strerror(errno))
                throw SemanticError(.badFormat, "\(path) changed after it was loaded (\(why)); run `make model` to fetch it again")
            }
        }
        if UInt32(littleEndian: 1) != 1 {
            for j in 0..<width { out[j] = Float(bitPattern: out[j].bitPattern.byteSwapped) }
        }
    }
}
