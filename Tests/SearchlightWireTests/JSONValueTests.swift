import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import TestThreads
@testable import SearchlightWire

@Suite("JSON parser and serializer", .onOwnThreads)
struct JSONValueTests {
    @Test("round-trips every kind of value")
    func roundTrip() throws {
        let value: JSONValue = ["a": [1, 2.5, -3e-2, true, false, nil], "s": "é\"\\\n\t\u{1}星", "o": ["x": [:]]]
        let text = value.jsonString
        #expect(!text.contains("\n"))
        #expect(try JSONValue.parse(text) == value)
    }

    @Test("a quote, backslash or control character is found at every offset of strings of every length")
    func specialBytesAtEveryOffset() throws {
        // The plain-byte skip reads eight bytes at a time and jumps to the first special one:
        // place one (escaped, or raw and refused) at each offset of strings of 0 to 40 bytes,
        // before and after non-ASCII text, and read them through every path that skips strings.
        let specials: [(escaped: String, decoded: String)] = [("\\\"", "\""), ("\\\\", "\\"), ("\\n", "\n"), ("\\u001f", "\u{1F}")]
        for length in 0...40 {
            for offset in 0...length {
                for (escaped, decoded) in specials {
                    for filler in ["a", "é"] {
                        let before = String(repeating: filler, count: offset), after = String(repeating: "b", count: length - offset)
                        let text = "{\"k\":\"\(before)\(escaped)\(after)\",\"n\":1}"
                        let value = try JSONValue.parse(Array(text.utf8))
                        #expect(value["k"]?.stringValue == before + decoded + after, "\(text)")
                        #expect(value["n"] == 1)
                        try Array(text.utf8).withUnsafeBufferPointer { b in
                            var p = JSONParser(bytes: b, maxDepth: 8)
                            try p.skipValue()
                            try p.end()
                        }
                    }
                    let raw = "{\"k\":\"\(String(repeating: "a", count: offset))\u{01}\(String(repeating: "b", count: length - offset))\"}"
                    #expect(throws: (any Error).self) { try JSONValue.parse(Array(raw.utf8)) }
                    #expect(throws: (any Error).self) {
                        try Array(raw.utf8).withUnsafeBufferPointer { b in
                            var p = JSONParser(bytes: b, maxDepth: 8)
                            try p.skipValue()
                        }
                    }
                }
            }
        }
    }

    @Test("surrogate pair escapes decode to one scalar")
    func surrogates() throws {
        #expect(try JSONValue.parse(#""\ud83d\ude00""#) == .string("😀"))
    }

    @Test("malformed input names the byte offset", arguments: [
        ("{\"a\":}", 5), ("[1,]", 3), ("\"abc", 0), ("tru", 0), ("{\"a\" 1}", 5), ("[1] x", 4), ("01", 1), ("\"\\x\"", 1),
        ("\"\\ud800\"", 1), ("-", 0), ("1.", 0),
    ])
    func offsets(input: String, offset: Int) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(input) }
        do {
            _ = try JSONValue.parse(input)
        } catch {
            #expect(error.offset == offset, "\(input): \(error)")
        }
    }

    @Test("invalid UTF-8 inside a string is refused")
    func invalidUTF8() {
        let bytes: [UInt8] = [0x22, 0xC3, 0x28, 0x22]
        #expect(throws: JSONParseError.self) { try JSONValue.parse(bytes) }
    }

    @Test("raw control characters in strings are refused")
    func controlCharacters() {
        #expect(throws: JSONParseError.self) { try JSONValue.parse("\"a\u{1}b\"") }
    }

    @Test("nesting deeper than the limit is refused without recursion blow-up")
    func depth() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(deep, maxDepth: 64) }
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(throws: Never.self) { try JSONValue.parse(ok, maxDepth: 64) }
    }

    @Test("integers serialize without a fraction, others keep it")
    func numbers() {
        #expect(JSONValue.number(42).jsonString == "42")
        #expect(JSONValue.number(-0.5).jsonString == "-0.5")
        #expect(JSONValue.number(1e300).jsonString == "1e+300")
    }
}

@Suite("NDJSON framing", .onOwnThreads)
struct FrameDecoderTests {
    @Test("every split of the input yields the same frames")
    func everySplit() throws {
        let input = Array("{\"a\":1}\n\n{\"b\":\"x\\ny\"}\r\n[3]\n".utf8)
        for cut in 0...input.count {
            var d = FrameDecoder(maxFrameBytes: 1024)
            var frames: [String] = []
            d.append(Array(input[..<cut]))
            while let f = try d.next() { frames.append(String(decoding: f, as: UTF8.self)) }
            d.append(Array(input[cut...]))
            while let f = try d.next() { frames.append(String(decoding: f, as: UTF8.self)) }
            #expect(frames == ["{\"a\":1}", "{\"b\":\"x\\ny\"}", "[3]"], "cut at \(cut)")
        }
    }

