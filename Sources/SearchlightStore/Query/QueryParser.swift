import Foundation
import SearchlightWire

/// Parses the CSSearchQuery language of `query.search` into a `QueryExpr`.
///
/// Grammar (precedence `!` > `&&` > `||`):
///
///     query      := or END
///     or         := and ( "||" and )*
///     and        := unary ( "&&" unary )*
///     unary      := "!" unary | primary
///     primary    := "(" or ")" | "InRange" "(" attribute "," value "," value ")"
///                 | attribute op value
///     attribute  := "*" | name            op := == != < > <= >=
///     value      := "string"[cdwt]* | number | true | false | $time.form[(arg)]
///
/// Every error is `invalidQuery` with the UTF-8 byte offset of the problem in `data.offset`.
public struct QueryParser: Sendable {
    public var time: QueryTime
    public var maxBytes: Int
    public var maxDepth: Int
    /// The comparisons this query may hold, each weighted by `QueryCost.of` (the work it adds for
    /// every item scanned); past it the parse fails at the comparison that crossed it.
    public var maxPredicates: Int
    /// The weight already spent by earlier texts of the same call (the query before its filter
    /// queries), counted against `maxPredicates` too.
    public var predicatesBefore = 0
    /// What the predicate limit counts, for its message ("the query", "the query and its filter
    /// queries together").
    public var predicateScope = "the query"

    public init(now: Date = Date(), calendar: Calendar = .current, maxBytes: Int = 64 * 1024, maxDepth: Int = 64,
                maxPredicates: Int = .max) {
        self.time = QueryTime(now: now, calendar: calendar)
        self.maxBytes = maxBytes
        self.maxDepth = maxDepth
        self.maxPredicates = maxPredicates
    }

    public func parse(_ query: String) throws(SearchlightError) -> QueryExpr {
        try parseCounting(query).expr
    }

    /// `parse`, also giving the weight of the comparisons found (what `maxPredicates` bounds).
    public func parseCounting(_ query: String) throws(SearchlightError) -> (expr: QueryExpr, cost: Int) {
        let bytes = Array(query.utf8)
        guard bytes.count <= maxBytes else {
            throw QueryParser.error("the query is \(bytes.count) bytes, over the limit of \(maxBytes); shorten it", at: maxBytes)
        }
        var lexer = QueryLexer(bytes: bytes)
        var tokens: [QueryToken] = []
        while true {
            let token = try lexer.next()
            tokens.append(token)
            if token.kind == .end { break }
        }
        var state = ParseState(tokens: tokens, bytes: bytes, parser: self)
        let expr = try state.parseOr(depth: 0)
        let trailing = state.peek
        if trailing.kind != .end {
            if trailing.kind == .rightParen {
                throw QueryParser.error("unbalanced ')': no '(' to close", at: trailing.offset)
            }
            throw QueryParser.error(
                "unexpected \(state.describe(trailing)); expected '&&', '||' or the end of the query", at: trailing.offset)
        }
        return (expr, state.cost)
    }

    static func error(_ message: String, at offset: Int) -> SearchlightError {
        SearchlightError(.invalidQuery, "\(message) at byte \(offset)", data: .object(["offset": .number(Double(offset))]))
    }
}

// MARK: - Tokens

enum QueryTokenKind: Equatable {
    case leftParen, rightParen, comma, and, or, not, star, end
    case op(QueryOperator)
    case string(QueryString)
    case number(Double)
    case identifier(String)
    /// `$time.form` with its raw argument (between the parentheses) and that argument's offset.
    case time(form: String, argument: String?, argumentOffset: Int)
}

struct QueryToken {
    var kind: QueryTokenKind
    var offset: Int
    var length: Int
}

struct QueryLexer {
    let bytes: [UInt8]
    var i = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    private func at(_ k: Int) -> UInt8? { k < bytes.count ? bytes[k] : nil }
    private static func isLetter(_ b: UInt8) -> Bool { (b | 0x20) >= 0x61 && (b | 0x20) <= 0x7A }
    private static func isDigit(_ b: UInt8) -> Bool { b >= 0x30 && b <= 0x39 }
    private static func isNameByte(_ b: UInt8) -> Bool { isLetter(b) || isDigit(b) || b == 0x5F || b == 0x2E }

