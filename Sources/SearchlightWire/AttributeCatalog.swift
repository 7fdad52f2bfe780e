/// The attributes Searchlight knows (DESIGN §3), their types, and where queries find them.
/// One schema file used by the SDK, the store and the query compiler alike.
public enum AttributeKind: Sendable, Equatable {
    /// Full-text indexed string (title, textContent, …).
    case text
    /// Full-text indexed array of strings (keywords, …).
    case textArray
    case string
    case stringArray
    case date
    case number
    case bool
    /// Binary data, base64 on the wire.
    case data
}

public enum AttributeCatalog {
    /// Every known attribute of an attribute set, by wire name.
    public static let kinds: [String: AttributeKind] = [
        "title": .text,
        "displayName": .text,
        "alternateNames": .textArray,
        "contentDescription": .text,
        "textContent": .text,
        "keywords": .textArray,
        "authorNames": .textArray,
        "contentType": .string,
        "contentTypeTree": .stringArray,
        "contentURL": .string,
        "thumbnailData": .data,
        "thumbnailURL": .string,
        "relatedUniqueIdentifier": .string,
        "weakRelatedUniqueIdentifier": .string,
        "lastUsedDate": .date,
        "contentCreationDate": .date,
        "contentModificationDate": .date,
        "rankingHint": .number,
        "userCreated": .bool,
        "userOwned": .bool,
        "userCurated": .bool,
        "providerDataTypeIdentifiers": .stringArray,
        "providerFileTypeIdentifiers": .stringArray,
    ]

    /// The full-text attributes, in the order of the full-text index's columns.
    public static let textAttributes = [
        "title", "displayName", "alternateNames", "contentDescription", "textContent", "keywords", "authorNames",
    ]

    /// Spotlight's `kMDItem…` names, accepted in queries as aliases.
    public static let aliases: [String: String] = [
        "kMDItemTitle": "title",
        "kMDItemDisplayName": "displayName",
        "kMDItemAlternateNames": "alternateNames",
        "kMDItemDescription": "contentDescription",
        "kMDItemTextContent": "textContent",
        "kMDItemKeywords": "keywords",
        "kMDItemAuthors": "authorNames",
        "kMDItemContentType": "contentType",
        "kMDItemContentTypeTree": "contentTypeTree",
        "kMDItemURL": "contentURL",
        "kMDItemLastUsedDate": "lastUsedDate",
        "kMDItemContentCreationDate": "contentCreationDate",
        "kMDItemContentModificationDate": "contentModificationDate",
        "kMDItemRankingHint": "rankingHint",
    ]

    /// Attributes of the item itself (not of its attribute set) that queries may name.
    public static let itemAttributes = ["uniqueIdentifier", "domainIdentifier", "expirationDate"]

    public static func isValidCustomName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 128
            && name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }
    }

    /// The unit separator joins array elements inside one full-text column: the tokenizer treats it
    /// as a separator and exact matching splits on it.
    public static let arraySeparator: Character = "\u{1F}"
}
