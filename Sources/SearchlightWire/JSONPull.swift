#if canImport(Glibc)
import Glibc
#endif

// Reading JSON without building a `JSONValue` tree: skipping a value (syntax checked, nothing
// built), walking an object's members or an array's elements, reading a string's bytes in place.
// The SDK reads query answers this way (`QueryAnswers.swift`): building every item's dictionaries
// and then looking its members up by hashed key was most of a query's cost on the client
// (`git show 8eae301:Docs/Performance.md`, "The SDK's side, profiled").

/// An object member's key: its bytes in the text when it has no escape, else decoded.
struct JSONKey {
    let raw: UnsafeBufferPointer<UInt8>?
    let decoded: [UInt8]

    func equals(_ name: StaticString) -> Bool {
        let count = name.utf8CodeUnitCount
        let bytes = UnsafeBufferPointer(start: name.utf8Start, count: count)
        if let raw { return raw.count == count && memcmpEqual(raw, bytes) }
        return decoded.count == count && decoded.withUnsafeBufferPointer { memcmpEqual($0, bytes) }
    }

    /// `a` and `b` have the same count. (`memcmp`: a byte loop over each candidate key was
    /// ~7 % of a term call's instructions on the client.)
    private func memcmpEqual(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let x = a.baseAddress, let y = b.baseAddress else { return a.count == 0 }
        return memcmp(x, y, a.count) == 0
    }
}

extension JSONParser {
    /// Skips one value after checking its syntax as `parseValue` would (depth, strings' escapes and
    /// control characters, numbers, literals); a skipped string's UTF-8 is not checked, since
    /// nothing is made of it.
    mutating func skipValue() throws(JSONParseError) {
        skipSpace()
        guard pos < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[pos] {
        case UInt8(ascii: "{"):
            try beginObject()
            var first = true
            while try nextMember(first: &first) != nil { try skipValue() }
        case UInt8(ascii: "["):
            try beginArray()
            var first = true
            while try nextElement(first: &first) { try skipValue() }
        case UInt8(ascii: "\""): if try stringBytes() == nil { _ = try parseString() }
        case UInt8(ascii: "t"): try expectLiteral("true")
        case UInt8(ascii: "f"): try expectLiteral("false")
        case UInt8(ascii: "n"): try expectLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): _ = try parseNumber()
        default: throw fail("unexpected character")
        }
    }

    /// The next value's first byte (after white space), or nil at the end.
    mutating func peek() -> UInt8? {
        skipSpace()
        return pos < bytes.count ? bytes[pos] : nil
    }

    /// Consumes `{`; then `nextMember` until it answers nil.
    mutating func beginObject() throws(JSONParseError) {
        skipSpace()
        guard pos < bytes.count, bytes[pos] == UInt8(ascii: "{") else { throw fail("expected an object") }
        try enter()
        pos += 1
    }

    /// The next member's key, with the parser at its value (which the caller must read or skip),
    /// or nil once the object's `}` is consumed. `first` starts true.
    mutating func nextMember(first: inout Bool) throws(JSONParseError) -> JSONKey? {
        skipSpace()
        guard pos < bytes.count else { throw fail("unexpected end of input in object") }
        if bytes[pos] == UInt8(ascii: "}") {
            pos += 1
            depth -= 1
            return nil
        }
        if !first {
            guard bytes[pos] == UInt8(ascii: ",") else { throw fail("expected ',' or '}' in object") }
            pos += 1
            skipSpace()
        }
        first = false
        guard pos < bytes.count, bytes[pos] == UInt8(ascii: "\"") else { throw fail("expected a string key") }
        let key: JSONKey
        if let raw = try stringBytes() {
            key = JSONKey(raw: raw, decoded: [])
        } else {
            key = JSONKey(raw: nil, decoded: Array(try parseString().utf8))
        }
        skipSpace()
        guard pos < bytes.count, bytes[pos] == UInt8(ascii: ":") else { throw fail("expected ':' after key") }
        pos += 1
        skipSpace()
        return key
    }

    /// Consumes `[`; then `nextElement` until it answers false.
    mutating func beginArray() throws(JSONParseError) {
        skipSpace()
        guard pos < bytes.count, bytes[pos] == UInt8(ascii: "[") else { throw fail("expected an array") }
        try enter()
        pos += 1
    }

    /// Whether another element follows (the parser is then at it), or false once `]` is consumed.
    mutating func nextElement(first: inout Bool) throws(JSONParseError) -> Bool {
        skipSpace()
        guard pos < bytes.count else { throw fail("unexpected end of input in array") }
        if bytes[pos] == UInt8(ascii: "]") {
            pos += 1
            depth -= 1
            return false
        }
        if !first {
            guard bytes[pos] == UInt8(ascii: ",") else { throw fail("expected ',' or ']' in array") }
            pos += 1
            skipSpace()
        }
        first = false
        return true
    }

    /// A string's bytes in the text when it has no escape (the parser is at its quote, and moves
    /// past it; its UTF-8 is not checked), else nil with the parser still at the quote, for
    /// `parseString` to decode it.
    mutating func stringBytes() throws(JSONParseError) -> UnsafeBufferPointer<UInt8>? {
        let start = pos
        pos += 1
        var escaped = false
        while true {
            guard pos < bytes.count else { throw fail("unterminated string", at: start) }
            let b = bytes[pos]
            if b == UInt8(ascii: "\"") {
                pos += 1
                if escaped {
                    // Decoded by `parseString` from the start (rare: the daemon escapes only
                    // quotes, backslashes and control characters).
                    pos = start
                    return nil
                }
                return UnsafeBufferPointer(rebasing: bytes[(start + 1)..<(pos - 1)])
            }
            if b < 0x20 { throw fail("control character in string; escape it") }
            if b == UInt8(ascii: "\\") {
                escaped = true
                pos += 2
                continue
            }
            pos += 1
            skipPlainStringBytes()
        }
    }

    /// A string value or null (nil); any other value is skipped and answers nil too.
    mutating func optionalString() throws(JSONParseError) -> String? {
        guard peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        return try parseString()
    }
}
