import Foundation
import SearchlightWire

/// Turns `query.search` text and filter queries into one SQL filter: parse (with the limits),
/// then compile their AND (`QueryCompiler.plan(all:)`), full-text driver included.
public enum QueryFront {
    /// `query` nil means "filter queries only" (user queries). An error in a filter query says which.
    /// The limits bound the work as well as the bytes: at most `maxFilterQueries` filter queries,
    /// and `maxQueryPredicates` weighted comparisons in the query and its filter queries together.
    public static func filter(query: String?, filterQueries: [String] = [], limits: Limits, now: Date) throws(SearchlightError) -> SQLFilter {
        guard filterQueries.count <= limits.maxFilterQueries else {
            throw SearchlightError(.invalidQuery,
                "filterQueries has \(filterQueries.count) entries; at most \(limits.maxFilterQueries) are allowed: join conditions "
                    + "with && in fewer filter queries", data: ["filterQueries": .number(Double(filterQueries.count)),
                    "limit": .number(Double(limits.maxFilterQueries))])
        }
        var parser = QueryParser(now: now, maxBytes: limits.maxQueryBytes, maxDepth: limits.maxQueryDepth, maxPredicates: limits.maxQueryPredicates)
        if !filterQueries.isEmpty { parser.predicateScope = query == nil ? "the filter queries together" : "the query and its filter queries together" }
        var expressions: [QueryExpr] = []
        let texts = (query.map { [(nil as Int?, $0)] } ?? []) + filterQueries.enumerated().map { (Optional($0), $1) }
        for (position, text) in texts {
            do {
                let parsed = try parser.parseCounting(text)
                expressions.append(parsed.expr)
                parser.predicatesBefore += parsed.cost
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
