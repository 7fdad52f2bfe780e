import Foundation
import SearchlightWire

/// Compiles a `QueryExpr` into a boolean SQL expression over the table `items` (columns written
/// `items.col`) with its bound values, for use as `SELECT … FROM items WHERE (<sql>) AND …`.
///
/// Word and prefix predicates on full-text attributes are answered by the FTS5 index: the
/// expression is `items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?)`, a superset (the
/// index folds case and diacritics), AND an exact residual check (`sl_match`). Predicates the
/// index cannot answer (infix and suffix wildcards on Latin text, negations, other attributes)
/// are residual checks only and scan. No user text is ever written into the SQL: every string,
/// number and JSON path is a bound parameter.
///
/// `plan` goes further: when every result must match some full-text expression (the *driver*),
/// the search walks the FTS5 table in rowid order and stops at the page limit, instead of
/// materializing every match of each prefilter first.
public struct QueryCompiler: Sendable {
    public init() {}

    /// The SQL expression and its bindings, in the order of the `?` placeholders.
    public static func compile(_ expr: QueryExpr) -> (sql: String, bindings: [SQLValue]) {
        QueryCompiler().compile(expr)
    }

    /// `prefilters: false` leaves out the `IN (SELECT … fts MATCH …)` prefilters. The result is
    /// still the exact condition, because each prefilter is implied by the exact check beside it
    /// (the index finds a superset); only the speed changes.
    public func compile(_ expr: QueryExpr, prefilters: Bool = true) -> (sql: String, bindings: [SQLValue]) {
        var builder = SQLBuilder(prefilters: prefilters)
        let sql = builder.expression(expr, positive: true)
        return (sql, builder.bindings)
    }

    /// The filter for `expr`: with a driver, the driver as `ftsMatch` and the exact condition
    /// without prefilters as `sql`; without one, the prefiltered condition.
    public static func plan(_ expr: QueryExpr) -> SQLFilter {
        plan(all: [expr])
    }

    /// The filter for the AND of `exprs` (a query and its filter queries); their drivers AND
    /// together, so one with a driver drives the others too. Empty: every item.
    public static func plan(all exprs: [QueryExpr]) -> SQLFilter {
        if exprs.isEmpty { return .all }
        let perExpression = exprs.map(driver(for:))
        let drivers = perExpression.compactMap { $0 }
        let driver = drivers.isEmpty ? nil : ftsJoined(drivers, "AND")
        var sql: [String] = []
        var bindings: [SQLValue] = []
        for expr in exprs {
            // Under a driver, prefilters would only materialize matches the walk does not need.
            let compiled = QueryCompiler().compile(expr, prefilters: driver == nil)
            sql.append(compiled.sql)
            bindings += compiled.bindings
        }
        // Balanced like the operands of one query: a flat chain of a thousand filter queries
        // was deeper than SQLite's expression limit ("Expression tree is too large").
        var filter = SQLFilter(sql: balanced(sql, "AND"), bindings: bindings, ftsMatch: driver)
        // One term drives alone: the ranked index can walk its documents (`RankedPageWalk`).
        if drivers.count == 1, let i = perExpression.firstIndex(where: { $0 != nil }),
           let term = driverTerm(for: exprs[i]), term.ftsQuery == driver {
            filter.driverTerm = term
        }
        return filter
    }

    /// The driver of `expr` as one structured term, when it is one (`title == "pars*"cdw`:
    /// `title : "pars" *`): a word, whole or a prefix, in one text column; nil for anything else
    /// (several words, CJK, `t`, `*`, an `&&` or `||`), which keeps FTS5 as the driver.
    static func driverTerm(for expr: QueryExpr) -> FullTextTerm? {
        let name: String, pattern: QueryString
        switch expr {
        case .comparison(.catalog(let n, .text), .equal, .string(let s)), .comparison(.catalog(let n, .textArray), .equal, .string(let s)):
            (name, pattern) = (n, s)
        default:
            return nil
        }
        guard let column = indexedColumn(name), !pattern.modifiers.contains(.tokenized) else { return nil }
        for part in pattern.parts {
            if case .text(let text) = part, !TextAnalysis.cjkRuns(text).isEmpty { return nil }
        }
        let terms = wordTermList(pattern.parts)
        guard terms.count == 1 else { return nil }
        return FullTextTerm(column: column, word: terms[0].word, prefix: terms[0].prefix)
    }

