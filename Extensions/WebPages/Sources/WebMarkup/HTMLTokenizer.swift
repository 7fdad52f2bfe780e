/// One token of an HTML page.
public enum HTMLToken: Equatable, Sendable {
    /// `<name a="v">`; names are lowercased, attribute values have their entities decoded.
    case startTag(name: String, attributes: [(String, String)], selfClosing: Bool)
    case endTag(name: String)
    /// Character data, entities decoded (raw inside `<script>` and `<style>`).
    case text(String)

    public static func == (a: HTMLToken, b: HTMLToken) -> Bool {
        switch (a, b) {
        case let (.startTag(n1, a1, s1), .startTag(n2, a2, s2)):
            n1 == n2 && s1 == s2 && a1.count == a2.count && zip(a1, a2).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        case let (.endTag(n1), .endTag(n2)): n1 == n2
        case let (.text(t1), .text(t2)): t1 == t2
        default: false
        }
    }
}

/// A small HTML tokenizer over UTF-8 bytes, shaped like WHATWG's (§13.2.5) with its states
/// simplified: data, tag open, tag name, attribute name and value (quoted and unquoted),
/// self-closing, markup declarations (comments, doctype, CDATA as bogus comments), and the raw
/// text and RCDATA states of `<script>`, `<style>`, `<title>` and `<textarea>`. Malformed markup
/// never fails: like a browser, it reads something and goes on. It allocates per token, bounded
/// by `maxAttributes` and `maxAttributeBytes`, so its work is linear in the page's size.
public struct HTMLTokenizer {
    public static let maxAttributes = 64
    public static let maxAttributeBytes = 64 * 1024
    static let maxNameBytes = 64

    private let bytes: [UInt8]
    private var i = 0
    /// Set after a start tag of a raw text (`true`: entities stay) or RCDATA element.
    private var rawEnd: (name: [UInt8], decodesEntities: Bool)?

    public init(utf8 bytes: [UInt8]) { self.bytes = bytes }

    public mutating func next() -> HTMLToken? {
        if let raw = rawEnd {
            rawEnd = nil
            if let token = rawText(until: raw.name, decodesEntities: raw.decodesEntities) { return token }
        }
        while i < bytes.count {
            if bytes[i] != UInt8(ascii: "<") { return data() }
            let start = i
            i += 1
            guard i < bytes.count else { return .text("<") }
            let c = bytes[i]
            if isASCIILetter(c) { return startTag() }
            if c == UInt8(ascii: "/") {
                i += 1
                if i < bytes.count, isASCIILetter(bytes[i]) { return endTag() }
                if i < bytes.count, bytes[i] == UInt8(ascii: ">") { i += 1; continue }  // `</>`: ignored
                skipBogusComment()
                continue
            }
            if c == UInt8(ascii: "!") {
                i += 1
                if hasPrefix("--") { skipComment() } else { skipBogusComment() }  // doctype, CDATA
                continue
            }
            if c == UInt8(ascii: "?") { skipBogusComment(); continue }
            i = start + 1
            return .text("<")  // `< ` and `<3` are text
        }
        return nil
    }

    // MARK: states

    private mutating func data() -> HTMLToken {
        let start = i
        while i < bytes.count, bytes[i] != UInt8(ascii: "<") { i += 1 }
        return .text(HTMLEntities.decode(bytes[start..<i], inAttribute: false))
    }

    private mutating func startTag() -> HTMLToken {
        let name = tagName()
        var attributes: [(String, String)] = []
        var selfClosing = false
        attributeLoop: while i < bytes.count {
            let c = bytes[i]
            switch c {
            case UInt8(ascii: ">"):
                i += 1
                break attributeLoop
            case UInt8(ascii: "/"):
                i += 1
                if i < bytes.count, bytes[i] == UInt8(ascii: ">") { selfClosing = true }
            case _ where isSpace(c):
                i += 1
            default:
                let attribute = self.attribute()
                if attributes.count < Self.maxAttributes, !attributes.contains(where: { $0.0 == attribute.0 }) {
                    attributes.append(attribute)  // the first of duplicates wins, as in browsers
                }
            }
        }
        switch name {
        case "script", "style", "xmp", "iframe", "noembed", "noframes": rawEnd = (Array(name.utf8), false)
        case "title", "textarea": rawEnd = (Array(name.utf8), true)
        default: break
        }
        return .startTag(name: name, attributes: attributes, selfClosing: selfClosing)
    }