    mutating func next() throws(SearchlightError) -> QueryToken {
        while let b = at(i), b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { i += 1 }
        let start = i
        guard let b = at(i) else { return QueryToken(kind: .end, offset: i, length: 0) }
        func token(_ kind: QueryTokenKind, _ length: Int) -> QueryToken {
            i = start + length
            return QueryToken(kind: kind, offset: start, length: length)
        }
        let next = at(i + 1)
        switch b {
        case UInt8(ascii: "("): return token(.leftParen, 1)
        case UInt8(ascii: ")"): return token(.rightParen, 1)
        case UInt8(ascii: ","): return token(.comma, 1)
        case UInt8(ascii: "*"): return token(.star, 1)
        case UInt8(ascii: "&"):
            guard next == UInt8(ascii: "&") else { throw QueryParser.error("unexpected '&'; write '&&' for and", at: start) }
            return token(.and, 2)
        case UInt8(ascii: "|"):
            guard next == UInt8(ascii: "|") else { throw QueryParser.error("unexpected '|'; write '||' for or", at: start) }
            return token(.or, 2)
        case UInt8(ascii: "!"):
            return next == UInt8(ascii: "=") ? token(.op(.notEqual), 2) : token(.not, 1)
        case UInt8(ascii: "="):
            guard next == UInt8(ascii: "=") else { throw QueryParser.error("unexpected '='; write '==' to compare", at: start) }
            return token(.op(.equal), 2)
        case UInt8(ascii: "<"):
            return next == UInt8(ascii: "=") ? token(.op(.lessOrEqual), 2) : token(.op(.less), 1)
        case UInt8(ascii: ">"):
            return next == UInt8(ascii: "=") ? token(.op(.greaterOrEqual), 2) : token(.op(.greater), 1)
        case UInt8(ascii: "\""):
            return try string()
        case UInt8(ascii: "$"):
            return try time()
        case 0x30...0x39:
            return try number()
        case UInt8(ascii: "-"), UInt8(ascii: "+"):
            guard let n = next, Self.isDigit(n) else {
                throw QueryParser.error("unexpected character '\(Character(Unicode.Scalar(b)))'", at: start)
            }
            return try number()
        default:
            if Self.isLetter(b) || b == 0x5F {
                while let c = at(i), Self.isNameByte(c) { i += 1 }
                let name = String(decoding: bytes[start..<i], as: UTF8.self)
                return QueryToken(kind: .identifier(name), offset: start, length: i - start)
            }
            let shown = b < 0x80 && b >= 0x20 ? "'\(Character(Unicode.Scalar(b)))'" : "byte 0x\(String(b, radix: 16))"
            throw QueryParser.error("unexpected character \(shown)", at: start)
        }
    }

    private mutating func string() throws(SearchlightError) -> QueryToken {
        let start = i
        i += 1
        var parts: [TextPattern.Part] = []
        var text: [UInt8] = []
        func flush() {
            if !text.isEmpty { parts.append(.text(String(decoding: text, as: UTF8.self))) }
            text = []
        }
        while true {
            guard let b = at(i) else {
                throw QueryParser.error("unterminated string: add the closing '\"' for the string that starts", at: start)
            }
            if b == UInt8(ascii: "\"") {
                i += 1
                break
            }
            if b == UInt8(ascii: "\\") {
                guard let e = at(i + 1), e == UInt8(ascii: "\"") || e == UInt8(ascii: "\\") || e == UInt8(ascii: "*") else {
                    throw QueryParser.error("unknown escape in a string: only \\\", \\\\ and \\* are allowed", at: i)
                }
                text.append(e)
                i += 2
            } else if b == UInt8(ascii: "*") {
                flush()
                if parts.last != .wildcard { parts.append(.wildcard) }
                i += 1
            } else {
                text.append(b)
                i += 1
            }
        }
        flush()
        var modifiers: StringModifiers = []
        while let b = at(i), Self.isLetter(b) {
            guard let m = StringModifiers(letter: Character(Unicode.Scalar(b))) else {
                throw QueryParser.error(
                    "unknown string modifier '\(Character(Unicode.Scalar(b)))': use c (case), d (diacritics), w (words) or t (tokens)",
                    at: i)
            }
            modifiers.insert(m)
            i += 1
        }
        return QueryToken(kind: .string(QueryString(parts: parts, modifiers: modifiers)), offset: start, length: i - start)
    }

