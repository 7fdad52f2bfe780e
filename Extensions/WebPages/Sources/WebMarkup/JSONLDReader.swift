import Foundation

/// schema.org fields from `<script type="application/ld+json">` blocks, parsed with Foundation's
/// JSONSerialization after a byte scan has bounded the block's size and nesting. A node is an
/// object with an `@type`, at the top, in a top-level array, or in `@graph`; each field is taken
/// from the first node that has it. `@id` references are not followed.
struct JSONLDReader {
    let limits: MarkupLimits
    private(set) var fields = MarkupFields()
    private(set) var warnings: [String] = []
    private var nodesSeen = 0
    private var blocks = 0

    init(limits: MarkupLimits) { self.limits = limits }

    mutating func read(_ script: String) {
        blocks += 1
        let bytes = Array(script.utf8)
        guard bytes.count <= limits.maxJSONLDBytes else {
            warnings.append("JSON-LD block \(blocks) is \(bytes.count) bytes, over the \(limits.maxJSONLDBytes)-byte limit; skipped")
            return
        }
        guard Self.nestingDepth(bytes) <= limits.maxJSONLDDepth else {
            warnings.append("JSON-LD block \(blocks) nests deeper than \(limits.maxJSONLDDepth) levels; skipped")
            return
        }
        guard let root = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]) else {
            warnings.append("JSON-LD block \(blocks) is not valid JSON; skipped")
            return
        }
        var nodes: [[String: Any]] = []
        collect(root, into: &nodes, level: 0)
        for node in nodes { take(node) }
    }

    /// The `@type`d objects: the root, the elements of a root array, and `@graph`'s.
    private mutating func collect(_ value: Any, into nodes: inout [[String: Any]], level: Int) {
        guard level < 3, nodesSeen < limits.maxJSONLDNodes else { return }
        nodesSeen += 1
        if let array = value as? [Any] {
            for element in array { collect(element, into: &nodes, level: level + 1) }
        } else if let object = value as? [String: Any] {
            if object["@type"] != nil { nodes.append(object) }
            if let graph = object["@graph"] { collect(graph, into: &nodes, level: level + 1) }
        }
    }

    private mutating func take(_ node: [String: Any]) {
        fields.types += strings(node["@type"]).map { $0.hasPrefix("http") ? String($0.split(separator: "/").last ?? "") : $0 }
        if fields.title == nil { fields.title = text(node["headline"]) ?? text(node["name"]) }
        if fields.description == nil { fields.description = text(node["description"]) }
        if fields.keywords.isEmpty {
            fields.keywords = strings(node["keywords"]).flatMap { $0.split(separator: ",").map { String($0).collapsingWhitespace } }
                .filter { !$0.isEmpty }
        }
        if fields.authors.isEmpty { fields.authors = names(node["author"]) + names(node["creator"]) }
        if fields.datePublished == nil { fields.datePublished = text(node["datePublished"]) ?? text(node["dateCreated"]) }
        if fields.dateModified == nil { fields.dateModified = text(node["dateModified"]) }
        if fields.image == nil { fields.image = url(node["image"]) ?? url(node["thumbnailUrl"]) }
    }

    /// A string, or the first string of an array, cleaned and capped.
    private mutating func text(_ value: Any?) -> String? {
        strings(value).first
    }

    private mutating func strings(_ value: Any?) -> [String] {
        guard let value, nodesSeen < limits.maxJSONLDNodes else { return [] }
        nodesSeen += 1
        if let s = value as? String {
            let clean = s.capped(limits.maxFieldCharacters).collapsingWhitespace
            return clean.isEmpty ? [] : [clean]
        }
        if let a = value as? [Any] { return a.prefix(64).flatMap { $0 is [Any] ? [] : strings($0) } }
        return []
    }

    /// Person or Organization names: a string, an object's `name`, or an array of either.
    private mutating func names(_ value: Any?) -> [String] {
        guard let value, nodesSeen < limits.maxJSONLDNodes else { return [] }
        nodesSeen += 1
        if let object = value as? [String: Any] { return strings(object["name"]) }
        if let array = value as? [Any] { return array.prefix(32).flatMap { $0 is [Any] ? [] : names($0) } }
        return strings(value)
    }

    /// An ImageObject's `url` (or `contentUrl`), a URL string, or the first of an array.
    private mutating func url(_ value: Any?) -> String? {
        if let object = value as? [String: Any] { return text(object["url"]) ?? text(object["contentUrl"]) }
        if let array = value as? [Any], let first = array.first { return url(first) }
        return text(value)
    }

    /// The deepest nesting of arrays and objects, outside strings (a bomb is refused before parsing).
    static func nestingDepth(_ bytes: [UInt8]) -> Int {
        var depth = 0, deepest = 0
        var inString = false, escaped = false
        for b in bytes {
            if inString {
                if escaped { escaped = false } else if b == UInt8(ascii: "\\") { escaped = true } else if b == UInt8(ascii: "\"") { inString = false }
                continue
            }
            switch b {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return deepest
    }
}