    /// Joins operands as a balanced tree, so that thousands of operands stay far below
    /// SQLite's expression depth limit (1000). Each operand is parenthesized.
    static func balanced(_ parts: [String], _ op: String) -> String {
        if parts.count == 1 { return parts[0] }
        let mid = parts.count / 2
        return "(\(balanced(Array(parts[..<mid]), op))) \(op) (\(balanced(Array(parts[mid...]), op)))"
    }

    /// The FTS5 expression every item matching `expr` matches, or nil when there is none: a
    /// predicate's prefilter; for `&&` the AND of the operands' drivers (those that have one);
    /// for `||` the OR of all operands' drivers, only if every operand has one. `!`, `!=` and
    /// `*` (its custom-attribute half is not in the index) have none.
    public static func driver(for expr: QueryExpr) -> String? {
        switch expr {
        case .and(let operands):
            let drivers = operands.compactMap(driver(for:))
            return drivers.isEmpty ? nil : ftsJoined(drivers, "AND")
        case .or(let operands):
            var drivers: [String] = []
            for operand in operands {
                guard let d = driver(for: operand) else { return nil }
                drivers.append(d)
            }
            return ftsJoined(drivers, "OR")
        case .comparison(.catalog(let name, .text), .equal, .string(let s)),
            .comparison(.catalog(let name, .textArray), .equal, .string(let s)):
            return indexedColumn(name) != nil ? ftsQuery(for: s, column: name) : nil
        default:
            return nil
        }
    }

    /// Operands joined flat (FTS5 flattens runs of one operator, so width is no problem).
    static func ftsJoined(_ operands: [String], _ op: String) -> String {
        operands.count == 1 ? operands[0] : operands.map { "(\($0))" }.joined(separator: " \(op) ")
    }

    /// The FTS column of a full-text attribute, from the schema's own list (never caller text).
    static func indexedColumn(_ name: String) -> String? {
        Schema.ftsColumns.first { $0 == name && $0 != "aux" }
    }

    /// The FTS5 query that prefilters `pattern` on `column` (nil: every column), or nil when no
    /// term of the pattern can be answered by the index.
    public static func ftsQuery(for pattern: QueryString, column: String?) -> String? {
        var terms: [String] = []
        func add(_ term: String) { if !terms.contains(term) { terms.append(term) } }
        let parts = pattern.parts
        for part in parts {
            guard case .text(let text) = part else { continue }
            // A CJK run is contiguous in the value whatever the modifiers: find it in the bigram column.
            for run in TextAnalysis.cjkRuns(text) { add("aux : " + TextAnalysis.cjkFTSPhrase(run)) }
        }
        if pattern.modifiers.contains(.tokenized) {
            tokenizedTerms(parts, column: column).forEach(add)
        } else {
            wordTerms(parts, column: column).forEach(add)
        }
        return terms.isEmpty ? nil : terms.joined(separator: " AND ")
    }

    /// The Latin words of a pattern as indexed terms: a word not preceded by `*` is a term, a
    /// prefix term when `*` follows it.
    private static func wordTerms(_ parts: [TextPattern.Part], column: String?) -> [String] {
        // A token holds no quote (not a token character), so quoting it is wrapping it.
        let head = column.map { $0 + " : \"" } ?? "\""
        return wordTermList(parts).map { term in head + term.word + (term.prefix ? "\" *" : "\"") }
    }

    /// `wordTerms`' words, unquoted, and whether each is a prefix. `ascii: false` takes the
    /// general path for ASCII texts too (tests compare the two).
    static func wordTermList(_ parts: [TextPattern.Part], ascii: Bool = true) -> [(word: String, prefix: Bool)] {
        var terms: [(word: String, prefix: Bool)] = []
        for (index, part) in parts.enumerated() {
            guard case .text(let text) = part else { continue }
            let precededByWildcard = index > 0
            let followedByWildcard = index < parts.count - 1
            if ascii, asciiWordTerms(text, precededByWildcard: precededByWildcard, followedByWildcard: followedByWildcard, into: &terms) {
                continue
            }
            let scalars = Array(text.unicodeScalars)
            for range in TextAnalysis.tokens(scalars) {
                let token = scalars[range]
                guard isLatinTerm(token) else { continue }
                if range.lowerBound == 0 && precededByWildcard { continue }  // infix or suffix: unanswerable
                var view = String.UnicodeScalarView()
                view.append(contentsOf: token)
                terms.append((String(view), range.upperBound == scalars.count && followedByWildcard))
            }
        }
        return terms
    }