    private mutating func number() throws(SearchlightError) -> QueryToken {
        let start = i
        if at(i) == UInt8(ascii: "-") || at(i) == UInt8(ascii: "+") { i += 1 }
        func digits() -> Int {
            let s = i
            while let c = at(i), Self.isDigit(c) { i += 1 }
            return i - s
        }
        guard digits() > 0 else { throw QueryParser.error("expected digits after the sign of a number", at: i) }
        if at(i) == UInt8(ascii: ".") {
            i += 1
            guard digits() > 0 else { throw QueryParser.error("expected digits after the decimal point", at: i) }
        }
        if let e = at(i), e | 0x20 == UInt8(ascii: "e") {
            i += 1
            if at(i) == UInt8(ascii: "-") || at(i) == UInt8(ascii: "+") { i += 1 }
            guard digits() > 0 else { throw QueryParser.error("expected digits in the exponent of a number", at: i) }
        }
        if let c = at(i), Self.isNameByte(c) {
            throw QueryParser.error("unexpected '\(Character(Unicode.Scalar(c)))' after a number", at: i)
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw QueryParser.error("the number \(text) is out of range", at: start)
        }
        return QueryToken(kind: .number(value), offset: start, length: i - start)
    }

    private mutating func time() throws(SearchlightError) -> QueryToken {
        let start = i
        let prefix = Array("$time.".utf8)
        guard bytes.count >= i + prefix.count, Array(bytes[i..<(i + prefix.count)]) == prefix else {
            throw QueryParser.error("unexpected '$': the only $ values are $time.now, $time.today, … ($time.iso(…))", at: start)
        }
        i += prefix.count
        let nameStart = i
        while let c = at(i), Self.isLetter(c) || c == 0x5F { i += 1 }
        let form = String(decoding: bytes[nameStart..<i], as: UTF8.self)
        var argument: String? = nil
        var argumentOffset = i
        if at(i) == UInt8(ascii: "(") {
            i += 1
            argumentOffset = i
            while let c = at(i), c != UInt8(ascii: ")") { i += 1 }
            guard at(i) != nil else {
                throw QueryParser.error("missing ')' to close the argument of $time.\(form)(", at: argumentOffset - 1)
            }
            argument = String(decoding: bytes[argumentOffset..<i], as: UTF8.self)
            i += 1
        }
        return QueryToken(
            kind: .time(form: form, argument: argument, argumentOffset: argumentOffset), offset: start, length: i - start)
    }
}

// MARK: - Parser

struct ParseState {
    let tokens: [QueryToken]
    let bytes: [UInt8]
    let parser: QueryParser
    var position = 0
    /// The weight of the comparisons parsed so far (`QueryCost`).
    var cost = 0

    init(tokens: [QueryToken], bytes: [UInt8], parser: QueryParser) {
        self.tokens = tokens
        self.bytes = bytes
        self.parser = parser
    }

    var peek: QueryToken { tokens[position] }

    mutating func advance() -> QueryToken {
        let token = tokens[position]
        if token.kind != .end { position += 1 }
        return token
    }

    /// The token as written, for messages.
    func describe(_ token: QueryToken) -> String {
        if token.kind == .end { return "end of the query" }
        let text = String(decoding: bytes[token.offset..<(token.offset + min(token.length, 40))], as: UTF8.self)
        return "'\(text)'"
    }

    /// Counts a comparison; past `maxPredicates`, fails at it (checked as it is read, so a query
    /// of thousands of alternatives is refused before any of them is compiled or run).
    private mutating func count(_ attribute: QueryAttribute, at token: QueryToken) throws(SearchlightError) {
        cost += QueryCost.of(attribute)
        guard parser.predicatesBefore + cost > parser.maxPredicates else { return }
        throw QueryParser.error(
            "too many comparisons in \(parser.predicateScope): more than \(parser.maxPredicates) (each '*' counts \(QueryCost.anyText): "
                + "one per attribute it searches); every comparison is checked on each item searched, so use fewer: "
                + "one pattern instead of many alternatives (\"*rep*\"cd), a word query the full-text index answers "
                + "(title == \"report*\"cdw), or several calls", at: token.offset)
    }

    private func checkDepth(_ depth: Int, at token: QueryToken) throws(SearchlightError) {
        if depth > parser.maxDepth {
            throw QueryParser.error("the query nests deeper than \(parser.maxDepth) levels; simplify it", at: token.offset)
        }
    }

    mutating func parseOr(depth: Int) throws(SearchlightError) -> QueryExpr {
        var operands = [try parseAnd(depth: depth)]
        while peek.kind == .or {
            _ = advance()
            operands.append(try parseAnd(depth: depth))
        }
        return operands.count == 1 ? operands[0] : .or(operands)
    }

    mutating func parseAnd(depth: Int) throws(SearchlightError) -> QueryExpr {
        var operands = [try parseUnary(depth: depth)]
        while peek.kind == .and {
            _ = advance()
            operands.append(try parseUnary(depth: depth))
        }
        return operands.count == 1 ? operands[0] : .and(operands)
    }

