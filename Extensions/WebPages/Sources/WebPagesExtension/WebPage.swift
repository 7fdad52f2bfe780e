#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import WebMarkup

/// One page, read from its markup and turned into a searchable item.
struct WebPage {
    var identifier: String
    var url: URL
    var modified: Date
    var markup: PageMarkup
    /// `og:image` (or schema.org `image`) when it is a file inside the folder.
    var thumbnail: URL?
    /// The first app link whose scheme an installed app handles, and that app's desktop id.
    var appLink: (url: String, desktopID: String)?
    /// An app link no installed app handles: kept as a custom attribute, the page opens instead.
    var unhandledAppLink: String?

    /// Reads the page `identifier` names; throws why it is not indexed (refused path, too big,
    /// nested too deep…). Only files inside the folder are read; no URL is ever fetched.
    init(identifier: String, folder: PagesFolder, reader: MarkupReader, handlers: SchemeHandlers) throws {
        let file = try folder.open(identifier)
        defer { close(file.fd) }
        guard file.size <= reader.limits.maxPageBytes else {
            throw PageError("the page is \(file.size) bytes, over the \(reader.limits.maxPageBytes)-byte limit")
        }
        var bytes = [UInt8](repeating: 0, count: file.size + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(file.fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw PageError("it cannot be read: \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            count += n
        }
        // Grown since fstat: the limit holds for what is read, too.
        guard count <= reader.limits.maxPageBytes else { throw PageError("the page grew past the \(reader.limits.maxPageBytes)-byte limit while read") }
        bytes.removeLast(bytes.count - count)
        do {
            markup = try reader.read(bytes)
        } catch {
            throw PageError(error.description)
        }
        self.identifier = identifier
        url = file.url
        modified = file.modified
        thumbnail = markup.image.flatMap { Self.localFile($0, page: file.url, folder: folder) }
        for link in markup.appLinks.prefix(16) where link.utf8.count <= 2048 {
            guard let scheme = URL(string: link)?.scheme, SchemeHandlers.isAppScheme(scheme) else { continue }
            if let id = handlers.desktopID(forScheme: scheme) {
                appLink = (link, id)
                break
            }
            if unhandledAppLink == nil { unhandledAppLink = link }
        }
    }

    /// A page's image reference as a `file://` URL, when it names a regular file inside the
    /// folder: relative to the page, `/`-rooted at the folder, or a `file:` URL. Anything with
    /// another scheme (http, data…) is never fetched, so the page gets no thumbnail.
    static func localFile(_ reference: String, page: URL, folder: PagesFolder) -> URL? {
        guard reference.utf8.count <= 2048, !reference.contains("\0"), let realRoot = folder.realRoot else { return nil }
        let path: String
        if let url = URL(string: reference), let scheme = url.scheme, scheme.count > 1 {  // `C:` is no scheme here
            guard url.isFileURL else { return nil }
            path = url.path
        } else if reference.hasPrefix("/") {
            path = folder.root.path + (reference.removingPercentEncoding ?? reference)
        } else {
            let clean = String(reference.prefix { $0 != "?" && $0 != "#" })
            path = page.deletingLastPathComponent().path + "/" + (clean.removingPercentEncoding ?? clean)
        }
        guard let real = PagesFolder.realPath(path), real.hasPrefix(realRoot + "/") else { return nil }
        var info = stat()
        guard stat(real, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        return URL(fileURLWithPath: real)
    }

    var domainIdentifier: String? {
        let folders = identifier.split(separator: "/").dropLast()
        guard !folders.isEmpty else { return nil }
        return folders.map { $0.replacingOccurrences(of: ".", with: "_") }.joined(separator: ".")
    }

    var searchableItem: SearchableItem {
        var attributes = AttributeSet(contentType: "public.html")
        let title = markup.title ?? url.deletingPathExtension().lastPathComponent
        attributes.title = title
        attributes.displayName = title
        if !markup.alternateTitles.isEmpty { attributes.alternateNames = markup.alternateTitles }
        attributes.contentDescription = markup.description
        let text = (markup.otherDescriptions + [markup.text]).joined(separator: "\n")
        if !text.isEmpty { attributes.textContent = text }
        if !markup.keywords.isEmpty { attributes.keywords = markup.keywords }
        if !markup.authors.isEmpty { attributes.authorNames = markup.authors }
        attributes.contentCreationDate = markup.datePublished.flatMap(Self.date)
        attributes.contentModificationDate = markup.dateModified.flatMap(Self.date) ?? modified
        attributes.thumbnailURL = thumbnail
        attributes.providerFileTypeIdentifiers = ["public.html"]
        if let appLink {
            // Opening the result opens the deep link, which the desktop hands to the app that
            // handles its scheme; the page stays at hand.
            attributes.contentURL = URL(string: appLink.url)
            attributes[custom: "appLinkHandler"] = .string(appLink.desktopID)
            attributes[custom: "pageURL"] = .string(url.absoluteString)
        } else {
            attributes.contentURL = url
            if let unhandledAppLink { attributes[custom: "appLink"] = .string(unhandledAppLink) }
        }
        if !markup.types.isEmpty { attributes[custom: "schemaTypes"] = .array(markup.types.prefix(16).map { .string($0) }) }
        var item = SearchableItem(uniqueIdentifier: identifier, domainIdentifier: domainIdentifier, attributeSet: attributes)
        Self.fitItemLimit(&item)
        return item
    }

    /// The page's text is cut, never the page refused, when its item would pass the index's limit.
    static func fitItemLimit(_ item: inout SearchableItem, limit: Int = Limits().maxItemBytes - 4096) {
        while item.json.serializedByteCount > limit, let text = item.attributeSet.textContent, !text.isEmpty {
            item.attributeSet.textContent = String(text.prefix(text.count * 3 / 4))
        }
    }

    /// schema.org and Open Graph dates: ISO 8601 with or without time, zone or fraction.
    static func date(_ text: String) -> Date? {
        let text = text.trimmingCharacters(in: .whitespaces)
        let formatter = ISO8601DateFormatter()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds], [.withFullDate]] {
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
