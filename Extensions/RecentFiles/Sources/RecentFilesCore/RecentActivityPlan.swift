import Foundation

/// A recent file as a user activity of one app: what the importer saves.
public struct RecentActivity: Sendable, Equatable, Codable {
    public var bundle: String
    public var persistentIdentifier: String
    public var title: String
    public var contentURL: String
    public var contentType: String
    public var application: String
    public var lastUsed: Date
    public var count: Int

    /// What changes when the entry changes (a save is needed).
    public var fingerprint: String {
        [title, contentURL, contentType, application, String(lastUsed.timeIntervalSince1970), String(count)].joined(separator: "\u{1F}")
    }
}

/// Turns bookmarks into activities: one per (file, application), in the application's bundle
/// (`ApplicationMap`), else in `fallbackBundle`. Only `file:` URIs are taken (the others, `sftp:`,
/// `trash:`, `recent:`, may name places that need a network or are gone).
public struct RecentActivityPlan: Sendable {
    public var fallbackBundle: String
    public var applications: ApplicationMap

    public init(fallbackBundle: String, applications: ApplicationMap) {
        self.fallbackBundle = fallbackBundle
        self.applications = applications
    }

    /// `ownBundleOnly`: every activity in `fallbackBundle` (under a system daemon, where saving to
    /// another app's bundle would claim it for this user), one per file, its most recent use.
    public func activities(_ bookmarks: [RecentBookmark], ownBundleOnly: Bool = false) -> [RecentActivity] {
        var out: [String: RecentActivity] = [:]
        for b in bookmarks {
            guard b.href.lowercased().hasPrefix("file:/"), b.href.utf8.count <= 4096, let url = URL(string: b.href), url.isFileURL else { continue }
            let title = url.lastPathComponent.isEmpty ? url.path : url.lastPathComponent
            let apps = b.applications.isEmpty ? [RecentApplication(name: "", exec: "")] : b.applications
            for app in apps {
                let bundle = ownBundleOnly ? fallbackBundle : applications.bundle(for: app) ?? fallbackBundle
                let id = Self.identifier(b.href)
                let used = app.modified ?? b.visited ?? b.modified ?? b.added ?? Date(timeIntervalSince1970: 0)
                let activity = RecentActivity(bundle: bundle, persistentIdentifier: id, title: title, contentURL: b.href,
                                              contentType: Self.contentType(b.mimeType), application: app.name, lastUsed: used,
                                              count: max(1, app.count))
                let key = bundle + "\u{0}" + id
                if let kept = out[key], kept.lastUsed >= used { continue }
                out[key] = activity
            }
        }
        return out.values.sorted { ($0.bundle, $0.persistentIdentifier) < ($1.bundle, $1.persistentIdentifier) }
    }

    /// `recent:` and the file's URI; a URI too long for an identifier is named by its hash.
    static func identifier(_ href: String) -> String {
        let id = "recent:" + href
        guard id.utf8.count > 1000 else { return id }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325  // FNV-1a: stable across runs, unlike Hasher
        for byte in href.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return "recent:" + String(href.prefix(900)) + "#" + String(hash, radix: 16)
    }

    /// A content type (UTI) for a MIME type, for the desktop's icons.
    static func contentType(_ mime: String?) -> String {
        guard let mime = mime?.lowercased() else { return "public.data" }
        switch mime {
        case "text/plain": return "public.plain-text"
        case "text/html": return "public.html"
        case "text/markdown": return "net.daringfireball.markdown"
        case "application/pdf": return "com.adobe.pdf"
        default:
            if mime.hasPrefix("image/") { return "public.image" }
            if mime.hasPrefix("audio/") { return "public.audio" }
            if mime.hasPrefix("video/") { return "public.movie" }
            if mime.hasPrefix("text/") { return "public.text" }
            return "public.data"
        }
    }
}
