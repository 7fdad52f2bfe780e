import Foundation

// The answers of `query.search` and `query.user` read straight from the frame's bytes into the
// SDK's items (`RPCConnection.call(_:_:decode:)`), without a `JSONValue` tree in between: the
// same fields, with the same leniency, as `QuerySearch.Response(result:)` and
// `QueryUser.Response(result:)` followed by `SearchableItem(wire:)` (tests compare the two).

/// A call's result read from its JSON bytes (`RPCConnection.call(_:_:as:)`), strictly: `decode`
/// throws unless `result` holds exactly one well-formed JSON value (white space around it
/// allowed; nesting within `maxDepth`; a skipped string's UTF-8 is not checked, as the envelope
/// scan does not check it either). That lets the connection read a success answer in one pass
/// when its result is the last member (as the daemon writes it): the bytes from the result to
/// the envelope's closing brace are handed to `decode` as they are, and only if they were the
/// result and nothing else does `decode` succeed; when it throws, the answer is read the general
/// way (the envelope scanned, the result found and decoded again, or the frame refused).
public protocol WireResultDecodable: Sendable {
    static func decode(_ result: UnsafeBufferPointer<UInt8>, maxDepth: Int) throws(JSONParseError) -> Self
}

/// A `query.search` answer: a page of items.
public struct SearchPageAnswer: WireResultDecodable {
    public var items: [SearchableItem] = []
    public var cursor: String?
    public var incomplete = false

    public static func decode(_ result: UnsafeBufferPointer<UInt8>, maxDepth: Int = 128) throws(JSONParseError) -> SearchPageAnswer {
        var p = JSONParser(bytes: result, maxDepth: maxDepth)
        var answer = SearchPageAnswer()
        if p.peek() == UInt8(ascii: "{") {
            try p.beginObject()
            var first = true
            while let key = try p.nextMember(first: &first) {
                if key.equals("items") {
                    answer.items = try p.items(explain: nil)
                } else if key.equals("cursor") {
                    answer.cursor = try p.optionalString()
                } else if key.equals("incomplete") {
                    answer.incomplete = try p.optionalBool() ?? false
                } else {
                    try p.skipValue()
                }
            }
        } else {
            try p.skipValue()
        }
        try p.end()
        return answer
    }
}

/// A `query.user` answer.
public struct UserQueryAnswer: WireResultDecodable {
    public var items: [SearchableItem] = []
    /// Each item's `explain` member, when it has one (one per item of `items`).
    public var explanations: [JSONValue?] = []
    public var rankedItems: [SearchableItem] = []
    public var suggestions: [QueryUser.Suggestion] = []
    public var incomplete = false

    public static func decode(_ result: UnsafeBufferPointer<UInt8>, maxDepth: Int = 128) throws(JSONParseError) -> UserQueryAnswer {
        var p = JSONParser(bytes: result, maxDepth: maxDepth)
        var answer = UserQueryAnswer()
        if p.peek() == UInt8(ascii: "{") {
            try p.beginObject()
            var first = true
            while let key = try p.nextMember(first: &first) {
                if key.equals("items") {
                    var explanations: [JSONValue?] = []
                    answer.items = try p.items(explain: &explanations)
                    answer.explanations = explanations
                } else if key.equals("rankedItems") {
                    answer.rankedItems = try p.items(explain: nil)
                } else if key.equals("suggestions") {
                    answer.suggestions = (try p.parseValue().arrayValue ?? []).compactMap(QueryUser.Suggestion.init(json:))
                } else if key.equals("incomplete") {
                    answer.incomplete = try p.optionalBool() ?? false
                } else {
                    try p.skipValue()
                }
            }
        } else {
            try p.skipValue()
        }
        try p.end()
        return answer
    }
}

extension JSONParser {
    /// An array of items (anything else: none). An element without a `uniqueIdentifier` string is
    /// left out, as `SearchableItem(wire:)` leaves it out; `explain` gets each kept item's
    /// `explain` member (nil without one).
    mutating func items(explain: UnsafeMutablePointer<[JSONValue?]>?) throws(JSONParseError) -> [SearchableItem] {
        guard peek() == UInt8(ascii: "[") else {
            try skipValue()
            return []
        }
        var out: [SearchableItem] = []
        // A page's items mostly share their expiration date (donated together, the default
        // applied): the last date's text and value, to parse each distinct text once.
        var lastDate: (text: UnsafeBufferPointer<UInt8>, date: Date?)?
        try beginArray()
        var first = true
        while try nextElement(first: &first) {
            guard peek() == UInt8(ascii: "{") else {
                try skipValue()
                continue
            }
            var id: String?, domain: String?, attributes: [String: JSONValue] = [:], expiration: Date?, explanation: JSONValue?
            try beginObject()
            var firstMember = true
            while let key = try nextMember(first: &firstMember) {
                if key.equals("uniqueIdentifier") {
                    id = try optionalString()
                } else if key.equals("attributeSet") {
                    attributes = try parseValue().objectValue ?? [:]
                } else if key.equals("expirationDate") {
                    expiration = try date(reusing: &lastDate)
                } else if key.equals("domainIdentifier") {
                    domain = try optionalString()
                } else if explain != nil, key.equals("explain") {
                    explanation = try parseValue()
                } else {
                    try skipValue()
                }
            }
            guard let id else { continue }
            var item = SearchableItem(uniqueIdentifier: id, domainIdentifier: domain, attributeSet: AttributeSet(validatedValues: attributes))
            item.expirationDate = expiration
            out.append(item)
            explain?.pointee.append(explanation)
        }
        return out
    }