    mutating func parseUnary(depth: Int) throws(SearchlightError) -> QueryExpr {
        if peek.kind == .not {
            try checkDepth(depth + 1, at: peek)
            _ = advance()
            return .not(try parseUnary(depth: depth + 1))
        }
        return try parsePrimary(depth: depth)
    }

    mutating func parsePrimary(depth: Int) throws(SearchlightError) -> QueryExpr {
        let token = peek
        switch token.kind {
        case .leftParen:
            try checkDepth(depth + 1, at: token)
            _ = advance()
            let inner = try parseOr(depth: depth + 1)
            guard peek.kind == .rightParen else {
                throw QueryParser.error(
                    "expected ')' to close the '(' at byte \(token.offset), found \(describe(peek))", at: peek.offset)
            }
            _ = advance()
            return inner
        case .identifier("InRange") where tokens[position + 1].kind == .leftParen:
            return try parseInRange()
        case .identifier, .star:
            return try parseComparison()
        default:
            throw QueryParser.error(
                "expected an attribute name, '(' or '!' but found \(describe(token))", at: token.offset)
        }
    }

    private mutating func parseComparison() throws(SearchlightError) -> QueryExpr {
        let attrToken = advance()
        let attribute = try resolveAttribute(attrToken)
        try count(attribute, at: attrToken)
        let opToken = advance()
        guard case .op(let op) = opToken.kind else {
            throw QueryParser.error(
                "expected a comparison operator (==, !=, <, >, <=, >=) after \(describe(attrToken)), found \(describe(opToken))",
                at: opToken.offset)
        }
        if attribute == .anyText, op != .equal, op != .notEqual {
            throw QueryParser.error("the '*' attribute supports only == and !=", at: opToken.offset)
        }
        let valueToken = advance()
        let value = try parseValue(valueToken, after: "'\(op.rawValue)'")
        return .comparison(attribute, op, try typed(value, for: attribute, at: valueToken))
    }

    private mutating func parseInRange() throws(SearchlightError) -> QueryExpr {
        _ = advance()  // InRange
        _ = advance()  // (
        let attrToken = advance()
        guard attrToken.kind != .star, case .identifier = attrToken.kind else {
            throw QueryParser.error(
                "expected an attribute name as the first argument of InRange, found \(describe(attrToken))",
                at: attrToken.offset)
        }
        let attribute = try resolveAttribute(attrToken)
        try count(attribute, at: attrToken)
        try expect(.comma, "',' after the attribute of InRange")
        let lowToken = advance()
        let low = try typed(try parseValue(lowToken, after: "',' in InRange"), for: attribute, at: lowToken)
        try expect(.comma, "',' between the bounds of InRange")
        let highToken = advance()
        let high = try typed(try parseValue(highToken, after: "',' in InRange"), for: attribute, at: highToken)
        try expect(.rightParen, "')' to close InRange")
        if case .string = low, case .string = high {
        } else if case .string = low {
            throw QueryParser.error("the bounds of InRange must have the same type", at: highToken.offset)
        } else if case .string = high {
            throw QueryParser.error("the bounds of InRange must have the same type", at: highToken.offset)
        }
        return .inRange(attribute, low, high)
    }

    private mutating func expect(_ kind: QueryTokenKind, _ what: String) throws(SearchlightError) {
        let token = advance()
        guard token.kind == kind else {
            throw QueryParser.error("expected \(what), found \(describe(token))", at: token.offset)
        }
    }

    private func parseValue(_ token: QueryToken, after what: String) throws(SearchlightError) -> QueryValue {
        switch token.kind {
        case .string(let s): return .string(s)
        case .number(let n): return .number(n)
        case .identifier("true"): return .bool(true)
        case .identifier("false"): return .bool(false)
        case .time(let form, let argument, let argumentOffset):
            return .date(try resolveTime(form: form, argument: argument, argumentOffset: argumentOffset, token: token))
        default:
            throw QueryParser.error(
                "expected a quoted string or value after \(what), found \(describe(token))", at: token.offset)
        }
    }

