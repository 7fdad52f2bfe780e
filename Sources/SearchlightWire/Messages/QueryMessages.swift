// The query methods. An app or extension queries its own bundle; an administrator names one with
// `bundle`, or leaves it out to search every bundle (each item then carries `bundle`).

/// `query.search {query, fetchAttributes?, filterQueries?, limit?, cursor?}`: the CSSearchQuery
/// language (Docs/QueryLanguage.md), a page of items in rowid order with a cursor while more remain.
public struct QuerySearch: WireRequest, Equatable {
    public static let method = Method.querySearch
    public static let fields = ["query", "fetchAttributes?", "filterQueries?", "limit?", "cursor?", "index?", "bundle?"]
    public static let example = QuerySearch(query: #"title == "natural*"cd"#, fetchAttributes: ["title"],
        filterQueries: [#"contentTypeTree == "public.text""#], limit: 50, cursor: "r:12", index: "trips", bundle: "com.example.notes")

    public var query: String
    /// nil: every attribute.
    public var fetchAttributes: [String]?
    public var filterQueries: [String]
    /// Items per page, 0 to 10 000 (1 000 when not given).
    public var limit: Int
    public var cursor: String?
    public var index: String
    public var bundle: String?

    public init(query: String, fetchAttributes: [String]? = nil, filterQueries: [String] = [], limit: Int = 1000, cursor: String? = nil,
                index: String = "", bundle: String? = nil) {
        self.query = query
        self.fetchAttributes = fetchAttributes
        self.filterQueries = filterQueries
        self.limit = limit
        self.cursor = cursor
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let query = try? p.optionalString("query", maxBytes: Int.max) else { throw .invalidParams("\"query\" must be a query string") }
        self.query = query
        filterQueries = try QueryLimits.filterQueries(p, "filterQueries")
        fetchAttributes = try p.optionalStrings("fetchAttributes", maxCount: 1000, maxBytes: 256)
        limit = try p.integer("limit", in: 0...10_000, default: 1000)
        cursor = try p.optionalString("cursor", maxBytes: 256)
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("query", query)
        b.set("fetchAttributes", fetchAttributes)
        if !filterQueries.isEmpty { b.set("filterQueries", filterQueries) }
        b.set("limit", limit)
        b.set("cursor", cursor)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }

    /// A page: the items (wire form), the cursor while more remain, `incomplete` while the index
    /// is being refilled.
    public struct Response: WireResponse, Equatable {
        public var items: [JSONValue]
        public var cursor: String?
        public var incomplete: Bool

        public init(items: [JSONValue], cursor: String? = nil, incomplete: Bool = false) {
            self.items = items
            self.cursor = cursor
            self.incomplete = incomplete
        }

        public init(result: JSONValue) throws(SearchlightError) {
            items = result["items"]?.arrayValue ?? []
            cursor = result["cursor"]?.stringValue
            incomplete = result["incomplete"]?.boolValue ?? false
        }

        public var result: JSONValue {
            var b = ParamsBuilder()
            b.set("items", .array(items))
            b.set("cursor", cursor)
            if incomplete { b.set("incomplete", true) }
            return b.json
        }
    }
}

/// `query.user {text, context?}`: free text as a person types it; ranked items and suggestions.
public struct QueryUser: WireRequest, Equatable {
    public static let method = Method.queryUser
    public static let fields = ["text", "context?", "context.enableRankedResults?", "context.maxRankedResultCount?",
                                "context.maxResultCount?", "context.maxSuggestionCount?", "context.filterQueries?",
                                "context.fetchAttributes?", "context.semanticSearch?", "context.semanticWeight?", "context.explain?",
                                "index?", "bundle?"]
    public static let example = QueryUser(text: "natural bri", context: Context(enableRankedResults: true, maxRankedResultCount: 5,
        maxResultCount: 20, maxSuggestionCount: 3, filterQueries: [#"contentTypeTree == "public.text""#], fetchAttributes: ["title"],
        semanticSearch: true, semanticWeight: 0.4, explain: true),
        index: "trips", bundle: "com.example.notes")

    /// CSUserQueryContext.
    public struct Context: Sendable, Equatable {
        public var enableRankedResults = true
        public var maxRankedResultCount = 10
        public var maxResultCount = 100
        public var maxSuggestionCount = 0
        public var filterQueries: [String] = []
        public var fetchAttributes: [String]?
        /// Hybrid ranking with the vector side (Docs/SemanticSearch.md); nil: on when the daemon
        /// has the static table.
        public var semanticSearch: Bool?
        /// 0…1, the weight of the vector side in the fusion (0.5).
        public var semanticWeight: Double
        /// Each item carries `explain: {lexicalRank?, vectorRank?, similarity?, score}`.
        public var explain: Bool

        public init(enableRankedResults: Bool = true, maxRankedResultCount: Int = 10, maxResultCount: Int = 100,
                    maxSuggestionCount: Int = 0, filterQueries: [String] = [], fetchAttributes: [String]? = nil,
                    semanticSearch: Bool? = nil, semanticWeight: Double = 0.5, explain: Bool = false) {
            self.semanticSearch = semanticSearch
            self.semanticWeight = semanticWeight
            self.explain = explain
            self.enableRankedResults = enableRankedResults
            self.maxRankedResultCount = maxRankedResultCount
            self.maxResultCount = maxResultCount
            self.maxSuggestionCount = maxSuggestionCount
            self.filterQueries = filterQueries
            self.fetchAttributes = fetchAttributes
        }

        init(params c: WireParams) throws(SearchlightError) {
            enableRankedResults = try c.bool("enableRankedResults", default: true)
            maxRankedResultCount = try c.integer("maxRankedResultCount", in: 0...1000, default: 10)
            maxResultCount = try c.integer("maxResultCount", in: 0...10_000, default: 100)
            maxSuggestionCount = try c.integer("maxSuggestionCount", in: 0...100, default: 0)
            filterQueries = try QueryLimits.filterQueries(c, "filterQueries")
            fetchAttributes = try c.optionalStrings("fetchAttributes", maxCount: 1000, maxBytes: 256)
            semanticSearch = try c.optionalBool("semanticSearch")
            semanticWeight = try c.optionalNumber("semanticWeight", in: 0...1) ?? 0.5
            explain = try c.bool("explain", default: false)
        }

        var json: JSONValue {
            var b = ParamsBuilder()
            b.set("enableRankedResults", enableRankedResults)
            b.set("maxRankedResultCount", maxRankedResultCount)
            b.set("maxResultCount", maxResultCount)
            b.set("maxSuggestionCount", maxSuggestionCount)
            if !filterQueries.isEmpty { b.set("filterQueries", filterQueries) }
            b.set("fetchAttributes", fetchAttributes)
            b.set("semanticSearch", semanticSearch)
            if semanticWeight != 0.5 { b.set("semanticWeight", semanticWeight) }
            if explain { b.set("explain", true) }
            return b.json
        }
    }

    public var text: String
    public var context: Context
    public var index: String
    public var bundle: String?

    public init(text: String, context: Context = Context(), index: String = "", bundle: String? = nil) {
        self.text = text
        self.context = context
        self.index = index
        self.bundle = bundle
    }

    public init(params p: WireParams) throws(SearchlightError) {
        guard let text = try? p.optionalString("text", maxBytes: Int.max) else { throw .invalidParams("\"text\" must be a string") }
        guard text.utf8.count <= p.limits.maxQueryBytes else {
            throw SearchlightError(.invalidQuery, "the text is longer than \(p.limits.maxQueryBytes) bytes",
                data: ["offset": .number(Double(p.limits.maxQueryBytes))])
        }
        self.text = text
        context = try Context(params: try p.nested("context"))
        index = try p.index()
        bundle = try p.optionalBundle()
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        b.set("text", text)
        b.set("context", context.json)
        b.setIndex(index)
        b.set("bundle", bundle)
        return b.json
    }

    /// A suggested query: a completion of the word being typed or a correction.
    public struct Suggestion: Sendable, Equatable {
        public var text: String
        /// Ranges of `text` to emphasise: UTF-16 offset and length.
        public var highlight: [[Int]]
        /// `completion` or `correction`.
        public var kind: String

        public init(text: String, highlight: [[Int]], kind: String) {
            self.text = text
            self.highlight = highlight
            self.kind = kind
        }

        public var json: JSONValue {
            ["text": .string(text), "highlight": .array(highlight.map { .array($0.map { .number(Double($0)) }) }), "kind": .string(kind)]
        }

        /// Offsets out of range are dropped, never turned into a range that traps.
        init?(json: JSONValue) {
            guard let text = json["text"]?.stringValue else { return nil }
            self.text = text
            let count = 0...NumericParameter.maxCount
            highlight = (json["highlight"]?.arrayValue ?? []).compactMap { pair -> [Int]? in
                guard let a = pair.arrayValue, a.count == 2,
                      let start = try? NumericParameter.integer(a[0], field: "highlight.start", in: count),
                      let length = try? NumericParameter.integer(a[1], field: "highlight.length", in: count) else { return nil }
                return [start, length]
            }
            kind = json["kind"]?.stringValue ?? "completion"
        }
    }

    public struct Response: WireResponse, Equatable {
        public var items: [JSONValue]
        public var rankedItems: [JSONValue]
        public var suggestions: [Suggestion]
        public var incomplete: Bool
        /// Role desktop only: for each bundle in the answer, how its items open (nil: by their
        /// `contentURL`). Every item then carries `bundle`.
        public var bundles: [String: DesktopOpening?]?

        public init(items: [JSONValue], rankedItems: [JSONValue], suggestions: [Suggestion], incomplete: Bool = false,
                    bundles: [String: DesktopOpening?]? = nil) {
            self.items = items
            self.rankedItems = rankedItems
            self.suggestions = suggestions
            self.incomplete = incomplete
            self.bundles = bundles
        }

        public init(result: JSONValue) throws(SearchlightError) {
            items = result["items"]?.arrayValue ?? []
            rankedItems = result["rankedItems"]?.arrayValue ?? []
            suggestions = (result["suggestions"]?.arrayValue ?? []).compactMap(Suggestion.init(json:))
            incomplete = result["incomplete"]?.boolValue ?? false
            if case .object(let o)? = result["bundles"] { bundles = o.mapValues(DesktopOpening.init(json:)) }
        }

        public var result: JSONValue {
            var o: [String: JSONValue] = ["items": .array(items), "rankedItems": .array(rankedItems),
                                          "suggestions": .array(suggestions.map(\.json))]
            if incomplete { o["incomplete"] = true }
            if let bundles {
                o["bundles"] = .object(bundles.mapValues { opening in
                    var b = ParamsBuilder()
                    opening?.write(into: &b)
                    return b.json
                })
            }
            return .object(o)
        }
    }
}

/// `query.engaged {identifier | suggestion, interaction?, text?, activity?}`: the user chose or looked at a
/// result or a suggestion; it ranks higher later. `activity: true`: the identifier is a user
/// activity's persistent identifier, an activity result of the bundle's history (no `index`).
public struct QueryEngaged: WireRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.queryEngaged
    public static let fields = ["identifier?", "suggestion?", "interaction?", "text?", "index?", "bundle?", "activity?"]
    public static let example = QueryEngaged(target: .identifier("trip-1"), interaction: .select, text: "natural bri", index: "trips",
                                             bundle: "com.example.notes")

    public enum Target: Sendable, Equatable {
        case identifier(String)
        case suggestion(String)
    }
    public enum Interaction: String, Sendable {
        case select, focus
    }

    public var target: Target
    public var interaction: Interaction
    public var text: String?
    public var index: String
    public var bundle: String?
    /// The identifier names a user activity of the bundle's history (DESIGN §13), not an item.
    public var activity: Bool

    public init(target: Target, interaction: Interaction = .select, text: String? = nil, index: String = "", bundle: String? = nil,
                activity: Bool = false) {
        self.target = target
        self.interaction = interaction
        self.text = text
        self.index = index
        self.bundle = bundle
        self.activity = activity
    }

    public init(params p: WireParams) throws(SearchlightError) {
        let identifier = try p.optionalString("identifier", maxBytes: p.limits.maxIdentifierBytes)
        let suggestion = try p.optionalString("suggestion", maxBytes: p.limits.maxQueryBytes)
        switch (identifier, suggestion) {
        case (let id?, nil): target = .identifier(id)
        case (nil, let s?): target = .suggestion(s)
        default: throw .invalidParams("give exactly one of \"identifier\" or \"suggestion\"")
        }
        guard let interaction = Interaction(rawValue: try p.optionalString("interaction", maxBytes: 16) ?? "select") else {
            throw .invalidParams("\"interaction\" must be \"select\" or \"focus\"")
        }
        self.interaction = interaction
        text = try p.optionalString("text", maxBytes: p.limits.maxQueryBytes)
        index = try p.index()
        bundle = try p.optionalBundle()
        activity = try p.bool("activity", default: false)
        if activity {
            guard case .identifier = target else { throw .invalidParams("\"activity\" engagement names an \"identifier\" (a persistent identifier), not a suggestion") }
            guard index.isEmpty else { throw .invalidParams("\"activity\" engagement names no \"index\": activities are kept in the bundle's history") }
        }
    }

    public var params: JSONValue {
        var b = ParamsBuilder()
        switch target {
        case .identifier(let id): b.set("identifier", id)
        case .suggestion(let s): b.set("suggestion", s)
        }
        b.set("interaction", interaction.rawValue)
        b.set("text", text)
        b.setIndex(index)
        b.set("bundle", bundle)
        if activity { b.set("activity", true) }
        return b.json
    }
}

/// `query.prepare {}`: loads the semantic model (the transformer) ahead of the first user query
/// (CSUserQuery.prepare()); answers `{semantic: {state, reason?, modelDirectory}}` once it is
/// loaded, or says why it cannot be (user queries then embed with the static table).
public struct QueryPrepare: ParameterlessRequest, Equatable {
    public typealias Response = JSONResponse
    public static let method = Method.queryPrepare
    public init() {}
}

/// The checks every query shares.
enum QueryLimits {
    /// The filter queries as given: their count and each one's size are the query language's to
    /// check (`QueryFront`, with byte offsets in its errors).
    static func filterQueries(_ p: WireParams, _ name: String) throws(SearchlightError) -> [String] {
        try p.optionalStrings(name, maxCount: Int.max, maxBytes: Int.max) ?? []
    }
}
