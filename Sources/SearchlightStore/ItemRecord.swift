import Foundation
import SearchlightSemantic
import SearchlightWire

/// An item in storage form: the row of `items` (see `Schema`).
struct ItemRecord {
    var uid: String
    var domain: String?
    var expires: Double
    var related: String?
    /// Values of the full-text columns, in `AttributeCatalog.textAttributes` order.
    var text: [String?]
    var aux: String?
    /// Every other attribute, in storage form (dates as Unix seconds).
    var attrs: [String: JSONValue]
    var rankingHint: Double?
    var lastUsed: Double?

    static let separator = String(AttributeCatalog.arraySeparator)
    static let textAttributeNames = Set(AttributeCatalog.textAttributes)

    /// Where a wire attribute goes in the record, found with one dictionary lookup per attribute
    /// (the hashing of attribute names showed in profiles of donations).
    private enum Slot {
        case text(Int)
        case custom
        case attribute(AttributeKind)
    }

    private static let slots: [String: Slot] = {
        var slots: [String: Slot] = [:]
        for (name, kind) in AttributeCatalog.kinds { slots[name] = .attribute(kind) }
        for (i, name) in AttributeCatalog.textAttributes.enumerated() { slots[name] = .text(i) }
        slots["custom"] = .custom
        return slots
    }()

    /// Builds the row for a validated item. `expires` is the item's expiration or the default.
    init(item: SearchableItem, defaultExpires: Double) {
        uid = item.uniqueIdentifier
        domain = item.domainIdentifier
        expires = item.expirationDate?.timeIntervalSince1970 ?? defaultExpires
        text = Array(repeating: nil, count: AttributeCatalog.textAttributes.count)
        attrs = [:]
        related = nil
        rankingHint = nil
        lastUsed = nil
        apply(wireAttributes: item.attributeSet.values)
    }

    /// Sets wire-form attributes on this record; `.null` removes one (update semantics).
    mutating func apply(wireAttributes values: [String: JSONValue]) {
        if attrs.isEmpty { attrs.reserveCapacity(values.count + 1) }
        var typeGiven = false, treeGiven = false
        for (name, value) in values {
            switch Self.slots[name] {
            case .text(let i)?:
                switch value {
                case .string(let s): text[i] = s
                case .array(let a): text[i] = a.compactMap(\.stringValue).joined(separator: Self.separator)
                default: text[i] = nil
                }
            case .custom?:
                applyCustom(value.objectValue ?? [:])
            case .attribute(let kind)?:
                var stored: JSONValue? = value
                if value.isNull {
                    stored = nil
                } else if kind == .date, let s = value.stringValue, let d = ISO8601.parse(s) {
                    stored = .number(d.timeIntervalSince1970)
                }
                attrs[name] = stored
                switch name {
                case "contentType": typeGiven = true
                case "contentTypeTree": treeGiven = stored != nil
                case "relatedUniqueIdentifier": related = stored?.stringValue
                case "rankingHint": rankingHint = stored?.doubleValue
                case "lastUsedDate": lastUsed = stored?.doubleValue
                default: break
                }
            case nil:
                continue
            }
        }
        if typeGiven, !treeGiven, let type = attrs["contentType"]?.stringValue {
            attrs["contentTypeTree"] = UTITree.treeValue(for: type)
        }
        aux = TextAnalysis.auxiliaryDocument(text.compactMap { $0 })
    }

