import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
import SearchlightWire

/// The daemon writes query answers' items straight from the rows (`WireItemWriter`); they must be
/// the items of the `JSONValue` path (`ItemRecord.wireItem`), member for member, value for value.
@Suite("Items written from rows", .onOwnThreads)
struct WireItemWriterTests {
    /// Strings an item may carry that an encoder can get wrong.
    static let hostile: [String] = [
        "", "plain", "quote \" inside", "back\\slash", "\\\"", "new\nline", "cr\rtab\t", "nul \u{0} byte",
        "bell \u{7} esc \u{1B} unit \u{1F}", "del \u{7F}", "line sep \u{2028} para \u{2029}", "é accent", "e\u{301} combining",
        "emoji 👩‍👩‍👧 and 𝄞", "日本語のテキスト", "mixed \"日本\" \\ \n\u{1}", String(repeating: "long ascii text ", count: 40),
        String(repeating: "\u{2028}\"", count: 30), "</script>", "\u{FEFF}bom", "\u{FFFD} replacement", "a/b\\/c",
    ]

    static func randomString(_ random: inout SeededRandom) -> String {
        let alphabet: [Unicode.Scalar] = ["a", "z", " ", "\"", "\\", "\n", "\u{0}", "\u{1}", "\u{1F}", "\u{7F}", "\u{80}", "\u{2028}",
            "é", "日", "\u{10FFFF}", "😀", "/", "{", "}", "[", "]", ":", ","]
        let n = Int(random.next() % 24)
        var s = String.UnicodeScalarView()
        for _ in 0..<n { s.append(alphabet[Int(random.next() % UInt64(alphabet.count))]) }
        return String(s)
    }

    /// Items with every kind of attribute: text, text arrays (empty elements too), dates,
    /// numbers from tiny to huge, custom values and custom dates, with and without a domain.
    static func hostileItems(_ f: StoreFixture) throws -> [SearchableItem] {
        var random = SeededRandom(state: 0xA115_3E4D)
        var items: [SearchableItem] = []
        let numbers: [JSONValue] = [0, -0.0, 1, -1, 0.1, 1e15, .number(1e15 + 1), 9_007_199_254_740_993, 1e300, -1e-300, 123_456.789, 2.5e-7]
        for (i, s) in hostile.enumerated() {
            let r = randomString(&random)
            var a: [String: JSONValue] = [
                "title": .string(s), "contentDescription": .string(r + s), "textContent": .string(s + "\n" + r),
                "keywords": .array([.string(s), "", .string(r), "k"]), "authorNames": .array([.string(r)]),
                "displayName": .string(r), "alternateNames": .array([]),
                "contentCreationDate": .string(ISO8601.format(Date(timeIntervalSince1970: 1_000_000_000 + Double(i) * 86_400.123))),
                "rankingHint": .number(Double(i * 7 % 100) + 0.25), "contentType": "public.plain-text",
                "custom": .object([
                    "n": numbers[(i + 3) % numbers.count], "s": .string(s), "b": .bool(i % 2 == 0), "when": ["$date": "2030-01-02T03:04:05.678Z"],
                    "list": .array([.string(r), 1, ["$date": "1999-12-31T23:59:59.999Z"]]), "k\(i)": .string(r),
                ]),
            ]
            if i % 3 == 0 { a["relatedUniqueIdentifier"] = .string("related-\(i)") }
            if i % 4 == 1 { a["lastUsedDate"] = "2026-11-25T12:00:00.5Z" }
            var json: [String: JSONValue] = ["uniqueIdentifier": .string(Self.noNUL("\(s)#\(i)")), "attributeSet": .object(a)]
            if i % 2 == 0 { json["domainIdentifier"] = .string(Self.domain(i, s)) }
            if i % 5 == 2 { json["expirationDate"] = "9999-12-31T23:59:59.999Z" }
            items.append(try ItemValidator().validate(item: .object(json)))
        }
        for i in 0..<200 {
            var a: [String: JSONValue] = ["title": .string(randomString(&random)), "keywords": .array([.string(randomString(&random))])]
            if i % 7 == 0 { a["textContent"] = .string(randomString(&random)) }
            items.append(try f.item(noNUL("r\(i)" + randomString(&random)), domain: i % 3 == 0 ? nil : domain(i, randomString(&random)), a))
        }
        return items
    }