    /// A date string read in place (`ISO8601.parse`); anything else, or a string that is no date,
    /// nil. `last`: the last unescaped date text read and its value, reused when this one is the
    /// same text, and replaced when not.
    mutating func date(reusing last: inout (text: UnsafeBufferPointer<UInt8>, date: Date?)?) throws(JSONParseError) -> Date? {
        guard peek() == UInt8(ascii: "\"") else {
            try skipValue()
            return nil
        }
        if let raw = try stringBytes() {
            if let last, last.text.count == raw.count, memcmp(last.text.baseAddress!, raw.baseAddress!, raw.count) == 0 {
                return last.date
            }
            let date = ISO8601.parse(bytes: raw)
            if raw.count > 0 { last = (raw, date) }
            return date
        }
        return ISO8601.parse(try parseString())
    }

    mutating func optionalBool() throws(JSONParseError) -> Bool? {
        try parseValue().boolValue
    }

    /// Only white space may follow the value.
    mutating func end() throws(JSONParseError) {
        skipSpace()
        if pos != bytes.count { throw fail("unexpected data after the JSON value") }
    }
}

/// A success response found by `scan`: its id and where its result lies in the frame.
struct ResponseEnvelope {
    var id: RPCID
    var result: Range<Int>

    /// One pass instead of two for the answers the daemon writes (`{"jsonrpc":"2.0","id":…,
    /// "result":…}`): when `jsonrpc` "2.0" and an id (each once, nothing else) come before
    /// `result`, the id, and as `result` the bytes from the result's first byte to the frame's
    /// last `}` (white space after it allowed), which are the result exactly when the result is
    /// the last member and the frame well formed. Nothing after the result's first byte is read
    /// here: a strict decoder (`WireResultDecodable`) reading those bytes checks it, and throws
    /// if a member follows the result or anything is malformed; then `scan` reads the frame.
    /// nil for any other order or member (then `scan`).
    /// An `id` member's value: an integer or a string; nil for any other value.
    private static func readID(_ p: inout JSONParser) throws -> RPCID? {
        if p.peek() == UInt8(ascii: "\"") { return .string(try p.parseString()) }
        return try p.parseValue().intValue.map { .number($0) }
    }

    static func resultLast(_ frame: UnsafeBufferPointer<UInt8>, maxDepth: Int) -> ResponseEnvelope? {
        var p = JSONParser(bytes: frame, maxDepth: maxDepth)
        var id: RPCID?, version = false
        do {
            try p.beginObject()
            var first = true
            while let key = try p.nextMember(first: &first) {
                if key.equals("id") {
                    guard id == nil, let read = try readID(&p) else { return nil }
                    id = read
                } else if key.equals("jsonrpc") {
                    guard !version, try p.parseValue() == "2.0" else { return nil }
                    version = true
                } else if key.equals("result") {
                    guard let id, version else { return nil }
                    var end = frame.count
                    while end > p.pos, JSONParser.isSpace(frame[end - 1]) { end -= 1 }
                    guard end > p.pos + 1, frame[end - 1] == UInt8(ascii: "}") else { return nil }
                    return ResponseEnvelope(id: id, result: p.pos..<(end - 1))
                } else {
                    return nil
                }
            }
        } catch {
            return nil
        }
        return nil
    }

    /// The id and result of a frame that is a well-formed success response (`jsonrpc` "2.0", an
    /// integer or string id, a result, no `method`, no `error`, no key twice), its result only
    /// skipped over; nil for anything else, which `RPCMessage.decode` then reads (and answers or
    /// refuses) as before.
    static func scan(_ frame: UnsafeBufferPointer<UInt8>, maxDepth: Int) -> ResponseEnvelope? {
        var p = JSONParser(bytes: frame, maxDepth: maxDepth)
        var id: RPCID?, result: Range<Int>?, version = false
        do {
            try p.beginObject()
            var first = true
            while let key = try p.nextMember(first: &first) {
                if key.equals("id") {
                    guard id == nil, let read = try readID(&p) else { return nil }
                    id = read
                } else if key.equals("result") {
                    guard result == nil else { return nil }
                    let start = p.pos
                    try p.skipValue()
                    result = start..<p.pos
                } else if key.equals("jsonrpc") {
                    guard !version, try p.parseValue() == "2.0" else { return nil }
                    version = true
                } else {
                    // "method", "error", "params" or anything else: the general path decides.
                    return nil
                }
            }
            try p.end()
        } catch {
            return nil
        }
        guard let id, let result, version else { return nil }
        return ResponseEnvelope(id: id, result: result)
    }
}