    @Test("a frame over the limit fails even before its newline arrives")
    func tooLarge() throws {
        var d = FrameDecoder(maxFrameBytes: 10)
        d.append(Array(repeating: UInt8(ascii: "a"), count: 11))
        #expect(throws: FrameDecoder.Failure.frameTooLarge(limit: 10)) { try d.next() }
        var e = FrameDecoder(maxFrameBytes: 10)
        e.append(Array("0123456789\n".utf8))
        #expect(try e.next().map { Array($0) } == Array("0123456789".utf8))
    }
}

@Suite("JSON-RPC messages", .onOwnThreads)
struct RPCMessageTests {
    @Test("requests, notifications and responses decode")
    func decode() throws {
        #expect(try RPCMessage.decode(Array(#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1}}"#.utf8))
            == .request(id: .number(7), method: "m", params: ["a": 1]))
        #expect(try RPCMessage.decode(Array(#"{"jsonrpc":"2.0","method":"n"}"#.utf8)) == .notification(method: "n", params: [:]))
        let error = try RPCMessage.decode(Array(#"{"jsonrpc":"2.0","id":"x","error":{"code":-1001,"message":"bad"}}"#.utf8))
        #expect(error == .response(id: .string("x"), result: .failure(SearchlightError(.invalidItem, "bad"))))
    }

    @Test("a message's frame, written without an envelope dictionary, is its JSON on one line, and decodes back")
    func framesMatchTheirJSON() throws {
        let messages: [RPCMessage] = [
            .request(id: .number(12), method: "query.search", params: ["query": "title == \"a\\\"b\"", "limit": 20]),
            .request(id: .string("r-\"1\"\n"), method: "m", params: [:]),
            .notification(method: "$/progress", params: ["completed": 3, "text": "é\u{1}"]),
            .response(id: .number(7), result: .success(["items": [["uniqueIdentifier": "x", "attributeSet": ["title": "t\tab"]]], "cursor": .null])),
            .response(id: .string("s"), result: .failure(SearchlightError(.invalidParams, "\"limit\" must be a number", data: ["field": "limit"]))),
        ]
        for message in messages {
            let frame = message.frame()
            #expect(frame.last == 0x0A && frame.dropLast().firstIndex(of: 0x0A) == nil, "one line: \(message)")
            #expect(try JSONValue.parse(frame.dropLast()) == message.json)
            #expect(try RPCMessage.decode(frame.dropLast()) == message)
        }
        // An error answer to a frame whose id could not be read carries a null id.
        let anonymous = RPCMessage.response(id: .number(0), result: .failure(SearchlightError(.parseError, "bad")))
        let parsed = try JSONValue.parse(anonymous.frame(nullID: true).dropLast())
        #expect(parsed["id"] == .null && parsed["error"]?["message"] == "bad")
    }

    @Test("a malformed response is marked as one, so that it is never answered")
    func malformedResponse() {
        func isResponse(_ s: String) -> Bool {
            do {
                _ = try RPCMessage.decode(Array(s.utf8))
                return false
            } catch {
                return error.isResponse
            }
        }
        #expect(isResponse(#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"bad"}}"#))
        #expect(isResponse(#"{"jsonrpc":"2.0","id":3,"error":"not an object"}"#))
        #expect(isResponse(#"{"jsonrpc":"2.0","result":7}"#))
        #expect(!isResponse(#"{"jsonrpc":"2.0","params":{}}"#))
        #expect(!isResponse("not json"))
    }

    @Test("wrong shapes get JSON-RPC errors that keep the id when it is readable")
    func wrongShapes() {
        func code(_ s: String) -> (Int, RPCID?) {
            do {
                _ = try RPCMessage.decode(Array(s.utf8))
                return (0, nil)
            } catch {
                return (error.error.rawCode, error.id)
            }
        }
        #expect(code("[1,2]").0 == -32600)
        #expect(code("not json").0 == -32700)
        #expect(code(#"{"jsonrpc":"1.0","id":1,"method":"m"}"#) == (-32600, .number(1)))
        #expect(code(#"{"jsonrpc":"2.0","id":2,"method":5}"#) == (-32600, .number(2)))
        #expect(code(#"{"jsonrpc":"2.0","id":3,"method":"m","params":7}"#) == (-32600, .number(3)))
        #expect(code(#"{"jsonrpc":"2.0","id":{"x":1},"method":"m"}"#).0 == -32600)
    }
}

@Suite("Item validation", .onOwnThreads)
struct ItemValidatorTests {
    let validator = ItemValidator()

