import Foundation
import SearchlightKit

/// One entry of the journal file: `{id, title, body, date, mood?, tags?}`, `date` in ISO 8601.
struct JournalEntry: Sendable {
    var id: String
    var title: String
    var body: String
    var date: Date
    /// The date as written: its `YYYY-MM` is the month the author lived it, whatever the offset.
    var dateText: String
    var mood: String?
    var tags: [String]
    /// The entry as it stands in the file, for the `public.json` representation.
    var raw: JSONValue

    /// Reads one entry; nil when a required field is missing or malformed.
    init?(_ value: JSONValue) {
        guard let title = value["title"]?.stringValue, let body = value["body"]?.stringValue,
            let dateText = value["date"]?.stringValue, let date = ISO8601.parse(dateText)
        else { return nil }
        // An app may well number its entries: accept whole numbers as identifiers too.
        if let text = value["id"]?.stringValue, !text.isEmpty {
            id = text
        } else if let number = value["id"]?.intValue {
            id = String(number)
        } else {
            return nil
        }
        self.title = title
        self.body = body
        self.date = date
        self.dateText = dateText
        mood = value["mood"]?.stringValue
        tags = value["tags"]?.arrayValue?.compactMap(\.stringValue) ?? []
        raw = value
    }

    /// The representations `data(forItem:typeIdentifier:)` serves, by UTI.
    static let dataTypes = ["public.plain-text", "public.json"]

    var searchableItem: SearchableItem {
        var attributes = AttributeSet(contentType: "public.plain-text")
        attributes.title = title
        attributes.textContent = body
        attributes.contentDescription = Self.snippet(of: body)
        attributes.contentCreationDate = date
        if !tags.isEmpty { attributes.keywords = tags }
        if let mood { attributes[custom: "mood"] = .string(mood) }
        attributes.providerDataTypeIdentifiers = Self.dataTypes
        // Months as domains let the app forget a month at once: deleteSearchableItems(withDomainIdentifiers:).
        return SearchableItem(uniqueIdentifier: id, domainIdentifier: "journal.\(dateText.prefix(7))",
            attributeSet: attributes)
    }

    /// The entry in a representation a client asked for (drag and drop, sharing).
    func data(typeIdentifier: String) -> Data? {
        switch typeIdentifier {
        case "public.plain-text", "public.utf8-plain-text", "public.text":
            Data("\(title)\n\n\(body)\n".utf8)
        case "public.json":
            Data(raw.serialized(sortedKeys: true))
        default:
            nil
        }
    }

    /// The first words of the body, shown under the title in search results.
    static func snippet(of body: String, limit: Int = 160) -> String {
        let flat = body.split(whereSeparator: \.isNewline).joined(separator: " ")
        guard flat.count > limit else { return flat }
        let cut = flat.prefix(limit)
        let end = cut.lastIndex(of: " ") ?? cut.endIndex
        return cut[..<end] + "…"
    }
}
