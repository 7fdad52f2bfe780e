import Foundation
import SearchlightKit
import WebMarkup

/// Indexes a folder of HTML pages for the bundle `org.searchlight.sample.webpages` from their
/// markup (schema.org JSON-LD and microdata, Open Graph, app links, `<title>` and `<meta>`): one
/// item per page, identified by its path relative to the folder, `contentURL` the page's file (or
/// its app link when an installed app handles the link's scheme). A page that cannot be read
/// (too big, nested too deep, a link out of the folder…) is logged with its reason and left out;
/// the others are indexed. Nothing is fetched from the network.
@main
struct WebPagesIndexer: IndexExtension {
    let folder: PagesFolder
    let reader = MarkupReader()
    let handlers: SchemeHandlers

    /// `webpages-extension [FOLDER]` (default `pages`); `--dump` prints the items.
    init(context: ExtensionContext) {
        folder = PagesFolder(path: ArgumentExtractor(context.arguments).positionalArguments.first ?? "pages")
        handlers = SchemeHandlers(environment: context.environment.isEmpty ? ProcessInfo.processInfo.environment : context.environment)
    }

    func reindexAllSearchableItems(in index: SearchableIndex) async throws {
        let started = Date()
        let identifiers = try folder.identifiers()
        await index.reportProgress(completed: 0, total: identifiers.count)
        try await index.deleteAllSearchableItems()
        let tally = PageTally()
        try await index.indexSearchableItems(pages(identifiers, tally: tally))
        let seconds = Date().timeIntervalSince(started)
        log("reindex-all done", ["pages": "\(identifiers.count)", "indexed": "\(identifiers.count - tally.refused.count)",
                                 "refused": "\(tally.refused.count)", "seconds": String(format: "%.3f", seconds),
                                 "pagesPerSecond": String(format: "%.0f", Double(identifiers.count) / max(seconds, 1e-6))])
    }

    func reindexSearchableItems(withIdentifiers identifiers: [String], in index: SearchableIndex) async throws {
        let tally = PageTally()
        try await index.indexSearchableItems(pages(identifiers.map(folder.relativeIdentifier), tally: tally))
        // A page that vanished, or can no longer be read, leaves the index.
        if !tally.refused.isEmpty { try await index.deleteSearchableItems(withIdentifiers: tally.refused) }
    }

    func fileURL(forItem identifier: String, typeIdentifier: String, inPlace: Bool) async throws -> URL {
        do {
            let file = try folder.open(folder.relativeIdentifier(identifier))
            close(file.fd)
            return file.url
        } catch {
            throw SearchlightError(.invalidParams, "there is no page \(identifier.prefix(200)) in \(folder.root.path): \(error)")
        }
    }

    /// The pages as items, each read when the SDK asks for it; a refused page is logged (one line,
    /// its reason) and noted in `tally`, and the walk goes on.
    private func pages(_ identifiers: [String], tally: PageTally) -> some Sequence<SearchableItem> {
        identifiers.lazy.compactMap { [folder, reader, handlers] identifier in
            do {
                let page = try WebPage(identifier: identifier, folder: folder, reader: reader, handlers: handlers)
                for warning in page.markup.warnings { log("page read with a loss", ["page": identifier, "reason": warning]) }
                return page.searchableItem
            } catch {
                tally.refused.append(identifier)
                log("page not indexed", ["page": identifier, "reason": "\(error)"])
                return nil
            }
        }
    }
}

/// The identifiers of a reindex whose page was refused (filled while the items are read).
final class PageTally {
    var refused: [String] = []
}

/// One line on stderr, which the daemon logs under the extension's label: a constant message,
/// then `key=value` (values quoted when they hold spaces).
func log(_ message: String, _ fields: KeyValuePairs<String, String>) {
    let rendered = fields.map { key, value in
        let v = value.count > 300 ? String(value.prefix(300)) + "…" : value
        return v.contains(where: { $0 == " " || $0 == "\"" || $0 == "\n" }) ? "\(key)=\"\(v.replacingOccurrences(of: "\"", with: "'").replacingOccurrences(of: "\n", with: " "))\"" : "\(key)=\(v)"
    }
    FileHandle.standardError.write(Data(("webpages: " + message + " " + rendered.joined(separator: " ") + "\n").utf8))
}
