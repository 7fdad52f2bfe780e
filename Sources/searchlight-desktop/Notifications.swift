import Foundation

/// What the user is told when a click of theirs did not do what it should: a desktop notification
/// (`org.freedesktop.Notifications.Notify` on the session bus, the Desktop Notifications
/// Specification), shown by GNOME Shell, Plasma or any notification daemon. The journal alone is
/// never enough: the user who clicked does not read it (issue 36).
struct Notice: Sendable, Equatable {
    var summary: String
    var body: String

    static let appName = "Searchlight"
    static let icon = "system-search"

    /// A result activated after its item was deleted, hidden or made unreadable.
    static let gone = Notice(summary: "This result is no longer there",
                             body: "The item was deleted or hidden after the search. Search again to see what there is now.")

    /// A result whose opening failed; `reason` is the opener's error (it says what to do).
    static func notOpened(_ name: String, reason: String) -> Notice {
        Notice(summary: "Searchlight could not open “\(SearchResult.oneLine(name, limit: 80))”", body: reason)
    }

    /// LaunchSearch when Searchlight's result view could not open (no terminal in this session,
    /// or the Searchlight app not installed): the results themselves, and why.
    static func results(_ text: String, _ results: [SearchResult], reason: String) -> Notice {
        let quoted = "“\(SearchResult.oneLine(text, limit: 80))”"
        var lines = results.prefix(10).map { "• \($0.name) — \($0.appName)" }
        if results.count > 10 { lines.append("and \(results.count - 10) more") }
        lines.append("Searchlight's result view did not open (\(reason)); `searchlight search` in a terminal shows the full list.")
        return Notice(summary: results.isEmpty ? "No results for \(quoted)" : "Results for \(quoted)",
                      body: lines.joined(separator: "\n"))
    }

    /// The body as the specification's markup (`&`, `<`, `>` escaped), at most 4 KiB.
    var markupBody: String {
        let text = body.utf8.count > 4096 ? String(decoding: Array(body.utf8.prefix(4093)), as: UTF8.self) + "…" : body
        return text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }
}

extension SessionBus {
    static let notifications = (name: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications")

    /// Shows `notice` (loop's thread), without waiting for the notification server: one that is
    /// missing or slow is logged, never a stall of the bus.
    func notify(_ notice: Notice) {
        // The summary may name the user's item: only that a notice went out is logged.
        Log.info("user notified")
        callAsync(destination: Self.notifications.name, path: Self.notifications.path, interface: Self.notifications.name,
                  member: "Notify", what: "notification") { w in
            // Notify(app_name s, replaces_id u, app_icon s, summary s, body s, actions as, hints a{sv}, expire_timeout i) -> u
            w.string(Notice.appName)
            w.uint32(0)
            w.string(Notice.icon)
            w.string(notice.summary)
            w.string(notice.markupBody)
            w.strings([])
            w.container("a", "{sv}") { w in
                w.entry("desktop-entry", "s") { $0.string("searchlight") }
            }
            w.int32(-1)
        }
    }
}
