import Foundation
import SearchlightWire
import Testing
import TestThreads

@testable import SearchlightStore

/// A fixed clock: Wednesday 2024-03-13 15:30:00 UTC.
let queryTestNow = Date(timeIntervalSince1970: 1_710_343_800)

func utcCalendar() -> Calendar {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    calendar.firstWeekday = 1
    return calendar
}

func iso(_ text: String) -> Date { ISO8601.parse(text)! }

@Suite("QueryParser", .onOwnThreads)
struct QueryParserTests {
    let parser = QueryParser(now: queryTestNow, calendar: utcCalendar())

    private func parse(_ query: String) throws -> QueryExpr { try parser.parse(query) }

    /// The error's byte offset and message, or nil when the query parses.
    private func failure(_ query: String, _ parser: QueryParser? = nil) -> (offset: Int, message: String)? {
        do {
            _ = try (parser ?? self.parser).parse(query)
            return nil
        } catch {
            #expect(error.code == .invalidQuery)
            return (error.data?["offset"]?.intValue ?? -1, error.message)
        }
    }

    private func string(_ parts: [TextPattern.Part], _ modifiers: StringModifiers = []) -> QueryValue {
        .string(QueryString(parts: parts, modifiers: modifiers))
    }

    private let title = QueryAttribute.catalog("title", .text)
    private let rankingHint = QueryAttribute.catalog("rankingHint", .number)
    private let lastUsed = QueryAttribute.catalog("lastUsedDate", .date)

    // MARK: Operators and values

    @Test("every comparison operator parses on strings and numbers")
    func operators() throws {
        for op in QueryOperator.allCases {
            #expect(try parse("title \(op.rawValue) \"x\"") == .comparison(title, op, string([.text("x")])))
            #expect(try parse("rankingHint\(op.rawValue)5") == .comparison(rankingHint, op, .number(5)))
        }
    }

    @Test("each modifier letter and their combinations")
    func modifiers() throws {
        let cases: [(String, StringModifiers)] = [
            ("c", .caseInsensitive), ("d", .diacriticInsensitive), ("w", .wordBased), ("t", .tokenized),
            ("cd", [.caseInsensitive, .diacriticInsensitive]),
            ("cwdt", [.caseInsensitive, .diacriticInsensitive, .wordBased, .tokenized]),
            ("tc", [.caseInsensitive, .tokenized]), ("", []),
        ]
        for (letters, expected) in cases {
            #expect(try parse("title == \"x\"\(letters)") == .comparison(title, .equal, string([.text("x")], expected)))
        }
        #expect(StringModifiers([.tokenized, .caseInsensitive, .wordBased, .diacriticInsensitive]).letters == "cdwt")
    }

    @Test("stars are wildcards and escapes give literal quote, backslash and star")
    func escapesAndWildcards() throws {
        #expect(try parse(#"title == "*ral Bri*""#) == .comparison(title, .equal, string([.wildcard, .text("ral Bri"), .wildcard])))
        #expect(try parse(#"title == "a\"b""#) == .comparison(title, .equal, string([.text("a\"b")])))
        #expect(try parse(#"title == "a\\b""#) == .comparison(title, .equal, string([.text("a\\b")])))
        #expect(try parse(#"title == "5\*""#) == .comparison(title, .equal, string([.text("5*")])))
        let value = QueryString(parts: [.text("5*"), .wildcard])
        #expect(value.pattern == "5\\**")
        #expect(value.hasWildcard)
        #expect(try parse(#"title == """#) == .comparison(title, .equal, string([.text("")])))
    }

    @Test("numbers: integers, decimals, exponents and negatives")
    func numbers() throws {
        let cases: [(String, Double)] = [("42", 42), ("-3.5", -3.5), ("1e3", 1000), ("2.5E-2", 0.025), ("-0", 0), ("+7", 7)]
        for (text, value) in cases {
            #expect(try parse("rankingHint == \(text)") == .comparison(rankingHint, .equal, .number(value)))
        }
    }

    @Test("true and false compare booleans")
    func booleans() throws {
        let userCreated = QueryAttribute.catalog("userCreated", .bool)
        #expect(try parse("userCreated == true") == .comparison(userCreated, .equal, .bool(true)))
        #expect(try parse("userCreated != false") == .comparison(userCreated, .notEqual, .bool(false)))
    }