    /// `wordTermList` for one ASCII text (false, nothing added, when it is not ASCII): its tokens
    /// are its runs of letters and digits, each a Latin term, read from the UTF-8 bytes without
    /// the scalar array and the general-category lookups of the general path (a user query's
    /// words are compiled on every keystroke).
    private static func asciiWordTerms(_ text: String, precededByWildcard: Bool, followedByWildcard: Bool,
                                       into terms: inout [(word: String, prefix: Bool)]) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            guard TextPattern.isASCII(bytes) else { return false }
            func isToken(_ b: UInt8) -> Bool { b &- 0x30 < 10 || (b | 0x20) &- 0x61 < 26 }
            var i = 0
            while i < bytes.count {
                guard isToken(bytes[i]) else {
                    i += 1
                    continue
                }
                let start = i
                while i < bytes.count, isToken(bytes[i]) { i += 1 }
                if start == 0 && precededByWildcard { continue }  // infix or suffix: unanswerable
                terms.append((String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self),
                              i == bytes.count && followedByWildcard))
            }
            return true
        }
    }

    /// The terms of a `t` pattern. A value matches if the pattern's words match its words, or the
    /// pattern's split words match its split words. A split word of the value is a whole word
    /// (in `column`) or a piece of a compound word (in the auxiliary column `aux`, where the
    /// writer puts them), so a pattern word that does not split is a term over `{column aux}`;
    /// one that does is `column : word OR ({column aux} : piece AND …)`.
    private static func tokenizedTerms(_ parts: [TextPattern.Part], column: String?) -> [String] {
        let whole = column.map { "\($0) : " } ?? ""
        let split = column.map { "{\($0) aux} : " } ?? ""
        var terms: [String] = []
        for word in TextPattern.patternWords(parts) {
            let pieces = TextPattern.splitWord(word)
            let pieceTerms = pieces.compactMap(wordTerm).map { split + $0 }
            if pieces.count == 1 {
                terms += pieceTerms
            } else if let plain = wordTerm(word), !pieceTerms.isEmpty {
                terms.append("(\(whole + plain) OR (\(pieceTerms.joined(separator: " AND "))))")
            }
        }
        return terms
    }

    /// The term for one pattern word (text and wildcards, as `TextPattern.patternWords` gives):
    /// its leading text, a prefix term when a wildcard follows; nil when it starts with a wildcard.
    private static func wordTerm(_ word: [TextPattern.Part]) -> String? {
        guard case .text(let text) = word.first, isLatinTerm(Array(text.unicodeScalars)[...]) else { return nil }
        return TextAnalysis.ftsQuoted(text) + (word.count > 1 ? " *" : "")
    }

    /// Whether a token can be looked up as a Latin term: no CJK (found through bigrams instead)
    /// and not only combining marks (which the index drops).
    private static func isLatinTerm(_ token: ArraySlice<Unicode.Scalar>) -> Bool {
        !token.contains(where: TextAnalysis.isCJK) && token.contains { $0.properties.generalCategory != .nonspacingMark }
    }
}

/// Accumulates SQL text and bindings; `?` placeholders are appended in text order.
private struct SQLBuilder {
    /// Whether to emit the `IN (SELECT … fts MATCH …)` prefilters (not needed under a driver).
    let prefilters: Bool
    var bindings: [SQLValue] = []

    mutating func bind(_ value: SQLValue) -> String {
        bindings.append(value)
        return "?"
    }

    mutating func expression(_ expr: QueryExpr, positive: Bool) -> String {
        switch expr {
        case .and(let operands):
            return balanced(operands.map { expression($0, positive: positive) }, "AND")
        case .or(let operands):
            return balanced(operands.map { expression($0, positive: positive) }, "OR")
        case .not(let inner):
            return "NOT (\(expression(inner, positive: !positive)))"
        case .comparison(let attribute, .equal, let value):
            return equal(attribute, value, prefilter: positive)
        case .comparison(let attribute, .notEqual, let value):
            // A missing attribute is "not equal": NOT EXISTS / NOT sl_match(NULL) are true.
            return "NOT (\(equal(attribute, value, prefilter: !positive)))"
        case .comparison(let attribute, let op, let value):
            return order(attribute, op, value)
        case .inRange(let attribute, let low, let high):
            return range(attribute, low, high)
        }
    }

    private func balanced(_ parts: [String], _ op: String) -> String { QueryCompiler.balanced(parts, op) }

    // MARK: Equality

