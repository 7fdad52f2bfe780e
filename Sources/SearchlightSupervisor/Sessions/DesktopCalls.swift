import Foundation
import SearchlightStore
import SearchlightWire

/// The `desktop.*` methods (DESIGN §12, Docs/Desktop.md), shared by the roles that answer them:
/// the settings of the desktop's search (`desktop.setHidden`, `desktop.register`,
/// `desktop.settings`: AppSession, AdminSession) and what opening an item needs
/// (`desktop.resolve`: those and DesktopSession).
///
/// Who may change a bundle's settings: its owner, over an app connection for that bundle
/// (`searchlight desktop hide BUNDLE` connects so), checked and recorded like a write of the app
/// (`BundleAccess`: a name nobody uses is claimed, within the per-user limit), because the desktop
/// a setting shapes is the owner's own; or an administrator, for any bundle, without claiming it.
/// An extension may not: its unit declares `OpenWith`, and hiding is the user's choice.
struct DesktopCalls {
    let calls: BundleCalls
    var context: ServiceContext { calls.context }
    var client: ClientSession { calls.client }

    /// How a bundle's items open: its unit's `OpenWith`, else the registered desktop file.
    func opening(_ bundle: String) -> DesktopOpening? {
        if let unit = context.catalog.unit(forBundle: bundle), let id = unit.openWith {
            return DesktopOpening(openWith: id, source: .unit, continuesSearch: unit.continuesSearch)
        }
        let entry = context.desktop.entry(bundle)
        if let id = entry.openWith { return DesktopOpening(openWith: id, source: .registration, continuesSearch: entry.continuesSearch) }
        return nil
    }

    // MARK: - What the desktop may show

    /// Whether the desktop's search may show a bundle to this peer: not hidden, and readable by
    /// the peer under the daemon's rules (the owner, a unit's user, root; never another user's).
    ///
    /// Root is no exception here: a desktop shows its own user's apps. Root's desktop showing (and
    /// opening, as root) items of other users' bundles would run what those users declared to open
    /// them with (issue 29, D1); an administrator reads them with `searchlight search` instead.
    func mayShow(_ bundle: String) -> Bool {
        guard !context.desktop.isHidden(bundle) else { return false }
        if client.peer.uid == 0, let owner = ownerUID(bundle), owner != 0 { return false }
        do {
            try BundleAccess(context: context).authorize(bundle, by: .app(client.peer, client.sandbox), write: false)
            return true
        } catch {
            return false
        }
    }

    /// The uid that owns a bundle: its unit's user when a unit serves it, else the recorded owner.
    func ownerUID(_ bundle: String) -> UInt32? {
        if let unit = context.catalog.unit(forBundle: bundle) { return context.unitOwner(unit) }
        return context.state.bundle(bundle)?.ownerUID
    }

    /// A bundle named by a desktop call must be one it may show and that has files; else the
    /// same refusal as an unreadable bundle, except for a hidden one the peer may read, whose
    /// owner is told how to show it again.
    func requireVisible(_ bundle: String) throws(SearchlightError) {
        guard context.registry.bundleExists(bundle), mayShow(bundle) else {
            if context.registry.bundleExists(bundle), context.desktop.isHidden(bundle),
               (try? BundleAccess(context: context).authorize(bundle, by: .app(client.peer, client.sandbox), write: false)) != nil {
                throw SearchlightError(.permissionDenied,
                    "\(bundle) is hidden from the desktop's search; show it again with `searchlight desktop show \(bundle)`")
            }
            throw BundleAccess.denied(bundle)
        }
    }

    // MARK: - Methods

    /// The bundle a settings change is for, after the permission check of its caller.
    private func settingsTarget(_ named: String?) throws(SearchlightError) -> String {
        switch calls.caller {
        case .app(let bundle):
            if let named, named != bundle {
                throw .invalidParams("an app connection changes its own bundle's settings (\(bundle)); leave \"bundle\" out")
            }
            try calls.authorize(bundle, write: true)
            return bundle
        case .admin:
            guard let named else { throw .invalidParams("\"bundle\" is required: the bundle whose desktop settings change") }
            return named
        case .desktop, .extensionUnit:
            throw SearchlightError(.permissionDenied,
                "the desktop settings of a bundle are changed by its owner (an app connection for it: `searchlight desktop hide|show`, `searchlight register`) or an administrator")
        }
    }

    func setHidden(_ r: DesktopSetHidden) throws(SearchlightError) -> DesktopSetHidden.Response {
        let bundle = try settingsTarget(r.bundle)
        do {
            try context.desktop.setHidden(bundle, r.hidden)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the desktop setting of \(bundle): \(error); retry")
        }
        context.log.notice("desktop visibility changed", ["bundle": bundle, "hidden": r.hidden, "by_uid": client.peer.uid])
        return DesktopSetHidden.Response(bundle: bundle, hidden: r.hidden)
    }

    func register(_ r: DesktopRegister) throws(SearchlightError) -> DesktopRegister.Response {
        let bundle = try settingsTarget(r.bundle)
        do {
            try context.desktop.setOpenWith(bundle, r.openWith, continuesSearch: r.continuesSearch)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the desktop setting of \(bundle): \(error); retry")
        }
        context.log.notice("desktop registration changed", ["bundle": bundle, "open_with": r.openWith ?? "-", "by_uid": client.peer.uid])
        var answer = DesktopRegister.Response(bundle: bundle, openWith: r.openWith)
        answer.continuesSearch = r.openWith != nil && r.continuesSearch
        if let unit = context.catalog.unit(forBundle: bundle), let declared = unit.openWith {
            // The unit's declaration wins; say so, rather than let the registration look in force.
            answer.unitOpenWith = declared
            answer.servedBy = unit.label
        }
        return answer
    }

