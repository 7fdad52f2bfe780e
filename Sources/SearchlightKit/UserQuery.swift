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

    public init() {}

    /// The context on the wire.
    var wire: QueryUser.Context {
        QueryUser.Context(enableRankedResults: enableRankedResults, maxRankedResultCount: maxRankedResultCount,
            maxResultCount: maxResultCount, maxSuggestionCount: maxSuggestionCount, filterQueries: filterQueries,
            fetchAttributes: fetchAttributes)
    }
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
        /// The best `maxRankedResultCount` items, best first (when ranking is enabled).
        public var rankedItems: [SearchableItem]
        public var suggestions: [QuerySuggestion]
        /// The index is being refilled after damage (recovery): items may be missing for now.
        public var isIncomplete = false
    }

    public init(userQueryString: String, userQueryContext: UserQueryContext = UserQueryContext(), index: SearchableIndex) {
        text = userQueryString
        context = userQueryContext
        self.index = index
    }

    public func run() async throws -> Response {
        let r = try await index.send(QueryUser(text: text, context: context.wire, index: index.name))
        let suggestions = r.suggestions.map { s in
            QuerySuggestion(text: s.text, highlight: s.highlight.map { $0[0]..<($0[0] + $0[1]) },
                kind: QuerySuggestion.Kind(rawValue: s.kind) ?? .completion)
        }
        return Response(items: r.items.compactMap(SearchableItem.init(wire:)), rankedItems: r.rankedItems.compactMap(SearchableItem.init(wire:)),
            suggestions: suggestions, isIncomplete: r.incomplete)
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
