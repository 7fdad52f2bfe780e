#if canImport(Glibc)
import Glibc
#endif
import CSystemd
import Foundation
import SearchlightDesktop

/// `org.kde.krunner1` at `/org/searchlight/Searchlight/KRunner`: KDE Plasma's KRunner and the
/// launcher's search (krunner's DBusRunner). KRunner may send the next Match before the last is
/// answered; each is answered from its own task.
final class KRunnerInterface: BusHandler, @unchecked Sendable {
    static let path = "/org/searchlight/Searchlight/KRunner"
    /// The one action: open the item's content URL (the file or link itself) with the default
    /// handler, even when its app declares a desktop file.
    static let openContentAction = (id: "open-content", text: "Open the file or link", icon: "document-open")

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
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    let terms = query.split(whereSeparator: { $0.isWhitespace }).map(String.init)
                    let results = await search.search(terms)
                    bus.post { $0.reply(kept) { w in Self.writeMatches(results, query: query, &w) } }
                }
            case "Actions":
                bus.noteActivity()
                let action = Self.openContentAction
                let kept = bus.keep(call)
                bus.reply(kept) { w in
                    w.container("a", "(sss)") { w in
                        w.container("r", "sss") { w in
                            w.string(action.id)
                            w.string(action.text)
                            w.string(action.icon)
                        }
                    }
                }
            case "Run":
                let id = try call.readString()
                let action = try call.readString()
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
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

    /// `a(sssida{sv})`: id, text, icon name, type (KRunner's QueryMatch types: 100 exact, 30
    /// possible), relevance (0-1, in the daemon's rank order), and subtext, category (the app),
    /// urls and the actions that apply.
    static func writeMatches(_ results: [SearchResult], query: String, _ w: inout BusWriter) {
        let folded = query.trimmingCharacters(in: .whitespaces).lowercased()
        w.container("a", "(sssida{sv})") { w in
            for (rank, r) in results.enumerated() {
                w.container("r", "sssida{sv}") { w in
                    w.string(r.id)
                    w.string(r.name)
                    w.string(r.icon.themeName ?? ContentTypeIcons.names(for: []).first!)
                    w.int32(r.name.lowercased() == folded ? 100 : 30)
                    w.double(max(0.05, 1 - Double(rank) * 0.05))
                    w.container("a", "{sv}") { w in
                        if !r.description.isEmpty { w.entry("subtext", "s") { $0.string(r.description) } }
                        w.entry("category", "s") { $0.string(r.appName) }
                        if let url = r.contentURL { w.entry("urls", "as") { $0.strings([url]) } }
                        let actions = r.contentURL != nil && r.openWith != nil ? [openContentAction.id] : []
                        w.entry("actions", "as") { $0.strings(actions) }
                    }
                }
            }
        }
    }
}
