import Foundation

/// A custom attribute value: string, number, bool, date, or an array of them.
/// On the wire a date is `{"$date": "<ISO 8601>"}` so that it is never confused with a string.
public enum CustomAttributeValue: Sendable, Hashable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case date(Date)
    case array([CustomAttributeValue])

    public var json: JSONValue {
        switch self {
        case .string(let s): .string(s)
        case .number(let n): .number(n)
        case .bool(let b): .bool(b)
        case .date(let d): ["$date": .string(ISO8601.format(d))]
        case .array(let a): .array(a.map(\.json))
        }
    }

    public init?(json: JSONValue, allowArray: Bool = true) {
        switch json {
        case .string(let s): self = .string(s)
        case .number(let n): self = .number(n)
        case .bool(let b): self = .bool(b)
        case .object(let o):
            guard o.count == 1, let s = o["$date"]?.stringValue, let d = ISO8601.parse(s) else { return nil }
            self = .date(d)
        case .array(let a) where allowArray:
            var values: [CustomAttributeValue] = []
            for element in a {
                guard let v = CustomAttributeValue(json: element, allowArray: false) else { return nil }
                values.append(v)
            }
            self = .array(values)
        default: return nil
        }
    }
}

/// The searchable metadata of an item (CSSearchableItemAttributeSet). Values are kept in wire
/// form; typed properties read and write them. Setting a property to nil removes it; for an
/// update item, `removeOnUpdate(_:)` asks the index to delete the stored value.
public struct AttributeSet: Sendable, Hashable {
    public private(set) var values: [String: JSONValue]

    public init(contentType: String? = nil) {
        values = [:]
        if let contentType { values["contentType"] = .string(contentType) }
    }

    /// Wraps wire-form values that were already validated (see `SearchableItem(validating:)`).
    public init(validatedValues: [String: JSONValue]) { values = validatedValues }

    public subscript(attribute name: String) -> JSONValue? {
        get { values[name] }
        set { values[name] = newValue }
    }

    /// For an update (`isUpdate`), removes the attribute from the stored item.
    public mutating func removeOnUpdate(_ name: String) { values[name] = .null }

    private func string(_ k: String) -> String? { values[k]?.stringValue }
    private mutating func set(_ k: String, _ v: String?) { values[k] = v.map(JSONValue.string) }
    private func strings(_ k: String) -> [String]? { values[k]?.arrayValue?.compactMap(\.stringValue) }
    private mutating func set(_ k: String, _ v: [String]?) { values[k] = v.map { .array($0.map(JSONValue.string)) } }
    private func date(_ k: String) -> Date? { values[k]?.stringValue.flatMap(ISO8601.parse) }
    private mutating func set(_ k: String, _ v: Date?) { values[k] = v.map { .string(ISO8601.format($0)) } }
    private func bool(_ k: String) -> Bool? { values[k]?.boolValue }
    private mutating func set(_ k: String, _ v: Bool?) { values[k] = v.map(JSONValue.bool) }

