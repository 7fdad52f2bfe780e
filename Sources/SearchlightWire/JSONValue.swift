/// A JSON document as a value. The wire protocol is JSON-RPC over NDJSON, and every input is
/// hostile until validated, so we parse with our own strict parser (depth limit, UTF-8 checked,
/// byte offsets in errors) rather than a permissive general-purpose one.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])
}

extension JSONValue {
    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var doubleValue: Double? { if case .number(let n) = self { return n } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o } else { return nil } }
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// The value as an exact integer, if it is a number with no fraction that fits in Int.
    public var intValue: Int? {
        guard case .number(let n) = self, n.rounded() == n, abs(n) < 9.007_199_254_740_992e15 else { return nil }
        return Int(n)
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// A short name of the value's type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}

// MARK: - Serialization

extension JSONValue {
    /// Compact UTF-8 JSON with no newlines (safe as one NDJSON frame). With `sortedKeys`, object
    /// keys are sorted so the output is deterministic (tests, logs); the wire does not need it.
    public func serialized(sortedKeys: Bool = false) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out, sortedKeys: sortedKeys)
        return out
    }

    public var jsonString: String { String(decoding: serialized(sortedKeys: true), as: UTF8.self) }

    public func write(to out: inout [UInt8], sortedKeys: Bool = false) {
        switch self {
        case .null: out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
        case .bool(let b): out.append(contentsOf: b ? "true".utf8 : "false".utf8)
        case .number(let n): JSONValue.writeNumber(n, to: &out)
        case .string(let s): JSONValue.writeString(s, to: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(to: &out, sortedKeys: sortedKeys)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            var first = true
            func member(_ key: String, _ value: JSONValue) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                JSONValue.writeString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out, sortedKeys: sortedKeys)
            }
            if sortedKeys {
                for key in o.keys.sorted() { member(key, o[key]!) }
            } else {
                for (key, value) in o { member(key, value) }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// The length of `serialized()` without building it (for size limits on hot paths).
    public var serializedByteCount: Int {
        switch self {
        case .null: return 4
        case .bool(let b): return b ? 4 : 5
        case .number(let n):
            var scratch: [UInt8] = []
            JSONValue.writeNumber(n, to: &scratch)
            return scratch.count
        case .string(let s): return JSONValue.escapedByteCount(s)
        case .array(let a): return 2 + max(0, a.count - 1) + a.reduce(0) { $0 + $1.serializedByteCount }
        case .object(let o):
            return 2 + max(0, o.count - 1) + o.reduce(0) { $0 + JSONValue.escapedByteCount($1.key) + 1 + $1.value.serializedByteCount }
        }
    }

    /// At least `serializedByteCount`, found without reading any string's bytes (each could need
    /// a six-byte escape, a number at most 32 bytes): a size limit far above it needs no exact count.
    var serializedByteCountBound: Int {
        switch self {
        case .null, .bool: return 5
        case .number: return 32
        case .string(let s): return 2 + 6 * s.utf8.count
        case .array(let a): return 2 + a.count + a.reduce(0) { $0 + $1.serializedByteCountBound }
        case .object(let o):
            return 2 + o.count + o.reduce(0) { $0 + 3 + 6 * $1.key.utf8.count + $1.value.serializedByteCountBound }
        }
    }

    static func escapedByteCount(_ s: String) -> Int {
        var copy = s
        return copy.withUTF8 { bytes in
            // Most bytes need no escape: count the ones that do, on top of the plain length.
            var n = 2 + bytes.count
            for b in bytes where b < 0x20 || b == 0x22 || b == 0x5C || b == 0x7F {
                n += (b == 0x22 || b == 0x5C || b == 0x0A || b == 0x0D || b == 0x09) ? 1 : 5
            }
            return n
        }
    }

    public static func writeNumber(_ n: Double, to out: inout [UInt8]) {
        guard n.isFinite else { out.append(contentsOf: "null".utf8); return }
        if n.rounded() == n, abs(n) < 1e15 {
            out.append(contentsOf: String(Int64(n)).utf8)
        } else {
            out.append(contentsOf: "\(n)".utf8)
        }
    }

    /// The first offset at or after `from` whose eight-byte word may hold a byte to escape (a
    /// quote, a backslash, a control character or DEL), or the start of the last partial word:
    /// the bytes before it are copied as they are. Text fields are most of what an SDK client sends.
    static func plainPrefixEnd(_ bytes: UnsafeBufferPointer<UInt8>, from: Int) -> Int {
        guard let base = bytes.baseAddress else { return from }
        let raw = UnsafeRawPointer(base)
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        var i = from
        while i + 8 <= bytes.count {
            let w = raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5C), del = w ^ (ones &* 0x7F)
            let hits = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((del &- ones) & ~del)
                | ((w &- ones &* 0x20) & ~w)
            if hits & highs != 0 { return i }
            i += 8
        }
        return i
    }

    @inline(__always)
    static func needsEscape(_ b: UInt8) -> Bool { b < 0x20 || b == 0x22 || b == 0x5C || b == 0x7F }

    public static func writeString(_ s: String, to out: inout [UInt8]) {
        var copy = s
        copy.withUTF8 { writeString(utf8: $0, to: &out) }
    }

    /// `bytes` (valid UTF-8: a Swift string's, or text checked to be ASCII) as a JSON string,
    /// quoted and escaped exactly as `writeString` does: the daemon writes answers' text columns
    /// from SQLite's buffers this way, without a `String` per column.
    public static func writeString(utf8 bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Nearly every string of an answer (keys, titles, identifiers) needs no escape: one
        // scan, one copy. (A byte loop with a copy per run cost ~450 instructions a string.)
        var plain = plainPrefixEnd(bytes, from: 0)
        while plain < bytes.count, !needsEscape(bytes[plain]) { plain += 1 }
        if plain == bytes.count {
            out.append(contentsOf: bytes)
            out.append(UInt8(ascii: "\""))
            return
        }
        var runStart = 0
        var i = 0
        while i < bytes.count {
            i = plainPrefixEnd(bytes, from: i)
            guard i < bytes.count else { break }
            let b = bytes[i]
            i += 1
            guard b < 0x20 || b == 0x22 || b == 0x5C || b == 0x7F else { continue }
            let at = i - 1
            if at > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<at])) }
            runStart = i
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            default:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            }
        }
        if bytes.count > runStart { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

    /// Whether `bytes` are all ASCII (then they are valid UTF-8 as they are), eight at a time.
    public static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var i = 0
        var any: UInt64 = 0
        while i + 8 <= bytes.count {
            any |= raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
            i += 8
        }
        while i < bytes.count {
            any |= UInt64(bytes[i])
            i += 1
        }
        return any & 0x8080_8080_8080_8080 == 0
    }
}
