import Foundation
import SearchlightStore
import SearchlightWire

/// The `desktop.*` methods (DESIGN §12, Docs/Protocol.md): the settings of the desktop's search
/// and what opening an item needs.
///
/// Who may change a bundle's settings (`desktop.setHidden`, `desktop.register`): its owner, over
/// an app connection for that bundle (`searchlight desktop hide BUNDLE` connects so), checked and
/// recorded like a write of the app (`BundleAccess`: a name nobody uses is claimed, within the
/// per-user limit), because the desktop a setting shapes is the owner's own; or an administrator,
/// for any bundle, without claiming it. An extension's connection may not: its unit declares
/// `OpenWith`, and hiding is the user's choice. The desktop role may only `desktop.resolve`.
struct DesktopMethods {
    let session: ClientSession
    var context: ServiceContext { session.context }

    func dispatch(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        switch method {
        case Method.desktopSetHidden: return try setHidden(params)
        case Method.desktopRegister: return try register(params)
        case Method.desktopResolve: return try resolve(params)
        case Method.desktopSettings: return try settings(params)
        default:
            throw SearchlightError(.methodNotFound, "unknown method \"\(method.prefix(64))\"; see Docs/Protocol.md")
        }
    }

    /// The desktop file a bundle's items open with: its unit's `OpenWith`, else the registered one.
    func openWith(_ bundle: String) -> (desktopID: String, source: String)? {
        if let unit = context.catalog.unit(forBundle: bundle), let id = unit.openWith { return (id, "unit") }
        if let id = context.desktop.entry(bundle).openWith { return (id, "registration") }
        return nil
    }

    /// The bundle a settings change is for, after the permission check of its caller.
    private func settingsTarget(_ params: JSONValue) throws(SearchlightError) -> String {
        switch session.role {
        case .app?:
            let bundle = try session.targetBundle(params)
            if let named = params["bundle"], !named.isNull, named.stringValue != bundle {
                throw .invalidParams("an app connection changes its own bundle's settings (\(bundle)); leave \"bundle\" out")
            }
            try session.authorize(bundle, write: true)
            return bundle
        case .admin?:
            guard let value = params["bundle"], !value.isNull else { throw .invalidParams("\"bundle\" is required") }
            return try Names.bundle(value)
        default:
            throw SearchlightError(.permissionDenied,
                "the desktop settings of a bundle are changed by its owner (an app connection for it: `searchlight desktop hide|show`, `searchlight register`) or an administrator")
        }
    }

    private func setHidden(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let bundle = try settingsTarget(params)
        guard let hidden = params["hidden"]?.boolValue else { throw .invalidParams("\"hidden\" must be true or false") }
        do {
            try context.desktop.setHidden(bundle, hidden)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the desktop setting of \(bundle): \(error); retry")
        }
        context.log.notice("desktop visibility changed", ["bundle": bundle, "hidden": hidden, "by_uid": session.peer.uid])
        return ["bundle": .string(bundle), "hidden": .bool(hidden)]
    }

    private func register(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let bundle = try settingsTarget(params)
        let desktopID: String?
        switch params["openWith"] {
        case .null?: desktopID = nil
        case .string(let s)? where Names.validDesktopFileID(s): desktopID = s
        default:
            throw .invalidParams("\"openWith\" must be a desktop-file id such as org.example.Notes.desktop (letters, digits, '.', '-', '_'; no '/'), or null to remove it")
        }
        do {
            try context.desktop.setOpenWith(bundle, desktopID)
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the desktop setting of \(bundle): \(error); retry")
        }
        context.log.notice("desktop registration changed", ["bundle": bundle, "open_with": desktopID ?? "-", "by_uid": session.peer.uid])
        var answer: [String: JSONValue] = ["bundle": .string(bundle), "openWith": desktopID.map(JSONValue.string) ?? .null]
        if let unit = context.catalog.unit(forBundle: bundle), let declared = unit.openWith {
            // The unit's declaration wins; say so, rather than let the registration look in force.
            answer["unitOpenWith"] = .string(declared)
            answer["servedBy"] = .string(unit.label)
        }
        return .object(answer)
    }

    /// `desktop.resolve {bundle, identifier, index?}`: the item (all attributes; absent when it
    /// does not exist or expired) and the desktop file it opens with.
    func resolve(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let limits = session.limits
        guard let identifier = params["identifier"]?.stringValue, !identifier.isEmpty, identifier.utf8.count <= limits.maxIdentifierBytes else {
            throw .invalidParams("\"identifier\" must be a non-empty string of at most \(limits.maxIdentifierBytes) bytes")
        }
        if session.role == .desktop { try session.requireDesktopVisible(try session.targetBundle(params)) }
        let target = try session.store(params, write: false)
        var answer: [String: JSONValue] = ["bundle": .string(target.bundle), "identifier": .string(identifier)]
        if let item = try target.store?.items(withIdentifiers: [identifier]).first { answer["item"] = item }
        if let (id, source) = openWith(target.bundle) {
            answer["openWith"] = .string(id)
            answer["openWithSource"] = .string(source)
        }
        return .object(answer)
    }

    /// `desktop.settings {bundle?}`: an app sees its own bundle's; an administrator every bundle
    /// with a setting or a unit's `OpenWith`, or the one named.
    private func settings(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        var names: [String]
        switch session.role {
        case .admin?:
            if let value = params["bundle"], !value.isNull {
                names = [try Names.bundle(value)]
            } else {
                let units = context.catalog.units.filter { !$0.disabled && $0.openWith != nil }.map(\.bundleIdentifier)
                names = Array(Set(context.desktop.all().map(\.bundle) + units)).sorted()
            }
        case .app?, .extensionHost?:
            let bundle = try session.targetBundle(params)
            try session.authorize(bundle, write: false)
            names = [bundle]
        default:
            throw SearchlightError(.permissionDenied, "desktop.settings is for a bundle's app or an administrator")
        }
        let list: [JSONValue] = names.map { bundle in
            var o: [String: JSONValue] = ["bundle": .string(bundle), "hidden": .bool(context.desktop.isHidden(bundle))]
            if let (id, source) = openWith(bundle) {
                o["openWith"] = .string(id)
                o["openWithSource"] = .string(source)
            }
            return .object(o)
        }
        return ["bundles": .array(list)]
    }
}
