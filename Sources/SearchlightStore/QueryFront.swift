import Foundation
import SearchlightWire

/// Turns `query.search` text and filter queries into one SQL filter: parse (with the limits),
/// compile, and AND them together.
public enum QueryFront {
    /// `query` nil means "filter queries only" (user queries). An error in a filter query says which.
    public static func filter(query: String?, filterQueries: [String] = [], limits: Limits, now: Date) throws(SearchlightError) -> SQLFilter {
        let parser = QueryParser(now: now, maxBytes: limits.maxQueryBytes, maxDepth: limits.maxQueryDepth)
        var sql: [String] = []
        var bindings: [SQLValue] = []
        let texts = (query.map { [(nil as Int?, $0)] } ?? []) + filterQueries.enumerated().map { (Optional($0), $1) }
        for (position, text) in texts {
            do {
                let compiled = QueryCompiler.compile(try parser.parse(text))
                sql.append("(\(compiled.sql))")
                bindings += compiled.bindings
            } catch {
                guard let position else { throw error }
                throw SearchlightError(rawCode: error.rawCode, message: "filterQueries[\(position)]: \(error.message)",
                    data: error.data.map { data in
                        guard case .object(var o) = data else { return data }
                        o["filterQuery"] = .number(Double(position))
                        return .object(o)
                    })
            }
        }
        return sql.isEmpty ? .all : SQLFilter(sql: sql.joined(separator: " AND "), bindings: bindings)
    }
}
