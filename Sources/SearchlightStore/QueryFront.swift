import Foundation
import SearchlightWire

/// Turns `query.search` text and filter queries into one SQL filter: parse (with the limits),
/// then compile their AND (`QueryCompiler.plan(all:)`), full-text driver included.
public enum QueryFront {
    /// `query` nil means "filter queries only" (user queries). An error in a filter query says which.
    public static func filter(query: String?, filterQueries: [String] = [], limits: Limits, now: Date) throws(SearchlightError) -> SQLFilter {
        let parser = QueryParser(now: now, maxBytes: limits.maxQueryBytes, maxDepth: limits.maxQueryDepth)
        var expressions: [QueryExpr] = []
        let texts = (query.map { [(nil as Int?, $0)] } ?? []) + filterQueries.enumerated().map { (Optional($0), $1) }
        for (position, text) in texts {
            do {
                expressions.append(try parser.parse(text))
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
        return QueryCompiler.plan(all: expressions)
    }
}
