// Answers written straight into their bytes. A query's answer was a `JSONValue` tree (a
// dictionary per item and per attribute set, a `String` per value) written out into the frame
// afterwards; the daemon now writes each item's JSON as it reads the item's row, and the frame
// around the items (`git show 8eae301:Docs/Performance.md`, "The daemon's side, profiled").

/// A list of JSON objects written one after another into one buffer (no commas between them):
/// a query's items. Each can be copied out as it is, or with members added at its end (the
/// bundle of an item found across bundles, a ranking's explanation).
public struct EncodedItems: Sendable {
    public private(set) var bytes: [UInt8] = []
    /// Where each object ends in `bytes` (the next one starts there).
    public private(set) var ends: [Int] = []

    public init() {}

    public var count: Int { ends.count }

    /// Writes one object with `write`, which appends its complete JSON (`{` … `}`) to the buffer.
    public mutating func append(_ write: (inout [UInt8]) throws -> Void) rethrows {
        let start = bytes.count
        do {
            try write(&bytes)
        } catch {
            bytes.removeSubrange(start...)
            throw error
        }
        ends.append(bytes.count)
    }

    /// Object `i`'s bytes.
    public func range(_ i: Int) -> Range<Int> { (i == 0 ? 0 : ends[i - 1])..<ends[i] }

    /// Appends object `i` to `out`; `extra`, when given, writes members with the object writer
    /// it is handed before the object's closing brace.
    public func write(_ i: Int, to out: inout [UInt8], extra: ((inout JSONObjectWriter, inout [UInt8]) -> Void)? = nil) {
        let r = range(i)
        bytes.withUnsafeBufferPointer { b in
            guard let extra else {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: b[r]))
                return
            }
            // An object written by `append` ends with its `}`; `{}` takes no comma before a member.
            out.append(contentsOf: UnsafeBufferPointer(rebasing: b[r.lowerBound..<(r.upperBound - 1)]))
            var members = JSONObjectWriter(continuing: r.count > 2)
            extra(&members, &out)
            out.append(UInt8(ascii: "}"))
        }
    }
}

/// Writes the members of a JSON object being written, each once, with the comma before all but
/// the first (`{` and `}` are the caller's).
public struct JSONObjectWriter {
    public private(set) var first = true

    public init(continuing: Bool = false) { first = !continuing }

    /// `"name":` (a constant name: written without an escape check).
    public mutating func key(_ name: StaticString, _ out: inout [UInt8]) {
        if !first { out.append(UInt8(ascii: ",")) }
        first = false
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }

    /// A key already written with its colon (`"name":`).
    public mutating func key(encoded: [UInt8], _ out: inout [UInt8]) {
        if !first { out.append(UInt8(ascii: ",")) }
        first = false
        out.append(contentsOf: encoded)
    }

    /// `"name":` for any name (escaped). (Not `key(_:)`: a literal would pick it over `StaticString`.)
    public mutating func key(escaping name: String, _ out: inout [UInt8]) {
        if !first { out.append(UInt8(ascii: ",")) }
        first = false
        JSONValue.writeString(name, to: &out)
        out.append(UInt8(ascii: ":"))
    }
}

extension RPCMessage {
    /// The frame of a success answer whose result is already written (`result`: one JSON value),
    /// newline included: the same bytes as `RPCMessage.response(id:result:).frame()` of the value.
    public static func responseFrame(id: RPCID, encodedResult result: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(result.count + 48)
        out.append(contentsOf: #"{"jsonrpc":"2.0","id":"#.utf8)
        switch id {
        case .number(let n): out.append(contentsOf: String(n).utf8)
        case .string(let s): JSONValue.writeString(s, to: &out)
        }
        out.append(contentsOf: #","result":"#.utf8)
        out.append(contentsOf: result)
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }
}

/// What a handler answers: a value, or its JSON already written (query answers).
public enum WireAnswer: Sendable {
    case value(JSONValue)
    case encoded([UInt8])
}
