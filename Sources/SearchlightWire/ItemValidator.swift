import Foundation

/// Validates items received on the wire. One invalid item fails the whole call (DESIGN §4), with a
/// message that names the item, the field and the fix.
public struct ItemValidator: Sendable {
    public var limits: Limits

    public init(limits: Limits = Limits()) { self.limits = limits }

    /// Validates a whole `items` array.
    public func validate(items value: JSONValue?) throws(SearchlightError) -> [SearchableItem] {
        guard let array = value?.arrayValue else {
            throw SearchlightError(.invalidParams, "\"items\" must be an array of items")
        }
        var items: [SearchableItem] = []
        items.reserveCapacity(array.count)
        for (index, element) in array.enumerated() {
            items.append(try validate(item: element, index: index))
        }
        return items
    }

    public func validate(item value: JSONValue, index: Int = 0) throws(SearchlightError) -> SearchableItem {
        func fail(_ message: String, id: String? = nil) -> SearchlightError {
            let which = id.map { "item \(index) (\"\($0.prefix(80))\")" } ?? "item \(index)"
            return SearchlightError(.invalidItem, "\(which): \(message)", data: ["index": .number(Double(index))])
        }
        guard case .object(let object) = value else { throw fail("must be an object, not \(value.typeName)") }
        guard case .string(let id)? = object["uniqueIdentifier"] else {
            throw fail("\"uniqueIdentifier\" is required and must be a string")
        }
        guard try validIdentifier(id) else {
            throw fail("\"uniqueIdentifier\" must be 1 to \(limits.maxIdentifierBytes) bytes with no NUL")
        }
        var item = SearchableItem(uniqueIdentifier: id, attributeSet: AttributeSet())
        switch object["domainIdentifier"] {
        case nil, .null?: break
        case .string(let d)?:
            guard validDomain(d) else {
                throw fail("\"domainIdentifier\" must be dot-separated non-empty components, at most \(limits.maxIdentifierBytes) bytes", id: id)
            }
            item.domainIdentifier = d
        default: throw fail("\"domainIdentifier\" must be a string", id: id)
        }
        switch object["expirationDate"] {
        case nil, .null?: break
        case .string(let s)?:
            guard let d = ISO8601.parse(s) else {
                throw fail("\"expirationDate\" must be ISO 8601 with a zone, e.g. 2026-12-31T00:00:00.000Z", id: id)
            }
            item.expirationDate = d
        default: throw fail("\"expirationDate\" must be an ISO 8601 string", id: id)
        }
        switch object["isUpdate"] {
        case nil, .null?: break
        case .bool(let b)?: item.isUpdate = b
        default: throw fail("\"isUpdate\" must be a boolean", id: id)
        }
        switch object["attributeSet"] {
        case nil, .null?: break
        case .object(let attributes)?:
            item.attributeSet = AttributeSet(validatedValues: try validate(attributes: attributes, isUpdate: item.isUpdate, fail: { fail($0, id: id) }))
        default: throw fail("\"attributeSet\" must be an object", id: id)
        }
        // The exact encoded size only when the cheap bound does not already settle it.
        if value.serializedByteCountBound > limits.maxItemBytes, case let size = value.serializedByteCount, size > limits.maxItemBytes {
            throw fail("encoded size \(size) bytes exceeds the \(limits.maxItemBytes)-byte item limit; move large content out of textContent", id: id)
        }
        return item
    }

    private func validIdentifier(_ s: String) throws(SearchlightError) -> Bool {
        let n = s.utf8.count
        return n > 0 && n <= limits.maxIdentifierBytes && !s.utf8.contains(0)
    }

    public func validDomain(_ d: String) -> Bool {
        let n = d.utf8.count
        guard n > 0, n <= limits.maxIdentifierBytes, !d.utf8.contains(0) else { return false }
        return !d.split(separator: ".", omittingEmptySubsequences: false).contains(where: \.isEmpty)
    }

