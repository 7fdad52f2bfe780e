import Foundation
import SearchlightStore
import SearchlightWire

/// The desktop role (DESIGN §12, Docs/Desktop.md): the connection of `searchlight-desktop`, the
/// search provider of GNOME Shell and KRunner, on behalf of the user it runs as.
///
/// It reads only what the peer's uid may read (`BundleAccess`, the same rules as an app's reads),
/// never a bundle hidden from the desktop (`desktop.setHidden`), and writes nothing but
/// engagement (`query.engaged`, so that what the user opens from the desktop ranks higher):
/// - `query.user` without `bundle` searches every bundle it may show; with `bundle`, that one.
///   Every item carries `bundle`, and the answer's `bundles` gives, for each bundle in it, the
///   desktop file its items open with (`openWith`), when one is declared.
/// - `query.engaged {bundle, identifier | suggestion, …}` on an index that exists.
/// - `desktop.resolve {bundle, identifier}`: the item and its `openWith`, to open it.
/// Everything else is refused with permissionDenied, before any other check.
extension ClientSession {
    func dispatchDesktop(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        switch method {
        case Method.queryUser:
            let bundle = try explicitBundle(params)
            if let bundle { try requireDesktopVisible(bundle) }
            return annotatedForDesktop(try queryUser(params), bundle: bundle)
        case Method.queryEngaged:
            guard let bundle = try explicitBundle(params) else {
                throw .invalidParams("\"bundle\" is required: the bundle of the item or suggestion engaged with")
            }
            try requireDesktopVisible(bundle)
            // Never creates an index: engagement is only recorded where the item can be.
            guard FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: try Names.index(params["index"]))) else {
                throw BundleAccess.denied(bundle)
            }
            return try queryEngaged(params)
        case Method.desktopResolve:
            return try DesktopMethods(session: self).resolve(params)
        default:
            throw SearchlightError(.permissionDenied,
                "the desktop role may only search (query.user), record engagement (query.engaged) and resolve items (desktop.resolve); \(method.prefix(64)) needs the app or admin role")
        }
    }

    /// Whether the desktop's search may show a bundle to this peer: not hidden, and readable by
    /// the peer under the daemon's rules (the owner, a unit's user, root; never another user's).
    func desktopMayShow(_ bundle: String) -> Bool {
        guard !context.desktop.isHidden(bundle) else { return false }
        do {
            try BundleAccess(context: context).authorize(bundle, by: .app(peer), write: false)
            return true
        } catch {
            return false
        }
    }

    /// A bundle named by a desktop call must be one it may show and that has files; else the
    /// same refusal as an unreadable bundle, except for a hidden one of the peer's own, whose
    /// owner is told how to show it again.
    func requireDesktopVisible(_ bundle: String) throws(SearchlightError) {
        guard context.registry.bundleExists(bundle), desktopMayShow(bundle) else {
            if context.registry.bundleExists(bundle), context.desktop.isHidden(bundle),
               (try? BundleAccess(context: context).authorize(bundle, by: .app(peer), write: false)) != nil {
                throw SearchlightError(.permissionDenied,
                    "\(bundle) is hidden from the desktop's search; show it again with `searchlight desktop show \(bundle)`")
            }
            throw BundleAccess.denied(bundle)
        }
    }

    private func explicitBundle(_ params: JSONValue) throws(SearchlightError) -> String? {
        guard let value = params["bundle"], !value.isNull else { return nil }
        return try Names.bundle(value)
    }

    /// Every item names its bundle (also when the query named one), and `bundles` says how the
    /// items of each bundle in the answer open.
    private func annotatedForDesktop(_ answer: JSONValue, bundle: String?) -> JSONValue {
        guard case .object(var o) = answer else { return answer }
        var bundles: [String: JSONValue] = [:]
        for key in ["items", "rankedItems"] {
            guard let items = o[key]?.arrayValue else { continue }
            o[key] = .array(items.map { item in
                var item = item
                if let bundle, item["bundle"] == nil { item = Self.tag(item, bundle: bundle, index: "") }
                if let b = item["bundle"]?.stringValue, bundles[b] == nil {
                    var info: [String: JSONValue] = [:]
                    if let (openWith, _) = DesktopMethods(session: self).openWith(b) { info["openWith"] = .string(openWith) }
                    bundles[b] = .object(info)
                }
                return item
            })
        }
        o["bundles"] = .object(bundles)
        return .object(o)
    }
}
