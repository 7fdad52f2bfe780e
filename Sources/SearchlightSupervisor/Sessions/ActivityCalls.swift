import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// The `activity.*` methods (DESIGN §13, Docs/Protocol.md "User activities"): a bundle's history
/// of user activities, kept as the items of its activity index (`Names.activityIndex`, a file of
/// its own beside its other indexes, which no client can name as an `index`). Only the bundle's
/// own app connection writes it, under the rules of an app's writes (`BundleAccess`).
///
/// An activity is stored as an item whose identifier is its persistent identifier, `lastUsedDate`
/// the daemon's time of the save, or an earlier one the attribute set gives (the ranking's recency), its `becomeCurrent()`s counted as
/// engagement (the ranking's engagement factor), and its own fields under `custom`
/// (`activityType`, `activityUserInfo` as JSON text, `activityWebpageURL`, `activityCurrent`,
/// `activityRelatedItem`), which are not searched. Expired ones are invisible at once and purged
/// with the index's other expired items; past `--max-activities-per-bundle` the least recently
/// used go.
///
/// An activity whose `contentAttributeSet.relatedUniqueIdentifier` names an item of the bundle's
/// default index is not kept as an activity: that item stands for it (shown once), its
/// `lastUsedDate` set to now and, when current, its engagement counted. One saved before its
/// item existed is kept until the item is donated, then shown as it the same way (`absorb`).
struct ActivityCalls {
    let calls: BundleCalls
    var context: ServiceContext { calls.context }

    /// The bundle's current activity and the connection that made it current, per bundle: a new
    /// current one resigns the one before it, and so does the close of that connection (the app
    /// quit or crashed: `connectionClosed`).
    private struct Current {
        var identifier: String
        var connection: ObjectIdentifier
    }
    private static let current = Mutex<[String: Current]>([:])
    private var connectionID: ObjectIdentifier { ObjectIdentifier(calls.client.connection) }

    /// Whether a connection holds a bundle's current activity (such a connection is not closed
    /// for idleness: the app is still showing it).
    static func holdsCurrent(_ connection: ObjectIdentifier) -> Bool {
        current.withLock { $0.values.contains { $0.connection == connection } }
    }

    /// The connection closed (its app quit or crashed): the activities it made current are
    /// resigned, as NSUserActivity's are when their app goes away; they stay in the history.
    static func connectionClosed(_ connection: ObjectIdentifier, context: ServiceContext) {
        let held = current.withLock { all -> [(bundle: String, identifier: String)] in
            let mine = all.filter { $0.value.connection == connection }
            for bundle in mine.keys { all[bundle] = nil }
            return mine.map { ($0.key, $0.value.identifier) }
        }
        for (bundle, identifier) in held {
            do {
                try context.registry.withStore(bundle: bundle, index: Names.activityIndex, create: false) { (store) throws(SearchlightError) in
                    _ = try store?.applySync([.items([resignation(identifier)])])
                }
            } catch {
                context.log.warning("activity not resigned on disconnect", ["bundle": bundle, "error": error.message])
            }
        }
    }

    /// The update that marks an activity no longer current.
    private static func resignation(_ id: String) -> SearchableItem {
        var a = AttributeSet()
        a[custom: "activityCurrent"] = .bool(false)
        var update = SearchableItem(uniqueIdentifier: id, attributeSet: a)
        update.isUpdate = true
        return update
    }

    private func ownBundle() throws(SearchlightError) -> String {
        guard case .app(let bundle) = calls.caller else {
            throw SearchlightError(.permissionDenied, "user activities are written by the bundle's app only (initialize with role \"app\")")
        }
        try calls.authorize(bundle, write: true)
        return bundle
    }

