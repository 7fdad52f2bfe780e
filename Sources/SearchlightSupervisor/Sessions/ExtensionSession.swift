import Foundation
import SearchlightUnits
import SearchlightWire

/// The session of an index extension (`initialize {role: "extension", label}`): launched by the
/// daemon (authenticated by its inherited socket) or attached by hand (it must run as its unit's
/// user, or root). It donates to its unit's bundle and nothing else; its `$/progress` and every
/// message reset its host's acknowledgement timer; while it serves a background request under
/// load, its index calls are paced.
final class ExtensionSession: BundleSession {
    let client: ClientSession
    let unit: ExtensionUnit
    let host: ExtensionHost
    let calls: BundleCalls

    var bundle: String { unit.bundleIdentifier }
    var label: String { unit.label }

    private init(client: ClientSession, unit: ExtensionUnit, host: ExtensionHost) {
        self.client = client
        self.unit = unit
        self.host = host
        calls = BundleCalls(client: client, caller: .extensionUnit(bundle: unit.bundleIdentifier, label: unit.label))
    }

    static let handlers: HandlerTable<ExtensionSession> = {
        var table = HandlerTable<ExtensionSession>()
        table.addIndexMethods()
        table.addQueryMethods()
        return table
    }()

    /// The unit an `initialize` in the extension role speaks for. A launched extension is its
    /// host's unit (authenticated by the inherited socket); a hand-started one names its label
    /// and must run as the unit's user (or root).
    static func handshake(_ hello: Initialize, client: ClientSession) throws(SearchlightError) -> ExtensionSession {
        let context = client.context
        if client.spawned, let host = client.extensionHost {
            if let claimed = hello.label, claimed != host.label {
                throw .invalidParams("this connection belongs to \(host.label), not \(claimed.prefix(255))")
            }
            return ExtensionSession(client: client, unit: host.unit, host: host)
        }
        guard let label = hello.label, !label.isEmpty else {
            throw .invalidParams("an extension attaching by hand must send its unit's \"label\"")
        }
        guard let unit = context.catalog.unit(label: String(label.prefix(255))), !unit.disabled,
              let host = context.scheduler?.host(label: unit.label) else {
            throw SearchlightError(.unknownExtension,
                "no enabled unit has the label \(label.prefix(255)); install its unit file (Docs/Units.md) and run `searchlight units`")
        }
        let owner = context.unitOwner(unit)
        let peer = client.peer
        guard peer.uid == owner || peer.uid == 0 else {
            throw SearchlightError(.permissionDenied, "uid \(peer.uid) may not attach as \(unit.label): run the extension as its unit's user (UserName) or as root")
        }
        // A sandboxed process attaches only as the extension of a bundle of its own app id.
        let sandbox = client.sandbox
        guard sandbox.mayUse(unit.bundleIdentifier) else { throw sandbox.refusal(unit.bundleIdentifier) }
        client.extensionHost = host
        return ExtensionSession(client: client, unit: unit, host: host)
    }

    /// After the `initialize` answer is on the wire: only then may requests flow to the extension.
    func handshakeAnswered() {
        if client.spawned { host.handshakeCompleted(client) } else { host.attach(client) }
    }

    /// The connection closed. An extension attached by hand stops being sent requests; a
    /// launched one's connection is watched by its host itself.
    func connectionClosed(_ reason: RPCConnection.CloseReason) {
        guard !client.spawned else { return }
        host.attachedConnectionClosed(client.connection, reason: reason)
    }

    /// A notification from the extension: `$/progress` on the request it is working on, with
    /// counts in range; anything else is ignored (a notification has no answer to carry an error).
    func notification(_ method: String, _ params: JSONValue) {
        guard method == Method.progress else {
            client.log.debug("notification ignored", ["method": method, "pid": client.peer.pid])
            return
        }
        host.noteActivity()
        do {
            let progress = try RequestProgress.decode(params, limits: client.limits)
            guard let id = Int64(progress.requestId), host.isCurrentRequest(id), let done = progress.completed else { return }
            client.context.scheduler?.reportProgress(requestID: id, completed: done, total: progress.total)
        } catch {
            client.log.debug("progress ignored", ["label": host.label, "error": error.message])
        }
    }

    /// Index calls of an extension serving a background request while the throttle is not normal
    /// wait this long before they are processed (DESIGN §6: pacing of a throttled extension's
    /// donations). Only this connection's thread waits: other clients and extensions go on.
    func donationPacing(_ method: String) -> TimeInterval? {
        guard method.hasPrefix("index."), method != Method.indexFetchLastClientState else { return nil }
        return host.donationDelay()
    }
}