    public var title: String? { get { string("title") } set { set("title", newValue) } }
    public var displayName: String? { get { string("displayName") } set { set("displayName", newValue) } }
    public var alternateNames: [String]? { get { strings("alternateNames") } set { set("alternateNames", newValue) } }
    public var contentDescription: String? { get { string("contentDescription") } set { set("contentDescription", newValue) } }
    public var textContent: String? { get { string("textContent") } set { set("textContent", newValue) } }
    public var keywords: [String]? { get { strings("keywords") } set { set("keywords", newValue) } }
    public var authorNames: [String]? { get { strings("authorNames") } set { set("authorNames", newValue) } }
    public var contentType: String? { get { string("contentType") } set { set("contentType", newValue) } }
    public var contentTypeTree: [String]? { get { strings("contentTypeTree") } set { set("contentTypeTree", newValue) } }
    /// Where the item's content lives: a `file://` URL for a file, or any URL the desktop can open
    /// (CSSearchableItemAttributeSet.contentURL). On the wire, the URL's absolute string.
    public var contentURL: URL? {
        get { string("contentURL").flatMap(URL.init(string:)) } set { set("contentURL", newValue?.absoluteString) }
    }
    /// A picture of the item, by URL (a `file://` URL, usually); on the wire, its absolute string.
    public var thumbnailURL: URL? {
        get { string("thumbnailURL").flatMap(URL.init(string:)) } set { set("thumbnailURL", newValue?.absoluteString) }
    }
    public var thumbnailData: Data? {
        get { string("thumbnailData").flatMap { Data(base64Encoded: $0) } }
        set { set("thumbnailData", newValue?.base64EncodedString()) }
    }
    public var relatedUniqueIdentifier: String? {
        get { string("relatedUniqueIdentifier") } set { set("relatedUniqueIdentifier", newValue) }
    }
    public var weakRelatedUniqueIdentifier: String? {
        get { string("weakRelatedUniqueIdentifier") } set { set("weakRelatedUniqueIdentifier", newValue) }
    }
    public var lastUsedDate: Date? { get { date("lastUsedDate") } set { set("lastUsedDate", newValue) } }
    public var contentCreationDate: Date? { get { date("contentCreationDate") } set { set("contentCreationDate", newValue) } }
    public var contentModificationDate: Date? {
        get { date("contentModificationDate") } set { set("contentModificationDate", newValue) }
    }
    /// 0–100; higher ranks higher in user queries.
    public var rankingHint: Double? {
        get { values["rankingHint"]?.doubleValue } set { values["rankingHint"] = newValue.map(JSONValue.number) }
    }
    public var userCreated: Bool? { get { bool("userCreated") } set { set("userCreated", newValue) } }
    public var userOwned: Bool? { get { bool("userOwned") } set { set("userOwned", newValue) } }
    public var userCurated: Bool? { get { bool("userCurated") } set { set("userCurated", newValue) } }
    public var providerDataTypeIdentifiers: [String]? {
        get { strings("providerDataTypeIdentifiers") } set { set("providerDataTypeIdentifiers", newValue) }
    }
    public var providerFileTypeIdentifiers: [String]? {
        get { strings("providerFileTypeIdentifiers") } set { set("providerFileTypeIdentifiers", newValue) }
    }

    /// Custom attributes by name (`[A-Za-z0-9_]+`).
    public subscript(custom name: String) -> CustomAttributeValue? {
        get { values["custom"]?[name].flatMap { CustomAttributeValue(json: $0) } }
        set {
            var custom = values["custom"]?.objectValue ?? [:]
            custom[name] = newValue?.json
            values["custom"] = custom.isEmpty ? nil : .object(custom)
        }
    }

    public var json: JSONValue { .object(values) }
}

/// An item donated to an index (CSSearchableItem).
public struct SearchableItem: Sendable, Hashable {
    public var uniqueIdentifier: String
    public var domainIdentifier: String?
    /// When the item disappears; the index applies its default (30 days) when nil.
    public var expirationDate: Date?
    /// Merge into the existing item instead of replacing it; dropped if there is none.
    public var isUpdate: Bool
    public var attributeSet: AttributeSet

    public init(uniqueIdentifier: String, domainIdentifier: String? = nil, attributeSet: AttributeSet) {
        self.uniqueIdentifier = uniqueIdentifier
        self.domainIdentifier = domainIdentifier
        self.expirationDate = nil
        self.isUpdate = false
        self.attributeSet = attributeSet
    }

    public var json: JSONValue {
        var o: [String: JSONValue] = ["uniqueIdentifier": .string(uniqueIdentifier), "attributeSet": attributeSet.json]
        if let domainIdentifier { o["domainIdentifier"] = .string(domainIdentifier) }
        if let expirationDate { o["expirationDate"] = .string(ISO8601.format(expirationDate)) }
        if isUpdate { o["isUpdate"] = true }
        return .object(o)
    }
}
