/// What a page says about itself, merged from its markup in this order of trust: schema.org
/// JSON-LD, schema.org microdata, Open Graph (`og:`, `article:`), then `<title>` and
/// `<meta name="description|keywords|author">`.
public struct PageMarkup: Sendable, Equatable {
    public var title: String?
    /// The other titles the page gives (say a `<title>` that differs from `og:title`).
    public var alternateTitles: [String] = []
    public var description: String?
    /// The other descriptions the page gives, indexed as text.
    public var otherDescriptions: [String] = []
    public var keywords: [String] = []
    public var authors: [String] = []
    /// ISO 8601 as written (schema.org `datePublished`, `article:published_time`).
    public var datePublished: String?
    public var dateModified: String?
    /// The image reference as written (`og:image`, schema.org `image`): relative or absolute.
    public var image: String?
    /// App-link URLs (`al:PLATFORM:url`), in page order.
    public var appLinks: [String] = []
    /// schema.org types (`Article`, `TechArticle`…).
    public var types: [String] = []
    /// The visible text of the body (no scripts, styles or head), whitespace collapsed, capped.
    public var text: String = ""
    /// What was read with a loss (invalid bytes, an unreadable JSON-LD block, text cut short).
    public var warnings: [String] = []

    public init() {}
}

/// Why a page is not indexed: always one clear sentence.
public struct MarkupError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The fields one source (JSON-LD, microdata, Open Graph, plain HTML) gives.
struct MarkupFields {
    var title: String?
    var description: String?
    var keywords: [String] = []
    var authors: [String] = []
    var datePublished: String?
    var dateModified: String?
    var image: String?
    var types: [String] = []
}

/// Limits on what one page may cost.
public struct MarkupLimits: Sendable {
    /// A bigger file is refused before it is read.
    public var maxPageBytes = 4 << 20
    /// Elements open at once; deeper nesting is refused (a browser would build it; an indexer has no need).
    public var maxDepth = 512
    public var maxElements = 500_000
    public var maxTextBytes = 256 << 10
    /// One `<script type="application/ld+json">`; bigger ones are skipped with a warning.
    public var maxJSONLDBytes = 256 << 10
    /// JSON-LD arrays and objects nested deeper are skipped with a warning.
    public var maxJSONLDDepth = 32
    /// JSON-LD values looked at per page.
    public var maxJSONLDNodes = 10_000
    /// A title, description, keyword or name longer than this is cut.
    public var maxFieldCharacters = 2_000

    public init() {}
}

extension String {
    /// Runs of whitespace as one space, trimmed.
    var collapsingWhitespace: String {
        var out = ""
        out.reserveCapacity(utf8.count)
        var pendingSpace = false
        for scalar in unicodeScalars {
            if scalar.value < 0x80 ? isSpace(UInt8(scalar.value)) : scalar.properties.isWhitespace {
                pendingSpace = !out.isEmpty
            } else {
                if pendingSpace { out.append(" ") }
                pendingSpace = false
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    func capped(_ n: Int) -> String { count > n ? String(prefix(n)) : self }
}