    private mutating func applyCustom(_ updates: [String: JSONValue]) {
        var custom = attrs["custom"]?.objectValue ?? [:]
        var dates = Set(attrs["customDates"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        for (name, value) in updates {
            dates.remove(name)
            guard !value.isNull, let v = CustomAttributeValue(json: value) else {
                custom[name] = nil
                continue
            }
            switch v {
            case .date(let d):
                custom[name] = .number(d.timeIntervalSince1970)
                dates.insert(name)
            case .array(let elements) where elements.contains(where: { if case .date = $0 { true } else { false } }):
                custom[name] = .array(elements.map {
                    if case .date(let d) = $0 { .number(d.timeIntervalSince1970) } else { $0.json }
                })
                dates.insert(name)
            default:
                custom[name] = value
            }
        }
        attrs["custom"] = custom.isEmpty ? nil : .object(custom)
        attrs["customDates"] = dates.isEmpty ? nil : .array(dates.sorted().map(JSONValue.string))
    }

    /// The attribute set in wire form; `fetch` limits it to the named attributes.
    func wireAttributes(fetch: Set<String>? = nil) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (i, name) in AttributeCatalog.textAttributes.enumerated() {
            guard let value = text[i], fetch?.contains(name) ?? true else { continue }
            if AttributeCatalog.kinds[name] == .textArray {
                out[name] = .array(value.split(separator: AttributeCatalog.arraySeparator, omittingEmptySubsequences: false)
                    .map { .string(String($0)) })
            } else {
                out[name] = .string(value)
            }
        }
        for (name, value) in attrs where name != "customDates" && (fetch?.contains(name) ?? true) {
            if name == "custom" {
                out["custom"] = wireCustom(value)
            } else if AttributeCatalog.kinds[name] == .date, let t = value.doubleValue {
                out[name] = .string(ISO8601.format(Date(timeIntervalSince1970: t)))
            } else {
                out[name] = value
            }
        }
        return out
    }

    private func wireCustom(_ value: JSONValue) -> JSONValue { Self.wireCustom(value, dates: attrs["customDates"]) }

    /// The stored `custom` object in wire form: the members named in the stored `customDates`
    /// (dates kept as Unix seconds) as `{"$date": ISO 8601}`.
    static func wireCustom(_ value: JSONValue, dates storedDates: JSONValue?) -> JSONValue {
        let dates = Set(storedDates?.arrayValue?.compactMap(\.stringValue) ?? [])
        guard case .object(var custom) = value, !dates.isEmpty else { return value }
        func date(_ v: JSONValue) -> JSONValue {
            guard let t = v.doubleValue else { return v }
            return ["$date": .string(ISO8601.format(Date(timeIntervalSince1970: t)))]
        }
        for name in dates {
            switch custom[name] {
            case .array(let a)?: custom[name] = .array(a.map(date))
            case let v?: custom[name] = date(v)
            case nil: break
            }
        }
        return .object(custom)
    }

    /// The item as `query.search` returns it.
    func wireItem(fetch: Set<String>? = nil) -> JSONValue {
        var o: [String: JSONValue] = [
            "uniqueIdentifier": .string(uid),
            "attributeSet": .object(wireAttributes(fetch: fetch)),
            "expirationDate": .string(ISO8601.format(Date(timeIntervalSince1970: expires))),
        ]
        if let domain { o["domainIdentifier"] = .string(domain) }
        return .object(o)
    }

    var attrsJSON: String { JSONValue.object(attrs).jsonString }

    /// FNV-1a 64 over the stored content; the idle scrub recomputes it to find damaged rows.
    /// Each field is its UTF-8 bytes (NUL for a missing one) then 0xFF. Part of the file format:
    /// the order and the `String(expires)` form must not change within format 1.
    func checksum(attrsJSON: String) -> Int64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ s: String?) {
            var copy = s ?? "\u{0}"
            copy.withUTF8 { bytes in
                for b in bytes {
                    h ^= UInt64(b)
                    h = h &* 0x100_0000_01b3
                }
            }
            h ^= 0xFF
            h = h &* 0x100_0000_01b3
        }
        mix(uid)
        mix(domain)
        mix(String(expires))
        for t in text { mix(t) }
        mix(attrsJSON)
        return Int64(bitPattern: h)
    }

    var checksum: Int64 { checksum(attrsJSON: attrsJSON) }

    /// `selectColumns` with NULL in place of what `fetch` does not return (a text attribute not
    /// asked for, the stored JSON when only text attributes are): a result page that shows titles
    /// then copies titles, not every description and body. Same positions, so `init(row:)` reads it.
    static func selectColumns(fetch: Set<String>?) -> String {
        guard let fetch else { return selectColumns }
        // The list depends only on which text attributes are asked for and whether anything else
        // is: one of `fetchColumnLists`, made once (joining it cost 12 k instructions a page).
        var mask = 0
        for (i, name) in AttributeCatalog.textAttributes.enumerated() where fetch.contains(name) { mask |= 1 << i }
        if fetch.count > mask.nonzeroBitCount { mask |= 1 << AttributeCatalog.textAttributes.count }
        return fetchColumnLists[mask]
    }

    /// `selectColumns(fetch:)` by mask: bit i for text attribute i, the bit after them for "the
    /// stored JSON too" (something else asked for).
    private static let fetchColumnLists: [String] = (0..<(2 << AttributeCatalog.textAttributes.count)).map { mask in
        var columns = ["items.uid", "items.domain", "items.expires"]
        for (i, name) in AttributeCatalog.textAttributes.enumerated() {
            columns.append(mask & (1 << i) != 0 ? "items.\(name)" : "NULL")
        }
        columns.append(mask & (1 << AttributeCatalog.textAttributes.count) != 0 ? "items.attrs" : "NULL")
        return columns.joined(separator: ", ")
    }

    /// Columns selected to rebuild a record, in this order.
    static let selectColumns =
        "items.uid, items.domain, items.expires, items.title, items.displayName, items.alternateNames, "
        + "items.contentDescription, items.textContent, items.keywords, items.authorNames, items.attrs"

    /// `fetch`: the attributes a query returns; the stored JSON of the others is parsed only when
    /// one of them is asked for (a result list that shows titles needs none of it).
    init(row: Row, offset: Int = 0, fetch: Set<String>? = nil) {
        uid = row.string(offset) ?? ""
        domain = row.string(offset + 1)
        expires = row.double(offset + 2) ?? 0
        text = (0..<AttributeCatalog.textAttributes.count).map { row.string(offset + 3 + $0) }
        if let fetch, fetch.isSubset(of: Self.textAttributeNames) {
            attrs = [:]
        } else {
            let attrsText = row.string(offset + 10) ?? "{}"
            attrs = (try? JSONValue.parse(attrsText))?.objectValue ?? [:]
        }
        related = attrs["relatedUniqueIdentifier"]?.stringValue
        rankingHint = attrs["rankingHint"]?.doubleValue
        lastUsed = attrs["lastUsedDate"]?.doubleValue
        aux = nil
    }
}