    /// The attributes to keep: the input itself when every attribute is known and set (the
    /// common case, which then costs no copy), else a copy without unknown and null ones.
    private func validate(
        attributes: [String: JSONValue], isUpdate: Bool, fail: (String) -> SearchlightError
    ) throws(SearchlightError) -> [String: JSONValue] {
        var unchanged = true
        for (name, value) in attributes {
            if value.isNull {
                if !isUpdate { unchanged = false }  // on a new item, null is just absent
                continue
            }
            if name == "custom" {
                guard case .object(let custom) = value else { throw fail("attributeSet.custom must be an object") }
                if try validate(custom: custom, isUpdate: isUpdate, fail: fail) != nil { unchanged = false }
                continue
            }
            guard let kind = AttributeCatalog.kinds[name] else {
                unchanged = false  // unknown attributes are ignored: fields are additive (DESIGN §4)
                continue
            }
            try check(value, kind: kind, name: name, fail: fail)
        }
        if unchanged { return attributes }
        var out: [String: JSONValue] = [:]
        for (name, value) in attributes {
            if value.isNull {
                // Null removes the attribute from an update; on a new item it is just absent.
                if isUpdate { out[name] = .null }
            } else if name == "custom", case .object(let custom) = value {
                out["custom"] = try validate(custom: custom, isUpdate: isUpdate, fail: fail).map(JSONValue.object) ?? value
            } else if AttributeCatalog.kinds[name] != nil {
                out[name] = value
            }
        }
        return out
    }

    /// Checks custom attributes; returns a copy without the null ones on a new item, or nil when
    /// the input can be kept as it is.
    private func validate(
        custom: [String: JSONValue], isUpdate: Bool, fail: (String) -> SearchlightError
    ) throws(SearchlightError) -> [String: JSONValue]? {
        guard custom.count <= limits.maxCustomAttributes else {
            throw fail("attributeSet.custom has \(custom.count) attributes; the limit is \(limits.maxCustomAttributes)")
        }
        var hasNull = false
        for (key, v) in custom {
            guard AttributeCatalog.isValidCustomName(key) else {
                throw fail("custom attribute name \"\(key.prefix(40))\" must match [A-Za-z0-9_]+ (at most 128 bytes)")
            }
            if v.isNull {
                hasNull = true
                continue
            }
            guard CustomAttributeValue(json: v) != nil else {
                throw fail("custom attribute \"\(key)\" must be a string, number, boolean, {\"$date\": ISO 8601} or an array of them")
            }
        }
        guard hasNull, !isUpdate else { return nil }
        return custom.filter { !$0.value.isNull }
    }

    private func check(_ value: JSONValue, kind: AttributeKind, name: String, fail: (String) -> SearchlightError) throws(SearchlightError) {
        switch kind {
        case .text, .string:
            guard value.stringValue != nil else { throw fail("attributeSet.\(name) must be a string, not \(value.typeName)") }
        case .textArray, .stringArray:
            guard let a = value.arrayValue, a.allSatisfy({ $0.stringValue != nil }) else {
                throw fail("attributeSet.\(name) must be an array of strings")
            }
        case .date:
            guard let s = value.stringValue, ISO8601.parse(s) != nil else {
                throw fail("attributeSet.\(name) must be an ISO 8601 date-time with a zone, e.g. 2026-11-22T10:00:00.000Z")
            }
        case .number:
            guard let n = value.doubleValue else { throw fail("attributeSet.\(name) must be a number") }
            if name == "rankingHint", !(0...100).contains(n) {
                throw fail("attributeSet.rankingHint must be from 0 to 100, got \(n)")
            }
        case .bool:
            guard value.boolValue != nil else { throw fail("attributeSet.\(name) must be a boolean") }
        case .data:
            guard let s = value.stringValue, Data(base64Encoded: s) != nil else {
                throw fail("attributeSet.\(name) must be base64-encoded data")
            }
        }
    }
}