    private mutating func equal(_ attribute: QueryAttribute, _ value: QueryValue, prefilter: Bool) -> String {
        switch (attribute, value) {
        case (.anyText, .string(let s)):
            var sql = ""
            if prefilter, prefilters, let fts = QueryCompiler.ftsQuery(for: s, column: nil) {
                sql = "items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH \(bind(.text(fts)))) AND "
            }
            var columns: [String] = []
            for name in AttributeCatalog.textAttributes { columns.append("sl_match(\(ftsColumn(name)), \(pattern(s)))") }
            let custom = "EXISTS (SELECT 1 FROM json_tree(items.attrs, '$.custom') WHERE type = 'text' AND sl_match(value, \(pattern(s))))"
            return "(\(sql)(\(columns.joined(separator: " OR ")))) OR \(custom)"
        case (.catalog(let name, .text), .string(let s)), (.catalog(let name, .textArray), .string(let s)):
            let column = ftsColumn(name)
            var sql = ""
            if prefilter, prefilters, column != "NULL", let fts = QueryCompiler.ftsQuery(for: s, column: name) {
                sql = "items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH \(bind(.text(fts)))) AND "
            }
            return sql + "sl_match(\(column), \(pattern(s)))"
        case (.uniqueIdentifier, .string(let s)), (.domainIdentifier, .string(let s)):
            let column = attribute == .uniqueIdentifier ? "items.uid" : "items.domain"
            if !s.hasWildcard && s.modifiers.isEmpty { return "\(column) IS \(bind(.text(s.literal)))" }
            return "sl_match(\(column), \(pattern(s)))"
        case (.expirationDate, _):
            return "items.expires = \(bind(number(value)))"
        case (.catalog(let name, _), .string(let s)):
            return jsonString(path: "$.\"\(name)\"", s)
        case (.custom(let name), .string(let s)):
            return customString(name, s, textCondition: { $0.stringEquals(s) }, dateOp: "=")
        case (.catalog(let name, let kind), _):
            return jsonNumber(path: "$.\"\(name)\"", "=", value, boolAttribute: kind == .bool)
        case (.custom(let name), _):
            return jsonNumber(path: customPath(name), "=", value, boolAttribute: false)
        case (.anyText, _), (.uniqueIdentifier, _), (.domainIdentifier, _):
            return "0"  // the parser never builds these
        }
    }

    // MARK: Ordering