    /// Identifiers may hold anything but NUL.
    static func noNUL(_ s: String) -> String { s.replacingOccurrences(of: "\u{0}", with: "0") }

    /// A domain with `s` (no dots, no NUL) as its last component.
    static func domain(_ i: Int, _ s: String) -> String {
        let last = noNUL(s).replacingOccurrences(of: ".", with: "")
        return "d\(i)." + (last.isEmpty ? "x" : last)
    }

    static let fetches: [[String]?] = [nil, ["title"], ["title", "keywords"], [], ["custom", "contentCreationDate", "rankingHint"],
        ["textContent", "lastUsedDate", "nothing-such"], ["alternateNames", "authorNames", "relatedUniqueIdentifier"]]

    /// Every page of `filter` both ways, with the same cursors.
    func expectSamePages(_ f: StoreFixture, _ filter: SQLFilter = .all, fetch: [String]?, limit: Int) throws -> Int {
        var cursor: String?
        var seen = 0
        repeat {
            let page = try f.store.search(filter, fetch: fetch, limit: limit, cursor: cursor)
            var encoded = EncodedItems()
            let next = try f.store.search(filter, fetch: fetch, limit: limit, cursor: cursor, into: &encoded)
            #expect(next == page.cursor)
            #expect(encoded.count == page.items.count)
            for (i, item) in page.items.enumerated() where i < encoded.count {
                let bytes = Array(encoded.bytes[encoded.range(i)])
                // One NDJSON frame: never a raw newline.
                #expect(!bytes.contains(0x0A) && !bytes.contains(0x0D))
                let parsed = try JSONValue.parse(bytes)
                #expect(parsed == item, "fetch \(String(describing: fetch)): \(String(decoding: bytes, as: UTF8.self))")
            }
            seen += page.items.count
            cursor = page.cursor
        } while cursor != nil
        return seen
    }

    @Test("search pages written from rows equal the JSONValue path's, for hostile items and every fetch")
    func hostileSearch() throws {
        let f = try StoreFixture()
        let items = try Self.hostileItems(f)
        _ = try f.store.applySync([.items(items)])
        #expect(f.store.count == items.count)
        for fetch in Self.fetches {
            #expect(try expectSamePages(f, fetch: fetch, limit: 7) == items.count)
        }
    }

