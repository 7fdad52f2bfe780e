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
/// `lastUsedDate` set to now and, when current, its engagement counted.
struct ActivityCalls {
    let calls: BundleCalls
    var context: ServiceContext { calls.context }

    /// The bundle's current activity, per bundle: a new current one resigns the one before it.
    private static let current = Mutex<[String: String]>([:])

    private func ownBundle() throws(SearchlightError) -> String {
        guard case .app(let bundle) = calls.caller else {
            throw SearchlightError(.permissionDenied, "user activities are written by the bundle's app only (initialize with role \"app\")")
        }
        try calls.authorize(bundle, write: true)
        return bundle
    }

    func save(_ r: ActivitySave) throws(SearchlightError) -> ActivitySave.Response {
        let bundle = try ownBundle()
        if context.state.bundle(bundle)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported, "indexing is off for \(bundle); turn it on with `searchlight indexing on \(bundle)`")
        }
        let now = Date()
        if let expires = r.expirationDate, expires.timeIntervalSince(now) > ActivityLimits.maximumLifetime {
            throw .invalidParams("\"expirationDate\" is more than a year ahead; user activities are recent history")
        }
        if r.current { resignPrevious(bundle: bundle, next: r.persistentIdentifier) }
        // Shown as the related item, when the bundle has it.
        if let related = r.attributeSet?.relatedUniqueIdentifier, !related.isEmpty,
           let store = try calls.store(bundle: nil, index: "", write: false).store,
           !(try store.items(withIdentifiers: [related])).isEmpty {
            var touch = AttributeSet()
            touch.lastUsedDate = now
            var update = SearchableItem(uniqueIdentifier: related, attributeSet: touch)
            update.isUpdate = true
            _ = try calls.apply([.items([update])], index: "", bundle: nil)
            if r.current { try store.recordEngagement(identifier: related, suggestion: nil, weight: 1) }
            try deleteStored([r.persistentIdentifier])
            return .init(persistentIdentifier: r.persistentIdentifier, shownAs: "item")
        }
        guard r.eligibleForSearch else {
            try deleteStored([r.persistentIdentifier])
            return .init(persistentIdentifier: r.persistentIdentifier, shownAs: "none")
        }
        let item = try Self.item(r, now: now, limits: calls.limits)
        _ = try calls.apply([.items([item])], index: Names.activityIndex, bundle: nil)
        guard let store = try calls.store(bundle: nil, index: Names.activityIndex, write: false).store else {
            throw SearchlightError(.indexUnavailable, "the activity history of \(bundle) could not be opened; retry")
        }
        if r.current { try store.recordEngagement(identifier: r.persistentIdentifier, suggestion: nil, weight: 1) }
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
        Self.current.withLock { if $0[bundle] == r.persistentIdentifier { $0[bundle] = nil } }
        try markResigned(r.persistentIdentifier)
        return .empty
    }

    func delete(_ r: ActivityDelete) throws(SearchlightError) -> JSONResponse {
        let bundle = try ownBundle()
        Self.current.withLock { if let c = $0[bundle], r.persistentIdentifiers.contains(c) { $0[bundle] = nil } }
        return JSONResponse(result: ["deleted": .number(Double(try deleteStored(r.persistentIdentifiers)))])
    }

    func deleteAll() throws(SearchlightError) -> JSONResponse {
        let bundle = try ownBundle()
        Self.current.withLock { $0[bundle] = nil }
        guard activityIndexExists(bundle) else { return JSONResponse(result: ["deleted": 0]) }
        let r = try calls.apply([.deleteAll], index: Names.activityIndex, bundle: nil)
        return JSONResponse(result: ["deleted": .number(Double(r.deleted))])
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

    // MARK: - Helpers

    private func activityIndexExists(_ bundle: String) -> Bool {
        context.registry.servedStore(bundle: bundle, index: Names.activityIndex) != nil
            || FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: Names.activityIndex))
    }

    @discardableResult
    private func deleteStored(_ ids: [String]) throws(SearchlightError) -> Int {
        guard case .app(let bundle) = calls.caller, activityIndexExists(bundle) else { return 0 }
        return try calls.apply([.deleteIdentifiers(ids)], index: Names.activityIndex, bundle: nil).deleted
    }

    private func markResigned(_ id: String) throws(SearchlightError) {
        guard case .app(let bundle) = calls.caller, activityIndexExists(bundle) else { return }
        var a = AttributeSet()
        a[custom: "activityCurrent"] = .bool(false)
        var update = SearchableItem(uniqueIdentifier: id, attributeSet: a)
        update.isUpdate = true
        _ = try calls.apply([.items([update])], index: Names.activityIndex, bundle: nil)
    }

    /// `becomeCurrent()` of another activity resigns the one that was current.
    private func resignPrevious(bundle: String, next: String) {
        let previous = Self.current.withLock { current -> String? in
            defer { current[bundle] = next }
            return current[bundle] == next ? nil : current[bundle]
        }
        if let previous { try? markResigned(previous) }
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
        addActivityResolve()
    }

    mutating func addActivityResolve() {
        on(ActivityResolve.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).resolve(r) }
    }
}
