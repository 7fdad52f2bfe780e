import SearchlightWire

/// The frame decoder, the JSON parser, the JSON-RPC message layer and the item validation the
/// daemon runs on `index.items`, fed a byte stream as a client would send it.
///
/// Invariants: frames do not depend on how the stream was split into reads; a frame that is
/// too large is refused at the same point either way; a bad frame is a `parseError` or
/// `invalidRequest`, a bad item an `invalidItem` or `invalidParams`; a parsed value, message and
/// item survive encode-then-decode unchanged, and their encoding holds no newline.
public struct WireFuzzTarget: FuzzTarget {
    public let name = "wire"
    /// Small, so that the mutator's repeats reach it.
    public var maxFrameBytes = 4096
    public var limits = Limits()

    public init() {}

    public var dictionary: [String] {
        ["{", "}", "[", "]", ":", ",", "\"", "\n", "\r\n", "null", "true", "false", "\"jsonrpc\":\"2.0\"",
         "\"id\":", "\"method\":", "\"params\":", "\"result\":", "\"error\":", "\"code\":", "\"message\":",
         "\"initialize\"", "\"index.items\"", "\"query.search\"", "\"items\":", "\"uniqueIdentifier\":",
         "\"domainIdentifier\":", "\"attributeSet\":", "\"custom\":", "\"expirationDate\":", "\"isUpdate\":",
         "\"rankingHint\":", "\"title\":", "\"keywords\":", "\"lastUsedDate\":", "\"$date\":",
         "\"2026-11-22T10:00:00.000Z\"", "\"2026-13-45T25:61:61Z\"", "\"contentTypeTree\":"]
    }

    public var seeds: [[UInt8]] {
        [
            #"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1,"role":"app","bundleIdentifier":"org.example.notes","capabilities":{}}}"#,
            #"{"jsonrpc":"2.0","id":2,"method":"index.items","params":{"index":"","items":[{"uniqueIdentifier":"n1","domainIdentifier":"notes.work","attributeSet":{"title":"Quarterly report","keywords":["q3","report"],"rankingHint":50,"lastUsedDate":"2026-11-20T09:30:00.125Z","custom":{"starred":true,"due":{"$date":"2026-12-01T00:00:00Z"},"tags":["a","b"],"size":12.5}},"expirationDate":"2027-01-01T00:00:00.000Z"}]}}"#,
            #"{"jsonrpc":"2.0","id":"x-3","method":"index.deleteIdentifiers","params":{"identifiers":["n1","n2","ü"]}}"#,
            #"{"jsonrpc":"2.0","id":4,"method":"query.search","params":{"query":"title == \"rep*\"cd","fetchAttributes":["title"],"limit":10}}"#,
            #"{"jsonrpc":"2.0","method":"$/progress","params":{"requestId":"r1","completed":3,"total":10}}"#,
            #"{"jsonrpc":"2.0","id":5,"result":{"items":[],"cursor":"17"}}"#,
            #"{"jsonrpc":"2.0","id":6,"error":{"code":-2002,"message":"bad query","data":{"offset":4}}}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"index.endBatch\",\"params\":{\"newClientState\":\"AAEC\"}}\r\n{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"index.deleteAll\",\"params\":{}}",
            #"[1,2.5e3,-0.0,"\u00e9\ud83d\ude00",{"a":null,"b":[true,false]}]"#,
        ].map { Array(($0 + "\n").utf8) }
    }

    @discardableResult
    public func run(_ input: [UInt8]) throws(FuzzViolation) -> Bool {
        try runChecks(input)
    }

    /// Half the mutants are structural: the first line parsed and its params mutated as JSON
    /// (`JSONMutator`), so that they get past the parser into item validation.
    public func structuralMutant(of input: [UInt8], random: inout FuzzRandom) -> [UInt8]? {
        guard random.oneIn(2), let line = input.split(separator: 0x0A).first,
            let message = try? JSONValue.parse(line, maxDepth: limits.maxJSONDepth)
        else { return nil }
        return JSONMutator().mutateRequest(message, random: &random).serialized() + [0x0A]
    }

