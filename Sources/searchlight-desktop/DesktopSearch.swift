import Foundation
import SearchlightDesktop
import SearchlightKit

/// The search both D-Bus interfaces serve: the user's terms as one `query.user` across every
/// bundle the user may read (the daemon's ranking, the same as `searchlight search`), capped per
/// app and in all, grouped per app in the order of each app's best result. The results of recent
/// searches are kept, so that GetResultMetas and ActivateResult (which name ids only) need no
/// further call; an id not kept (the provider restarted meanwhile) is resolved with the daemon.
actor DesktopSearch {
    struct Limits: Sendable {
        /// Results per search (GNOME Shell shows five rows per provider; KRunner more).
        var total = 10
        /// Results of one app per search, so that one app cannot fill the list.
        var perApp = 5
    }

    let daemon: DaemonClient
    let limits: Limits
    let opener: ItemOpener
    private let locator: DesktopEntryLocator
    private var kept: [String: SearchResult] = [:]
    private var keptOrder: [String] = []
    static let keptLimit = 512
    /// Apps' desktop entries by desktop-file id, read at most once a minute.
    private var apps: [String: (entry: DesktopEntry?, read: ContinuousClock.Instant)] = [:]
    /// Results whose `file:` contentURL is gone are left out (issue 34), checked here, as the user.
    private var fileCheck = VanishedFileCheck()
    /// Stale items told to the daemon lately (it also remembers them): not sent again each query.
    private var reportedStale: Set<String> = []
    /// For recent searches (by their text): the app of the best result and how it opens, so that
    /// LaunchSearch, which names only the terms, continues the search in the app whose results
    /// the user was looking at.
    private var topApps: [String: (bundle: String, opening: DesktopOpening?)] = [:]
    private var topAppsOrder: [String] = []

    /// The attributes a result needs, and no more (`textContent` can be large).
    static let fetchAttributes = ["title", "displayName", "contentDescription", "contentType", "contentTypeTree",
                                  "contentURL", "thumbnailURL", "thumbnailData"]

    init(daemon: DaemonClient, limits: Limits, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.daemon = daemon
        self.limits = limits
        locator = DesktopEntryLocator(environment: environment)
        opener = ItemOpener(environment: environment)
    }

    /// The results for `terms` (words, AND-ed by the daemon's user query); empty when the daemon
    /// is unavailable, which is logged.
    func search(_ terms: [String]) async -> [SearchResult] {
        let text = terms.joined(separator: " ").trimmingCharacters(in: .whitespacesAndNewlines)
        // Without a word the daemon finds nothing: answered at once, never sent (a busy daemon
        // once held `" * (` until the deadline).
        guard Self.hasWords(text) else { return [] }
        let answer: QueryUser.Response
        do {
            // Room for the per-app cap to leave other apps' results in.
            let context = QueryUser.Context(enableRankedResults: false, maxResultCount: min(limits.total * 3, 1000),
                                            maxSuggestionCount: 0, fetchAttributes: Self.fetchAttributes)
            answer = try await daemon.send(QueryUser(text: String(text.prefix(1024)), context: context))
        } catch {
            Log.notice("search answered empty", ["reason": "\(error)"])
            return []
        }
        let openWith = (answer.bundles ?? [:]).compactMapValues { $0?.openWith }
        var results: [SearchResult] = []
        var perApp: [String: Int] = [:]
        var launchable: Set<String> = []
        var checks = fileCheck.begin()
        var stale: [StaleKey: [String]] = [:]
        for wire in answer.items where results.count < limits.total {
            guard let bundle = wire["bundle"]?.stringValue, perApp[bundle, default: 0] < limits.perApp,
                  var result = SearchResult(wire: wire, bundle: bundle, openWith: openWith[bundle], app: ownApp(bundle),
                                            opener: app(openWith[bundle])),
                  canOpen(result, launchable: &launchable)
            else { continue }
            result.continuesSearch = (answer.bundles ?? [:])[bundle]??.continuesSearch ?? false
            if fileCheck.isGone(result.contentURL, in: &checks) {
                stale[StaleKey(bundle: bundle, index: wire["index"]?.stringValue ?? ""), default: []].append(result.item.uniqueIdentifier)
                continue
            }
            perApp[bundle, default: 0] += 1
            results.append(result)
        }
        if !stale.isEmpty { reportStale(stale) }
        let grouped = Self.groupedByApp(results)
        for r in grouped { keep(r) }
        if let top = grouped.first {
            let bundle = top.item.bundleIdentifier
            if topApps.updateValue((bundle, (answer.bundles ?? [:])[bundle] ?? nil), forKey: text) == nil { topAppsOrder.append(text) }
            if topAppsOrder.count > 64 { topApps[topAppsOrder.removeFirst()] = nil }
        }
        return grouped
    }

    private struct StaleKey: Hashable {
        var bundle: String
        var index: String
    }

    /// Tells the daemon about results left out because their file is gone, in the background
    /// (the search does not wait): it asks their extension to reindex them, or deletes them.
    private func reportStale(_ stale: [StaleKey: [String]]) {
        if reportedStale.count > 4096 { reportedStale.removeAll() }
        for (key, ids) in stale {
            let fresh = ids.filter { reportedStale.insert(key.bundle + "\u{0}" + key.index + "\u{0}" + $0).inserted }
            guard !fresh.isEmpty else { continue }
            Log.info("results left out: their file is gone", ["bundle": key.bundle, "count": fresh.count])
            let daemon = self.daemon
            Task.detached(priority: .background) {
                for start in stride(from: 0, to: fresh.count, by: DesktopStaleItems.maxIdentifiers) {
                    let part = Array(fresh[start..<min(fresh.count, start + DesktopStaleItems.maxIdentifiers)])
                    do {
                        _ = try await daemon.send(DesktopStaleItems(bundle: key.bundle, identifiers: part, index: key.index))
                    } catch {
                        Log.notice("stale results not reported", ["bundle": key.bundle, "reason": "\(error)"])
                    }
                }
            }
        }
    }

    /// Stable grouping: each app's results together, apps in the order of their best result.
    static func groupedByApp(_ results: [SearchResult]) -> [SearchResult] {
        var order: [String] = []
        var groups: [String: [SearchResult]] = [:]
        for r in results {
            if groups[r.item.bundleIdentifier] == nil { order.append(r.item.bundleIdentifier) }
            groups[r.item.bundleIdentifier, default: []].append(r)
        }
        return order.flatMap { groups[$0]! }
    }

    /// Whether `text` has a word as the daemon's user query reads words: a run of letters,
    /// digits or marks (SearchlightStore's `TextAnalysis.isTokenChar`). A text of quotes, stars,
    /// parentheses and punctuation only can match nothing.
    static func hasWords(_ text: String) -> Bool {
        text.unicodeScalars.contains { s in
            if s.isASCII { return ("0"..."9").contains(s) || ("A"..."Z").contains(s) || ("a"..."z").contains(s) }
            switch s.properties.generalCategory {
            case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
                 .decimalNumber, .letterNumber, .otherNumber, .privateUse, .nonspacingMark:
                return true
            default:
                return false
            }
        }
    }

    /// Whether the result can be opened now (its declared app installed and trusted, else a
    /// content URL): a result nothing can open is left out of the desktop's answers, so that a
    /// click on it cannot do nothing (issue 36).
    /// `launchable`: the declared desktop files found and trusted in this search, so that the
    /// file checks (a realpath, an open, a stat per folder) run once per app, not once per result.
    private func canOpen(_ result: SearchResult, launchable: inout Set<String>) -> Bool {
        if let id = result.openWith, launchable.contains(id) { return true }
        guard let planned = try? opener.plan(result.item, openWith: result.openWith, contentURL: result.contentURL, uri: result.activityURI) else { return false }
        if case .application(let id, _, _) = planned.action { launchable.insert(id) }
        return true
    }

    /// The results with these ids, to show (GetResultMetas), in their order: each checked with
    /// the daemon now, so that an item deleted, hidden or made unreadable since the search is
    /// left out; the kept one only when the daemon is unavailable. Four at a time: a hung daemon
    /// costs a deadline per batch at most (its connection is closed at the first), not one per id,
    /// and the batch stays under `DaemonClient.maxInFlight`.
    func results(_ ids: [String]) async -> [SearchResult] {
        var found: [SearchResult] = []
        var start = 0
        while start < ids.count {
            let batch = Array(ids[start..<min(ids.count, start + 4)])
            start += batch.count
            let answers = await withTaskGroup(of: (Int, SearchResult?).self) { group in
                for (i, id) in batch.enumerated() { group.addTask { (i, await self.result(id)) } }
                var answers = [SearchResult?](repeating: nil, count: batch.count)
                for await (i, r) in group { answers[i] = r }
                return answers
            }
            found += answers.compactMap { $0 }
        }
        return found
    }

    /// The result with this id, to show: resolved with the daemon (kept from a recent search
    /// when the daemon is unavailable); nil when the id is malformed, the item is gone or hidden,
    /// or the daemon refuses it.
    func result(_ id: String) async -> SearchResult? {
        do {
            return try await resolve(id)
        } catch is DaemonClient.Unavailable {
            return kept[id]
        } catch {
            return nil
        }
    }

    /// The result with this id, to open: resolved with the daemon now, so that a registration or
    /// a content URL changed since the search counts; the kept one only when the daemon is
    /// unavailable. Nil when the id is malformed, the item is gone, or the daemon refuses it.
    func resultForOpening(_ id: String) async -> SearchResult? {
        do {
            return try await resolve(id)
        } catch is DaemonClient.Unavailable {
            return kept[id]
        } catch {
            return nil  // refused: no longer readable, or hidden since
        }
    }

    /// Throws when the daemon is unavailable or refuses; nil when there is no such item.
    private func resolve(_ id: String) async throws -> SearchResult? {
        let activity = UserActivity(uri: id)
        guard let item = activity.flatMap({ a in a.bundleIdentifier.map { SearchableItemActivity(bundleIdentifier: $0, uniqueIdentifier: a.savedIdentifier) } })
                ?? SearchableItemActivity(resultID: id) else { return nil }
        let answer: DesktopResolve.Response
        do {
            if activity != nil {
                answer = try await daemon.send(ActivityResolve(persistentIdentifier: item.uniqueIdentifier, bundle: item.bundleIdentifier))
            } else {
                answer = try await daemon.send(DesktopResolve(identifier: item.uniqueIdentifier, bundle: item.bundleIdentifier))
            }
        } catch {
            Log.notice("result not resolved", ["id": id, "reason": "\(error)"])
            throw error
        }
        let openWith = answer.opening?.openWith
        var wire = answer.item
        if activity != nil, case .object(var o)? = wire {
            o["index"] = .string(Names.activityIndex)
            wire = .object(o)
        }
        guard let wire,
              var result = SearchResult(wire: wire, bundle: item.bundleIdentifier, openWith: openWith, app: ownApp(item.bundleIdentifier),
                                        opener: app(openWith))
        else {
            kept[id] = nil
            return nil
        }
        result.continuesSearch = answer.opening?.continuesSearch ?? false
        keep(result)
        return result
    }

    /// The app that continues a search for `terms` (GNOME Shell's LaunchSearch), with the
    /// continuation to hand it: the app of the best result of the search for the same text (run
    /// now when it is not one of the recent ones), when it declares so (unit key `ContinuesSearch`
    /// with `OpenWith`, or `searchlight register --continues-search`). The bundle is one the
    /// daemon lets this desktop show: its own user's (root's desktop: root's only), so the
    /// declaration is this user's own or an administrator's unit, never another user's (issue 29).
    func continuation(for terms: [String]) async -> (bundle: String, desktopID: String, query: SearchQueryContinuation)? {
        let text = terms.joined(separator: " ").trimmingCharacters(in: .whitespacesAndNewlines)
        guard let query = SearchQueryContinuation(text: String(text.prefix(1024))) else { return nil }
        if topApps[text] == nil { _ = await search(terms) }
        guard let top = topApps[text], let opening = top.opening, opening.continuesSearch,
              Names.validDesktopFileID(opening.openWith) else { return nil }
        return (top.bundle, opening.openWith, query)
    }

    /// Forgets the kept results (KRunner's Teardown: the match session is over).
    func forget() {
        kept.removeAll()
        keptOrder.removeAll()
    }

    /// Tells the daemon the user opened a result, so that it ranks higher next time.
    func engaged(_ result: SearchResult, terms: [String]) async {
        // An activity result's engagement goes to its bundle's activity history (`activity: true`).
        do {
            _ = try await daemon.send(QueryEngaged(target: .identifier(result.item.uniqueIdentifier), interaction: .select,
                                                   text: terms.joined(separator: " "), bundle: result.item.bundleIdentifier,
                                                   activity: result.activityURI != nil))
        } catch {
            Log.notice("engagement not recorded", ["id": result.id, "reason": "\(error)"])
        }
    }

    private func keep(_ result: SearchResult) {
        if kept.updateValue(result, forKey: result.id) == nil { keptOrder.append(result.id) }
        if keptOrder.count > Self.keptLimit {
            for id in keptOrder.prefix(keptOrder.count - Self.keptLimit) { kept[id] = nil }
            keptOrder.removeFirst(keptOrder.count - Self.keptLimit)
        }
    }

    /// The donating app's own desktop file: `BUNDLE.desktop`, the freedesktop.org convention for
    /// an app whose id is its bundle identifier (org.gnome.Notes, org.gnome.Notes.desktop).
    private func ownApp(_ bundle: String) -> DesktopEntry? {
        let id = bundle + ".desktop"
        guard Names.validDesktopFileID(id) else { return nil }
        return app(id)
    }

    private func app(_ desktopID: String?) -> DesktopEntry? {
        guard let desktopID else { return nil }
        if let cached = apps[desktopID], ContinuousClock.now - cached.read < .seconds(60) { return cached.entry }
        let entry = locator.entry(forDesktopID: desktopID)
        apps[desktopID] = (entry, .now)
        return entry
    }
}
