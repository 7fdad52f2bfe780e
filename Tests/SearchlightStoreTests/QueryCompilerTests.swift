import CSQLite
import Foundation
import SearchlightWire
import Testing

@testable import SearchlightStore

/// An in-memory index with the real schema and SQL functions, filled through raw SQLite.
private final class QueryTestDatabase {
    let db: OpaquePointer

    init() throws {
        var handle: OpaquePointer?
        guard sqlite3_open(":memory:", &handle) == SQLITE_OK, let handle else { throw Failure("open") }
        db = handle
        SQLFunctions.register(on: db)
        try exec(Schema.create)
    }

    deinit { sqlite3_close(db) }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    func exec(_ sql: String) throws {
        var message: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(db, sql, nil, nil, &message) == SQLITE_OK else {
            defer { sqlite3_free(message) }
            throw Failure(message.map { String(cString: $0) } ?? "exec")
        }
    }

    /// Runs `sql` and returns the first column of every row as text.
    func rows(_ sql: String, _ bindings: [SQLValue]) throws -> [String] {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw Failure("\(String(cString: sqlite3_errmsg(db))) in \(sql)")
        }
        defer { sqlite3_finalize(statement) }
        for (k, value) in bindings.enumerated() {
            let i = Int32(k + 1)
            switch value {
            case .null: sqlite3_bind_null(statement, i)
            case .integer(let n): sqlite3_bind_int64(statement, i, n)
            case .double(let d): sqlite3_bind_double(statement, i, d)
            case .text(let t): sqlite3_bind_text(statement, i, t, -1, csqlite_transient())
            case .blob(let b): sqlite3_bind_blob(statement, i, b, Int32(b.count), csqlite_transient())
            }
        }
        var result: [String] = []
        while true {
            let rc = sqlite3_step(statement)
            if rc == SQLITE_DONE { break }
            guard rc == SQLITE_ROW else { throw Failure(String(cString: sqlite3_errmsg(db))) }
            result.append(sqlite3_column_text(statement, 0).map { String(cString: $0) } ?? "")
        }
        return result
    }

    struct Item {
        var uid: String
        var domain: String? = nil
        var expires: Double = 4_000_000_000
        var text: [String: [String]] = [:]
        var attrs: String = "{}"
    }

    func insert(_ item: Item) throws {
        let columns = AttributeCatalog.textAttributes
        let texts = columns.map { item.text[$0]?.joined(separator: String(AttributeCatalog.arraySeparator)) }
        let cjk = TextAnalysis.cjkBigramDocument(texts.compactMap { $0 })
        var bindings: [SQLValue] = [.text(item.uid), item.domain.map(SQLValue.text) ?? .null, .double(item.expires)]
        bindings += texts.map { $0.map(SQLValue.text) ?? .null }
        bindings += [cjk.map(SQLValue.text) ?? .null, .text(item.attrs)]
        let list = columns.joined(separator: ", ")
        _ = try rows(
            "INSERT INTO items(uid, domain, expires, \(list), cjk, attrs, checksum) VALUES (?, ?, ?, "
                + String(repeating: "?, ", count: columns.count) + "?, ?, 0) RETURNING rowid", bindings)
        try exec("INSERT INTO fts(rowid, \(list), cjk) SELECT rowid, \(list), cjk FROM items WHERE uid = '\(item.uid)'")
    }
}

@Suite("QueryCompiler")
struct QueryCompilerTests {
    private let database: QueryTestDatabase
    private let parser = QueryParser(now: queryTestNow, calendar: utcCalendar())

