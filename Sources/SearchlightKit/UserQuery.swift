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

    var json: JSONValue {
        var o: [String: JSONValue] = [
            "enableRankedResults": .bool(enableRankedResults),
            "maxRankedResultCount": .number(Double(maxRankedResultCount)),
            "maxResultCount": .number(Double(maxResultCount)),
            "maxSuggestionCount": .number(Double(maxSuggestionCount)),
        ]
        if !filterQueries.isEmpty { o["filterQueries"] = .array(filterQueries.map(JSONValue.string)) }
        if let fetchAttributes { o["fetchAttributes"] = .array(fetchAttributes.map(JSONValue.string)) }
        return .object(o)
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
        let r = try await index.call(Method.queryUser, ["text": .string(text), "context": context.json])
        func items(_ key: String) -> [SearchableItem] { (r[key]?.arrayValue ?? []).compactMap(SearchableItem.init(wire:)) }
        let suggestions: [QuerySuggestion] = (r["suggestions"]?.arrayValue ?? []).compactMap { s in
            guard let text = s["text"]?.stringValue else { return nil }
            // Offsets out of range are dropped, never turned into a range that traps.
            let ranges = (s["highlight"]?.arrayValue ?? []).compactMap { pair -> Range<Int>? in
                let count = 0...NumericParameter.maxCount
                guard let a = pair.arrayValue, a.count == 2,
                      let start = try? NumericParameter.integer(a[0], field: "highlight.start", in: count),
                      let length = try? NumericParameter.integer(a[1], field: "highlight.length", in: count)
                else { return nil }
                return start..<(start + length)
            }
            return QuerySuggestion(text: text, highlight: ranges, kind: QuerySuggestion.Kind(rawValue: s["kind"]?.stringValue ?? "") ?? .completion)
        }
        return Response(items: items("items"), rankedItems: items("rankedItems"), suggestions: suggestions,
            isIncomplete: r["incomplete"]?.boolValue ?? false)
    }

    /// Tells the index the user engaged with an item; it ranks higher in later queries.
    public func userEngaged(_ item: SearchableItem, interaction: Interaction = .select) async throws {
        _ = try await index.call(Method.queryEngaged, [
            "identifier": .string(item.uniqueIdentifier), "interaction": .string(interaction.rawValue), "text": .string(text),
        ])
    }

    /// Tells the index the user picked a suggestion; it is offered earlier next time.
    public func userEngaged(_ suggestion: QuerySuggestion, interaction: Interaction = .select) async throws {
        _ = try await index.call(Method.queryEngaged, [
            "suggestion": .string(suggestion.text), "interaction": .string(interaction.rawValue), "text": .string(text),
        ])
    }

    public enum Interaction: String, Sendable { case select, focus }
}
