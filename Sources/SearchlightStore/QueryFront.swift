import Foundation
import SearchlightWire
import Synchronization

/// Turns `query.search` text and filter queries into one SQL filter: parse (with the limits),
/// then compile their AND (`QueryCompiler.plan(all:)`), full-text driver included.
public enum QueryFront {
    /// `query` nil means "filter queries only" (user queries). An error in a filter query says which.
    /// The limits bound the work as well as the bytes: at most `maxFilterQueries` filter queries,
    /// and `maxQueryPredicates` weighted comparisons in the query and its filter queries together.
    ///
    /// `cacheScope`: whose cache entries the call may use and fill (the daemon passes the
    /// caller's uid); nil compiles without the cache. Kept per uid, a hit (faster by the compile)
    /// never tells one user which texts another searched for lately.
    public static func filter(query: String?, filterQueries: [String] = [], limits: Limits, now: Date,
                              cacheScope: UInt32? = nil) throws(SearchlightError) -> SQLFilter {
        // A text without `$` never reads the clock or the calendar (only `$time.…` does), so its
        // filter is the same at every call: kept by its text (and the limits it was checked
        // against), the parse and compile are done once (33 k instructions of a term page).
        let key = cacheScope.flatMap { FilterCache.Key(scope: $0, query: query, filterQueries: filterQueries, limits: limits) }
        if let key, let known = filterCache.withLock({ $0.filter(key) }) { return known }
        let filter = try compile(query: query, filterQueries: filterQueries, limits: limits, now: now)
        if let key { filterCache.withLock { $0.store(filter, key) } }
        return filter
    }

    /// Filters of recent texts (`filter`), shared by every connection.
    static let filterCache = Mutex(FilterCache())

    static func compile(query: String?, filterQueries: [String], limits: Limits, now: Date) throws(SearchlightError) -> SQLFilter {
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

/// `QueryFront.filter`'s results by text, bounded by the bytes of text held (a client sending
/// ever new queries makes it start over, costing what a miss costs). Errors are not kept.
struct FilterCache {
    struct Key: Hashable {
        /// The uid whose calls made the entry (`QueryFront.filter`'s `cacheScope`).
        var scope: UInt32
        var query: String?
        var filterQueries: [String]
        /// The limits the parse checks the text against (a daemon's are fixed; tests vary them).
        var bounds: [Int]

        /// Nil when a text may depend on the clock (`$time.…`): not cached.
        init?(scope: UInt32, query: String?, filterQueries: [String], limits: Limits) {
            let dollar = UInt8(ascii: "$")
            if let query, query.utf8.contains(dollar) { return nil }
            if filterQueries.contains(where: { $0.utf8.contains(dollar) }) { return nil }
            self.scope = scope
            self.query = query
            self.filterQueries = filterQueries
            bounds = [limits.maxFilterQueries, limits.maxQueryBytes, limits.maxQueryDepth, limits.maxQueryPredicates]
        }

        var bytes: Int { (query?.utf8.count ?? 0) + filterQueries.reduce(0) { $0 + $1.utf8.count + 16 } + 64 }
    }

    static let capacity = 256 << 10
    private var filters: [Key: SQLFilter] = [:]
    private var bytes = 0

    func filter(_ key: Key) -> SQLFilter? { filters[key] }

    mutating func store(_ filter: SQLFilter, _ key: Key) {
        // The filter's bindings, FTS5 text and driver word are copies of the query's text: its
        // bytes counted three times over, with the SQL.
        let size = 3 * key.bytes + filter.sql.utf8.count
        guard size <= Self.capacity / 4 else { return }
        if bytes + size > Self.capacity {
            filters.removeAll()
            bytes = 0
        }
        if filters.updateValue(filter, forKey: key) == nil { bytes += size }
    }

    mutating func removeAll() {
        filters.removeAll()
        bytes = 0
    }
}
