import Foundation
import SearchlightUnits
import SearchlightWire

/// Who may read and write a bundle's indexes (DESIGN §6 Security), and the owner record every
/// write keeps current in `supervisor.sqlite`.
///
/// - A bundle served by an enabled extension unit belongs to the unit's user (`UserName`, else the
///   daemon's user). Its writes record that user, so the bundle stays theirs when the unit goes.
/// - Otherwise it belongs to its recorded owner: the first app that wrote it, the unit user who
///   last wrote it, the daemon's user (root in system mode) for an administrator's writes, or
///   whoever an administrator gave it to (`admin.setOwner`).
/// - A bundle whose files exist but that has no recorded owner (written before owners were
///   recorded on every write) is for administrators only until one gives it an owner.
/// - A name nobody uses is claimed by the first app that writes it, within the per-user bundle
///   limit; reading it finds nothing.
///
/// A sandboxed peer (`PeerSandbox`: a Flatpak app) is held to its own bundles first, whatever its
/// uid may do (DESIGN §14); the sandbox only takes rights away.
///
/// Root may act on any bundle. The permission check runs before any other check of the bundle,
/// and every refusal is the same `permissionDenied` (`denied`), whatever the reason: a caller
/// learns that a name is taken, never by whom nor what it holds.
struct BundleAccess {
    let context: ServiceContext

    /// Who is calling, as far as bundles are concerned.
    enum Caller {
        /// The admin role: root, the daemon's user, `--admin-group`.
        case admin
        /// An extension, writing its own unit's bundle (authenticated by its socket or its handshake),
        /// and the sandbox of its process (`.none` for one the supervisor launched).
        case extensionUnit(ExtensionUnit, PeerSandbox)
        /// An app connection (or the desktop's), checked against its peer credentials and sandbox.
        case app(PeerCredentials, PeerSandbox)

        /// The sandbox the caller's process runs in (an administrator's is never sandboxed: the
        /// handshake refuses the role to a sandboxed peer).
        var sandbox: PeerSandbox {
            switch self {
            case .admin: .none
            case .extensionUnit(_, let sandbox), .app(_, let sandbox): sandbox
            }
        }
    }

    /// The one answer to a refused bundle: the same code and text whether the bundle holds items,
    /// has indexing off, is served by a unit, or waits for an administrator; no uid in it.
    static func denied(_ bundle: String) -> SearchlightError {
        SearchlightError(.permissionDenied,
            "permission denied for bundle \(bundle): this user may not read or write it; use a bundle identifier of your own, or ask an administrator")
    }

    /// The one check of every call that touches a bundle, whatever its method: the caller's
    /// sandbox, then its uid (or unit, or role). A write records the owner.
    func authorize(_ bundle: String, by caller: Caller, write: Bool) throws(SearchlightError) {
        let sandbox = caller.sandbox
        guard sandbox.mayUse(bundle) else { throw sandbox.refusal(bundle) }
        switch caller {
        case .admin:
            // An administrator's write to a bundle nobody owns makes it the daemon user's (root's
            // in system mode), never left open to the next writer.
            if write { try record(bundle) { _ = try context.state.claim(bundle, uid: context.daemonUID) } }
        case .extensionUnit(let unit, _):
            if write { try record(bundle) { try context.state.setOwner(bundle, uid: context.unitOwner(unit)) } }
        case .app(let peer, _):
            try authorizeApp(bundle, peer: peer, write: write)
        }
    }

    private func authorizeApp(_ bundle: String, peer: PeerCredentials, write: Bool) throws(SearchlightError) {
        let privileged = peer.uid == 0 || peer.uid == context.daemonUID
        if let unit = context.catalog.unit(forBundle: bundle) {
            let owner = context.unitOwner(unit)
            guard peer.uid == owner || peer.uid == 0 else { throw Self.denied(bundle) }
            if write { try record(bundle) { try context.state.setOwner(bundle, uid: owner) } }
            return
        }
        if let owner = context.state.bundle(bundle)?.ownerUID {
            guard owner == peer.uid || peer.uid == 0 else { throw Self.denied(bundle) }
            return
        }
        if context.registry.bundleExists(bundle) {
            // Files nobody is recorded to own: an administrator decides whose they are.
            guard privileged else { throw Self.denied(bundle) }
            if write { try record(bundle) { _ = try context.state.claim(bundle, uid: peer.uid) } }
            return
        }
        // A name nobody uses: a read finds nothing, a write claims it (DESIGN §6).
        guard write else { return }
        let limit = privileged || context.mayAdminister(peer) ? nil : context.config.maxBundlesPerUser
        let owner: UInt32
        do {
            owner = try context.state.claim(bundle, uid: peer.uid, limit: limit)
        } catch let refused as SupervisorState.OwnedTooMany {
            throw SearchlightError(.quotaExceeded,
                "uid \(peer.uid) already owns \(refused.owned) bundles, the most a user may (--max-bundles-per-user \(limit ?? 0)); write to one of them, or ask an administrator to erase unused ones (`searchlight erase BUNDLE`) or to raise the limit")
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the owner of \(bundle): \(error); retry")
        }
        // Another app claimed it in the same instant.
        guard owner == peer.uid || peer.uid == 0 else { throw Self.denied(bundle) }
    }

    private func record(_ bundle: String, _ change: () throws -> Void) throws(SearchlightError) {
        do {
            try change()
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot record the owner of \(bundle): \(error); retry")
        }
    }
}