    @Test("damaged rows read the same both ways: bad UTF-8, stored JSON that does not parse, a column shadowed by it")
    func damagedRows() throws {
        let f = try StoreFixture()
        try f.donate(try f.item("a", ["title": "one"]), try f.item("b", ["title": "two", "contentCreationDate": "2020-01-01T00:00:00Z"]),
            try f.item("c", ["title": "three"]), try f.item("d", ["title": "four"]))
        _ = try f.store.writeSync { store in
            try store.writer.execute("UPDATE items SET title = CAST(X'61FF62C3' AS TEXT), domain = CAST(X'E282' AS TEXT) WHERE uid = 'a'")
            try store.writer.execute("UPDATE items SET attrs = '{bad' WHERE uid = 'b'")
            try store.writer.execute(#"UPDATE items SET attrs = '{"title":"from attrs","x":[1,2]}' WHERE uid = 'c'"#)
            try store.writer.execute("UPDATE items SET expires = 'soon' WHERE uid = 'd'")
            return ApplyResult()
        }
        for fetch in Self.fetches {
            #expect(try expectSamePages(f, fetch: fetch, limit: 3) >= 3)
        }
    }

    @Test("the shared corpus's items are written the same both ways", .enabled(if: StoreCorpus.path != nil))
    func corpusSearch() throws {
        let items = try StoreCorpus.load(limit: 3000)
        try #require(!items.isEmpty, "the shared corpus is missing")
        let f = try StoreFixture()
        _ = try f.store.applySync([.items(items)])
        for fetch in [nil, ["title"], ["title", "contentDescription", "keywords"]] as [[String]?] {
            #expect(try expectSamePages(f, fetch: fetch, limit: 500) == items.count)
        }
        let filter = try QueryFront.filter(query: "textContent == \"library\"cdw", filterQueries: [], limits: Limits(), now: Date())
        #expect(try expectSamePages(f, filter, fetch: ["title"], limit: 20) > 20)
    }

    @Test("user query items written from rows equal the JSONValue path's, with scores, explanations and suggestions")
    func userQueries() throws {
        let f = try StoreFixture()
        let corpus = try StoreCorpus.load(limit: 2000)
        _ = try f.store.applySync([.items(corpus)])
        _ = try f.store.applySync([.items(try Self.hostileItems(f))])
        for text in ["library", "gtk theme", "pyth", "json pars", "quote", "\"", "emoji", "日本", "nothing-at-all-here", "lib ", ""] {
            for fetch in Self.fetches {
                var request = UserQueryRequest(text: text)
                request.fetch = fetch
                request.maxResultCount = 25
                request.maxRankedResultCount = 5
                request.maxSuggestionCount = 3
                request.explain = fetch == nil
                let old = try f.store.userQuery(request)
                var encoded = EncodedItems()
                let new = try f.store.userQuery(request, into: &encoded)
                #expect(new.scores == old.scores)
                #expect(new.suggestions == old.suggestions)
                #expect(new.explanations?.map(\.rowID) == old.explanations?.map(\.rowID))
                #expect(encoded.count == old.items.count)
                for (i, item) in old.items.enumerated() where i < encoded.count {
                    #expect(try JSONValue.parse(Array(encoded.bytes[encoded.range(i)])) == item, "\(text) fetch \(String(describing: fetch))")
                }
            }
        }
    }

    @Test("members added to a written item (bundle, explain) make one valid object, also to an empty one")
    func addedMembers() throws {
        var items = EncodedItems()
        items.append { $0 += Array(#"{"a":1}"#.utf8) }
        items.append { $0 += Array("{}".utf8) }
        for i in 0..<2 {
            var out: [UInt8] = []
            items.write(i, to: &out) { o, out in
                o.key("bundle", &out)
                JSONValue.writeString("b\"\n", to: &out)
                o.key("explain", &out)
                JSONValue.object(["score": 1.5]).write(to: &out)
            }
            var expected: [String: JSONValue] = ["bundle": "b\"\n", "explain": ["score": 1.5]]
            if i == 0 { expected["a"] = 1 }
            #expect(try JSONValue.parse(out) == .object(expected))
        }
    }

    @Test("strings written from UTF-8 bytes and dates written in place are the String path's bytes")
    func primitives() throws {
        var random = SeededRandom(state: 99)
        var strings = Self.hostile
        for _ in 0..<2000 { strings.append(Self.randomString(&random)) }
        for b in 0..<128 { strings.append(String(UnicodeScalar(UInt8(b)))) }
        for s in strings {
            var a: [UInt8] = [], b: [UInt8] = [], c: [UInt8] = []
            JSONValue.writeString(s, to: &a)
            JSONValue.string(s).write(to: &b)
            var copy = s
            copy.withUTF8 { WireItemWriter.writeText($0, to: &c) }
            #expect(a == b && a == c, "\(s.debugDescription)")
        }
        var times: [Double] = [0, 0.0004, 0.0005, 0.9995, 86_399.9996, 951_782_400, 1_800_000_000.123, 253_402_300_799.999,
            253_402_300_799.9996, 253_402_300_800, -1, -0.5, 4e11]
        for _ in 0..<5000 { times.append(Double(random.next() % 300_000_000_000) / 1000 * (random.next() % 2 == 0 ? 1 : 1.000_123)) }
        for t in times {
            let date = Date(timeIntervalSince1970: t)
            var out: [UInt8] = []
            ISO8601.writeQuoted(WireItemWriter.dateSeconds(t), to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "\"" + ISO8601.format(date) + "\"", "t = \(t)")
        }
    }
}
