import Foundation
import Testing
import TestThreads
@testable import SearchlightKit

/// Query answers read straight from the frame's bytes (`SearchPageAnswer`, `UserQueryAnswer`,
/// `RPCConnection.call(_:_:decode:)`) give what the `JSONValue` path gave.
@Suite("Query answers read from the bytes", .onOwnThreads)
struct QueryAnswerTests {
    static let item: JSONValue = ["uniqueIdentifier": "a-1", "domainIdentifier": "d.e",
        "attributeSet": ["title": "T \"quoted\" \\ é", "keywords": ["x", "y"], "rankingHint": 2.5],
        "expirationDate": "2026-12-25T17:46:37.278Z"]
    /// Every member the decoder reads, in odd forms: escaped keys and values, members it does not
    /// know (before and after), a missing identifier, a non-object, a null, a date that is none.
    static let results: [JSONValue] = [
        ["items": [item, item], "cursor": "42"],
        ["items": [], "incomplete": true],
        ["items": [
            ["uniqueIdentifier": "b", "bundle": "com.x", "index": "i", "attributeSet": [:], "extra": [[1, 2], ["k": nil]]],
            ["attributeSet": ["title": "no id"]],
            ["uniqueIdentifier": .number(3)],
            "not an item", .null, 7,
            ["uniqueIdentifier": "c", "expirationDate": "soon", "domainIdentifier": .null, "attributeSet": "not an object"],
            ["uniqueIdentifier": "d\u{1}\n\u{7F}\u{1F600}", "expirationDate": .number(5)],
            ["explain": ["score": 1.5, "lexicalRank": 1], "uniqueIdentifier": "e"],
        ], "cursor": .null, "incomplete": "yes"],
        ["items": "not an array", "rankedItems": ["x"], "suggestions": "none"],
        ["rankedItems": [item], "items": [item], "suggestions": [["text": "gtk theme", "highlight": [[0, 3], [1]], "kind": "completion"], ["kind": "x"]],
         "incomplete": false],
        // Dates repeated, alternating, changed in one digit or in length, with an escape, no date, none:
        // each item's date is its own (the decoder reuses the last date's value for the same text).
        ["items": .array(["2026-12-25T17:46:37.278Z", "2026-12-25T17:46:37.278Z", "2026-12-25T17:46:37.279Z",
                          "2026-12-25T17:46:37.278Z", "2026-12-25T17:46:37Z", "soon", "", "2026-12-25T17:46:37.278Z",
                          "2026-12-25T17:46:37.278\\Z", .number(1), "2026-12-25T17:46:37.278Z", "2026-12-25T17:46:37Z"]
            .enumerated().map { i, date in ["uniqueIdentifier": .string("i\(i)"), "expirationDate": date] })],
        [:],
        .array([]),
        .null,
    ]

