import Foundation

/// An attribute of an item that a column fills (`Attribute("name", as: .displayName)`): one of
/// Core Spotlight's attributes (DESIGN §3), or a custom one (`.custom("rating")`).
public struct AttributeKey: Sendable, Hashable, CustomStringConvertible {
    /// The attribute's wire name (`displayName`), or `custom.NAME`.
    public let name: String

    init(_ name: String) { self.name = name }

    public static func custom(_ name: String) -> AttributeKey { AttributeKey("custom." + name) }

    public static let title = AttributeKey("title")
    public static let displayName = AttributeKey("displayName")
    public static let alternateNames = AttributeKey("alternateNames")
    public static let contentDescription = AttributeKey("contentDescription")
    public static let textContent = AttributeKey("textContent")
    public static let keywords = AttributeKey("keywords")
    public static let authorNames = AttributeKey("authorNames")
    public static let contentType = AttributeKey("contentType")
    /// A path becomes a `file://` URL; any other text is taken as a URL.
    public static let contentURL = AttributeKey("contentURL")
    public static let thumbnailURL = AttributeKey("thumbnailURL")
    public static let thumbnailData = AttributeKey("thumbnailData")
    public static let relatedUniqueIdentifier = AttributeKey("relatedUniqueIdentifier")
    public static let weakRelatedUniqueIdentifier = AttributeKey("weakRelatedUniqueIdentifier")
    /// Dates: a number is Unix seconds; text is ISO 8601 or SQLite's `YYYY-MM-DD HH:MM:SS` (UTC).
    public static let lastUsedDate = AttributeKey("lastUsedDate")
    public static let contentCreationDate = AttributeKey("contentCreationDate")
    public static let contentModificationDate = AttributeKey("contentModificationDate")
    public static let rankingHint = AttributeKey("rankingHint")
    public static let userCreated = AttributeKey("userCreated")
    public static let userOwned = AttributeKey("userOwned")
    public static let userCurated = AttributeKey("userCurated")

    public var description: String { name }

    var customName: String? { name.hasPrefix("custom.") ? String(name.dropFirst(7)) : nil }
}

extension AttributeSet {
    /// Sets `key` from a column's value, converted to the attribute's type; NULL and values that
    /// cannot be converted (a blob for a text attribute) leave it unset. Array attributes collect
    /// the values of every column mapped to them; a scalar keeps the first.
    mutating func set(_ key: AttributeKey, from value: DatabaseValue) {
        if let custom = key.customName {
            let converted: CustomAttributeValue? = switch value {
            case .integer(let n): .number(Double(n))
            case .real(let d): .number(d)
            case .text(let s): .string(s)
            case .null, .blob: nil
            }
            if let converted, self[custom: custom] == nil { self[custom: custom] = converted }
            return
        }
        guard let kind = AttributeCatalog.kinds[key.name] else { return }
        let converted: JSONValue?
        switch kind {
        case .text, .string:
            guard let text = value.stringValue, !text.isEmpty else { return }
            converted = .string(key == .contentURL || key == .thumbnailURL ? Self.url(text) : text)
        case .textArray, .stringArray:
            guard let text = value.stringValue, !text.isEmpty else { return }
            var array = self[attribute: key.name]?.arrayValue ?? []
            array.append(.string(text))
            self[attribute: key.name] = .array(array)
            return
        case .date:
            converted = Self.date(value).map { .string(ISO8601.format($0)) }
        case .number:
            converted = value.doubleValue.map(JSONValue.number)
        case .bool:
            converted = switch value {
            case .integer(let n): .bool(n != 0)
            case .real(let d): .bool(d != 0)
            case .text(let s): ["1", "true", "yes"].contains(s.lowercased()) ? .bool(true)
                : ["0", "false", "no"].contains(s.lowercased()) ? .bool(false) : nil
            case .null, .blob: nil
            }
        case .data:
            guard case .blob(let bytes) = value else { return }
            converted = .string(Data(bytes).base64EncodedString())
        }
        if let converted, self[attribute: key.name] == nil { self[attribute: key.name] = converted }
    }

    private static func url(_ text: String) -> String {
        text.hasPrefix("/") ? URL(fileURLWithPath: text).absoluteString : text
    }

    private static func date(_ value: DatabaseValue) -> Date? {
        switch value {
        case .integer(let n): Date(timeIntervalSince1970: Double(n))
        case .real(let d): Date(timeIntervalSince1970: d)
        // SQLite's own date functions write UTC without a zone (`2026-05-01 10:00:00`).
        case .text(let s): ISO8601.parse(s) ?? ISO8601.parse(s + "Z") ?? Double(s).map(Date.init(timeIntervalSince1970:))
        case .null, .blob: nil
        }
    }
}
