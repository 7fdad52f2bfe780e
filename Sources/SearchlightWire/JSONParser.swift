/// Why a JSON text was refused, with the byte offset where the problem starts.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var offset: Int
    public var reason: String
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSONValue {
    /// Parses one JSON text. `maxDepth` bounds nesting of arrays and objects (hostile input).
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 128) throws(JSONParseError) -> JSONValue {
        // A frame is a slice of the connection's buffer: parse it in place, without a copy.
        let inPlace: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            do throws(JSONParseError) { return .success(try parser.parseDocument()) } catch { return .failure(error) }
        }
        if let inPlace { return try inPlace.get() }
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buffer throws(JSONParseError) in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            return try parser.parseDocument()
        }
    }

    public static func parse(_ text: String, maxDepth: Int = 128) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }
}

struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var pos = 0
    var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipSpace()
        let value = try parseValue()
        skipSpace()
        if pos != bytes.count { throw fail("unexpected data after the JSON value") }
        return value
    }

    func fail(_ reason: String, at offset: Int? = nil) -> JSONParseError {
        JSONParseError(offset: offset ?? pos, reason: reason)
    }

    mutating func skipSpace() {
        while pos < bytes.count {
            switch bytes[pos] {
            case 0x20, 0x09, 0x0A, 0x0D: pos += 1
            default: return
            }
        }
    }

    /// JSON's white space (what `skipSpace` skips).
    static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard pos < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[pos] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw fail("unexpected character")
        }
    }

    mutating func expectLiteral(_ word: StaticString) throws(JSONParseError) {
        let start = pos
        let count = word.utf8CodeUnitCount
        guard bytes.count - pos >= count else { throw fail("unexpected end of input", at: start) }
        let w = word.utf8Start
        for i in 0..<count where bytes[pos + i] != w[i] { throw fail("invalid literal", at: start) }
        pos += count
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth { throw fail("nesting deeper than \(maxDepth) levels") }
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1
        var object: [String: JSONValue] = [:]
        skipSpace()
        if pos < bytes.count, bytes[pos] == UInt8(ascii: "}") { pos += 1; depth -= 1; return .object(object) }
        // Room for an answer's item (three or four keys) at once: growing from empty rehashes
        // every key at each doubling, and an answer page is mostly small objects. (Not
        // `reserveCapacity`: it is not specialized, and its generic call cost more than it saved.)
        object = Dictionary(minimumCapacity: 4)
        while true {
            skipSpace()
            guard pos < bytes.count, bytes[pos] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
            let key = try parseString()
            skipSpace()
            guard pos < bytes.count, bytes[pos] == UInt8(ascii: ":") else { throw fail("expected ':' after key") }
            pos += 1
            skipSpace()
            object[key] = try parseValue()
            skipSpace()
            guard pos < bytes.count else { throw fail("unexpected end of input in object") }
            if bytes[pos] == UInt8(ascii: ",") { pos += 1; continue }
            if bytes[pos] == UInt8(ascii: "}") { pos += 1; break }
            throw fail("expected ',' or '}' in object")
        }
        depth -= 1
        return .object(object)
    }

    mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1
        var array: [JSONValue] = []
        skipSpace()
        if pos < bytes.count, bytes[pos] == UInt8(ascii: "]") { pos += 1; depth -= 1; return .array(array) }
        while true {
            skipSpace()
            array.append(try parseValue())
            skipSpace()
            guard pos < bytes.count else { throw fail("unexpected end of input in array") }
            if bytes[pos] == UInt8(ascii: ",") { pos += 1; continue }
            if bytes[pos] == UInt8(ascii: "]") { pos += 1; break }
            throw fail("expected ',' or ']' in array")
        }
        depth -= 1
        return .array(array)
    }

    mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = pos
        if bytes[pos] == UInt8(ascii: "-") { pos += 1 }
        guard pos < bytes.count, isDigit(bytes[pos]) else { throw fail("invalid number", at: start) }
        if bytes[pos] == UInt8(ascii: "0") {
            pos += 1
        } else {
            while pos < bytes.count, isDigit(bytes[pos]) { pos += 1 }
        }
        if pos < bytes.count, bytes[pos] == UInt8(ascii: ".") {
            pos += 1
            guard pos < bytes.count, isDigit(bytes[pos]) else { throw fail("invalid number fraction", at: start) }
            while pos < bytes.count, isDigit(bytes[pos]) { pos += 1 }
        }
        if pos < bytes.count, bytes[pos] == UInt8(ascii: "e") || bytes[pos] == UInt8(ascii: "E") {
            pos += 1
            if pos < bytes.count, bytes[pos] == UInt8(ascii: "+") || bytes[pos] == UInt8(ascii: "-") { pos += 1 }
            guard pos < bytes.count, isDigit(bytes[pos]) else { throw fail("invalid number exponent", at: start) }
            while pos < bytes.count, isDigit(bytes[pos]) { pos += 1 }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<pos]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw fail("number out of range", at: start) }
        return value
    }

    func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }

    mutating func parseString() throws(JSONParseError) -> String {
        let start = pos
        pos += 1
        // Fast path: no escapes. Validate UTF-8 as we go.
        var scratch: [UInt8] = []
        var runStart = pos
        while true {
            guard pos < bytes.count else { throw fail("unterminated string", at: start) }
            let b = bytes[pos]
            if b == UInt8(ascii: "\"") {
                if scratch.isEmpty {
                    let s = try makeString(UnsafeBufferPointer(rebasing: bytes[runStart..<pos]), at: runStart)
                    pos += 1
                    return s
                }
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<pos]))
                pos += 1
                return try makeString(scratch, at: start)
            }
            if b < 0x20 { throw fail("control character in string; escape it") }
            if b == UInt8(ascii: "\\") {
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<pos]))
                try parseEscape(into: &scratch)
                runStart = pos
                continue
            }
            pos += 1
            skipPlainStringBytes()
        }
    }

    /// Moves `pos` past bytes that need no attention inside a string, eight at a time, to the
    /// first quote, backslash or control character of a block (or to the last bytes, fewer than
    /// eight, which the byte loop reads). Text fields are most of a donation's bytes, and short
    /// strings (keys, titles) most of an answer's: stopping at the block's start instead made
    /// the byte loop call this again for every byte before the closing quote.
    mutating func skipPlainStringBytes() {
        guard let base = bytes.baseAddress else { return }
        let raw = UnsafeRawPointer(base)
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        let count = bytes.count
        var i = pos
        while i + 8 <= count {
            let w = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: i, as: UInt64.self))
            let quote = w ^ (ones &* 0x22), backslash = w ^ (ones &* 0x5C)
            let control = (w &- ones &* 0x20) & ~w
            let hits = (((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | control) & highs
            if hits != 0 {
                // The lowest flagged byte is a true one: a borrow flags only bytes above a hit
                // (little-endian: later in the text).
                pos = i + hits.trailingZeroBitCount >> 3
                return
            }
            i += 8
        }
        pos = i
    }

    func makeString(_ buffer: UnsafeBufferPointer<UInt8>, at offset: Int) throws(JSONParseError) -> String {
        // ASCII needs no validation; `String(validating:)` is generic and costs a metadata
        // lookup per call, which showed in profiles of donations.
        if Self.isASCII(buffer) { return String(decoding: buffer, as: UTF8.self) }
        guard let s = String(validating: buffer, as: UTF8.self) else { throw fail("invalid UTF-8 in string", at: offset) }
        return s
    }

    func makeString(_ bytes: [UInt8], at offset: Int) throws(JSONParseError) -> String {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONParseError) in try makeString(buffer, at: offset) }
    }

    /// Whether every byte is below 0x80, eight at a time.
    static func isASCII(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = b.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var i = 0
        while i + 8 <= b.count {
            if raw.loadUnaligned(fromByteOffset: i, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            i += 8
        }
        while i < b.count {
            if b[i] >= 0x80 { return false }
            i += 1
        }
        return true
    }

    mutating func parseEscape(into out: inout [UInt8]) throws(JSONParseError) {
        let start = pos
        pos += 1
        guard pos < bytes.count else { throw fail("unterminated escape", at: start) }
        let c = bytes[pos]
        pos += 1
        switch c {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"): out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try parseHex4()
            if (0xD800..<0xDC00).contains(scalar) {
                guard bytes.count - pos >= 6, bytes[pos] == 0x5C, bytes[pos + 1] == UInt8(ascii: "u") else {
                    throw fail("unpaired surrogate in \\u escape", at: start)
                }
                pos += 2
                let low = try parseHex4()
                guard (0xDC00..<0xE000).contains(low) else { throw fail("invalid low surrogate", at: start) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00..<0xE000).contains(scalar) {
                throw fail("unpaired surrogate in \\u escape", at: start)
            }
            guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape", at: start) }
            out.append(contentsOf: Array(String(Character(u)).utf8))
        default: throw fail("invalid escape character", at: start)
        }
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - pos >= 4 else { throw fail("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[pos]
            let d: UInt32
            switch b {
            case 0x30...0x39: d = UInt32(b - 0x30)
            case 0x41...0x46: d = UInt32(b - 0x41 + 10)
            case 0x61...0x66: d = UInt32(b - 0x61 + 10)
            default: throw fail("invalid hex digit in \\u escape")
            }
            v = v * 16 + d
            pos += 1
        }
        return v
    }
}
