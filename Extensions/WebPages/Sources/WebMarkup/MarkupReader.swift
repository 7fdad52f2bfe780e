/// Reads a page's markup (`PageMarkup`) from its bytes: decodes them (`PageDecoder`), runs the
/// tokenizer, and keeps a stack of open elements — enough of WHATWG's tree construction to know
/// nesting (void elements, `<p>` and `<li>` closed by their next sibling, end tags that close
/// what they match) — for microdata scopes, the visible text and the depth limit.
public struct MarkupReader: Sendable {
    public var limits: MarkupLimits

    public init(limits: MarkupLimits = MarkupLimits()) { self.limits = limits }

    static let voidElements: Set<String> = ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                                            "param", "source", "track", "wbr", "keygen", "basefont", "frame"]
    /// Elements whose start closes an open `<p>` (and, for these, an open one of the same name).
    static let closesParagraph: Set<String> = ["address", "article", "aside", "blockquote", "div", "dl", "fieldset", "footer",
                                               "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "main", "nav", "ol",
                                               "p", "pre", "section", "table", "ul", "figure", "details", "menu"]
    static let closesSameName: Set<String> = ["li", "dt", "dd", "option", "tr", "td", "th"]
    static let inlineElements: Set<String> = ["a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd",
                                              "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "tt", "font"]
    /// Elements whose content is not visible text.
    static let hiddenElements: Set<String> = ["head", "script", "style", "template", "title", "noscript", "textarea", "iframe", "svg", "math"]

    /// The page's markup, or an error saying why it cannot be read (too big, nested too deep, too
    /// many elements). Lossy reads (invalid bytes, an unreadable JSON-LD block) are warnings.
    public func read(_ bytes: [UInt8]) throws(MarkupError) -> PageMarkup {
        guard bytes.count <= limits.maxPageBytes else {
            throw MarkupError("the page is \(bytes.count) bytes, over the \(limits.maxPageBytes)-byte limit")
        }
        let decoded = PageDecoder.decode(bytes)
        var walk = TreeWalk(limits: limits)
        walk.warnings = decoded.warnings
        var tokenizer = HTMLTokenizer(utf8: decoded.utf8)
        while let token = tokenizer.next() { try walk.consume(token) }
        return walk.finish()
    }
}

/// The state of one page's read.
struct TreeWalk {
    struct Open {
        var name: String
        /// The microdata scope this element opened (index into `scopes`).
        var scope: Int?
        /// The `itemprop` names whose value is this element's text, and the scope they go to.
        var textProperty: (names: [String], scope: Int)?
        var textStart: Int = 0
    }

    struct Scope {
        var types: [String]
        var properties: [String: [String]] = [:]
        /// Where this scope's value goes when it is itself an `itemprop` of an outer scope.
        var parent: (names: [String], scope: Int)?
    }

    let limits: MarkupLimits
    var warnings: [String] = []
    private var stack: [Open] = []
    private var elements = 0
    private var hiddenDepth = 0
    private var scopes: [Scope] = []
    private var meta: [String: [String]] = [:]
    private var htmlTitle: String?
    private var inTitle = false
    private var inJSONLD = false
    private var jsonLD: JSONLDReader
    private var text = ""
    private var textCut = false
    /// Text of open `itemprop` elements, appended while any is open.
    private var propertyText = ""
    /// How many open elements have a `textProperty` (their text is collected while any is open).
    private var openTextProperties = 0
    /// Open elements by name: an end tag that matches none is dropped without a scan of the stack
    /// (a page of a million stray end tags under 500 open elements stays linear).
    private var openCounts: [String: Int] = [:]

    init(limits: MarkupLimits) {
        self.limits = limits
        jsonLD = JSONLDReader(limits: limits)
    }

    mutating func consume(_ token: HTMLToken) throws(MarkupError) {
        switch token {
        case .text(let s): take(text: s)
        case .endTag(let name): close(name)
        case let .startTag(name, attributes, selfClosing): try open(name, attributes, selfClosing: selfClosing)
        }
    }

    private mutating func take(text s: String) {
        if inTitle, htmlTitle == nil { htmlTitle = s.capped(limits.maxFieldCharacters).collapsingWhitespace }
        if inJSONLD { jsonLD.read(s); return }
        if openTextProperties > 0, propertyText.utf8.count < limits.maxTextBytes { propertyText += s }
        guard hiddenDepth == 0, !textCut else { return }
        if text.utf8.count + s.utf8.count > limits.maxTextBytes {
            textCut = true
            warnings.append("the page's text is over \(limits.maxTextBytes) bytes; the rest is not indexed")
            return
        }
        text += s
    }

