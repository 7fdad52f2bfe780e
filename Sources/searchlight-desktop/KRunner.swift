#if canImport(Glibc)
import Glibc
#endif
import CSystemd
import Foundation
import SearchlightDesktop
import Synchronization

/// `org.kde.krunner1` at `/org/searchlight/Searchlight/KRunner`: KDE Plasma's KRunner and the
/// launcher's search (krunner's DBusRunner). KRunner may send the next Match before the last is
/// answered; each is answered from its own task.
final class KRunnerInterface: BusHandler, @unchecked Sendable {
    static let path = "/org/searchlight/Searchlight/KRunner"
    /// The one action: open the item's content URL (the file or link itself) with the default
    /// handler, even when its app declares a desktop file.
    static let openContentAction = (id: "open-content", text: "Open the file or link", icon: "document-open")
    /// On the matches of an app that continues searches: the app, with the query.
    static let searchInAppAction = (id: "search-in-app", text: "Search in the app", icon: "system-search")
    /// The text of the last Match: Run names only a match and an action.
    private let lastQuery = Mutex("")

    let bus: SessionBus
    let search: DesktopSearch

    init(bus: SessionBus, search: DesktopSearch) {
        self.bus = bus
        self.search = search
    }

    override func handle(_ call: BusCall, _ error: UnsafeMutablePointer<sd_bus_error>?) -> Int32 {
        do {
            switch call.member {
            case "Match":
                let query = try call.readString()
                lastQuery.withLock { $0 = query }
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                let started = ContinuousClock.now
                Task {
                    let terms = query.split(whereSeparator: { $0.isWhitespace }).map(String.init)
                    let results = await search.search(terms)
                    // Decoded here, not on the bus's thread.
                    let icons = results.map { Self.iconPixels($0.icon) }
                    Log.debug("match answered", ["results": results.count, "elapsed_ms": (ContinuousClock.now - started).milliseconds])
                    bus.post { $0.reply(kept) { w in Self.writeMatches(results, icons: icons, query: query, &w) } }
                }
            case "Actions":
                bus.noteActivity()
                let kept = bus.keep(call)
                bus.reply(kept) { w in
                    w.container("a", "(sss)") { w in
                        for action in [Self.openContentAction, Self.searchInAppAction] {
                            w.container("r", "sss") { w in
                                w.string(action.id)
                                w.string(action.text)
                                w.string(action.icon)
                            }
                        }
                    }
                }
            case "Run":
                let id = try call.readString()
                let action = try call.readString()
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                if action == Self.searchInAppAction.id {
                    let text = lastQuery.withLock { $0 }
                    Task { await Self.continueSearch(id, text: text, kept, bus: bus, search: search) }
                    return 1
                }
                Task {
                    await GnomeSearchProvider.activate(id, terms: [], kept, bus: bus, search: search,
                                                       contentURLOnly: action == Self.openContentAction.id)
                }
            case "Teardown":
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    await search.forget()
                    bus.post { $0.reply(kept) { _ in } }
                }
            default:
                return -ENOSYS
            }
            return 1
        } catch {
            return error.code
        }
    }

    /// Run with `search-in-app`: the match's app with the last Match's text; a failure is told
    /// to the user (a notification) and answered as an error.
    static func continueSearch(_ id: String, text: String, _ kept: BusCall, bus: SessionBus, search: DesktopSearch) async {
        guard let result = await search.resultForOpening(id) else {
            bus.post {
                $0.notify(.gone)
                $0.reply(kept) { _ in }
            }
            return
        }
        do {
            try await search.continueSearch(in: result, text: text)
            bus.post { $0.reply(kept) { _ in } }
        } catch {
            Log.notice("search not continued in the app", ["id": id.prefix(200), "reason": "\(error)"])
            let reason = "\(error)"
            bus.post { $0.replyError(kept, name: "org.freedesktop.DBus.Error.Failed", reason) }
        }
    }

    /// The side a thumbnail is scaled to fit for KRunner (its list shows icons smaller than this).
    static let iconSide = 64

    /// A result's thumbnail as the pixels KRunner's `icon-data` takes, when it has one that
    /// decodes: a PNG, its `thumbnailData` or a local `file:` `thumbnailURL` (what GNOME Shell
    /// gets), within `SearchResult.maximumThumbnailBytes`; nil leaves the theme icon.
    static func iconPixels(_ icon: SearchResult.Icon) -> ThumbnailImage? {
        let data: [UInt8]
        switch icon {
        case .bytes(let bytes): data = bytes
        case .file(let uri):
            guard let bytes = ThumbnailImage.contentsOfFile(uri: uri, limit: SearchResult.maximumThumbnailBytes) else { return nil }
            data = bytes
        case .themed: return nil
        }
        return decodedIcons.icon(for: data) {
            do {
                return try ThumbnailImage(png: data).scaled(toFit: iconSide)
            } catch {
                Log.debug("thumbnail not shown in KRunner", ["reason": "\(error)"])
                return nil
            }
        }
    }

    /// Each keystroke is a Match, mostly of the same results: their icons are decoded once.
    static let decodedIcons = DecodedIcons()

    /// `a(sssida{sv})`: id, text, icon name, type (KRunner's QueryMatch types: 100 exact, 30
    /// possible), relevance (0-1, in the daemon's rank order), and subtext, category (the app),
    /// urls, the actions that apply and, for a thumbnail, `icon-data`: `(iiibiiay)` width,
    /// height, row stride, has alpha, bits per sample, channels, RGBA bytes (krunner's
    /// `RemoteImage`, the notification spec's `image-data`).
    static func writeMatches(_ results: [SearchResult], icons: [ThumbnailImage?] = [], query: String, _ w: inout BusWriter) {
        let folded = query.trimmingCharacters(in: .whitespaces).lowercased()
        w.container("a", "(sssida{sv})") { w in
            for (rank, r) in results.enumerated() {
                w.container("r", "sssida{sv}") { w in
                    w.string(r.id)
                    w.string(r.name)
                    w.string(r.icon.themeName ?? r.iconWithoutThumbnail.themeName ?? ContentTypeIcons.names(for: []).first!)
                    w.int32(r.name.lowercased() == folded ? 100 : 30)
                    w.double(max(0.05, 1 - Double(rank) * 0.05))
                    w.container("a", "{sv}") { w in
                        if !r.description.isEmpty { w.entry("subtext", "s") { $0.string(r.description) } }
                        w.entry("category", "s") { $0.string(r.appName) }
                        if let url = r.contentURL { w.entry("urls", "as") { $0.strings([url]) } }
                        let actions = (r.contentURL != nil && r.openWith != nil ? [openContentAction.id] : [])
                            + (r.continuesSearch ? [searchInAppAction.id] : [])
                        w.entry("actions", "as") { $0.strings(actions) }
                        if rank < icons.count, let image = icons[rank] {
                            w.entry("icon-data", "(iiibiiay)") { w in
                                w.container("r", "iiibiiay") { w in
                                    w.int32(Int32(image.width))
                                    w.int32(Int32(image.height))
                                    w.int32(Int32(image.width * 4))
                                    w.bool(true)
                                    w.int32(8)
                                    w.int32(4)
                                    w.bytes(image.rgba)
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The last `limit` thumbnails decoded for KRunner (and those that would not decode), by a hash
/// of their bytes.
final class DecodedIcons: Sendable {
    let limit = 64
    private let entries = Mutex<(icons: [Int: ThumbnailImage?], order: [Int])>(([:], []))

    func icon(for data: [UInt8], decode: () -> ThumbnailImage?) -> ThumbnailImage? {
        var hasher = Hasher()
        data.withUnsafeBytes { hasher.combine(bytes: $0) }
        let key = hasher.finalize()
        if let known = entries.withLock({ $0.icons[key] }) { return known }
        let icon = decode()  // outside the lock: another Match's lookups go on meanwhile
        entries.withLock {
            if $0.icons.updateValue(icon, forKey: key) == nil { $0.order.append(key) }
            if $0.order.count > limit { $0.icons.removeValue(forKey: $0.order.removeFirst()) }
        }
        return icon
    }
}