    @Test("a full item validates and keeps its attributes")
    func valid() throws {
        let item = try validator.validate(item: [
            "uniqueIdentifier": "a", "domainIdentifier": "x.y", "expirationDate": "2030-01-01T00:00:00Z",
            "attributeSet": ["title": "T", "keywords": ["k"], "rankingHint": 10, "lastUsedDate": "2026-01-01T00:00:00.000Z",
                "custom": ["n": 3, "d": ["$date": "2026-01-01T00:00:00Z"], "arr": ["a", "b"]]],
        ])
        #expect(item.attributeSet.title == "T")
        #expect(item.attributeSet[custom: "n"] == .number(3))
        #expect(item.expirationDate == ISO8601.parse("2030-01-01T00:00:00Z"))
    }

    @Test("each kind of bad field is named in the error", arguments: [
        (JSONValue.string("x"), "must be an object"),
        (["attributeSet": [:]], "uniqueIdentifier"),
        (["uniqueIdentifier": ""], "uniqueIdentifier"),
        (["uniqueIdentifier": "a", "domainIdentifier": "a..b"], "domainIdentifier"),
        (["uniqueIdentifier": "a", "expirationDate": "tomorrow"], "expirationDate"),
        (["uniqueIdentifier": "a", "attributeSet": ["title": 5]], "attributeSet.title"),
        (["uniqueIdentifier": "a", "attributeSet": ["keywords": "k"]], "attributeSet.keywords"),
        (["uniqueIdentifier": "a", "attributeSet": ["rankingHint": 101]], "rankingHint"),
        (["uniqueIdentifier": "a", "attributeSet": ["lastUsedDate": "2026-01-01T00:00:00"]], "lastUsedDate"),
        (["uniqueIdentifier": "a", "attributeSet": ["thumbnailData": "!!"]], "thumbnailData"),
        (["uniqueIdentifier": "a", "attributeSet": ["custom": ["bad-name": 1]]], "bad-name"),
        (["uniqueIdentifier": "a", "attributeSet": ["custom": ["x": ["y": 1]]]], "custom attribute \"x\""),
    ] as [(JSONValue, String)])
    func invalid(item: JSONValue, mentions: String) {
        do {
            _ = try validator.validate(item: item)
            Issue.record("accepted \(item.jsonString)")
        } catch {
            #expect(error.code == .invalidItem)
            #expect(error.message.contains(mentions), "\(error.message)")
        }
    }

    @Test("an item over the size limit is refused")
    func size() {
        var limits = Limits()
        limits.maxItemBytes = 100
        #expect(throws: SearchlightError.self) {
            try ItemValidator(limits: limits).validate(item: ["uniqueIdentifier": "a", "attributeSet": ["textContent": .string(String(repeating: "x", count: 200))]])
        }
    }

    @Test("null removes an attribute only on updates")
    func nulls() throws {
        let update = try validator.validate(item: ["uniqueIdentifier": "a", "isUpdate": true, "attributeSet": ["title": nil]])
        #expect(update.attributeSet[attribute: "title"] == .null)
        let plain = try validator.validate(item: ["uniqueIdentifier": "a", "attributeSet": ["title": nil]])
        #expect(plain.attributeSet[attribute: "title"] == nil)
    }
}

@Suite("ISO 8601", .onOwnThreads)
struct ISO8601Tests {
    @Test("parses zones and fractions, formats UTC milliseconds")
    func parseFormat() {
        #expect(ISO8601.parse("2026-11-22T10:15:30.250Z")?.timeIntervalSince1970 == 1_795_342_530.25)
        #expect(ISO8601.parse("2026-11-22T12:15:30+02:00")?.timeIntervalSince1970 == 1_795_342_530)
        #expect(ISO8601.parse("2026-11-22")?.timeIntervalSince1970 == 1_795_305_600)
        #expect(ISO8601.parse("2026-13-01") == nil)
        #expect(ISO8601.parse("2026-11-22T10:15") == nil)
        #expect(ISO8601.format(ISO8601.parse("2026-11-22T10:15:30.250Z")!) == "2026-11-22T10:15:30.250Z")
    }
}

@Suite("ISO 8601 formatting", .onOwnThreads)
struct ISO8601FormatTests {
    @Test("the arithmetic formatter writes what gmtime writes, from 1970 to 9999, milliseconds rounded")
    func formatMatchesGmtime() {
        var state: UInt64 = 0x1234_5678
        func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state >> 11
        }
        var samples: [Double] = [0, 0.9995, 59.9999, 86_399.9996, 951_782_400, 1_709_208_000.5, 253_402_300_799.999, 253_402_300_799.9996]
        for _ in 0..<20_000 { samples.append(Double(next() % 253_402_300_800_000) / 1000) }
        for t in samples {
            let fast = ISO8601.format(Date(timeIntervalSince1970: t))
            var seconds = time_t(t.rounded(.down))
            var millis = Int(((t - Double(seconds)) * 1000).rounded())
            if millis >= 1000 { seconds += 1; millis -= 1000 }
            var tm = Glibc.tm()
            gmtime_r(&seconds, &tm)
            let expected = String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1,
                Int(tm.tm_mday), Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec), millis)
            #expect(fast == expected, "\(t)")
            if fast != expected { break }
        }
    }
}
