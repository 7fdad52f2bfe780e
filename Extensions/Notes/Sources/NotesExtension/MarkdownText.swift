/// The little Markdown a notes indexer needs: front matter to skip, and the first heading.
enum MarkdownText {
    /// The text without a leading YAML front matter block (`---` … `---` or `...`).
    static func removingFrontMatter(_ text: String) -> String {
        guard text.hasPrefix("---\n") || text.hasPrefix("---\r\n") else { return text }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropFirst()
        while let line = lines.popFirst() {
            let trimmed = line.trimmingTrailingWhitespace
            if trimmed == "---" || trimmed == "..." { return lines.joined(separator: "\n") }
        }
        return text  // unterminated: it was a thematic break, not front matter
    }

    /// The text of the first ATX (`# Title`) or setext (`Title` over `===`/`---`) heading,
    /// ignoring fenced code blocks, where `# comment` lines are not headings.
    static func firstHeading(in text: String) -> String? {
        var fence: Substring?
        var previous: Substring = ""
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = rawLine.trimmingTrailingWhitespace
            let indented = line.prefix(while: { $0 == " " }).count
            let content = line.dropFirst(min(indented, 3))
            if let open = fence {
                if content.hasPrefix(open) { fence = nil }
                previous = ""
                continue
            }
            if indented < 4, content.hasPrefix("```") || content.hasPrefix("~~~") {
                fence = content.prefix(3)
                previous = ""
                continue
            }
            if indented < 4, let heading = atxHeading(content) { return heading }
            if indented < 4, !content.isEmpty, content.allSatisfy({ $0 == "=" }) || content.allSatisfy({ $0 == "-" }) {
                let title = previous.trimming(" \t")
                if !title.isEmpty { return String(title) }
            }
            previous = line
        }
        return nil
    }

    /// `## Title ##` -> `Title`; nil when the line is no ATX heading or the heading is empty.
    private static func atxHeading(_ line: Substring) -> String? {
        let hashes = line.prefix(while: { $0 == "#" }).count
        guard (1...6).contains(hashes) else { return nil }
        let rest = line.dropFirst(hashes)
        guard rest.isEmpty || rest.first == " " || rest.first == "\t" else { return nil }
        var title = rest.trimming(" \t")
        // A closing run of #s is decoration, when a space separates it from the text.
        let closing = title.reversed().prefix(while: { $0 == "#" }).count
        if closing > 0, closing == title.count || title.dropLast(closing).last == " " {
            title = title.dropLast(closing).trimming(" \t")
        }
        return title.isEmpty ? nil : String(title)
    }
}

extension Substring {
    var trimmingTrailingWhitespace: Substring {
        var s = self
        while let last = s.last, last == " " || last == "\t" || last == "\r" { s.removeLast() }
        return s
    }

    func trimming(_ set: String) -> Substring {
        var s = self
        while let first = s.first, set.contains(first) { s.removeFirst() }
        while let last = s.last, set.contains(last) { s.removeLast() }
        return s
    }
}