    func runChecks(_ input: [UInt8]) throws(FuzzViolation) -> Bool {
        let whole = frames(of: input, readSizes: [input.count])
        let split = frames(of: input, readSizes: readSizes(for: input))
        guard whole.frames == split.frames, whole.tooLarge == split.tooLarge else {
            throw violation("the frames depend on how the stream was split into reads", input)
        }
        var accepted = false
        for frame in whole.frames {
            if try check(frame: frame, input: input) { accepted = true }
        }
        return accepted
    }

    struct Framed {
        var frames: [[UInt8]] = []
        var tooLarge = false
    }

    func frames(of input: [UInt8], readSizes: [Int]) -> Framed {
        var decoder = FrameDecoder(maxFrameBytes: maxFrameBytes)
        var result = Framed()
        var offset = 0
        var k = 0
        while offset < input.count {
            let size = max(1, readSizes[k % readSizes.count])
            k += 1
            decoder.append(Array(input[offset..<min(input.count, offset + size)]))
            offset += size
            do {
                while let frame = try decoder.next() { result.frames.append(Array(frame)) }
            } catch {
                result.tooLarge = true
                return result
            }
        }
        return result
    }

    /// Read sizes derived from the input itself, so a run is reproducible: 1-byte reads too.
    func readSizes(for input: [UInt8]) -> [Int] {
        var random = FuzzRandom(seed: input.reduce(UInt64(input.count)) { $0 &* 31 &+ UInt64($1) })
        return (0..<8).map { _ in random.pick([1, 2, 3, 7, 64, 1000, 5000]) }
    }

    /// True when the frame is a valid message (and its items, if any, are valid).
    func check(frame: [UInt8], input: [UInt8]) throws(FuzzViolation) -> Bool {
        if let value = try? JSONValue.parse(frame, maxDepth: limits.maxJSONDepth) {
            let encoded = value.serialized()
            guard !encoded.contains(0x0A) else { throw violation("an encoded JSON value holds a newline", input) }
            guard let again = try? JSONValue.parse(encoded, maxDepth: limits.maxJSONDepth), again == value else {
                throw violation("a JSON value changed in encode-then-parse: \(String(decoding: encoded.prefix(200), as: UTF8.self))", input)
            }
        }
        let message: RPCMessage
        do {
            message = try RPCMessage.decode(frame, maxDepth: limits.maxJSONDepth)
        } catch {
            guard error.error.code == .parseError || error.error.code == .invalidRequest else {
                throw violation("a bad frame failed with \(error.error), not parseError or invalidRequest", input)
            }
            return false
        }
        let reframed = message.frame()
        guard reframed.last == 0x0A, !reframed.dropLast().contains(0x0A) else {
            throw violation("an encoded message is not exactly one line", input)
        }
        guard let again = try? RPCMessage.decode(reframed.dropLast(), maxDepth: limits.maxJSONDepth), again == message else {
            throw violation("a message changed in encode-then-decode", input)
        }
        if case .request(_, _, let params) = message, params["items"] != nil {
            return try checkItems(params["items"], input: input)
        }
        return true
    }

    func checkItems(_ value: JSONValue?, input: [UInt8]) throws(FuzzViolation) -> Bool {
        let validator = ItemValidator(limits: limits)
        let items: [SearchableItem]
        do {
            items = try validator.validate(items: value)
        } catch {
            guard error.code == .invalidItem || error.code == .invalidParams else {
                throw violation("bad items failed with \(error), not invalidItem or invalidParams", input)
            }
            return false
        }
        for (i, item) in items.enumerated() {
            guard let again = try? validator.validate(item: item.json, index: i), again == item else {
                throw violation("item \(i) changed in encode-then-validate", input)
            }
        }
        return true
    }
}
