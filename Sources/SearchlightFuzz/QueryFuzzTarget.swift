import Foundation
import SearchlightStore
import SearchlightWire

/// The query parser and compiler, run for real: every query that parses is compiled and
/// searched on an index with items of every attribute type, so the generated SQL is fuzzed too;
/// the same text is also run as a user query (free text).
///
/// Invariants: a query that does not parse is an `invalidQuery` whose `offset` lies inside the
/// query; a query that parses runs without error; a user query within `maxQueryTerms` never
/// fails, and one past it is an `invalidQuery` at one of its words.
public final class QueryFuzzTarget: FuzzTarget {
    public let name = "query"
    let store: IndexStore
    let directory: String
    let limits = Limits()
    /// Fixed, so that `$time` values and expiry are the same in every run.
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    /// Creates the index in a fresh temporary directory, removed by `close()`.
    public init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("searchlight-fuzz-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var options = StoreOptions()
        options.clock = { QueryFuzzTarget.now }
        options.fullSync = false
        store = try IndexStore(path: directory + "/index.sqlite", options: options)
        let items = try ItemValidator().validate(items: try JSONValue.parse(Self.itemsJSON))
        _ = try store.applySync([.items(items)])
    }

    public func close() {
        store.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    static let itemsJSON = #"""
        [{"uniqueIdentifier":"note-1","domainIdentifier":"notes.work","attributeSet":{"title":"Natural Bridges report","displayName":"星球大战 notes","keywords":["bridge","Éclair"],"authorNames":["Jane Doe"],"textContent":"WindowsPCFile the quick brown fox","contentType":"public.plain-text","contentTypeTree":["public.plain-text","public.text","public.data"],"rankingHint":70,"lastUsedDate":"2026-11-20T09:30:00.125Z","contentCreationDate":"2025-01-01T00:00:00Z","userCreated":true,"custom":{"starred":true,"rating":4.5,"due":{"$date":"2026-12-01T00:00:00Z"},"tags":["a","b"]}}},
         {"uniqueIdentifier":"img-2","domainIdentifier":"photos","attributeSet":{"displayName":"IMG_0001.jpg","contentType":"public.jpeg","contentTypeTree":["public.jpeg","public.image","public.data"],"rankingHint":5,"alternateNames":["holiday"],"contentURL":"file:///home/u/IMG_0001.jpg","relatedUniqueIdentifier":"note-1","custom":{"rating":2,"camera":"X100"}}},
         {"uniqueIdentifier":"x","attributeSet":{"title":"","custom":{"empty":"","n":-0.0,"big":1e300}}}]
        """#

    public var dictionary: [String] {
        ["==", "!=", "<", ">", "<=", ">=", "&&", "||", "!", "(", ")", ",", "\"", "*", "\\\"", "\\*", "\\\\",
         "\"cdwt", "\"c", "\"w", "InRange(", "title", "displayName", "keywords", "textContent", "authorNames",
         "contentTypeTree", "rankingHint", "lastUsedDate", "contentCreationDate", "expirationDate",
         "uniqueIdentifier", "domainIdentifier", "userCreated", "kMDItemTitle", "kMDItemFoo", "custom.",
         "custom.rating", "custom.due", "rating", "thumbnailData", "$time.now", "$time.today(-7)",
         "$time.this_month(-1)", "$time.iso(2026-01-01T00:00:00Z)", "$time.iso(", "$time.", "true", "false",
         "1e308", "-", "星球", "AND", "OR", "NOT", " ", "\t", "\n"]
    }

    public var seeds: [[UInt8]] {
        [
            #"(keywords == "Natural Bridges*"cwdt)"#,
            #"(displayName == "*星球*"cd)"#,
            #"contentTypeTree == "public.image" && lastUsedDate >= $time.today(-7)"#,
            #"InRange(rankingHint, 50, 100) || custom.starred == true"#,
            #"title == "*report*"c"#,
            #"authorNames == "Jane Doe"c"#,
            #"uniqueIdentifier == "note-*""#,
            #"InRange(contentCreationDate, $time.this_month(-1), $time.this_month)"#,
            #"expirationDate < $time.now(86400)"#,
            #"custom.due < "2025-01-01T00:00:00Z""#,
            #"* == "bridge"w && !(rating > 3) && domainIdentifier != "photos""#,
            #"textContent == "windows pc"cwd || kMDItemTitle == "\"quoted\\ \* star""#,
            #"lastUsedDate > $time.iso(2026-01-01T00:00:00Z) && rankingHint <= -1.5e2"#,
            "camera == \"X100\"t",
        ].map { Array($0.utf8) }
    }

    @discardableResult
    public func run(_ input: [UInt8]) throws(FuzzViolation) -> Bool {
        // The query reaches the daemon as a JSON string, so it is always valid Unicode.
        let text = String(decoding: input, as: UTF8.self)
        let filter: SQLFilter
        do {
            filter = try QueryFront.filter(query: text, filterQueries: [], limits: limits, now: Self.now)
        } catch {
            guard error.code == .invalidQuery else { throw violation("a bad query failed with \(error), not invalidQuery", input) }
            guard let offset = error.data?["offset"]?.intValue, (0...text.utf8.count).contains(offset) else {
                throw violation("invalidQuery without an offset inside the query: \(error)", input)
            }
            return false
        }
        do {
            _ = try store.search(filter, limit: 5)
        } catch {
            throw violation("a query that parsed failed to run: \(error)", input)
        }
        do {
            try UserQueryRequest.check(text, limits: limits)
        } catch {
            // More different words than `maxQueryTerms`: refused before the index is read, at a word of the text.
            guard error.code == .invalidQuery, let offset = error.data?["offset"]?.intValue, (0..<text.utf8.count).contains(offset) else {
                throw violation("a user query was refused with \(error), not invalidQuery at a word of the text", input)
            }
            return true
        }
        do {
            var request = UserQueryRequest(text: text)
            request.maxSuggestionCount = 3
            _ = try store.userQuery(request)
        } catch {
            throw violation("a user query within the limits failed: \(error)", input)
        }
        return true
    }
}