    @Test("a page read from the bytes equals the JSONValue path, member for member")
    func pageEqualsTreePath() throws {
        for result in Self.results {
            let bytes = result.serialized()
            let page = try bytes.withUnsafeBufferPointer { try SearchPageAnswer.decode($0) }
            let tree = try QuerySearch.Response(result: result)
            #expect(page.items == tree.items.compactMap(SearchableItem.init(wire:)), "\(result.jsonString)")
            #expect(page.cursor == tree.cursor)
            #expect(page.incomplete == tree.incomplete)
        }
        // The escaped key reads as the key it spells.
        let escaped = Array(#"{"items":[{"uniqueIdentifier":"k","\u0061ttributeSet":{"title":"t"}}],"curs\u006fr":"9"}"#.utf8)
        let page = try escaped.withUnsafeBufferPointer { try SearchPageAnswer.decode($0) }
        #expect(page.items.first?.attributeSet.title == "t")
        #expect(page.cursor == "9")
    }

    @Test("a user query answer read from the bytes equals the JSONValue path, explanations included")
    func userAnswerEqualsTreePath() throws {
        for result in Self.results {
            let bytes = result.serialized()
            let answer = try bytes.withUnsafeBufferPointer { try UserQueryAnswer.decode($0) }
            let tree = try QueryUser.Response(result: result)
            let kept = tree.items.compactMap { wire in SearchableItem(wire: wire).map { ($0, wire["explain"]) } }
            #expect(answer.items == kept.map(\.0), "\(result.jsonString)")
            #expect(answer.explanations == kept.map(\.1))
            #expect(answer.rankedItems == tree.rankedItems.compactMap(SearchableItem.init(wire:)))
            #expect(answer.suggestions == tree.suggestions)
            #expect(answer.incomplete == tree.incomplete)
        }
    }

    @Test("malformed answers are refused with the byte where they go wrong, skipped members included")
    func malformedAnswersRefused() {
        let bad = [
            #"{"items":[{"uniqueIdentifier":"a"}"#,                  // cut short
            #"{"items":[],"other":{"x":[1,2,}}"#,                    // a skipped member's syntax
            "{\"items\":[],\"other\":\"tab\tinside\"}",          // a control character in a skipped string
            #"{"items":[],"other":"\q"}"#,                           // a bad escape in a skipped string
            #"{"items":[{"uniqueIdentifier":"\ud800"}]}"#,           // an unpaired surrogate
            #"{"items":[]} x"#,                                       // data after the value
            #"{"items":[],"other":01}"#,                              // a number with a leading zero
            String(repeating: "[", count: 200) + String(repeating: "]", count: 200),
            #"{"items":[],"other":"# + String(repeating: "[", count: 200) + String(repeating: "]", count: 200) + "}",
        ]
        for text in bad {
            let bytes = Array(text.utf8)
            #expect(throws: JSONParseError.self, "\(text.prefix(60))") { try bytes.withUnsafeBufferPointer { try SearchPageAnswer.decode($0) } }
            #expect(throws: JSONParseError.self, "\(text.prefix(60))") { try bytes.withUnsafeBufferPointer { try UserQueryAnswer.decode($0) } }
        }
        // Invalid UTF-8 in a string the decoder keeps.
        let invalid: [UInt8] = Array(#"{"items":[{"uniqueIdentifier":""#.utf8) + [0xFF, 0xFE] + Array(#""}]}"#.utf8)
        #expect(throws: JSONParseError.self) { try invalid.withUnsafeBufferPointer { try SearchPageAnswer.decode($0) } }
    }

    @Test("a query.search request's params written straight into bytes equal its JSONValue params")
    func encodedSearchParams() throws {
        let queries = ["textContent == \"library\"cdw", "title == \"pars*\"cdw", "", "é \u{1F600} \u{2028} \u{1}\t\\ \"q\""]
        var count = 0
        for query in queries {
            for fetch in [nil, [], ["title"], ["a", "b\"c", "\u{7F}"]] as [[String]?] {
                for filters in [[], ["contentType == \"x\""], ["a", "b"]] {
                    for (limit, cursor) in [(0, nil), (20, "r:12"), (10_000, "c\n\u{0}"), (1000, "")] as [(Int, String?)] {
                        for (index, bundle) in [("", nil), ("trips", "com.example.notes"), ("i\"x", "")] as [(String, String?)] {
                            let request = QuerySearch(query: query, fetchAttributes: fetch, filterQueries: filters, limit: limit,
                                                      cursor: cursor, index: index, bundle: bundle)
                            let encoded = request.encodedParams
                            #expect(try JSONValue.parse(encoded) == request.params, "\(String(decoding: encoded, as: UTF8.self))")
                            // The daemon reads them back as the same request (names it accepts).
                            if bundle != "", index != "i\"x" {
                                #expect(try QuerySearch(params: WireParams(JSONValue.parse(encoded))) == request)
                            }
                            count += 1
                        }
                    }
                }
            }
        }
        #expect(count == 576)
    }

    /// A peer answering each request line with `answer(id)` (raw JSON text), on its own thread.
    static func peer(_ socket: UnixSocket, answer: @escaping @Sendable (Int) -> [UInt8]) {
        Thread {
            var decoder = FrameDecoder()
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 1)
            defer { buffer.deallocate() }
            while let n = try? socket.read(into: buffer), n > 0 {
                decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                while let frame = try? decoder.next() {
                    guard let id = (try? JSONValue.parse(frame))?["id"]?.intValue else { continue }
                    try? socket.writeAll(answer(id) + [0x0A])
                }
            }
        }.start()
    }

    @Test("a typed call reads its answer from the bytes in any key order; error answers and unusual envelopes still arrive")
    func typedCallOverSocket() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let result = #"{"items":[{"uniqueIdentifier":"a","attributeSet":{"title":"t"}}],"cursor":"5"}"#
        Self.peer(theirs) { id in
            switch id {
            case 1: Array(#"{"jsonrpc":"2.0","id":1,"result":\#(result)}"#.utf8)
            case 2: Array(#"{"result":\#(result),"id":2,"jsonrpc":"2.0"}"#.utf8)
            // A member the envelope scan does not know: read by the general path, then decoded.
            case 3: Array(#"{"jsonrpc":"2.0","id":3,"result":\#(result),"note":"x"}"#.utf8)
            case 4: Array(#"{"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"no such index"}}"#.utf8)
            // A result the decoder refuses: invalid UTF-8 in an identifier (the envelope scan
            // skips strings without checking their UTF-8; what is kept is checked).
            case 5: Array(#"{"jsonrpc":"2.0","id":5,"result":{"items":[{"uniqueIdentifier":""#.utf8) + [0xFF, 0xFE] + Array(#""}]}}"#.utf8)
            default: Array(#"{"jsonrpc":"2.0","id":\#(id),"result":{"plain":true}}"#.utf8)
            }
        }
        let connection = RPCConnection(socket: mine)
        connection.start(onMessage: { _, _ in })
        defer { connection.close() }
        for _ in 1...3 {
            let page = try await connection.call("query.search", [:], decode: { try SearchPageAnswer.decode($0) })
            #expect(page.items.map(\.uniqueIdentifier) == ["a"])
            #expect(page.items.first?.attributeSet.title == "t")
            #expect(page.cursor == "5")
        }
        await #expect(throws: SearchlightError.self) { _ = try await connection.call("query.search", [:], decode: { try SearchPageAnswer.decode($0) }) }
        do {
            _ = try await connection.call("query.search", [:], decode: { try SearchPageAnswer.decode($0) })
            Issue.record("a result the decoder refuses was taken")
        } catch let error as SearchlightError {
            #expect(error.code == .parseError, "\(error)")
        }
        // Calls without a decoder, beside them, get their JSONValue as before.
        #expect(try await connection.call("other") == ["plain": true])
    }

    @Test("a call reading its answer in one pass (result last) gets what the two passes gave; other orders, members after the result and error answers still arrive")
    func onePassCallOverSocket() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let result = #"{"items":[{"uniqueIdentifier":"a","attributeSet":{"title":"t"}}],"cursor":"5"}"#
        Self.peer(theirs) { id in
            switch id {
            case 1: Array(#"{"jsonrpc":"2.0","id":1,"result":\#(result)}"#.utf8)
            case 2: Array(#"{"result":\#(result),"id":2,"jsonrpc":"2.0"}"#.utf8)
            // Result last as far as the head goes, then a member: the one pass refuses it, the scan reads it.
            case 3: Array(#"{"jsonrpc":"2.0","id":3,"result":\#(result),"note":"x"}"#.utf8)
            case 4: Array(#"{"jsonrpc":"2.0","id":4,"error":{"code":-32001,"message":"no such index"}}"#.utf8)
            case 5: Array(#"{"jsonrpc":"2.0","id":5,"result":{"items":[{"uniqueIdentifier":""#.utf8) + [0xFF, 0xFE] + Array(#""}]}}"#.utf8)
            // A user query's answer, result last.
            case 6: Array(#"{"jsonrpc":"2.0","id":6,"result":{"items":[{"uniqueIdentifier":"u","explain":{"s":1}}],"rankedItems":[],"incomplete":true}}"#.utf8)
            default: Array(#"{"jsonrpc":"2.0","id":\#(id),"result":{"plain":true}}"#.utf8)
            }
        }
        let connection = RPCConnection(socket: mine)
        connection.start(onMessage: { _, _ in })
        defer { connection.close() }
        for _ in 1...3 {
            let page = try await connection.call("query.search", [:], as: SearchPageAnswer.self)
            #expect(page.items.map(\.uniqueIdentifier) == ["a"])
            #expect(page.items.first?.attributeSet.title == "t")
            #expect(page.cursor == "5")
        }
        await #expect(throws: SearchlightError.self) { _ = try await connection.call("query.search", [:], as: SearchPageAnswer.self) }
        do {
            _ = try await connection.call("query.search", [:], as: SearchPageAnswer.self)
            Issue.record("a result the decoder refuses was taken")
        } catch let error as SearchlightError {
            #expect(error.code == .parseError, "\(error)")
        }
        let user = try await connection.call("query.user", [:], as: UserQueryAnswer.self)
        #expect(user.items.map(\.uniqueIdentifier) == ["u"])
        #expect(user.explanations == [["s": 1]])
        #expect(user.incomplete)
        #expect(try await connection.call("other") == ["plain": true])
    }
}
