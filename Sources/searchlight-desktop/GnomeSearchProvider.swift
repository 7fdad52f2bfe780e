#if canImport(Glibc)
import Glibc
#endif
import CSystemd
import Foundation
import SearchlightDesktop

/// `org.gnome.Shell.SearchProvider2` at `/org/searchlight/Searchlight/SearchProvider`: GNOME
/// Shell's search (js/ui/remoteSearch.js). Every call is answered from a task, so the bus goes on
/// meanwhile; a search that fails answers an empty list (GNOME Shell drops nothing then, it shows
/// no results of ours).
final class GnomeSearchProvider: BusHandler, @unchecked Sendable {
    static let path = "/org/searchlight/Searchlight/SearchProvider"

    let bus: SessionBus
    let search: DesktopSearch

    init(bus: SessionBus, search: DesktopSearch) {
        self.bus = bus
        self.search = search
    }

    override func handle(_ call: BusCall, _ error: UnsafeMutablePointer<sd_bus_error>?) -> Int32 {
        do {
            switch call.member {
            case "GetInitialResultSet":
                let terms = try call.readStrings()
                answerIDs(bus.keep(call), terms)
            case "GetSubsearchResultSet":
                // The previous results may be narrowed, but a fresh query is as fast and finds the
                // items the previous cap left out.
                _ = try call.readStrings()
                let terms = try call.readStrings()
                answerIDs(bus.keep(call), terms)
            case "GetResultMetas":
                let ids = try call.readStrings()
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    // Each checked with the daemon: a result deleted since the search is left out.
                    let metas = await search.results(Array(ids.prefix(100)))
                    bus.post { $0.reply(kept) { w in Self.writeMetas(metas, &w) } }
                }
            case "ActivateResult":
                let id = try call.readString()
                let terms = try call.readStrings()
                _ = try call.readUInt32()  // the event's time: gio launch has no use for it
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task { await Self.activate(id, terms: terms, kept, bus: bus, search: search) }
            case "LaunchSearch":
                let terms = try call.readStrings()
                _ = try call.readUInt32()
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    await Self.launchSearch(terms, bus: bus, search: search)
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

    /// ActivateResult, and KRunner's Run: opens the result; the user who clicked is told by a
    /// notification when it cannot be. A result gone since the search (deleted, hidden, no longer
    /// readable) is answered without an error: the Shell has nothing to show for one, the
    /// notification says it. A failure to open also answers an error, which says why.
    static func activate(_ id: String, terms: [String], _ kept: BusCall, bus: SessionBus, search: DesktopSearch,
                         contentURLOnly: Bool = false) async {
        guard let result = await search.resultForOpening(id) else {
            Log.notice("activated result gone", ["id": id.prefix(200)])
            bus.post {
                $0.notify(.gone)
                $0.reply(kept) { _ in }
            }
            return
        }
        do {
            _ = try await search.open(result, terms: terms, contentURLOnly: contentURLOnly)
            bus.post { $0.reply(kept) { _ in } }
        } catch {
            Log.warning("result not opened", ["id": id, "error": "\(error)"])
            bus.post {
                $0.notify(.notOpened(result.name, reason: "\(error)"))
                $0.replyError(kept, name: "org.freedesktop.DBus.Error.Failed", "\(error)")
            }
        }
    }

    /// LaunchSearch: Searchlight's result view (`searchlight.desktop`, in a terminal) with the
    /// terms; where it cannot open (no terminal GLib knows in this session, the app not installed)
    /// the results themselves in a notification, so that the click always shows something.
    static func launchSearch(_ terms: [String], bus: SessionBus, search: DesktopSearch) async {
        do {
            try await search.launchSearch(terms)
        } catch {
            Log.notice("result view not opened; results notified", ["error": "\(error)"])
            let results = await search.search(terms)
            let reason = "\(error)"
            bus.post { $0.notify(.results(terms.joined(separator: " "), results, reason: reason)) }
        }
    }

    private func answerIDs(_ kept: BusCall, _ terms: [String]) {
        let (bus, search) = (self.bus, self.search)
        let started = ContinuousClock.now
        Task {
            let ids = await search.search(terms).map(\.id)
            Log.debug("search answered", ["results": ids.count, "elapsed_ms": (ContinuousClock.now - started).milliseconds])
            bus.post { $0.reply(kept) { w in w.strings(ids) } }
        }
    }

    /// `aa{sv}`: id, name, description, icon (a serialized GIcon, `g_icon_serialize`'s shape),
    /// clipboardText (the content URL, when there is one).
    static func writeMetas(_ results: [SearchResult], _ w: inout BusWriter) {
        w.container("a", "a{sv}") { w in
            for r in results {
                w.container("a", "{sv}") { w in
                    w.entry("id", "s") { $0.string(r.id) }
                    w.entry("name", "s") { $0.string(r.name) }
                    w.entry("description", "s") { $0.string(r.description.isEmpty ? r.appName : "\(r.description) — \(r.appName)") }
                    w.entry("icon", "(sv)") { writeIcon(r.icon, &$0) }
                    if let url = r.contentURL { w.entry("clipboardText", "s") { $0.string(url) } }
                }
            }
        }
    }

    /// A GIcon as `g_icon_serialize` makes it: `('themed', <['name', …]>)`, `('file', <'file:///…'>)`
    /// or `('bytes', <[byte …]>)`, which `g_icon_deserialize` turns back into a GIcon.
    static func writeIcon(_ icon: SearchResult.Icon, _ w: inout BusWriter) {
        w.container("r", "sv") { w in
            switch icon {
            case .themed(let names):
                w.string("themed")
                w.container("v", "as") { $0.strings(names) }
            case .file(let uri):
                w.string("file")
                w.container("v", "s") { $0.string(uri) }
            case .bytes(let data):
                w.string("bytes")
                w.container("v", "ay") { $0.bytes(data) }
            }
        }
    }
}

extension Duration {
    var milliseconds: Double { Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15 }
}
