import CSQLite
import Foundation
import SearchlightWire
import Testing
import TestThreads

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
        let aux = TextAnalysis.auxiliaryDocument(texts.compactMap { $0 })
        var bindings: [SQLValue] = [.text(item.uid), item.domain.map(SQLValue.text) ?? .null, .double(item.expires)]
        bindings += texts.map { $0.map(SQLValue.text) ?? .null }
        bindings += [aux.map(SQLValue.text) ?? .null, .text(item.attrs)]
        let list = columns.joined(separator: ", ")
        _ = try rows(
            "INSERT INTO items(uid, domain, expires, \(list), aux, attrs, checksum) VALUES (?, ?, ?, "
                + String(repeating: "?, ", count: columns.count) + "?, ?, 0) RETURNING rowid", bindings)
        try exec("INSERT INTO fts(rowid, \(list), aux) SELECT rowid, \(list), aux FROM items WHERE uid = '\(item.uid)'")
    }
}

@Suite("QueryCompiler", .onOwnThreads)
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

    /// The identifiers of the live items the query finds, sorted. Every query is run both ways,
    /// prefiltered and FTS-driven (when it has a driver), and both must agree.
    private func search(_ query: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> [String] {
        let (sql, bindings) = try compile(query)
        let now: SQLValue = .double(queryTestNow.timeIntervalSince1970)
        let prefiltered = try database.rows(
            "SELECT uid FROM items WHERE (\(sql)) AND items.expires > ? ORDER BY uid", bindings + [now])
        let plan = QueryCompiler.plan(try parser.parse(query))
        if let match = plan.ftsMatch {
            let driven = try database.rows(
                "SELECT uid FROM fts JOIN items ON items.rowid = fts.rowid WHERE fts MATCH ? AND (\(plan.sql)) "
                    + "AND items.expires > ? ORDER BY uid", [.text(match)] + plan.bindings + [now])
            #expect(driven == prefiltered, "\(query) driven by \(match)", sourceLocation: sourceLocation)
        }
        return prefiltered
    }

    /// The EXPLAIN QUERY PLAN of the statement `IndexStore.search` runs for the query.
    private func searchPlan(_ query: String, filterQueries: [String] = []) throws -> String {
        let plan = QueryCompiler.plan(all: try ([query] + filterQueries).map { try parser.parse($0) })
        let (sql, bindings) = IndexStore.searchStatement(plan, after: 0, now: 0, limit: 21)
        return explain(sql, bindings)
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
        #expect(fts("*星球*") == #"aux : "星球""#)
        #expect(fts("*星球大*") == #"aux : "星球 球大""#)
        #expect(fts("星") == #"aux : "星" *"#)
        #expect(fts("pc", [.wordBased, .tokenized]) == #"{title aux} : "pc""#)
        #expect(fts("Natural Bridges*", [.tokenized], "keywords") == #"{keywords aux} : "Natural" AND {keywords aux} : "Bridges" *"#)
        #expect(fts("WindowsPC", [.tokenized]) == #"(title : "WindowsPC" OR ({title aux} : "Windows" AND {title aux} : "PC"))"#)
        #expect(fts("*PCFile", [.tokenized]) == nil)
        #expect(fts("*pc", [.tokenized]) == nil)
        #expect(fts("mp3*", [.tokenized], nil) == #"("mp3" * OR ("mp" AND "3" *))"#)
        #expect(fts("tuesday", [], nil) == #""tuesday""#)
        #expect(fts("say \"hi\"") == #"title : "say" AND title : "hi""#)
    }

    @Test("the ASCII word terms equal the general path's on random ASCII patterns with wildcards")
    func asciiWordTerms() {
        var state: UInt64 = 0x5DEE_CE66_D1CE_4E5B
        func next(_ n: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(n))
        }
        let pieces = ["lib", "GTK3", "x", "json", "Pars", "9", "a1b2", " ", "  ", "-", ".", "_", "\"", "'", "*", "\\*", "@", "\u{1F}", "\t"]
        var compared = 0, withTerms = 0
        for _ in 0..<3000 {
            let pattern = (0..<(1 + next(7))).map { _ in pieces[next(pieces.count)] }.joined()
            let parts = TextPattern.parts(of: pattern)
            let fast = QueryCompiler.wordTermList(parts), general = QueryCompiler.wordTermList(parts, ascii: false)
            #expect(fast.map(\.word) == general.map(\.word) && fast.map(\.prefix) == general.map(\.prefix), "\(pattern.debugDescription)")
            compared += 1
            if !fast.isEmpty { withTerms += 1 }
        }
        #expect(withTerms > compared / 2, "\(withTerms) of \(compared) patterns had terms")
        #expect(TextAnalysis.ftsQuoted("say \"hi\"") == #""say ""hi""""#)
        #expect(TextAnalysis.ftsQuoted("plain") == #""plain""#)
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
            // `t` words that split, start with a wildcard, or match only as whole words.
            "WindowsPC", "PCFile*", "*PCFile", "windowspcfile", "Phone手机", "MP3", "mp*er", "ǖber straße",
        ]
        for pattern in patterns {
            for modifiers in ["", "c", "d", "cd", "w", "cw", "cdw", "wt", "cdwt"] {
                let query = "title == \"\(pattern)\"\(modifiers)"
                let expr = try parser.parse(query)
                let (sql, bindings) = QueryCompiler.compile(expr)
                let indexed = try db.rows("SELECT uid FROM items WHERE \(sql) ORDER BY uid", bindings)
                let scanned = try db.rows(
                    "SELECT uid FROM items WHERE sl_match(items.title, ?, ?) ORDER BY uid",
                    [.text(pattern), .text(modifiers)])
                #expect(indexed == scanned, "\(query)")
                let plan = QueryCompiler.plan(expr)
                #expect(!plan.sql.contains("fts MATCH"), "\(query): \(plan.sql)")
                if let match = plan.ftsMatch {
                    let driven = try db.rows(
                        "SELECT uid FROM fts JOIN items ON items.rowid = fts.rowid WHERE fts MATCH ? AND (\(plan.sql)) ORDER BY uid",
                        [.text(match)] + plan.bindings)
                    #expect(driven == scanned, "\(query) driven by \(match)")
                } else {
                    #expect(plan.sql == sql, "\(query)")
                }
            }
        }
    }

    @Test("drivers: a predicate's prefilter, AND of those that exist, OR only when all exist, none under !")
    func drivers() throws {
        func driver(_ query: String) throws -> String? { QueryCompiler.driver(for: try parser.parse(query)) }
        #expect(try driver(#"title == "bridge*"cw"#) == #"title : "bridge" *"#)
        #expect(try driver(#"title == "bridge*"cw && rankingHint > 5"#) == #"title : "bridge" *"#)
        #expect(try driver(#"title == "a"w && keywords == "b"w"#) == #"(title : "a") AND (keywords : "b")"#)
        #expect(try driver(#"title == "a"w || keywords == "b"w"#) == #"(title : "a") OR (keywords : "b")"#)
        #expect(try driver(#"title == "a"w || rankingHint > 5"#) == nil)
        #expect(try driver(#"title != "a"w"#) == nil)
        #expect(try driver(#"!(title == "a"w)"#) == nil)
        #expect(try driver(#"!(!(title == "a"w))"#) == nil)
        #expect(try driver(#"* == "a"w"#) == nil)  // custom strings are not in the index
        #expect(try driver(#"title == "*onument"c"#) == nil)
        #expect(try driver(#"(keywords == "Natural Bridges*"cwdt)"#)
            == #"{keywords aux} : "Natural" AND {keywords aux} : "Bridges" *"#)
    }

    @Test("FTS-driven and prefiltered searches agree on compound queries")
    func drivenCompounds() throws {
        #expect(try search(#"title == "bridge*"cw && rankingHint > 5"#) == ["bridge-club", "bridges"])
        #expect(try search(#"title == "bridge*"cw && !(keywords == "cards"cw)"#) == ["bridges"])
        #expect(try search(#"(title == "star*"cw || keywords == "utah"cw) && rankingHint >= 50"#) == ["bridges", "starwars"])
        #expect(try search(#"title == "bridge*"cw && (keywords == "cards"cw || rankingHint > 50)"#) == ["bridge-club", "bridges"])
        #expect(try search(#"keywords == "natural"cw && !(!(title == "bridge club"c))"#) == ["bridge-club"])
        #expect(try search(#"displayName == "pc"wt || displayName == "*星球*""#) == ["cafe", "starwars"])
        #expect(try search(#"title == "bridge*"cw && * == "tuesday"cw"#) == ["bridge-club"])
    }

    @Test("a term query is driven by FTS5: rows come in rowid order, no scan of items, no sort")
    func drivenPlan() throws {
        for (query, filters) in [
            (#"title == "bridge*"cw && rankingHint > 5"#, [String]()),
            (#"rankingHint > 5"#, [#"title == "bridge*"cw"#]),
        ] {
            let detail = try searchPlan(query, filterQueries: filters)
            #expect(detail.hasPrefix("SCAN fts VIRTUAL TABLE"), "\(query): \(detail)")
            #expect(detail.contains("SEARCH items USING INTEGER PRIMARY KEY (rowid=?)"), "\(query): \(detail)")
            #expect(!detail.contains("SCAN items") && !detail.contains("TEMP B-TREE"), "\(query): \(detail)")
        }
        let undriven = try searchPlan(#"title == "*onument"c"#)
        #expect(!undriven.contains("VIRTUAL TABLE"), "\(undriven)")
    }

    @Test("the headline t query (keywords == \"Natural Bridges*\"cwdt) uses the index")
    func tokenizedUsesIndex() throws {
        let detail = try searchPlan(#"(keywords == "Natural Bridges*"cwdt)"#)
        #expect(detail.hasPrefix("SCAN fts VIRTUAL TABLE") && !detail.contains("SCAN items"), "\(detail)")
        #expect(try plan(#"displayName == "pc"wt"#).contains("VIRTUAL TABLE"))
    }

    @Test("the FTS-driven search statement pages by rowid like the scan")
    func drivenPaging() throws {
        let db = try QueryTestDatabase()
        for k in 0..<25 {
            try db.insert(.init(uid: String(format: "i%02d", k), text: ["title": [k % 3 == 0 ? "report \(k)" : "Report\(k) draft"]]))
        }
        for query in [#"title == "report*"cw"#, #"title == "report"wt"#, #"title == "*eport*"c"#] {
            var pages: [[String]] = []
            var after: Int64 = 0
            while pages.count < 10 {
                let (sql, bindings) = IndexStore.searchStatement(
                    QueryCompiler.plan(try parser.parse(query)), after: after, now: 0, limit: 4)
                let rowids = try db.rows(sql, bindings)
                if rowids.isEmpty { break }
                pages.append(rowids)
                after = Int64(rowids.last!)!
            }
            let all = pages.flatMap { $0 }
            #expect(all == (1...25).map(String.init), "\(query)")
            #expect(pages.dropLast().allSatisfy { $0.count == 4 }, "\(query)")
        }
    }
}
