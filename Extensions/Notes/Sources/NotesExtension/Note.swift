#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// One note file, read and turned into a searchable item.
struct Note: Sendable {
    var identifier: String
    var url: URL
    var contentType: String
    var title: String
    var text: String
    var modified: Date

    /// Reads the note at `url`; nil if it vanished or cannot be read.
    init?(identifier: String, url: URL) {
        guard let contentType = NotesFolder.contentType(ofFileNamed: url.lastPathComponent),
            let bytes = FileManager.default.contents(atPath: url.path)
        else { return nil }
        var info = stat()
        guard stat(url.path, &info) == 0 else { return nil }
        self.identifier = identifier
        self.url = url
        self.contentType = contentType
        // Invalid UTF-8 (a note saved in Latin-1) is repaired, not refused: the words still index.
        let text = MarkdownText.removingFrontMatter(String(decoding: bytes, as: UTF8.self))
        let fileTitle = url.deletingPathExtension().lastPathComponent
        title = contentType == "public.plain-text" ? fileTitle : MarkdownText.firstHeading(in: text) ?? fileTitle
        self.text = text
        modified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
    }

    /// The subfolder path, dotted (`recipes/soups/x.md` -> `recipes.soups`), so that deleting the
    /// domain `recipes` forgets a whole folder. Dots inside folder names would read as nesting.
    var domainIdentifier: String? {
        let folders = identifier.split(separator: "/").dropLast()
        guard !folders.isEmpty else { return nil }
        return folders.map { $0.replacingOccurrences(of: ".", with: "_") }.joined(separator: ".")
    }

    var searchableItem: SearchableItem {
        var attributes = AttributeSet(contentType: contentType)
        attributes.title = title
        attributes.displayName = url.lastPathComponent
        attributes.textContent = text
        attributes.contentURL = url
        attributes.contentModificationDate = modified
        attributes.providerFileTypeIdentifiers = [contentType]
        var item = SearchableItem(uniqueIdentifier: identifier, domainIdentifier: domainIdentifier, attributeSet: attributes)
        Self.fitItemLimit(&item)
        return item
    }

    /// A note up to 1 MiB can still encode over the index's 1 MiB item limit once escaped
    /// (newlines, quotes); the end of such a note is left out rather than failing its whole chunk.
    static func fitItemLimit(_ item: inout SearchableItem, limit: Int = Limits().maxItemBytes - 4096) {
        while item.json.serializedByteCount > limit, let text = item.attributeSet.textContent, !text.isEmpty {
            item.attributeSet.textContent = String(text.prefix(text.count * 3 / 4))
        }
    }
}
