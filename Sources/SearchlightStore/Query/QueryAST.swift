import Foundation
import SearchlightWire

/// A parsed `query.search` query (the CSSearchQuery language, Docs/QueryLanguage.md).
/// `QueryParser` builds it with every attribute resolved and every value checked against the
/// attribute's kind; `QueryCompiler` turns it into SQL.
public indirect enum QueryExpr: Sendable, Equatable {
    /// `attribute op value`.
    case comparison(QueryAttribute, QueryOperator, QueryValue)
    /// `InRange(attribute, low, high)`, inclusive at both ends.
    case inRange(QueryAttribute, QueryValue, QueryValue)
    /// `a && b && …` (two or more operands).
    case and([QueryExpr])
    /// `a || b || …` (two or more operands).
    case or([QueryExpr])
    /// `!a`.
    case not(QueryExpr)
}

/// What a predicate tests.
public enum QueryAttribute: Sendable, Equatable {
    /// `*`: every full-text attribute and every custom string attribute.
    case anyText
    /// An attribute of the attribute set known to `AttributeCatalog` (wire name and kind).
    case catalog(String, AttributeKind)
    /// `uniqueIdentifier`, the item's identifier.
    case uniqueIdentifier
    /// `domainIdentifier`, the item's domain.
    case domainIdentifier
    /// `expirationDate`, the item's expiration.
    case expirationDate
    /// A custom attribute (`custom.<name>` or an unknown bare name); its type is the value's.
    case custom(String)

    /// The name as written in canonical form, for messages.
    public var name: String {
        switch self {
        case .anyText: "*"
        case .catalog(let name, _): name
        case .uniqueIdentifier: "uniqueIdentifier"
        case .domainIdentifier: "domainIdentifier"
        case .expirationDate: "expirationDate"
        case .custom(let name): "custom.\(name)"
        }
    }
}

public enum QueryOperator: String, Sendable, CaseIterable {
    case equal = "=="
    case notEqual = "!="
    case less = "<"
    case greater = ">"
    case lessOrEqual = "<="
    case greaterOrEqual = ">="
}

/// The modifier letters written after a string's closing quote.
public struct StringModifiers: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// `c`: case-insensitive.
    public static let caseInsensitive = StringModifiers(rawValue: 1)
    /// `d`: diacritic-insensitive.
    public static let diacriticInsensitive = StringModifiers(rawValue: 2)
    /// `w`: word-based.
    public static let wordBased = StringModifiers(rawValue: 4)
    /// `t`: tokenized (word-based, also split at case changes and digits; implies `c`).
    public static let tokenized = StringModifiers(rawValue: 8)

    /// The letters in canonical order (`cdwt`), as `TextPattern` and `sl_match` take them.
    public var letters: String {
        var s = ""
        if contains(.caseInsensitive) { s += "c" }
        if contains(.diacriticInsensitive) { s += "d" }
        if contains(.wordBased) { s += "w" }
        if contains(.tokenized) { s += "t" }
        return s
    }

    public init?(letter: Character) {
        switch letter {
        case "c": self = .caseInsensitive
        case "d": self = .diacriticInsensitive
        case "w": self = .wordBased
        case "t": self = .tokenized
        default: return nil
        }
    }
}

/// A quoted string: literal text and `*` wildcards, with modifiers.
public struct QueryString: Sendable, Hashable {
    public var parts: [TextPattern.Part]
    public var modifiers: StringModifiers

    public init(parts: [TextPattern.Part], modifiers: StringModifiers = []) {
        self.parts = parts.isEmpty ? [.text("")] : parts
        self.modifiers = modifiers
    }

    /// A string without wildcards.
    public init(literal: String, modifiers: StringModifiers = []) {
        self.init(parts: [.text(literal)], modifiers: modifiers)
    }

    public var hasWildcard: Bool { parts.contains(.wildcard) }

    /// The text with wildcards written as `*` (what ordering comparisons use).
    public var literal: String {
        parts.map { part in
            if case .text(let t) = part { return t }
            return "*"
        }.joined()
    }

    /// The pattern in `TextPattern` syntax (`\*` for a literal star), as bound for `sl_match`.
    public var pattern: String { TextPattern.syntax(of: parts) }
}

/// A value on the right of an operator.
public enum QueryValue: Sendable, Equatable {
    case string(QueryString)
    case number(Double)
    case bool(Bool)
    case date(Date)
}

/// The weight of a comparison against `Limits.maxQueryPredicates`: how many attribute checks it
/// adds for every item a search looks at (the residual `sl_match`/`sl_compare` calls).
public enum QueryCost {
    /// `*` checks every full-text attribute and the custom strings.
    public static let anyText = AttributeCatalog.textAttributes.count + 1

    public static func of(_ attribute: QueryAttribute) -> Int { attribute == .anyText ? anyText : 1 }
}