    private mutating func open(_ name: String, _ attributes: [(String, String)], selfClosing: Bool) throws(MarkupError) {
        elements += 1
        guard elements <= limits.maxElements else { throw MarkupError("the page has more than \(limits.maxElements) elements") }
        let attribute = { (key: String) in attributes.first { $0.0 == key }?.1 }
        // Implied end tags: `<p>` before a block, `<li>` before the next `<li>`.
        if MarkupReader.closesParagraph.contains(name) { closeSibling(of: "p") }
        if MarkupReader.closesSameName.contains(name) { closeSibling(of: name) }
        if !MarkupReader.inlineElements.contains(name) { separateText() }
        if name == "meta" { readMeta(attribute) }
        if name == "title", htmlTitle == nil { inTitle = true }
        if name == "script", attribute("type")?.lowercased().trimmingASCIISpaces == "application/ld+json" { inJSONLD = true }

        var element = TreeWalk.Open(name: name)
        let property = attribute("itemprop").map { $0.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).map(String.init) } ?? []
        let enclosing = stack.last(where: { $0.scope != nil })?.scope
        if attribute("itemscope") != nil {
            var scope = Scope(types: (attribute("itemtype") ?? "").split(separator: " ").map { String($0.split(separator: "/").last ?? "") })
            if !property.isEmpty, let enclosing { scope.parent = (property, enclosing) }
            if scopes.count < 1_000 {
                scopes.append(scope)
                element.scope = scopes.count - 1
            }
        } else if !property.isEmpty, let enclosing {
            if let value = Self.propertyValue(name, attribute) {
                for p in property { add(value, to: p, in: enclosing) }
            } else {
                element.textProperty = (property, enclosing)
                element.textStart = propertyText.utf8.count
            }
        }
        if MarkupReader.voidElements.contains(name) || selfClosing && !["script", "style", "title", "textarea"].contains(name) {
            if let p = element.textProperty { for n in p.names { add("", to: n, in: p.scope) } }
            return
        }
        guard stack.count < limits.maxDepth else { throw MarkupError("the page nests elements deeper than \(limits.maxDepth) levels") }
        if MarkupReader.hiddenElements.contains(name) { hiddenDepth += 1 }
        if element.textProperty != nil { openTextProperties += 1 }
        openCounts[name, default: 0] += 1
        stack.append(element)
    }

    /// `<li>` closes an open `<li>` (and what is open inside it, like a `<p>`) up to the list
    /// it is in; likewise `<dt>`/`<dd>`, `<tr>`, `<td>`/`<th>`, `<option>` and `<p>`.
    private mutating func closeSibling(of name: String) {
        let siblings: Set<String> = switch name {
        case "dt", "dd": ["dt", "dd"]
        case "td", "th": ["td", "th"]
        default: [name]
        }
        let boundaries: Set<String> = ["ul", "ol", "dl", "table", "tbody", "thead", "tfoot", "select", "html", "body", "template"]
        for index in stack.indices.reversed() {
            if siblings.contains(stack[index].name) {
                while stack.count > index { popLast() }
                return
            }
            if boundaries.contains(stack[index].name) || (name == "tr" && stack[index].name == "tr") { return }
            if stack.count - index > 16 { return }
        }
    }

    /// An end tag closes the innermost open element of its name and everything opened inside it;
    /// one that matches nothing open is ignored.
    private mutating func close(_ name: String) {
        guard openCounts[name, default: 0] > 0, let index = stack.lastIndex(where: { $0.name == name }) else { return }
        while stack.count > index { popLast() }
        if !MarkupReader.inlineElements.contains(name) { separateText() }
    }

    private mutating func popLast() {
        let element = stack.removeLast()
        openCounts[element.name, default: 1] -= 1
        if MarkupReader.hiddenElements.contains(element.name) { hiddenDepth -= 1 }
        if element.name == "title" { inTitle = false }
        if element.name == "script" { inJSONLD = false }
        if let p = element.textProperty {
            openTextProperties -= 1
            let utf8 = propertyText.utf8
            let start = utf8.index(utf8.startIndex, offsetBy: min(element.textStart, utf8.count))
            let value = String(propertyText[start...]).capped(limits.maxFieldCharacters).collapsingWhitespace
            for n in p.names { add(value, to: n, in: p.scope) }
        }
        if openTextProperties == 0 { propertyText = "" }
        if let index = element.scope, let parent = scopes[index].parent, let value = scopes[index].properties["name"]?.first {
            for n in parent.names { add(value, to: n, in: parent.scope) }
        }
    }

    private mutating func add(_ value: String, to property: String, in scope: Int) {
        guard scopes[scope].properties[property, default: []].count < 64 else { return }
        scopes[scope].properties[property, default: []].append(value)
    }

    /// Microdata values read from an attribute (WHATWG §5.2.4), or nil for the element's text.
    static func propertyValue(_ name: String, _ attribute: (String) -> String?) -> String? {
        switch name {
        case "meta": attribute("content") ?? ""
        case "a", "area", "link": attribute("href") ?? ""
        case "img", "audio", "video", "source", "embed", "iframe", "track": attribute("src") ?? ""
        case "object": attribute("data") ?? ""
        case "data", "meter": attribute("value") ?? ""
        case "time": attribute("datetime")
        default: nil
        }
    }

    private mutating func readMeta(_ attribute: (String) -> String?) {
        guard let key = (attribute("property") ?? attribute("name"))?.lowercased().trimmingASCIISpaces, !key.isEmpty,
              let content = attribute("content"), meta[key, default: []].count < 32 else { return }
        let value = content.capped(limits.maxFieldCharacters).collapsingWhitespace
        if !value.isEmpty { meta[key, default: []].append(value) }
    }

    private mutating func separateText() {
        if hiddenDepth == 0, !textCut, let last = text.utf8.last, last != 0x20 { text += " " }
    }

    // MARK: the merge

    mutating func finish() -> PageMarkup {
        while !stack.isEmpty { popLast() }
        warnings += jsonLD.warnings
        let sources = [jsonLD.fields, microdataFields(), openGraphFields(), htmlFields()]
        var page = PageMarkup()
        let titles = unique(sources.compactMap(\.title))
        page.title = titles.first
        page.alternateTitles = Array(titles.dropFirst())
        let descriptions = unique(sources.compactMap(\.description))
        page.description = descriptions.first
        page.otherDescriptions = Array(descriptions.dropFirst())
        page.keywords = Array(unique(sources.flatMap(\.keywords)).prefix(64))
        page.authors = sources.first { !$0.authors.isEmpty }?.authors ?? []
        page.datePublished = sources.lazy.compactMap(\.datePublished).first
        page.dateModified = sources.lazy.compactMap(\.dateModified).first
        // og:image first: it is the picture the page chose to be shown by.
        page.image = openGraphFields().image ?? sources.lazy.compactMap(\.image).first
        page.types = unique(sources.flatMap(\.types).filter { !$0.isEmpty })
        page.appLinks = meta.keys.filter { $0.hasPrefix("al:") && $0.hasSuffix(":url") }.sorted().flatMap { meta[$0] ?? [] }
        page.text = text.collapsingWhitespace
        page.warnings = warnings
        return page
    }

    private func microdataFields() -> MarkupFields {
        var fields = MarkupFields()
        for scope in scopes where scope.parent == nil {
            let p = scope.properties
            let first = { (key: String) in p[key]?.first { !$0.isEmpty } }
            fields.types += scope.types
            fields.title = fields.title ?? first("headline") ?? first("name")
            fields.description = fields.description ?? first("description")
            if fields.keywords.isEmpty { fields.keywords = (p["keywords"] ?? []).flatMap { $0.split(separator: ",").map { String($0).collapsingWhitespace } }.filter { !$0.isEmpty } }
            if fields.authors.isEmpty { fields.authors = (p["author"] ?? []).filter { !$0.isEmpty } }
            fields.datePublished = fields.datePublished ?? first("datePublished")
            fields.dateModified = fields.dateModified ?? first("dateModified")
            fields.image = fields.image ?? first("image")
        }
        return fields
    }

    private func openGraphFields() -> MarkupFields {
        var fields = MarkupFields()
        fields.title = meta["og:title"]?.first ?? meta["twitter:title"]?.first
        fields.description = meta["og:description"]?.first ?? meta["twitter:description"]?.first
        fields.keywords = meta["article:tag"] ?? []
        fields.authors = (meta["article:author"] ?? []).filter { !$0.hasPrefix("http") }
        fields.datePublished = meta["article:published_time"]?.first
        fields.dateModified = meta["article:modified_time"]?.first ?? meta["og:updated_time"]?.first
        fields.image = meta["og:image"]?.first ?? meta["og:image:url"]?.first
        return fields
    }

    private func htmlFields() -> MarkupFields {
        var fields = MarkupFields()
        fields.title = htmlTitle.flatMap { $0.isEmpty ? nil : $0 }
        fields.description = meta["description"]?.first
        fields.keywords = (meta["keywords"] ?? []).flatMap { $0.split(separator: ",").map { String($0).collapsingWhitespace } }.filter { !$0.isEmpty }
        fields.authors = meta["author"] ?? []
        return fields
    }

    private func unique(_ values: [String]) -> [String] {
        var seen = Set<String>()
        return values.filter { !$0.isEmpty && seen.insert($0.lowercased()).inserted }
    }
}