    func save(_ r: ActivitySave) throws(SearchlightError) -> ActivitySave.Response {
        let bundle = try ownBundle()
        // A user's history says what that user did: root (who may write any bundle as an app)
        // does not write it into a bundle another user owns, so it cannot be forged for them.
        if let owner = context.state.bundle(bundle)?.ownerUID, owner != calls.client.peer.uid {
            throw SearchlightError(.permissionDenied,
                "user activities of \(bundle) are written by its owner's apps only (uid \(owner)); run the app as that user")
        }
        if context.state.bundle(bundle)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported, "indexing is off for \(bundle); turn it on with `searchlight indexing on \(bundle)`")
        }
        let now = Date()
        if let expires = r.expirationDate, expires.timeIntervalSince(now) > ActivityLimits.maximumLifetime {
            throw .invalidParams("\"expirationDate\" is more than a year ahead; user activities are recent history")
        }
        // The activity that was current before, resigned in the same commit as this save.
        let taken = r.current ? takeCurrent(bundle: bundle, next: r.persistentIdentifier) : nil
        let previous = taken?.resign
        // A save that fails (an invalid item, a full disk) leaves the current activity as it was.
        var saved = false
        defer { if !saved, let taken { restoreCurrent(bundle: bundle, next: r.persistentIdentifier, old: taken.old) } }
        // Shown as the related item, when the bundle has it.
        if let related = r.attributeSet?.relatedUniqueIdentifier, !related.isEmpty,
           let store = try calls.store(bundle: nil, index: "", write: false).store,
           !(try store.items(withIdentifiers: [related])).isEmpty {
            var touch = AttributeSet()
            touch.lastUsedDate = now
            var update = SearchableItem(uniqueIdentifier: related, attributeSet: touch)
            update.isUpdate = true
            _ = try calls.apply([.items([update])], index: "", bundle: nil, engaging: r.current ? (related, 1) : nil)
            if let previous { try? markResigned(previous) }
            try deleteStored([r.persistentIdentifier])
            saved = true
            return .init(persistentIdentifier: r.persistentIdentifier, shownAs: "item")
        }
        guard r.eligibleForSearch else {
            if let previous { try? markResigned(previous) }
            try deleteStored([r.persistentIdentifier])
            saved = true
            return .init(persistentIdentifier: r.persistentIdentifier, shownAs: "none")
        }
        let item = try Self.item(r, now: now, limits: calls.limits)
        // One commit: the previous current activity resigned, this one saved, its engagement counted.
        let items = (previous.map { [Self.resignation($0)] } ?? []) + [item]
        _ = try calls.apply([.items(items)], index: Names.activityIndex, bundle: nil,
                            engaging: r.current ? (r.persistentIdentifier, 1) : nil)
        saved = true
        guard let store = try calls.store(bundle: nil, index: Names.activityIndex, write: false).store else {
            throw SearchlightError(.indexUnavailable, "the activity history of \(bundle) could not be opened; retry")
        }
        let overflow = try store.identifiersBeyondNewest(context.config.maxActivitiesPerBundle)
        if !overflow.isEmpty { _ = try calls.apply([.deleteIdentifiers(overflow)], index: Names.activityIndex, bundle: nil) }
        return .init(persistentIdentifier: r.persistentIdentifier, shownAs: "activity")
    }

    /// The stored item of an activity (checked again as an item: the encoded size limit).
    static func item(_ r: ActivitySave, now: Date, limits: Limits) throws(SearchlightError) -> SearchableItem {
        var a = r.attributeSet ?? AttributeSet()
        let related = a.relatedUniqueIdentifier
        a.relatedUniqueIdentifier = nil  // names an item of another index: never this index's lifetime link
        a.weakRelatedUniqueIdentifier = nil
        if a.title == nil, let title = r.title { a.title = title }
        if let keywords = r.keywords {
            var all = a.keywords ?? []
            for k in keywords where !all.contains(k) { all.append(k) }
            a.keywords = all
        }
        // An imported history (recent files) says when it was used; never later than now.
        a.lastUsedDate = min(a.lastUsedDate ?? now, now)
        if a.contentURL == nil, let web = r.webpageURL { a[custom: "activityOpensWebpage"] = .bool(true); a.contentURL = URL(string: web) }
        a[custom: "activityType"] = .string(r.activityType)
        a[custom: "activityCurrent"] = .bool(r.current)
        if let info = r.userInfo { a[custom: "activityUserInfo"] = .string(String(decoding: info.serialized(), as: UTF8.self)) }
        if let web = r.webpageURL { a[custom: "activityWebpageURL"] = .string(web) }
        if let related { a[custom: "activityRelatedItem"] = .string(related) }
        var item = SearchableItem(uniqueIdentifier: r.persistentIdentifier, attributeSet: a)
        item.expirationDate = r.expirationDate
        do {
            return try ItemValidator(limits: limits).validate(item: item.json)
        } catch {
            throw .invalidParams("the activity is not a valid item: \(error.message)")
        }
    }

    func resign(_ r: ActivityResign) throws(SearchlightError) -> JSONResponse {
        let bundle = try ownBundle()
        Self.current.withLock { if $0[bundle]?.identifier == r.persistentIdentifier { $0[bundle] = nil } }
        try markResigned(r.persistentIdentifier)
        return .empty
    }

    func delete(_ r: ActivityDelete) throws(SearchlightError) -> JSONResponse {
        let bundle = try ownBundle()
        Self.current.withLock { if let c = $0[bundle], r.persistentIdentifiers.contains(c.identifier) { $0[bundle] = nil } }
        return JSONResponse(result: ["deleted": .number(Double(try deleteStored(r.persistentIdentifiers)))])
    }

    func deleteAll() throws(SearchlightError) -> JSONResponse {
        let bundle = try ownBundle()
        Self.current.withLock { $0[bundle] = nil }
        guard activityIndexExists(bundle) else { return JSONResponse(result: ["deleted": 0]) }
        let r = try calls.apply([.deleteAll], index: Names.activityIndex, bundle: nil)
        return JSONResponse(result: ["deleted": .number(Double(r.deleted))])
    }

    /// `activity.list`: the app's own saved activities (not expired), most recently used first.
    func list(_ r: ActivityList) throws(SearchlightError) -> JSONResponse {
        guard case .app(let bundle) = calls.caller else { throw BundleAccess.denied("") }
        try calls.authorize(bundle, write: false)
        guard activityIndexExists(bundle) else { return JSONResponse(result: ["activities": []]) }
        let items = try context.registry.withStore(bundle: bundle, index: Names.activityIndex, create: false) {
            (store) throws(SearchlightError) -> [JSONValue] in
            guard let store else { return [] }
            let ids = try store.read { db in
                try db.rows("SELECT uid FROM items WHERE expires > ? ORDER BY coalesce(last_used, 0) DESC, rowid DESC LIMIT ?",
                            [.double(Date().timeIntervalSince1970), .integer(Int64(r.limit))]).compactMap { $0.string(0) }
            }
            let found = try store.items(withIdentifiers: ids)
            let byID = Dictionary(found.compactMap { v in v["uniqueIdentifier"]?.stringValue.map { ($0, v) } }, uniquingKeysWith: { a, _ in a })
            return ids.compactMap { byID[$0] }
        }
        return JSONResponse(result: ["activities": .array(items)])
    }

    /// `activity.resolve`: the stored activity (every attribute) and how the bundle opens; the
    /// desktop names a bundle it may show, an app reads its own, an administrator names any.
    func resolve(_ r: ActivityResolve) throws(SearchlightError) -> DesktopResolve.Response {
        let desktop = DesktopCalls(calls: calls)
        if case .desktop = calls.caller { try desktop.requireVisible(try calls.target(r.bundle)) }
        let bundle = try calls.target(r.bundle)
        try calls.authorize(bundle, write: false)
        var item: JSONValue?
        if activityIndexExists(bundle) {
            item = try context.registry.withStore(bundle: bundle, index: Names.activityIndex, create: false) {
                (store) throws(SearchlightError) -> JSONValue? in try store?.items(withIdentifiers: [r.persistentIdentifier]).first
            }
        }
        return DesktopResolve.Response(bundle: bundle, identifier: r.persistentIdentifier, item: item, opening: desktop.opening(bundle),
                                       ownerUID: desktop.ownerUID(bundle))
    }

    // MARK: - Related items donated later

    /// Whether the bundle has an activity history (open, or its file).
    static func historyExists(_ bundle: String, context: ServiceContext) -> Bool {
        context.registry.servedStore(bundle: bundle, index: Names.activityIndex) != nil
            || FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: Names.activityIndex))
    }

    /// Items of the default index (`items`) were donated: the saved activities whose related item
    /// is among `identifiers` (saved while that item did not exist) are shown as it from now on,
    /// by the rule of `save`: the item takes the activity's recency (its `lastUsedDate`, when
    /// later than the item's own) and engagement, and the activity leaves the history.
    static func absorb(relatedTo identifiers: Set<String>, bundle: String, items: IndexStore, context: ServiceContext) throws(SearchlightError) {
        try context.registry.withStore(bundle: bundle, index: Names.activityIndex, create: false) { (history) throws(SearchlightError) in
            guard let history else { return }
            // The history is bounded (--max-activities-per-bundle): its related names are read whole.
            let related = try history.read { db in
                try db.rows("""
                    SELECT uid, json_extract(attrs, '$.custom.activityRelatedItem'), last_used, engagement FROM items
                    WHERE expires > ? AND json_extract(attrs, '$.custom.activityRelatedItem') IS NOT NULL
                    """, [.double(Date().timeIntervalSince1970)]).compactMap { row -> (activity: String, item: String, lastUsed: Double?, engagement: Double)? in
                    guard let activity = row.string(0), let item = row.string(1), identifiers.contains(item) else { return nil }
                    return (activity, item, row.double(2), row.double(3) ?? 0)
                }
            }
            guard !related.isEmpty else { return }
            let existing = try items.read { db in
                var found: [String: Double?] = [:]
                for r in related {
                    for row in try db.rows("SELECT last_used FROM items WHERE uid = ?", [.text(r.item)]) { found[r.item] = row.double(0) }
                }
                return found
            }
            var absorbed: [String] = []
            for r in related {
                guard let itemLastUsed = existing[r.item] else { continue }
                if let used = r.lastUsed, used > (itemLastUsed ?? -.infinity) {
                    var touch = AttributeSet()
                    touch.lastUsedDate = Date(timeIntervalSince1970: used)
                    var update = SearchableItem(uniqueIdentifier: r.item, attributeSet: touch)
                    update.isUpdate = true
                    _ = try items.applySync([.items([update])])
                }
                if r.engagement > 0 { try items.recordEngagement(identifier: r.item, suggestion: nil, weight: r.engagement) }
                absorbed.append(r.activity)
            }
            if !absorbed.isEmpty { _ = try history.applySync([.deleteIdentifiers(absorbed)]) }
        }
    }

    // MARK: - Helpers

    private func activityIndexExists(_ bundle: String) -> Bool { Self.historyExists(bundle, context: context) }

    @discardableResult
    private func deleteStored(_ ids: [String]) throws(SearchlightError) -> Int {
        guard case .app(let bundle) = calls.caller, activityIndexExists(bundle) else { return 0 }
        return try calls.apply([.deleteIdentifiers(ids)], index: Names.activityIndex, bundle: nil).deleted
    }

    private func markResigned(_ id: String) throws(SearchlightError) {
        guard case .app(let bundle) = calls.caller, activityIndexExists(bundle) else { return }
        _ = try calls.apply([.items([Self.resignation(id)])], index: Names.activityIndex, bundle: nil)
    }

    /// `becomeCurrent()` of another activity: it becomes the bundle's current one; answers the
    /// one that was current before (to resign), if another.
    /// Makes `next` the bundle's current activity; returns the one to resign (if another) and the
    /// entry it replaced (to put back if the save fails).
    private func takeCurrent(bundle: String, next: String) -> (resign: String?, old: Current?) {
        let connection = connectionID
        return Self.current.withLock { current -> (resign: String?, old: Current?) in
            let old = current[bundle]
            current[bundle] = Current(identifier: next, connection: connection)
            return (old?.identifier == next ? nil : old?.identifier, old)
        }
    }

    /// Undoes `takeCurrent` after a failed save, unless another save has replaced it meanwhile.
    private func restoreCurrent(bundle: String, next: String, old: Current?) {
        let connection = connectionID
        Self.current.withLock { current in
            guard let now = current[bundle], now.identifier == next, now.connection == connection else { return }
            current[bundle] = old
        }
    }
}

extension IndexStore {
    /// The identifiers past the `keep` most recently used items (`lastUsedDate`, then newest row):
    /// what a bounded history lets go.
    func identifiersBeyondNewest(_ keep: Int) throws(SearchlightError) -> [String] {
        try read { db in
            try db.rows("SELECT uid FROM items ORDER BY coalesce(last_used, 0) DESC, rowid DESC LIMIT -1 OFFSET ?",
                        [.integer(Int64(keep))]).compactMap { $0.string(0) }
        }
    }
}

extension HandlerTable where Session: BundleSession {
    /// The writes of a bundle's activity history (role app) and `activity.resolve`.
    mutating func addActivityMethods() {
        on(ActivitySave.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).save(r) }
        on(ActivityResign.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).resign(r) }
        on(ActivityDelete.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).delete(r) }
        on(ActivityDeleteAll.self) { s, _ throws(SearchlightError) in try ActivityCalls(calls: s.calls).deleteAll() }
        on(ActivityList.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).list(r) }
        addActivityResolve()
    }

    mutating func addActivityResolve() {
        on(ActivityResolve.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).resolve(r) }
    }
}
