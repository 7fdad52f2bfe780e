import Foundation
import SearchlightDesktop
import SearchlightKit

/// One result of the desktop's search: what GNOME Shell's metas and KRunner's matches show, and
/// what opening it needs.
struct SearchResult: Sendable {
    var item: SearchableItemActivity
    /// A user activity's result (DESIGN §13): its `searchlight-activity:BUNDLE/ID` URI, which is
    /// also its result id (an item's id never has a `:` before its `/`), and what the app is
    /// launched with.
    var activityURI: String?
    var id: String { activityURI ?? item.resultID }
    var name: String
    var description: String
    /// The donating app's name: its own desktop file's `Name` (`BUNDLE.desktop`), else the
    /// bundle identifier; never the name of the app its items open with (a text editor opening
    /// a notes app's files is not the app the results came from).
    var appName: String
    var icon: Icon
    /// The icon without the item's thumbnail: the app's, else its content type's (what KRunner
    /// names when the thumbnail cannot be shown as pixels).
    var iconWithoutThumbnail: Icon
    var contentURL: String?
    /// The desktop file the bundle's items open with, when one is declared.
    var openWith: String?
    /// The app it opens with also continues searches (`ContinuesSearch`, `--continues-search`).
    var continuesSearch = false

    /// An icon as GNOME Shell deserializes it (`g_icon_deserialize`): a theme icon with
    /// fallbacks, a file, or the image bytes of a thumbnail.
    enum Icon: Sendable, Equatable {
        case themed([String])
        case file(uri: String)
        case bytes([UInt8])

        /// The first theme name (what KRunner's match names).
        var themeName: String? { if case .themed(let names) = self { names.first } else { nil } }
    }

    /// Thumbnails larger than this (256 KiB) are not sent over the bus; the type's icon is.
    static let maximumThumbnailBytes = 256 << 10

    /// A result from an item of a `query.user` answer (attributes as fetched by `DesktopSearch`).
    /// `app`: the donating app's own desktop file; `opener`: the one its items open with (its
    /// icon stands in when the app has none of its own).
    init?(wire: JSONValue, bundle: String, openWith: String?, app: DesktopEntry?, opener: DesktopEntry? = nil) {
        guard let identifier = wire["uniqueIdentifier"]?.stringValue, !identifier.isEmpty else { return nil }
        item = SearchableItemActivity(bundleIdentifier: bundle, uniqueIdentifier: identifier)
        if wire["index"]?.stringValue == Names.activityIndex {
            activityURI = UserActivity.uriScheme + ":" + item.resultID
        }
        let attributes = wire["attributeSet"] ?? [:]
        func text(_ key: String) -> String? {
            attributes[key]?.stringValue.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        name = Self.oneLine(text("title") ?? text("displayName") ?? identifier, limit: 200)
        appName = app?.name.map { Self.oneLine($0, limit: 80) }.flatMap { $0.isEmpty ? nil : $0 } ?? bundle
        description = Self.oneLine(text("contentDescription") ?? "", limit: 300)
        contentURL = text("contentURL")
        self.openWith = openWith
        let types = (attributes["contentTypeTree"]?.arrayValue ?? []).compactMap(\.stringValue)
        let iconApp = app?.icon?.isEmpty == false ? app : opener
        icon = Self.icon(attributes, types: [text("contentType")].compactMap { $0 } + types, app: iconApp)
        iconWithoutThumbnail = Self.icon([:], types: [text("contentType")].compactMap { $0 } + types, app: iconApp)
    }

    /// The item's own thumbnail, else the app's icon, else its content type's.
    static func icon(_ attributes: JSONValue, types: [String], app: DesktopEntry?) -> Icon {
        if let base64 = attributes["thumbnailData"]?.stringValue, base64.utf8.count <= maximumThumbnailBytes * 4 / 3 + 4,
           let data = Data(base64Encoded: base64), !data.isEmpty {
            return .bytes(Array(data))
        }
        if let url = attributes["thumbnailURL"]?.stringValue, url.lowercased().hasPrefix("file:/") { return .file(uri: url) }
        if let icon = app?.icon, !icon.isEmpty {
            return icon.hasPrefix("/") ? .file(uri: URL(fileURLWithPath: icon).absoluteString) : .themed([icon] + ContentTypeIcons.names(for: types))
        }
        return .themed(ContentTypeIcons.names(for: types))
    }

    /// Text for one line of a result: whitespace runs become one space, at most `limit` characters.
    static func oneLine(_ s: String, limit: Int) -> String {
        let words = s.split(whereSeparator: { $0.isWhitespace || $0.isNewline })
        let joined = words.joined(separator: " ")
        return joined.count > limit ? String(joined.prefix(limit - 1)) + "…" : joined
    }
}

/// Theme icon names (freedesktop.org Icon Naming Specification) for a content type, from its
/// type tree (the item's `contentType` first, then its ancestors), ending with `text-x-generic`.
enum ContentTypeIcons {
    private static let table: [(String, String)] = [
        ("public.folder", "folder"), ("public.directory", "folder"),
        ("com.adobe.pdf", "application-pdf"),
        ("public.html", "text-html"),
        ("public.vcard", "x-office-address-book"), ("public.contact", "x-office-address-book"),
        ("public.calendar-event", "x-office-calendar"),
        ("public.email-message", "mail-message"), ("public.message", "mail-message"),
        ("public.source-code", "text-x-script"), ("public.script", "text-x-script"),
        ("public.spreadsheet", "x-office-spreadsheet"), ("public.presentation", "x-office-presentation"),
        ("public.image", "image-x-generic"),
        ("public.movie", "video-x-generic"), ("public.video", "video-x-generic"),
        ("public.audio", "audio-x-generic"),
        ("public.archive", "package-x-generic"), ("public.zip-archive", "package-x-generic"),
        ("com.apple.application", "application-x-executable"), ("public.executable", "application-x-executable"),
        ("public.url", "text-html"),
        ("public.composite-content", "x-office-document"),
    ]

    static func names(for types: [String]) -> [String] {
        var names: [String] = []
        for type in types {
            for (uti, name) in table where uti == type && !names.contains(name) { names.append(name) }
        }
        if !names.contains("text-x-generic") { names.append("text-x-generic") }
        return names
    }
}