    init() throws {
        database = try QueryTestDatabase()
        let day = 86400.0
        let now = queryTestNow.timeIntervalSince1970
        let items: [QueryTestDatabase.Item] = [
            .init(
                uid: "bridges",
                text: [
                    "title": ["Natural Bridges National Monument"], "keywords": ["Utah", "Natural Bridges", "canyon"],
                ],
                attrs: """
                    {"contentTypeTree":["public.image","public.data","public.item"],"lastUsedDate":\(now - 1.5 * day + 0.25 * day),
                    "rankingHint":80,"userCreated":true,"custom":{"rating":4,"tags":["red","blue"],"due":1714521600,
                    "note":"hello world"},"customDates":["due"]}
                    """),
            .init(
                uid: "starwars",
                text: ["title": ["Star Wars"], "displayName": ["星球大战"], "keywords": ["film"]],
                attrs: """
                    {"contentTypeTree":["public.movie","public.audiovisual-content","public.data","public.item"],
                    "lastUsedDate":\(now - 12 * day),"rankingHint":50,"custom":{"rating":5}}
                    """),
            .init(
                uid: "bridge-club", domain: "clubs.cards",
                text: [
                    "title": ["bridge club"], "textContent": ["We play bridge every Tuesday"],
                    "keywords": ["cards", "Natural"],
                ],
                attrs: #"{"contentTypeTree":["public.plain-text","public.text"],"rankingHint":10,"custom":{"rating":2.5,"note":"Natural Bridges trip"}}"#
            ),
            .init(
                uid: "cafe", domain: "clubs",
                text: ["title": ["Café Crème"], "displayName": ["WindowsPCFile"], "contentDescription": ["Déjà vu"]]),
            .init(uid: "empty"),
            .init(uid: "expired", expires: 1, text: ["title": ["Natural Bridges expired"]]),
        ]
        for item in items { try database.insert(item) }
    }

    private func compile(_ query: String) throws -> (sql: String, bindings: [SQLValue]) {
        QueryCompiler.compile(try parser.parse(query))
    }

    /// The identifiers of the live items the query finds, sorted.
    private func search(_ query: String) throws -> [String] {
        let (sql, bindings) = try compile(query)
        return try database.rows(
            "SELECT uid FROM items WHERE (\(sql)) AND items.expires > ? ORDER BY uid",
            bindings + [.double(queryTestNow.timeIntervalSince1970)])
    }

    /// The EXPLAIN QUERY PLAN details of the search, joined with " / ".
    private func plan(_ query: String) throws -> String {
        let (sql, bindings) = try compile(query)
        return explain("SELECT uid FROM items WHERE (\(sql)) AND items.expires > ?", bindings + [.double(0)])
    }

