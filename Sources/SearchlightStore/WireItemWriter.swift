import CSQLite
import Foundation
import SearchlightWire

/// Writes items as `query.search` and `query.user` return them (`ItemRecord.wireItem`) straight
/// from a statement's current row into an answer's bytes: the text columns escaped once from
/// SQLite's own buffers, the expiration date formatted in place, no `ItemRecord`, no `Row`, no
/// `JSONValue` tree (which, with its dictionaries and strings, was most of the daemon's work per
/// item after the search itself). The stored JSON of the other attributes is still parsed, when
/// one of them is asked for, since dates and custom dates change form on the way out.
///
/// The same JSON as `wireItem(fetch:)` (members in another order, which JSON does not fix);
/// `WireItemWriterTests` compares the two on real and hostile items.
struct WireItemWriter {
    private struct TextColumn {
        /// `"name":`, ready to copy.
        let key: [UInt8]
        let name: String
        let isArray: Bool
    }

    /// The text attributes returned, by column position (nil: not asked for).
    private let text: [TextColumn?]
    /// Whether the stored JSON of the other attributes is read.
    private let readsAttrs: Bool
    private let fetch: Set<String>?

    /// Every text attribute's column, made once.
    private static let columns: [TextColumn] = AttributeCatalog.textAttributes.map { name in
        var key: [UInt8] = []
        JSONValue.writeString(name, to: &key)
        key.append(UInt8(ascii: ":"))
        return TextColumn(key: key, name: name, isArray: AttributeCatalog.kinds[name] == .textArray)
    }

    /// For rows of `ItemRecord.selectColumns(fetch:)` with the same `fetch`.
    init(fetch: Set<String>?) {
        self.fetch = fetch
        text = Self.columns.map { column in fetch?.contains(column.name) ?? true ? column : nil }
        readsAttrs = !(fetch.map { $0.isSubset(of: ItemRecord.textAttributeNames) } ?? false)
    }

    /// Writes the item of `statement`'s row whose `ItemRecord.selectColumns(fetch:)` begin at
    /// column `offset`.
    func write(_ s: Statement, offset: Int32, to out: inout [UInt8]) {
        var attrs: [String: JSONValue] = [:]
        if readsAttrs {
            // As `ItemRecord(row:)`: a stored text that does not parse is no attributes.
            let stored = s.textColumn(offset + 10).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
            attrs = (try? JSONValue.parse(stored))?.objectValue ?? [:]
        }
        // The fixed members' keys and braces are written as whole pieces (one append each, not
        // five): with 20 short items, the appends were a third of the answer's JSON.
        out.append(contentsOf: Self.itemStart)
        Self.writeText(s.textColumn(offset) ?? UnsafeBufferPointer(start: nil, count: 0), to: &out)
        out.append(contentsOf: Self.attributeSetStart)
        var set = JSONObjectWriter()
        for (i, column) in text.enumerated() {
            guard let column, let value = s.textColumn(offset + 3 + Int32(i)) else { continue }
            // An attribute of the stored JSON wins over a column of the same name (as in `wireAttributes`).
            if !attrs.isEmpty, attrs[column.name] != nil { continue }
            set.key(encoded: column.key, &out)
            if column.isArray {
                Self.writeArray(value, to: &out)
            } else {
                Self.writeText(value, to: &out)
            }
        }
        for (name, value) in attrs where name != "customDates" && (fetch?.contains(name) ?? true) {
            set.key(escaping: name, &out)
            if name == "custom" {
                ItemRecord.wireCustom(value, dates: attrs["customDates"]).write(to: &out)
            } else if AttributeCatalog.kinds[name] == .date, let t = value.doubleValue {
                ISO8601.writeQuoted(Self.dateSeconds(t), to: &out)
            } else {
                value.write(to: &out)
            }
        }
        out.append(contentsOf: Self.attributeSetEnd)
        ISO8601.writeQuoted(Self.dateSeconds(s.realColumn(offset + 2) ?? 0), to: &out)
        if let domain = s.textColumn(offset + 1) {
            out.append(contentsOf: Self.domainKey)
            Self.writeText(domain, to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    private static let itemStart = Array(#"{"uniqueIdentifier":"#.utf8)
    private static let attributeSetStart = Array(#","attributeSet":{"#.utf8)
    private static let attributeSetEnd = Array(#"},"expirationDate":"#.utf8)
    private static let domainKey = Array(#","domainIdentifier":"#.utf8)

    /// `t` as `Date(timeIntervalSince1970: t).timeIntervalSince1970` gives it back (what the
    /// `JSONValue` path formats: a `Date` keeps seconds since 2001, so the last bit can differ).
    static func dateSeconds(_ t: Double) -> Double { Date(timeIntervalSince1970: t).timeIntervalSince1970 }

    /// A text column as a JSON string: as it is when ASCII, else decoded as `String(decoding:)`
    /// would (bad UTF-8 in a damaged file becomes U+FFFD, as on the `JSONValue` path).
    static func writeText(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        if JSONValue.isASCII(bytes) {
            JSONValue.writeString(utf8: bytes, to: &out)
        } else {
            JSONValue.writeString(String(decoding: bytes, as: UTF8.self), to: &out)
        }
    }

    /// A text-array column (elements joined by `AttributeCatalog.arraySeparator`, one byte) as
    /// a JSON array of strings, empty elements kept.
    static func writeArray(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        let separator = UInt8(ascii: "\u{1F}")
        out.append(UInt8(ascii: "["))
        var start = 0
        for i in 0...bytes.count where i == bytes.count || bytes[i] == separator {
            if start > 0 { out.append(UInt8(ascii: ",")) }
            writeText(UnsafeBufferPointer(rebasing: bytes[start..<i]), to: &out)
            start = i + 1
        }
        out.append(UInt8(ascii: "]"))
    }
}

extension Statement {
    /// Column `i`'s text in SQLite's buffer (valid until the next step or reset), nil unless the
    /// value is TEXT (as `Row.string`).
    func textColumn(_ i: Int32) -> UnsafeBufferPointer<UInt8>? {
        guard sqlite3_column_type(handle, i) == SQLITE_TEXT else { return nil }
        guard let p = sqlite3_column_text(handle, i) else { return UnsafeBufferPointer(start: nil, count: 0) }
        return UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(handle, i)))
    }

    /// Column `i` as a number when it is REAL or INTEGER (as `Row.double`).
    func realColumn(_ i: Int32) -> Double? {
        switch sqlite3_column_type(handle, i) {
        case SQLITE_FLOAT: sqlite3_column_double(handle, i)
        case SQLITE_INTEGER: Double(sqlite3_column_int64(handle, i))
        default: nil
        }
    }
}