    private mutating func endTag() -> HTMLToken {
        let name = tagName()
        // Attributes on an end tag are read and dropped.
        while i < bytes.count, bytes[i] != UInt8(ascii: ">") {
            if bytes[i] == UInt8(ascii: "\"") || bytes[i] == UInt8(ascii: "'") { _ = quoted(bytes[i]) } else { i += 1 }
        }
        if i < bytes.count { i += 1 }
        return .endTag(name: name)
    }

    private mutating func tagName() -> String {
        let start = i
        while i < bytes.count, !isSpace(bytes[i]), bytes[i] != UInt8(ascii: "/"), bytes[i] != UInt8(ascii: ">") { i += 1 }
        return lowercased(bytes[start..<min(i, start + Self.maxNameBytes)])
    }

    /// Attribute name, then `=` and a value (double-quoted, single-quoted or unquoted), or none.
    private mutating func attribute() -> (String, String) {
        let start = i
        i += 1  // the first character belongs to the name even when it is `=` (WHATWG)
        while i < bytes.count, !isSpace(bytes[i]), !"/>=".utf8.contains(bytes[i]) { i += 1 }
        let name = lowercased(bytes[start..<min(i, start + Self.maxNameBytes)])
        var j = i
        while j < bytes.count, isSpace(bytes[j]) { j += 1 }
        guard j < bytes.count, bytes[j] == UInt8(ascii: "=") else { return (name, "") }
        i = j + 1
        while i < bytes.count, isSpace(bytes[i]) { i += 1 }
        guard i < bytes.count else { return (name, "") }
        let value: ArraySlice<UInt8>
        if bytes[i] == UInt8(ascii: "\"") || bytes[i] == UInt8(ascii: "'") {
            value = quoted(bytes[i])
        } else {
            let valueStart = i
            while i < bytes.count, !isSpace(bytes[i]), bytes[i] != UInt8(ascii: ">") { i += 1 }
            value = bytes[valueStart..<i]
        }
        return (name, HTMLEntities.decode(value.prefix(Self.maxAttributeBytes), inAttribute: true))
    }

    /// The bytes up to the closing `quote` (or the end), the quotes consumed.
    private mutating func quoted(_ quote: UInt8) -> ArraySlice<UInt8> {
        i += 1
        let start = i
        while i < bytes.count, bytes[i] != quote { i += 1 }
        let value = bytes[start..<i]
        if i < bytes.count { i += 1 }
        return value
    }

    /// The text up to `</name` (ASCII case-insensitive) followed by a space, `/` or `>`.
    private mutating func rawText(until name: [UInt8], decodesEntities: Bool) -> HTMLToken? {
        let start = i
        var end = bytes.count
        var j = i
        while j + 1 < bytes.count {
            if bytes[j] == UInt8(ascii: "<"), bytes[j + 1] == UInt8(ascii: "/"), matchesName(name, at: j + 2) {
                let after = j + 2 + name.count
                if after >= bytes.count || isSpace(bytes[after]) || bytes[after] == UInt8(ascii: "/") || bytes[after] == UInt8(ascii: ">") {
                    end = j
                    break
                }
            }
            j += 1
        }
        i = end
        guard end > start else { return nil }
        let text = bytes[start..<end]
        return .text(decodesEntities ? HTMLEntities.decode(text, inAttribute: false) : String(decoding: text, as: UTF8.self))
    }

    private mutating func skipComment() {
        i += 2
        while i < bytes.count {
            if hasPrefix("-->") { i += 3; return }
            if hasPrefix("--!>") { i += 4; return }
            i += 1
        }
    }

    private mutating func skipBogusComment() {
        while i < bytes.count, bytes[i] != UInt8(ascii: ">") { i += 1 }
        if i < bytes.count { i += 1 }
    }

    // MARK: helpers

    private func hasPrefix(_ s: String) -> Bool {
        var j = i
        for c in s.utf8 {
            guard j < bytes.count, bytes[j] == c else { return false }
            j += 1
        }
        return true
    }

    private func matchesName(_ name: [UInt8], at j: Int) -> Bool {
        guard j + name.count <= bytes.count else { return false }
        for k in 0..<name.count where lowerASCII(bytes[j + k]) != name[k] { return false }
        return true
    }
}

@inline(__always) func isSpace(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D }
@inline(__always) func isASCIILetter(_ c: UInt8) -> Bool { (c | 0x20) >= UInt8(ascii: "a") && (c | 0x20) <= UInt8(ascii: "z") }
@inline(__always) func lowerASCII(_ c: UInt8) -> UInt8 { c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z") ? c | 0x20 : c }
func lowercased(_ s: ArraySlice<UInt8>) -> String { String(decoding: s.map(lowerASCII), as: UTF8.self) }