    private func resolveTime(form name: String, argument: String?, argumentOffset: Int, token: QueryToken)
        throws(SearchlightError) -> Date
    {
        guard let form = QueryTime.Form(rawValue: name) else {
            throw QueryParser.error(
                "unknown time value '$time.\(name)': use $time.now, today, yesterday, this_week, this_month, this_year or iso",
                at: token.offset)
        }
        let trimmed = argument?.trimmingCharacters(in: .whitespaces)
        if form == .iso {
            guard let trimmed, let date = QueryTime.iso(trimmed) else {
                throw QueryParser.error(
                    "expected an ISO 8601 date such as $time.iso(2024-01-01T00:00:00Z)", at: argumentOffset)
            }
            return date
        }
        var count = 0.0
        if let trimmed, !trimmed.isEmpty {
            if form == .yesterday {
                throw QueryParser.error("$time.yesterday takes no count; use $time.today(-n)", at: argumentOffset)
            }
            let text = trimmed.hasPrefix("+") ? String(trimmed.dropFirst()) : trimmed
            let body = text.hasPrefix("-") ? text.dropFirst() : Substring(text)
            let isInteger = !body.isEmpty && body.allSatisfy(\.isASCIIDigit)
            let isDecimal = body.first?.isASCIIDigit == true && body.allSatisfy { $0.isASCIIDigit || $0 == "." }
            guard let value = Double(text), value.isFinite, isInteger || (form == .now && isDecimal) else {
                let unit = form == .now ? "seconds" : "whole periods"
                throw QueryParser.error("expected a number of \(unit) in $time.\(name)(…)", at: argumentOffset)
            }
            guard abs(value) <= 1e12, form == .now || abs(value) <= 100_000 else {
                throw QueryParser.error("the count of $time.\(name)(…) is out of range", at: argumentOffset)
            }
            count = value
        }
        guard let date = parser.time.resolve(form, count: count) else {
            throw QueryParser.error("cannot compute $time.\(name) in the current calendar", at: token.offset)
        }
        return date
    }

    private func resolveAttribute(_ token: QueryToken) throws(SearchlightError) -> QueryAttribute {
        guard case .identifier(let name) = token.kind else { return .anyText }
        if name.hasPrefix("custom.") {
            let custom = String(name.dropFirst("custom.".count))
            guard AttributeCatalog.isValidCustomName(custom) else {
                throw QueryParser.error(
                    "invalid custom attribute name '\(custom)': use 1 to 128 letters, digits and '_'", at: token.offset)
            }
            return .custom(custom)
        }
        let canonical = AttributeCatalog.aliases[name] ?? name
        if let kind = AttributeCatalog.kinds[canonical] { return .catalog(canonical, kind) }
        switch name {
        case "uniqueIdentifier": return .uniqueIdentifier
        case "domainIdentifier": return .domainIdentifier
        case "expirationDate": return .expirationDate
        default: break
        }
        if name.hasPrefix("kMDItem") {
            throw QueryParser.error(
                "unknown Spotlight attribute '\(name)'; write custom.\(name) for a custom attribute of that name",
                at: token.offset)
        }
        guard AttributeCatalog.isValidCustomName(name) else {
            throw QueryParser.error("unknown attribute '\(name)'", at: token.offset)
        }
        return .custom(name)
    }

    /// Checks a value against the attribute's kind, converting dates written as strings or numbers.
    private func typed(_ value: QueryValue, for attribute: QueryAttribute, at token: QueryToken)
        throws(SearchlightError) -> QueryValue
    {
        enum Want { case string, date, number, bool, any }
        let want: Want
        switch attribute {
        case .anyText, .uniqueIdentifier, .domainIdentifier: want = .string
        case .expirationDate: want = .date
        case .custom: want = .any
        case .catalog(let name, let kind):
            switch kind {
            case .text, .textArray, .string, .stringArray: want = .string
            case .date: want = .date
            case .number: want = .number
            case .bool: want = .bool
            case .data:
                throw QueryParser.error("the attribute '\(name)' holds binary data and cannot be searched", at: token.offset)
            }
        }
        switch (want, value) {
        case (.any, _), (.string, .string), (.date, .date), (.number, .number), (.bool, .bool), (.bool, .number):
            return value
        case (.date, .number(let seconds)):
            return .date(Date(timeIntervalSince1970: seconds))
        case (.date, .string(let s)):
            guard !s.hasWildcard, let date = ISO8601.parse(s.literal) else {
                throw QueryParser.error(
                    "expected an ISO 8601 date such as \"2024-01-01T00:00:00Z\" for '\(attribute.name)'", at: token.offset)
            }
            return .date(date)
        case (.string, _):
            throw QueryParser.error("the attribute '\(attribute.name)' takes a quoted string", at: token.offset)
        case (.date, _):
            throw QueryParser.error(
                "the attribute '\(attribute.name)' takes a date: a quoted ISO 8601 string, $time.… or Unix seconds",
                at: token.offset)
        case (.number, _):
            throw QueryParser.error("the attribute '\(attribute.name)' takes a number", at: token.offset)
        case (.bool, _):
            throw QueryParser.error("the attribute '\(attribute.name)' takes true or false", at: token.offset)
        }
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
