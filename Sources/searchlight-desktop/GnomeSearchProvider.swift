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
                    var results: [SearchResult] = []
                    for id in ids.prefix(100) { if let r = await search.result(id) { results.append(r) } }
                    let metas = results
                    bus.post { $0.reply(kept) { w in Self.writeMetas(metas, &w) } }
                }
            case "ActivateResult":
                let id = try call.readString()
                let terms = try call.readStrings()
                _ = try call.readUInt32()  // the event's time: gio launch has no use for it
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    guard let result = await search.resultForOpening(id) else {
                        bus.post { $0.replyError(kept, name: "org.freedesktop.DBus.Error.InvalidArgs", "no such result: \(id.prefix(200))") }
                        return
                    }
                    do {
                        _ = try await search.open(result, terms: terms)
                        bus.post { $0.reply(kept) { _ in } }
                    } catch {
                        Log.warning("result not opened", ["id": id, "error": "\(error)"])
                        bus.post { $0.replyError(kept, name: "org.freedesktop.DBus.Error.Failed", "\(error)") }
                    }
                }
            case "LaunchSearch":
                let terms = try call.readStrings()
                _ = try call.readUInt32()
                let kept = bus.keep(call)
                let (bus, search) = (self.bus, self.search)
                Task {
                    do {
                        try await search.launchSearch(terms)
                        bus.post { $0.reply(kept) { _ in } }
                    } catch {
                        Log.warning("search not launched", ["error": "\(error)"])
                        bus.post { $0.replyError(kept, name: "org.freedesktop.DBus.Error.Failed", "\(error)") }
                    }
                }
            default:
                return -ENOSYS
            }
            return 1
        } catch {
            return error.code
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