/// A record with everything the writer binds already computed: the storage-form JSON, the
/// checksum and the column values. Made on the caller's thread (a connection's, in the daemon),
/// so the single writer thread only binds and steps, and calls from several connections prepare
/// in parallel.
struct StoredRow {
    /// `items` columns from `domain` to `checksum`, in the order of `IndexStore.itemColumns`.
    let columns: [SQLValue]
    /// The full-text columns, `aux` last (the FTS5 row, and what a later delete must repeat).
    let fullText: [SQLValue]
    /// The item's semantic vector (`VectorTable`), made from `semanticText` when the store has
    /// an encoder: on the caller's thread for a donation, so the writer only stores it.
    let vector: QuantizedVector?

    /// The item's expiration (seconds since 1970), from `columns`.
    var expires: Double {
        if case .double(let e) = columns[1] { return e }
        return .infinity
    }

    /// The text semantic search embeds, from the text columns in `AttributeCatalog.textAttributes`
    /// order: title, contentDescription and textContent, joined by ". " (what the relevance
    /// evaluation of Docs/SemanticSearch.md measured as a document); an item with neither title
    /// nor textContent (a store delegate's, named by displayName and keywords) embeds its
    /// displayName, alternateNames, contentDescription and keywords instead, so that every item
    /// with text has a vector. Array values are joined by ", ".
    static func semanticText(_ text: [String?]) -> String {
        func column(_ i: Int) -> String? {
            guard i < text.count, let t = text[i], !t.isEmpty else { return nil }
            return t.replacingOccurrences(of: ItemRecord.separator, with: ", ")
        }
        let main = [0, 3, 4].compactMap(column)
        if column(0) != nil || column(4) != nil { return main.joined(separator: ". ") }
        return [1, 2, 3, 5].compactMap(column).joined(separator: ". ")
    }

    /// The columns `semanticText` reads, as SQL over `items` (its `text` in this order).
    static let semanticColumns = "title, displayName, alternateNames, contentDescription, textContent, keywords"

    init(_ record: ItemRecord, encoder: StaticEncoder? = nil) {
        if let encoder {
            let text = Self.semanticText(record.text)
            self.init(record, vector: text.isEmpty ? nil : QuantizedVector(encoder.embed(text)))
        } else {
            self.init(record, vector: nil)
        }
    }

    /// The vectors of donated `records` (nil where there is no record, or no text), embedded in
    /// one batch (`StaticEncoder.quantizedVectors`: the same vectors as one at a time, in less time).
    static func vectors(_ records: [ItemRecord?], encoder: StaticEncoder) -> [QuantizedVector?] {
        var texts: [String] = [], positions: [Int] = []
        texts.reserveCapacity(records.count)
        for i in records.indices {
            guard let record = records[i] else { continue }
            let text = semanticText(record.text)
            if !text.isEmpty {
                texts.append(text)
                positions.append(i)
            }
        }
        var vectors = [QuantizedVector?](repeating: nil, count: records.count)
        for (i, v) in zip(positions, encoder.quantizedVectors(of: texts)) { vectors[i] = v }
        return vectors
    }

    init(_ record: ItemRecord, vector: QuantizedVector?) {
        self.vector = vector
        func text(_ s: String?) -> SQLValue { s.map(SQLValue.text) ?? .null }
        func real(_ d: Double?) -> SQLValue { d.map(SQLValue.double) ?? .null }
        let attrs = record.attrsJSON
        var fullText = record.text.map(text)
        fullText.append(text(record.aux))
        var columns: [SQLValue] = [text(record.domain), .double(record.expires), text(record.related)]
        columns.reserveCapacity(15)
        columns += fullText
        columns += [.text(attrs), real(record.rankingHint), real(record.lastUsed), .integer(record.checksum(attrsJSON: attrs))]
        self.columns = columns
        self.fullText = fullText
    }
}