    /// `desktop.resolve`: the item (every attribute) and how it opens. The desktop names a bundle
    /// it may show; an app reads its own; an administrator names any.
    func resolve(_ r: DesktopResolve) throws(SearchlightError) -> DesktopResolve.Response {
        if case .desktop = calls.caller { try requireVisible(try calls.target(r.bundle)) }
        let target = try calls.store(bundle: r.bundle, index: r.index, write: false)
        let item = try target.store?.items(withIdentifiers: [r.identifier]).first
        return DesktopResolve.Response(bundle: target.bundle, identifier: r.identifier, item: item, opening: opening(target.bundle),
                                       ownerUID: ownerUID(target.bundle))
    }

    /// `desktop.staleItems`: items of a bundle the desktop may show whose `file:` contentURL the
    /// desktop found gone, at query time and with its user's rights. The daemon never looks at the
    /// files itself (as root it would learn of files the user cannot see); it takes the desktop's
    /// word only as far as the user could act anyway:
    /// - only identifiers that exist in the index with a `file:` contentURL count, each at most
    ///   once per `StaleItems.repeatAfter`;
    /// - a bundle with an enabled extension serving the index: a background reindex-identifiers
    ///   request (journalled, coalesced and throttled like every background request), so that the
    ///   extension, which can see the file, decides;
    /// - without one: deleted when the reporting user owns the bundle (it could delete them
    ///   itself), else left and counted as kept.
    func staleItems(_ r: DesktopStaleItems) throws(SearchlightError) -> JSONValue {
        try requireVisible(r.bundle)
        guard let store = try calls.store(bundle: r.bundle, index: r.index, write: false).store else { throw BundleAccess.denied(r.bundle) }
        let stale = try store.items(withIdentifiers: r.identifiers).compactMap { item -> String? in
            guard let id = item["uniqueIdentifier"]?.stringValue,
                  let url = item["attributeSet"]?["contentURL"]?.stringValue, url.hasPrefix("file:") else { return nil }
            return id
        }
        let fresh = context.staleItems.fresh(bundle: r.bundle, index: r.index, identifiers: stale)
        var answer: [String: JSONValue] = ["bundle": .string(r.bundle), "accepted": .number(Double(fresh.count))]
        guard !fresh.isEmpty else { return .object(answer) }
        if let unit = context.catalog.unit(forBundle: r.bundle), !unit.disabled, unit.indexExtension.indexNames.contains(r.index),
           context.state.bundle(r.bundle)?.indexingEnabled != false, let scheduler = context.scheduler {
            do {
                let queued = try scheduler.enqueue(bundle: r.bundle, index: r.index, kind: .identifiers, identifiers: fresh,
                                                   reason: "stale", background: true)
                answer["requestId"] = .number(Double(queued.id))
            } catch {
                throw SearchlightError(.indexUnavailable, "cannot record the reindex request for \(r.bundle): \(error); retry")
            }
            context.staleItems.record { $0.reindexRequested += fresh.count }
            context.log.info("stale items reported", ["bundle": r.bundle, "count": fresh.count, "action": "reindex", "by_uid": client.peer.uid])
        } else if context.catalog.unit(forBundle: r.bundle) == nil, ownerUID(r.bundle) == client.peer.uid {
            let result = try calls.apply([.deleteIdentifiers(fresh)], index: r.index, bundle: r.bundle)
            context.staleItems.record { $0.deleted += result.deleted }
            answer["deleted"] = .number(Double(result.deleted))
            context.log.info("stale items reported", ["bundle": r.bundle, "count": fresh.count, "action": "delete", "by_uid": client.peer.uid])
        } else {
            context.staleItems.record { $0.kept += fresh.count }
            context.log.info("stale items reported", ["bundle": r.bundle, "count": fresh.count, "action": "kept", "by_uid": client.peer.uid])
        }
        return .object(answer)
    }

    /// `desktop.settings`: an app sees its own bundle's; an administrator every bundle with a
    /// setting or an enabled unit's `OpenWith`, or the one named.
    func settings(_ r: DesktopSettings) throws(SearchlightError) -> DesktopSettings.Response {
        var names: [String]
        switch calls.caller {
        case .admin:
            if let b = r.bundle {
                names = [b]
            } else {
                let units = context.catalog.units.filter { !$0.disabled && $0.openWith != nil }.map(\.bundleIdentifier)
                names = Array(Set(context.desktop.all().map(\.bundle) + units)).sorted()
            }
        case .app(let bundle):
            try calls.authorize(bundle, write: false)
            names = [bundle]
        case .desktop, .extensionUnit:
            throw SearchlightError(.permissionDenied, "desktop.settings is for a bundle's app or an administrator")
        }
        return DesktopSettings.Response(bundles: names.map {
            DesktopSettings.Setting(bundle: $0, hidden: context.desktop.isHidden($0), opening: opening($0))
        })
    }
}

extension HandlerTable where Session: BundleSession {
    /// The settings of the desktop's search and `desktop.resolve` (roles app and admin).
    mutating func addDesktopSettingsMethods() {
        on(DesktopSetHidden.self) { s, r throws(SearchlightError) in try DesktopCalls(calls: s.calls).setHidden(r) }
        on(DesktopRegister.self) { s, r throws(SearchlightError) in try DesktopCalls(calls: s.calls).register(r) }
        on(DesktopSettings.self) { s, r throws(SearchlightError) in try DesktopCalls(calls: s.calls).settings(r) }
        on(DesktopResolve.self) { s, r throws(SearchlightError) in try DesktopCalls(calls: s.calls).resolve(r) }
    }
}
