import Foundation
import SearchlightStore
import SearchlightWire

/// The session of the desktop's search (`initialize {role: "desktop"}`, DESIGN §12,
/// Docs/Desktop.md): the connection of `searchlight-desktop`, the search provider of GNOME Shell
/// and KRunner, on behalf of the user it runs as.
///
/// It reads only what the peer's uid may read (`BundleAccess`, the same rules as an app's reads),
/// never a bundle hidden from the desktop (`desktop.setHidden`), and writes nothing but
/// engagement, so that what the user opens from the desktop ranks higher:
/// - `query.user` without `bundle` searches every bundle it may show; with `bundle`, that one.
///   Every item carries `bundle`, and the answer's `bundles` says how each bundle's items open.
/// - `query.engaged {bundle, identifier | suggestion, …}` on an index that exists (`activity: true`:
///   an activity result, in the bundle's activity history).
/// - `desktop.resolve {bundle, identifier}`: the item and how it opens.
/// - `desktop.staleItems {bundle, identifiers}`: items whose `file:` contentURL is gone
///   (`DesktopCalls.staleItems`).
/// Every other method is refused with permissionDenied (`ClientSession.Role.handler(for:)`).
final class DesktopSession: BundleSession {
    let client: ClientSession
    let calls: BundleCalls
    var desktop: DesktopCalls { DesktopCalls(calls: calls) }

    init(client: ClientSession) {
        self.client = client
        calls = BundleCalls(client: client, caller: .desktop)
    }

    static let handlers: HandlerTable<DesktopSession> = {
        var table = HandlerTable<DesktopSession>()
        table.onEncoded(QueryUser.self) { s, r throws(SearchlightError) in try s.userQuery(r) }
        table.on(QueryEngaged.self) { s, r throws(SearchlightError) in try s.engaged(r) }
        table.on(DesktopResolve.self) { s, r throws(SearchlightError) in try s.desktop.resolve(r) }
        table.on(DesktopStaleItems.self) { s, r throws(SearchlightError) in JSONResponse(result: try s.desktop.staleItems(r)) }
        table.on(ActivityResolve.self) { s, r throws(SearchlightError) in try ActivityCalls(calls: s.calls).resolve(r) }
        return table
    }()

    static let refusal = "the desktop role may only search (query.user), record engagement (query.engaged), resolve items (desktop.resolve) and activities (activity.resolve) and report items whose file is gone (desktop.staleItems)"

    private func userQuery(_ r: QueryUser) throws(SearchlightError) -> WireAnswer {
        if let bundle = r.bundle { try desktop.requireVisible(bundle) }
        // Every item names its bundle (also when the query named one), and `bundles` says how the
        // items of each bundle in the answer open.
        return try calls.userQuery(r, desktop: desktop)
    }

    /// Engagement on an item or suggestion of a bundle it may show, in an index that exists:
    /// never creates an index nor claims a bundle (read access is enough; the store is the
    /// bundle's own ranking signal, not its data).
    private func engaged(_ r: QueryEngaged) throws(SearchlightError) -> JSONResponse {
        guard let bundle = r.bundle else {
            throw .invalidParams("\"bundle\" is required: the bundle of the item or suggestion engaged with")
        }
        try desktop.requireVisible(bundle)
        // An activity result names the bundle's activity history, which no client names as an index.
        let index = r.activity ? Names.activityIndex : r.index
        guard let store = try calls.store(bundle: bundle, index: index, write: false).store else { throw BundleAccess.denied(bundle) }
        var identifier: String?, suggestion: String?
        switch r.target {
        case .identifier(let id): identifier = id
        case .suggestion(let s): suggestion = s
        }
        try store.recordEngagement(identifier: identifier, suggestion: suggestion, weight: r.interaction == .select ? 1 : 0.25)
        return .empty
    }
}