    private mutating func order(_ attribute: QueryAttribute, _ op: QueryOperator, _ value: QueryValue) -> String {
        let sqlOp = op.rawValue
        switch (attribute, value) {
        case (.catalog(let name, .text), .string(let s)), (.catalog(let name, .textArray), .string(let s)):
            return "sl_compare(\(ftsColumn(name)), \(bind(.text(sqlOp))), \(literal(s)))"
        case (.uniqueIdentifier, .string(let s)), (.domainIdentifier, .string(let s)):
            let column = attribute == .uniqueIdentifier ? "items.uid" : "items.domain"
            return "sl_compare(\(column), \(bind(.text(sqlOp))), \(literal(s)))"
        case (.expirationDate, _):
            return "items.expires \(sqlOp) \(bind(number(value)))"
        case (.catalog(let name, _), .string(let s)):
            return "EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text("$.\"\(name)\"")))) WHERE type = 'text' AND "
                + "sl_compare(value, \(bind(.text(sqlOp))), \(literal(s))))"
        case (.custom(let name), .string(let s)):
            return customString(
                name, s, textCondition: { "sl_compare(value, \($0.bind(.text(sqlOp))), \($0.literal(s)))" }, dateOp: sqlOp)
        case (.catalog(let name, let kind), _):
            return jsonNumber(path: "$.\"\(name)\"", sqlOp, value, boolAttribute: kind == .bool)
        case (.custom(let name), _):
            return jsonNumber(path: customPath(name), sqlOp, value, boolAttribute: false)
        case (.anyText, _), (.uniqueIdentifier, _), (.domainIdentifier, _):
            return "0"
        }
    }

    private mutating func range(_ attribute: QueryAttribute, _ low: QueryValue, _ high: QueryValue) -> String {
        if case .string(let lo) = low, case .string(let hi) = high {
            let modifiers = lo.modifiers.union(hi.modifiers).letters
            func args(_ b: inout SQLBuilder) -> String {
                "\(b.bind(.text(lo.literal))), \(b.bind(.text(hi.literal))), \(b.bind(.text(modifiers)))"
            }
            switch attribute {
            case .catalog(let name, .text), .catalog(let name, .textArray):
                return "sl_range(\(ftsColumn(name)), \(args(&self)))"
            case .uniqueIdentifier, .domainIdentifier:
                let column = attribute == .uniqueIdentifier ? "items.uid" : "items.domain"
                return "sl_range(\(column), \(args(&self)))"
            case .catalog(let name, _):
                return "EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text("$.\"\(name)\"")))) WHERE type = 'text' AND "
                    + "sl_range(value, \(args(&self))))"
            case .custom(let name):
                var sql = "(EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text(customPath(name))))) WHERE type = 'text' AND "
                    + "sl_range(value, \(args(&self)))))"
                if let a = ISO8601.parse(lo.literal), let b = ISO8601.parse(hi.literal) {
                    sql += " OR (\(customIsDate(name)) AND \(jsonNumberRange(customPath(name), .date(a), .date(b), false)))"
                }
                return sql
            case .anyText, .expirationDate:
                return "0"
            }
        }
        switch attribute {
        case .expirationDate:
            return "items.expires BETWEEN \(bind(number(low))) AND \(bind(number(high)))"
        case .catalog(let name, let kind):
            return jsonNumberRange("$.\"\(name)\"", low, high, kind == .bool)
        case .custom(let name):
            return jsonNumberRange(customPath(name), low, high, false)
        case .anyText, .uniqueIdentifier, .domainIdentifier:
            return "0"
        }
    }

    // MARK: Pieces

    /// `?, ?`: a pattern and its modifiers, for `sl_match`.
    mutating func pattern(_ s: QueryString) -> String {
        "\(bind(.text(s.pattern))), \(bind(.text(s.modifiers.letters)))"
    }

    /// `?, ?`: a literal and its modifiers, for `sl_compare`.
    mutating func literal(_ s: QueryString) -> String {
        "\(bind(.text(s.literal))), \(bind(.text(s.modifiers.letters)))"
    }

    /// The condition on a JSON text `value` for `==`.
    mutating func stringEquals(_ s: QueryString) -> String {
        if !s.hasWildcard && s.modifiers.isEmpty { return "value = \(bind(.text(s.literal)))" }
        return "sl_match(value, \(pattern(s)))"
    }

    private mutating func jsonString(path: String, _ s: QueryString) -> String {
        "EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text(path)))) WHERE type = 'text' AND \(stringEquals(s)))"
    }

    /// A custom attribute compared with a string: its text values, or, when the string is an
    /// ISO 8601 date and the attribute holds dates (listed in `customDates`), its date values.
    private mutating func customString(
        _ name: String, _ s: QueryString, textCondition: (inout SQLBuilder) -> String, dateOp: String
    ) -> String {
        let path = customPath(name)
        var sql = "(EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text(path)))) WHERE type = 'text' AND "
            + "\(textCondition(&self))))"
        if !s.hasWildcard, let date = ISO8601.parse(s.literal) {
            sql += " OR (\(customIsDate(name)) AND \(jsonNumber(path: path, dateOp, .date(date), boolAttribute: false)))"
        }
        return sql
    }

    private mutating func customIsDate(_ name: String) -> String {
        "EXISTS (SELECT 1 FROM json_each(items.attrs, '$.customDates') WHERE value = \(bind(.text(name))))"
    }

    private mutating func jsonNumber(path: String, _ op: String, _ value: QueryValue, boolAttribute: Bool) -> String {
        "EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text(path)))) WHERE \(typeCondition(value, boolAttribute)) "
            + "AND value \(op) \(bind(number(value))))"
    }

    private mutating func jsonNumberRange(_ path: String, _ low: QueryValue, _ high: QueryValue, _ boolAttribute: Bool)
        -> String
    {
        "EXISTS (SELECT 1 FROM json_each(items.attrs, \(bind(.text(path)))) WHERE \(typeCondition(low, boolAttribute)) "
            + "AND value >= \(bind(number(low))) AND value <= \(bind(number(high))))"
    }

    private func typeCondition(_ value: QueryValue, _ boolAttribute: Bool) -> String {
        if case .bool = value { return "type IN ('true', 'false')" }
        return boolAttribute ? "type IN ('true', 'false')" : "type IN ('integer', 'real')"
    }

    private func number(_ value: QueryValue) -> SQLValue {
        switch value {
        case .number(let n): .double(n)
        case .date(let d): .double(d.timeIntervalSince1970)
        case .bool(let b): .integer(b ? 1 : 0)
        case .string: .null
        }
    }

    private func customPath(_ name: String) -> String { "$.\"custom\".\"\(name)\"" }

    /// The column name from the schema's own list, so the SQL never contains caller text.
    private func ftsColumn(_ name: String) -> String {
        QueryCompiler.indexedColumn(name).map { "items.\($0)" } ?? "NULL"
    }
}
