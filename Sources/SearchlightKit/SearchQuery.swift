import Foundation

/// Options of a `SearchQuery` (CSSearchQueryContext).
public struct SearchQueryContext: Sendable {
    /// Attributes to return; nil returns all of them.
    public var fetchAttributes: [String]?
    /// Further queries every result must also match (e.g. `contentTypeTree == "public.image"`).
    public var filterQueries: [String] = []
    /// Results per round trip.
    public var pageSize = 500

    public init(fetchAttributes: [String]? = nil, filterQueries: [String] = []) {
        self.fetchAttributes = fetchAttributes
        self.filterQueries = filterQueries
    }
}

/// A query in the CSSearchQuery language over one index (Docs/QueryLanguage.md). Iterate
/// `results`; pages are fetched as you go.
public struct SearchQuery: Sendable {
    public let queryString: String
    public let context: SearchQueryContext
    let index: SearchableIndex

    public init(queryString: String, queryContext: SearchQueryContext = SearchQueryContext(), index: SearchableIndex) {
        self.queryString = queryString
        self.context = queryContext
        self.index = index
    }

    public var results: Results { Results(query: self) }

    /// All matching items at once.
    public func allItems() async throws -> [SearchableItem] {
        var out: [SearchableItem] = []
        for try await item in results { out.append(item) }
        return out
    }

    /// The matching items, fetched page by page.
    public struct Results: AsyncSequence, Sendable {
        public typealias Element = SearchableItem
        let query: SearchQuery

        public func makeAsyncIterator() -> Iterator { Iterator(query: query) }

        public struct Iterator: AsyncIteratorProtocol {
            let query: SearchQuery
            /// The page being handed out, from `nextInBuffer` on (not reversed into a copy to pop
            /// from: that copied every item of every page).
            var buffer: [SearchableItem] = []
            var nextInBuffer = 0
            var cursor: String?
            var finished = false

            init(query: SearchQuery) { self.query = query }

            public mutating func next() async throws -> SearchableItem? {
                while nextInBuffer == buffer.count {
                    if finished { return nil }
                    try Task.checkCancellation()
                    // The page is read straight into items from the answer's bytes.
                    let page = try await query.index.sendPage(QuerySearch(
                        query: query.queryString, fetchAttributes: query.context.fetchAttributes,
                        filterQueries: query.context.filterQueries, limit: query.context.pageSize, cursor: cursor, index: query.index.name))
                    buffer = page.items
                    nextInBuffer = 0
                    cursor = page.cursor
                    finished = cursor == nil
                }
                defer { nextInBuffer += 1 }
                return buffer[nextInBuffer]
            }
        }
    }
}
