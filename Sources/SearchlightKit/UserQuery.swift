import Foundation
import SearchlightWire

/// Options of a `UserQuery` (CSUserQueryContext).
public struct UserQueryContext: Sendable {
    public var enableRankedResults = true
    public var maxRankedResultCount = 10
    public var maxResultCount = 100
    public var maxSuggestionCount = 0
    public var filterQueries: [String] = []
    public var fetchAttributes: [String]?
    /// Semantic search (hybrid ranking, Docs/SemanticSearch.md); nil: the daemon's default (on
    /// when it has the model's static table).
    public var semanticSearch: Bool?
    /// 0…1: the weight of the vector side in the fusion.
    public var semanticWeight = 0.5
    /// Each item's ranks and score in `Response.explanations`.
    public var explain = false

    public init() {}

    /// The context on the wire.
    var wire: QueryUser.Context {
        QueryUser.Context(enableRankedResults: enableRankedResults, maxRankedResultCount: maxRankedResultCount,
            maxResultCount: maxResultCount, maxSuggestionCount: maxSuggestionCount, filterQueries: filterQueries,
            fetchAttributes: fetchAttributes, semanticSearch: semanticSearch, semanticWeight: semanticWeight, explain: explain)
    }
}

/// Why an item ranks where it does (`UserQueryContext.explain`): its rank on each side (1-based,
/// nil when that side did not find it), its vector's similarity to the query's, the fused score.
public struct RankExplanation: Sendable, Equatable {
    public var lexicalRank: Int?
    public var vectorRank: Int?
    public var similarity: Double?
    /// Higher is better.
    public var score: Double

    init?(wire: JSONValue?) {
        guard let o = wire, let score = o["score"]?.doubleValue else { return nil }
        lexicalRank = o["lexicalRank"]?.intValue
        vectorRank = o["vectorRank"]?.intValue
        similarity = o["similarity"]?.doubleValue
        self.score = score
    }
}

/// The state of the daemon's semantic model (`UserQuery.prepare()`).
public struct SemanticModelState: Sendable, Equatable {
    /// `unavailable`, `unloaded` or `loaded`.
    public var state: String
    /// Why it is not loaded, with the command that installs the model.
    public var reason: String?
    public var modelDirectory: String
}

/// A suggested query (CSSuggestion): a completion of the word being typed or a correction.
public struct QuerySuggestion: Sendable, Hashable {
    public enum Kind: String, Sendable { case completion, correction }
    public var text: String
    /// Ranges of `text` to emphasise, as UTF-16 offset and length (NSRange-compatible).
    public var highlight: [Range<Int>]
    public var kind: Kind
}

/// Free text as a person types it, answered with ranked items and suggestions (CSUserQuery).
public struct UserQuery: Sendable {
    public let text: String
    public let context: UserQueryContext
    let index: SearchableIndex

    public struct Response: Sendable {
        public var items: [SearchableItem]
        /// The best `maxRankedResultCount` items, best first (when ranking is enabled): the first
        /// items of `items`, which a UI may set apart as top hits; the list a UI shows is `items`.
        public var rankedItems: [SearchableItem]
        public var suggestions: [QuerySuggestion]
        /// The index is being refilled after damage (recovery): items may be missing for now.
        public var isIncomplete = false
        /// With `explain`, one per item of `items`.
        public var explanations: [RankExplanation?] = []
    }

    public init(userQueryString: String, userQueryContext: UserQueryContext = UserQueryContext(), index: SearchableIndex) {
        text = userQueryString
        context = userQueryContext
        self.index = index
    }

    public func run() async throws -> Response {
        // The answer is read straight into items from its bytes, in one pass.
        let r = try await index.send(QueryUser(text: text, context: context.wire, index: index.name), as: UserQueryAnswer.self)
        let suggestions = r.suggestions.map { s in
            QuerySuggestion(text: s.text, highlight: s.highlight.map { $0[0]..<($0[0] + $0[1]) },
                kind: QuerySuggestion.Kind(rawValue: s.kind) ?? .completion)
        }
        return Response(items: r.items, rankedItems: r.rankedItems, suggestions: suggestions, isIncomplete: r.incomplete,
            explanations: context.explain ? r.explanations.map(RankExplanation.init(wire:)) : [])
    }

    /// One result of `responses` (CSUserQuery.Item): an item, with its explanation when the
    /// context asked for it, and whether it is one of the ranked results (the first
    /// `rankedItems.count` of `items`, a UI's "top hits").
    public struct Item: Sendable {
        public var item: SearchableItem
        /// Why it ranks where it does (with `UserQueryContext.explain`); nil otherwise.
        public var explanation: RankExplanation?
        /// Among the `maxRankedResultCount` best (`Response.rankedItems`).
        public var isRanked: Bool
    }

    /// What `responses` yields (CSUserQuery's responses): the items, best first, then the
    /// suggestions.
    public enum ResponseElement: Sendable {
        case item(Item)
        case suggestion(QuerySuggestion)
    }

    /// The answer as an async sequence, like `CSUserQuery.responses`: every item of
    /// `Response.items` in order (each with its explanation), then every suggestion. One query to
    /// the daemon, sent when iteration starts; ending the iteration early cancels it. An index
    /// being refilled after damage is not reported here: use `run()` for `isIncomplete`.
    public var responses: AsyncThrowingStream<ResponseElement, any Error> {
        let query = self
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let response = try await query.run()
                    for (n, item) in response.items.enumerated() {
                        try Task.checkCancellation()
                        let explanation = n < response.explanations.count ? response.explanations[n] : nil
                        continuation.yield(.item(Item(item: item, explanation: explanation, isRanked: n < response.rankedItems.count)))
                    }
                    for suggestion in response.suggestions { continuation.yield(.suggestion(suggestion)) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    /// Loads the daemon's semantic model ahead of the first query (CSUserQuery.prepare()), so the
    /// first query does not wait for it. Answers its state; without the model files `reason`
    /// says which are missing and how to install them (queries then use the static table, or
    /// stay lexical where that is missing too).
    @discardableResult
    public func prepare() async throws -> SemanticModelState { try await Self.prepare(index: index) }

    @discardableResult
    public static func prepare(index: SearchableIndex) async throws -> SemanticModelState {
        let r = try await index.send(QueryPrepare())
        let s = r.result["semantic"]
        return SemanticModelState(state: s?["state"]?.stringValue ?? "unavailable", reason: s?["reason"]?.stringValue,
            modelDirectory: s?["modelDirectory"]?.stringValue ?? "")
    }

    /// Tells the index the user engaged with an item; it ranks higher in later queries.
    public func userEngaged(_ item: SearchableItem, interaction: Interaction = .select) async throws {
        _ = try await index.send(QueryEngaged(target: .identifier(item.uniqueIdentifier), interaction: interaction.wire, text: text, index: index.name))
    }

    /// Tells the index the user picked a suggestion; it is offered earlier next time.
    public func userEngaged(_ suggestion: QuerySuggestion, interaction: Interaction = .select) async throws {
        _ = try await index.send(QueryEngaged(target: .suggestion(suggestion.text), interaction: interaction.wire, text: text, index: index.name))
    }

    public enum Interaction: String, Sendable {
        case select, focus
        var wire: QueryEngaged.Interaction { self == .select ? .select : .focus }
    }
}