    @Test("InRange takes an attribute and two inclusive bounds")
    func inRange() throws {
        #expect(try parse("InRange(rankingHint, 10, 20)") == .inRange(rankingHint, .number(10), .number(20)))
        #expect(
            try parse("InRange(kMDItemLastUsedDate, $time.today(-7), $time.now)")
                == .inRange(lastUsed, .date(iso("2024-03-06T00:00:00Z")), .date(queryTestNow)))
        #expect(
            try parse(#"InRange(title, "a", "m"c)"#)
                == .inRange(title, string([.text("a")]), string([.text("m")], .caseInsensitive)))
    }

    // MARK: Structure

    @Test("! binds tighter than &&, which binds tighter than ||")
    func precedence() throws {
        let a = QueryExpr.comparison(rankingHint, .equal, .number(1))
        let b = QueryExpr.comparison(rankingHint, .equal, .number(2))
        let c = QueryExpr.comparison(rankingHint, .equal, .number(3))
        #expect(try parse("rankingHint == 1 || rankingHint == 2 && !rankingHint == 3") == .or([a, .and([b, .not(c)])]))
        #expect(try parse("!rankingHint == 1 && rankingHint == 2") == .and([.not(a), b]))
        #expect(try parse("rankingHint == 1 && rankingHint == 2 && rankingHint == 3") == .and([a, b, c]))
    }

    @Test("parentheses override precedence")
    func parentheses() throws {
        let a = QueryExpr.comparison(rankingHint, .equal, .number(1))
        let b = QueryExpr.comparison(rankingHint, .equal, .number(2))
        let c = QueryExpr.comparison(rankingHint, .equal, .number(3))
        #expect(try parse("(rankingHint == 1 || rankingHint == 2) && rankingHint == 3") == .and([.or([a, b]), c]))
        #expect(try parse("!(rankingHint == 1 || rankingHint == 2)") == .not(.or([a, b])))
        #expect(try parse("((((rankingHint == 1))))") == a)
    }

    // MARK: Attributes

    @Test("kMDItem aliases name catalog attributes")
    func aliases() throws {
        #expect(try parse(#"kMDItemTitle == "x""#) == .comparison(title, .equal, string([.text("x")])))
        #expect(
            try parse(#"kMDItemContentTypeTree == "public.image""#)
                == .comparison(.catalog("contentTypeTree", .stringArray), .equal, string([.text("public.image")])))
        #expect(try parse("kMDItemRankingHint > 5") == .comparison(rankingHint, .greater, .number(5)))
    }

    @Test("custom.name and unknown bare names are custom attributes of any type")
    func customAttributes() throws {
        #expect(try parse("custom.rating > 3") == .comparison(.custom("rating"), .greater, .number(3)))
        #expect(try parse("rating > 3") == .comparison(.custom("rating"), .greater, .number(3)))
        #expect(try parse(#"custom.title == "x""#) == .comparison(.custom("title"), .equal, string([.text("x")])))
        #expect(try parse("custom.done == true") == .comparison(.custom("done"), .equal, .bool(true)))
        #expect(
            try parse("custom.due < $time.now") == .comparison(.custom("due"), .less, .date(queryTestNow)))
    }

    @Test("item-level attributes and the * attribute")
    func itemAttributes() throws {
        #expect(try parse(#"uniqueIdentifier == "a*""#) == .comparison(.uniqueIdentifier, .equal, string([.text("a"), .wildcard])))
        #expect(try parse(#"domainIdentifier == "mail""#) == .comparison(.domainIdentifier, .equal, string([.text("mail")])))
        #expect(try parse("expirationDate > 0") == .comparison(.expirationDate, .greater, .date(Date(timeIntervalSince1970: 0))))
        #expect(try parse(#"* == "foo*"cd"#) == .comparison(.anyText, .equal, string([.text("foo"), .wildcard], [.caseInsensitive, .diacriticInsensitive])))
    }

    @Test("dates accept quoted ISO 8601 strings and Unix seconds")
    func dateValues() throws {
        #expect(
            try parse(#"lastUsedDate >= "2024-01-01T00:00:00Z""#)
                == .comparison(lastUsed, .greaterOrEqual, .date(iso("2024-01-01T00:00:00Z"))))
        #expect(try parse("lastUsedDate < 1700000000") == .comparison(lastUsed, .less, .date(Date(timeIntervalSince1970: 1_700_000_000))))
    }

    // MARK: $time

    @Test("every $time form against the injected clock and UTC calendar")
    func timeForms() throws {
        let cases: [(String, String)] = [
            ("$time.now", "2024-03-13T15:30:00Z"),
            ("$time.now(-60)", "2024-03-13T15:29:00Z"),
            ("$time.now(+3600)", "2024-03-13T16:30:00Z"),
            ("$time.now(1.5)", "2024-03-13T15:30:01.5Z"),
            ("$time.today", "2024-03-13T00:00:00Z"),
            ("$time.today()", "2024-03-13T00:00:00Z"),
            ("$time.today(-1)", "2024-03-12T00:00:00Z"),
            ("$time.today(2)", "2024-03-15T00:00:00Z"),
            ("$time.yesterday", "2024-03-12T00:00:00Z"),
            ("$time.this_week", "2024-03-10T00:00:00Z"),
            ("$time.this_week(-1)", "2024-03-03T00:00:00Z"),
            ("$time.this_month", "2024-03-01T00:00:00Z"),
            ("$time.this_month(-2)", "2024-01-01T00:00:00Z"),
            ("$time.this_month(1)", "2024-04-01T00:00:00Z"),
            ("$time.this_year", "2024-01-01T00:00:00Z"),
            ("$time.this_year(-1)", "2023-01-01T00:00:00Z"),
            ("$time.iso(2024-01-01T00:00:00Z)", "2024-01-01T00:00:00Z"),
            ("$time.iso(\"2024-02-03T04:05:06+01:00\")", "2024-02-03T03:05:06Z"),
            ("$time.today( -1 )", "2024-03-12T00:00:00Z"),
        ]
        for (text, expected) in cases {
            #expect(try parse("lastUsedDate > \(text)") == .comparison(lastUsed, .greater, .date(iso(expected))), "\(text)")
        }
    }

    @Test("calendar periods start in the calendar's time zone")
    func timeZones() throws {
        var tokyo = utcCalendar()
        tokyo.timeZone = TimeZone(identifier: "Asia/Tokyo")!
        let parser = QueryParser(now: queryTestNow, calendar: tokyo)  // 2024-03-14 00:30 in Tokyo
        #expect(try parser.parse("lastUsedDate > $time.today") == .comparison(lastUsed, .greater, .date(iso("2024-03-13T15:00:00Z"))))
        #expect(
            try parser.parse("lastUsedDate > $time.yesterday")
                == .comparison(lastUsed, .greater, .date(iso("2024-03-12T15:00:00Z"))))
    }

    // MARK: Errors

    @Test("syntax errors name the byte offset and what was expected")
    func errorOffsets() {
        let cases: [(String, Int, String)] = [
            (#"title == "abc"#, 9, "unterminated string"),
            ("title ==", 8, "expected a quoted string or value after '=='"),
            (#"title == "x"cq"#, 13, "unknown string modifier 'q'"),
            ("lastUsedDate > $time.tomorrow", 15, "unknown time value"),
            (#"(title == "x""#, 13, "expected ')'"),
            (#"title == "x")"#, 12, "unbalanced ')'"),
            (#"title == "x" garbage"#, 13, "expected '&&', '||' or the end"),
            (#"title "x""#, 6, "expected a comparison operator"),
            (#"title # "x""#, 6, "unexpected character '#'"),
            (#"&& title == "x""#, 0, "expected an attribute name"),
            (#"title = "x""#, 6, "write '=='"),
            (#"lastUsedDate > "yesterday""#, 15, "ISO 8601"),
            (#"rankingHint == "abc""#, 15, "takes a number"),
            ("InRange(rankingHint, 1 2)", 23, "expected ','"),
            (#"title == "\q""#, 10, "unknown escape"),
            ("", 0, "expected an attribute name"),
            ("lastUsedDate > $time.today(x)", 27, "whole periods"),
            ("lastUsedDate > $time.iso(soon)", 25, "ISO 8601"),
            ("lastUsedDate > $time.yesterday(1)", 31, "takes no count"),
            ("kMDItemFSSize == 1", 0, "unknown Spotlight attribute"),
            (#"thumbnailData == "x""#, 17, "binary data"),
            (#"* > "a""#, 2, "only == and !="),
            (#"title == "x" && || title == "y""#, 16, "expected an attribute name"),
            ("rankingHint == 1.", 17, "decimal point"),
            (#"title == "星球" &&"#, 20, "expected an attribute name"),
            ("custom.bad-name == 1", 10, "unexpected character '-'"),
            (#"title == "x" & title == "y""#, 13, "write '&&'"),
        ]
        for (query, offset, message) in cases {
            guard let f = failure(query) else {
                Issue.record("\(query) parsed")
                continue
            }
            #expect(f.offset == offset, "\(query): \(f.message)")
            #expect(f.message.contains(message), "\(query): \(f.message)")
            #expect(f.message.hasSuffix("at byte \(f.offset)"), "\(query): \(f.message)")
        }
    }

    @Test("nesting deeper than maxDepth is refused; exactly maxDepth is fine")
    func depthLimit() throws {
        func nested(_ n: Int) -> String {
            String(repeating: "(", count: n) + "rankingHint == 1" + String(repeating: ")", count: n)
        }
        _ = try parse(nested(64))
        let f = failure(nested(65))
        #expect(f?.offset == 64)
        #expect(f?.message.contains("deeper than 64") == true)
        let nots = failure(String(repeating: "!", count: 65) + "rankingHint == 1")
        #expect(nots?.offset == 64)
        let small = QueryParser(now: queryTestNow, calendar: utcCalendar(), maxDepth: 2)
        #expect(failure("!(!rankingHint == 1)", small)?.offset == 2)
    }

    @Test("a query over maxBytes is refused")
    func sizeLimit() throws {
        let small = QueryParser(now: queryTestNow, calendar: utcCalendar(), maxBytes: 20)
        let f = failure(#"title == "a long string value""#, small)
        #expect(f?.offset == 20)
        #expect(f?.message.contains("limit of 20") == true)
        let long = Array(repeating: "rankingHint == 1", count: 3000).joined(separator: " || ")
        #expect(long.utf8.count < 64 * 1024)
        guard case .or(let operands) = try parse(long) else {
            Issue.record("expected an or")
            return
        }
        #expect(operands.count == 3000)
    }
}