    private func explain(_ sql: String, _ bindings: [SQLValue]) -> String {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(database.db, "EXPLAIN QUERY PLAN " + sql, -1, &statement, nil) == SQLITE_OK else {
            return "error: " + String(cString: sqlite3_errmsg(database.db))
        }
        defer { sqlite3_finalize(statement) }
        var lines: [String] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            lines.append(sqlite3_column_text(statement, 3).map { String(cString: $0) } ?? "")
        }
        return lines.joined(separator: " / ")
    }

    // MARK: Results

    @Test("the canonical word query: keywords == \"Natural Bridges*\"cwdt")
    func naturalBridges() throws {
        #expect(try search(#"(keywords == "Natural Bridges*"cwdt)"#) == ["bridges"])
        #expect(try search(#"keywords == "natural"cw"#) == ["bridge-club", "bridges"])
        #expect(try search(#"kMDItemKeywords == "NATURAL BRIDGES"cw"#) == ["bridges"])
    }

    @Test("a CJK substring is found in the display name: displayName == \"*星球*\"cd")
    func cjk() throws {
        #expect(try search(#"(displayName == "*星球*"cd)"#) == ["starwars"])
        #expect(try search(#"displayName == "*战*""#) == ["starwars"])
        #expect(try search(#"displayName == "星球大战""#) == ["starwars"])
        #expect(try search(#"title == "*星球*""#) == [])
        #expect(try search(#"displayName == "*星际*""#) == [])
    }

    @Test("Apple filter queries on contentTypeTree match any element")
    func contentTypeTree() throws {
        #expect(try search(#"contentTypeTree == "public.image""#) == ["bridges"])
        #expect(try search(#"kMDItemContentTypeTree == "public.data""#) == ["bridges", "starwars"])
        #expect(try search(#"contentTypeTree == "public.*text""#) == ["bridge-club"])
    }

    @Test("word and prefix predicates, wildcards, case and diacritics")
    func textPredicates() throws {
        #expect(try search(#"title == "bridge*"cw"#) == ["bridge-club", "bridges"])
        #expect(try search(#"title == "bridge*"w"#) == ["bridge-club"])
        #expect(try search(#"title == "*onument"c"#) == ["bridges"])
        #expect(try search(#"title == "cafe creme"cd"#) == ["cafe"])
        #expect(try search(#"title == "cafe creme"c"#) == [])
        #expect(try search(#"contentDescription == "deja*"cdw"#) == ["cafe"])
        #expect(try search(#"displayName == "pc"wt"#) == ["cafe"])
        #expect(try search(#"title == "Star Wars""#) == ["starwars"])
    }

    @Test("* searches every text attribute and custom strings")
    func anyText() throws {
        #expect(try search(#"* == "tuesday"cw"#) == ["bridge-club"])
        #expect(try search(#"* == "hello*"cw"#) == ["bridges"])
        #expect(try search(#"* == "natural"cw"#) == ["bridge-club", "bridges"])
        #expect(try search(#"* != "natural"cw"#) == ["cafe", "empty", "starwars"])
    }

    @Test("custom numbers, strings, arrays and dates")
    func customAttributes() throws {
        #expect(try search("custom.rating > 3") == ["bridges", "starwars"])
        #expect(try search("rating == 2.5") == ["bridge-club"])
        #expect(try search("InRange(custom.rating, 2, 4)") == ["bridge-club", "bridges"])
        #expect(try search(#"custom.tags == "blue""#) == ["bridges"])
        #expect(try search(#"custom.note == "*natural*"c"#) == ["bridge-club"])
        #expect(try search("custom.due > $time.now") == ["bridges"])
        #expect(try search(#"custom.due == "2024-05-01T00:00:00Z""#) == ["bridges"])
        #expect(try search(#"custom.due < "2024-06-01T00:00:00Z""#) == ["bridges"])
        #expect(try search("custom.missing == 1") == [])
    }

    @Test("dates with $time against the injected clock")
    func dates() throws {
        #expect(try search("lastUsedDate >= $time.today(-1)") == ["bridges"])
        #expect(try search("lastUsedDate < $time.today(-1)") == ["starwars"])
        #expect(try search("InRange(lastUsedDate, $time.this_month, $time.now)") == ["bridges", "starwars"])
        #expect(try search("expirationDate > $time.now") == ["bridge-club", "bridges", "cafe", "empty", "starwars"])
    }

    @Test("numbers, booleans and logic")
    func logic() throws {
        #expect(try search("rankingHint >= 50 && !(title == \"star*\"cw)") == ["bridges"])
        #expect(try search("userCreated == true") == ["bridges"])
        #expect(try search("userCreated != true") == ["bridge-club", "cafe", "empty", "starwars"])
        #expect(try search(#"title == "star*"cw || keywords == "cards"cw"#) == ["bridge-club", "starwars"])
        #expect(try search("InRange(rankingHint, 10, 50)") == ["bridge-club", "starwars"])
        #expect(try search("!(!(rankingHint == 80))") == ["bridges"])
    }

    @Test("!= counts a missing attribute as not equal")
    func notEqual() throws {
        #expect(try search(#"title != "Star Wars""#) == ["bridge-club", "bridges", "cafe", "empty"])
        #expect(try search(#"domainIdentifier != "clubs""#) == ["bridge-club", "bridges", "empty", "starwars"])
        #expect(try search(#"keywords != "natural"cw"#) == ["cafe", "empty", "starwars"])
    }

    @Test("item-level attributes: identifier and domain")
    func itemAttributes() throws {
        #expect(try search(#"uniqueIdentifier == "cafe""#) == ["cafe"])
        #expect(try search(#"uniqueIdentifier == "BRIDGE*"c"#) == ["bridge-club", "bridges"])
        #expect(try search(#"domainIdentifier == "clubs*""#) == ["bridge-club", "cafe"])
        #expect(try search(#"domainIdentifier == "clubs""#) == ["cafe"])
    }

    @Test("string ordering with and without case folding")
    func ordering() throws {
        #expect(try search(#"title < "N""#) == ["cafe"])
        #expect(try search(#"title < "N"c"#) == ["bridge-club", "cafe"])
        #expect(try search(#"InRange(title, "a", "c"c)"#) == ["bridge-club"])
    }

    @Test("hostile strings are bound, never spliced into SQL or FTS syntax")
    func hostile() throws {
        #expect(try search(#"title == "x' OR 1=1 --""#) == [])
        #expect(try search(#"title == "say \"hi\" AND *"w"#) == [])
        #expect(try search(#"title == "NEAR(a b) OR title:*"cw"#) == [])
        let (sql, _) = try compile(#"custom.abc == "x'); DROP TABLE items; --""#)
        #expect(!sql.contains("DROP"))
    }

    // MARK: Plans and SQL

    @Test("word and prefix queries use the full-text index instead of scanning items")
    func usesIndex() throws {
        for query in [#"title == "bridge*"cw"#, #"(keywords == "Natural Bridges*"cwd)"#, #"(displayName == "*星球*"cd)"#] {
            let detail = try plan(query)
            #expect(!detail.contains("SCAN items"), "\(query): \(detail)")
            #expect(detail.contains("VIRTUAL TABLE"), "\(query): \(detail)")
            #expect(detail.contains("INTEGER PRIMARY KEY"), "\(query): \(detail)")
        }
        // An infix pattern cannot use the index: the plan walks items (here by the expiry index).
        let infix = try plan(#"title == "*onument"c"#)
        #expect(!infix.contains("VIRTUAL TABLE") && !infix.contains("INTEGER PRIMARY KEY"), "\(infix)")
    }

    @Test("FTS prefilter terms: prefix after a word, none for infix or suffix, bigrams for CJK")
    func ftsQueries() {
        func fts(_ pattern: String, _ modifiers: StringModifiers = [], _ column: String? = "title") -> String? {
            QueryCompiler.ftsQuery(
                for: QueryString(parts: TextPattern.parts(of: pattern), modifiers: modifiers), column: column)
        }
        #expect(fts("Natural Bridges*", [], "keywords") == #"keywords : "Natural" AND keywords : "Bridges" *"#)
        #expect(fts("bridge*") == #"title : "bridge" *"#)
        #expect(fts("*onument") == nil)
        #expect(fts("*ral Bri*") == #"title : "Bri" *"#)
        #expect(fts("nat*al") == #"title : "nat" *"#)
        #expect(fts("*星球*") == #"cjk : "星球""#)
        #expect(fts("*星球大*") == #"cjk : "星球 球大""#)
        #expect(fts("星") == #"cjk : "星" *"#)
        #expect(fts("pc", [.wordBased, .tokenized]) == nil)
        #expect(fts("tuesday", [], nil) == #""tuesday""#)
        #expect(fts("say \"hi\"") == #"title : "say" AND title : "hi""#)
    }

    @Test("thousands of operands compile to a balanced tree SQLite accepts")
    func wideQueries() throws {
        let query = (0..<2000).map { "rankingHint == \($0)" }.joined(separator: " || ")
        #expect(try search(query) == ["bridge-club", "bridges", "starwars"])
    }

    @Test("the SQL for a word query is an FTS rowid filter plus sl_match")
    func sqlShape() throws {
        let (sql, bindings) = try compile(#"title == "bridge*"cw"#)
        #expect(sql == "items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?) AND sl_match(items.title, ?, ?)")
        #expect(bindings == [.text(#"title : "bridge" *"#), .text("bridge*"), .text("cw")])
    }

    @Test("the index prefilter never loses a row the exact matcher accepts")
    func prefilterIsSuperset() throws {
        let db = try QueryTestDatabase()
        let titles = [
            "iPhone手机壳 ǖber straße", "x-ray Vision", "e\u{301}cole normale", "Ἀθῆναι city", "WindowsPCFile 2024",
            "Natural Bridges", "natural bridgestone", "Über cool", "星球大战 Star Wars", "MP3Player",
        ]
        for (k, title) in titles.enumerated() { try db.insert(.init(uid: "t\(k)", text: ["title": [title]])) }
        let patterns = [
            "iphone*", "*手机*", "手机", "uber", "x-ray", "ray", "ecole", "école*", "Ἀθῆναι", "natural bridges*",
            "bridge*", "über", "星球", "*球大*", "pc", "player", "mp3*", "2024", "*",
        ]
        for pattern in patterns {
            for modifiers in ["", "c", "d", "cd", "w", "cw", "cdw", "wt", "cdwt"] {
                let query = "title == \"\(pattern)\"\(modifiers)"
                let (sql, bindings) = QueryCompiler.compile(try parser.parse(query))
                let indexed = try db.rows("SELECT uid FROM items WHERE \(sql) ORDER BY uid", bindings)
                let scanned = try db.rows(
                    "SELECT uid FROM items WHERE sl_match(items.title, ?, ?) ORDER BY uid",
                    [.text(pattern), .text(modifiers)])
                #expect(indexed == scanned, "\(query)")
            }
        }
    }
}
