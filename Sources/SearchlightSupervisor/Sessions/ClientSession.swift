import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// The last "index unavailable" log line, and the failures since (shared by every connection).
private let unavailableLogGate = Mutex<(last: Date, count: Int)>((.distantPast, 0))

/// One client connection: its handshake (`initialize`, typed `Initialize`), then the session of
/// the role it took (`AppSession`, `ExtensionSession`, `AdminSession`, `DesktopSession`), which answers each method
/// from its table of handlers. Messages are handled in order on the connection's own reader
/// thread, so a slow or malicious client delays only itself; a handler that waits on an
/// extension (item data, a waited reindex) is answered later from a task.
///
/// What belongs to the connection whatever its role lives here: open batches, the stores a call
/// leases, the deferred calls outstanding, idleness.
final class ClientSession: Sendable {
    /// The role taken at the handshake, with its session.
    enum Role {
        case app(AppSession)
        case extensionHost(ExtensionSession)
        case admin(AdminSession)
        /// The desktop's search (DESIGN §12): reads what the peer may read, minus hidden bundles.
        case desktop(DesktopSession)

        var name: String {
            switch self {
            case .app: "app"
            case .extensionHost: "extension"
            case .admin: "admin"
            case .desktop: "desktop"
            }
        }
    }

    let context: ServiceContext
    let connection: RPCConnection
    let peer: PeerCredentials
    /// The peer's process, pinned at accept and identified at the handshake (`sandbox`); nil for
    /// the socketpair of an extension the supervisor launched.
    private let process: PeerProcess?
    /// Set once, by the handshake, on the connection's reader thread; read there and by `idle`.
    private let roleState = Mutex<Role?>(nil)
    var role: Role? { roleState.withLock { $0 } }
    /// The peer's sandbox, found from its process at the handshake (DESIGN §14): every bundle a
    /// call names is checked against it (`BundleAccess`). Until then, and should the handshake
    /// fail, nothing is allowed.
    private let sandboxState = Mutex<PeerSandbox?>(nil)
    var sandbox: PeerSandbox { sandboxState.withLock { $0 } ?? .unidentified(reason: "it has not sent initialize") }
    /// Open batches by index name: the calls between beginBatch and endBatch. Locked because the
    /// scheduler discards an extension's batches when a request ends (`discardBatches`).
    let batches = Mutex<[String: [Mutation]]>([:])
    /// For an extension's connection: its host (set for a spawned one at once, for an attached
    /// one by its handshake). Its donations and progress reset the inactivity timer.
    var extensionHost: ExtensionHost? {
        get { host.withLock { $0.host } }
        set { host.withLock { $0.host = newValue } }
    }
    private struct WeakHost {
        weak var host: ExtensionHost?
    }
    private let host: Mutex<WeakHost>
    /// True for the socketpair of an extension the supervisor launched: authenticated by it.
    let spawned: Bool
    /// Deferred calls (answered from a task) outstanding on this connection, at most
    /// `maxDeferredCalls`: past that the reader thread waits for one to be answered, so a client
    /// that pipelines them without reading its answers stops being read (its own writes block)
    /// instead of piling up tasks and memory in the daemon.
    private let deferredSlots = DispatchSemaphore(value: ClientSession.maxDeferredCalls)
    static let maxDeferredCalls = 64
    /// Deferred calls not yet answered (a connection with one is never idle).
    private let deferredOutstanding = SharedCount()
    /// The stores the call being handled uses, given back when it is answered.
    let callLeases: IndexLeases

    init(context: ServiceContext, connection: RPCConnection, peer: PeerCredentials, process: PeerProcess? = nil,
         spawnedFor host: ExtensionHost? = nil) {
        self.context = context
        self.connection = connection
        self.peer = peer
        self.process = process
        self.host = Mutex(WeakHost(host: host))
        spawned = host != nil
        callLeases = IndexLeases(context.registry)
    }

    var log: Logger { context.log }
    var limits: Limits { context.config.limits }

    /// Whether the connection may be closed for idleness once nothing has come or gone on it for
    /// `--idle-timeout` (asked by its reader thread, which is then waiting for input, so no call
    /// is being handled). Never an extension's connection (spawned or attached: it waits for the
    /// daemon's requests), nor one with an open batch, a deferred call outstanding (item data, a
    /// waited reindex), an `admin.monitor` stream or a current user activity (its close resigns it).
    var idle: Bool {
        if spawned { return false }
        if case .extensionHost? = role { return false }
        if batches.withLock({ !$0.isEmpty }) { return false }
        if deferredOutstanding.value > 0 { return false }
        if ActivityCalls.holdsCurrent(ObjectIdentifier(connection)) { return false }
        return !context.events.isSubscribed(connection)
    }

    /// Drops every open batch (nothing of them is applied); returns how many there were. Called
    /// when a supervisor request to this extension ends, so that a handler that threw inside a
    /// batch cannot leave it open for the retry, whose donations would then never commit.
    @discardableResult
    func discardBatches() -> Int {
        batches.withLock { open in
            defer { open.removeAll() }
            return open.count
        }
    }

    /// The connection closed: an admin monitor stops receiving events, waiters of its reindex
    /// requests go, an extension attached by hand stops being sent requests, and an app's current
    /// user activities are resigned (`ActivityCalls.connectionClosed`).
    func closed(_ reason: RPCConnection.CloseReason) {
        context.events.unsubscribe(connection)
        context.scheduler?.removeWaiters(owner: ObjectIdentifier(connection))
        if case .extensionHost(let session)? = role { session.connectionClosed(reason) }
        if case .app? = role { ActivityCalls.connectionClosed(ObjectIdentifier(connection), context: context) }
    }

    // MARK: - Messages

    func handle(_ message: RPCMessage) {
        switch message {
        case .request(let id, let method, let params):
            context.countRequest()
            extensionHost?.noteActivity()
            guard let role else {
                let result = Result { () throws(SearchlightError) -> JSONValue in try initialize(method, params) }
                connection.reply(to: id, result)
                if case .success = result, case .extensionHost(let session)? = self.role { session.handshakeAnswered() }
                return
            }
            let handler: RoleHandler
            do {
                handler = try role.handler(for: method)
            } catch {
                connection.reply(to: id, .failure(error))
                return
            }
            switch handler {
            case .sync(let run):
                if case .extensionHost(let session) = role, let delay = session.donationPacing(method) { Thread.sleep(forTimeInterval: delay) }
                let result = Result { () throws(SearchlightError) -> WireAnswer in
                    try runRecovering(method, params, targets: role.target(of: method, params)) { () throws(SearchlightError) -> WireAnswer in
                        try run(params, limits)
                    }
                }
                if case .failure(let error) = result, error.code == .indexUnavailable { logUnavailable(method, error) }
                connection.reply(to: id, answer: result)
            case .deferred(let run):
                answerLater(id, params, run)
            }
        case .notification(let method, let params):
            if case .extensionHost(let session)? = role {
                session.notification(method, params)
                return
            }
            log.debug("notification ignored", ["method": method, "pid": peer.pid])
        case .response:
            break
        }
    }

    /// Runs a handler that waits on an extension in a task, and answers when it is done; the
    /// connection keeps reading while fewer than `maxDeferredCalls` are outstanding.
    private func answerLater(_ id: RPCID, _ params: JSONValue, _ run: @escaping RoleHandler.Deferred) {
        let connection = self.connection, limits = self.limits
        let slots = deferredSlots, outstanding = deferredOutstanding
        slots.wait()
        outstanding.add(1)
        // On the daemon's control thread (what the handler calls may block: the journal, a
        // launch), and answered from there: `reply` only queues what the socket does not take.
        Task(executorPreference: ControlThread.executor) {
            let result: Result<JSONValue, SearchlightError>
            do {
                result = .success(try await run(params, limits))
            } catch let error as SearchlightError {
                result = .failure(error)
            } catch {
                result = .failure(SearchlightError(.extensionFailed, "\(error)"))
            }
            connection.reply(to: id, result)
            outstanding.add(-1)
            slots.signal()
        }
    }

    // MARK: - Handshake

    private func initialize(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard method == Method.initialize else {
            throw SearchlightError(.invalidRequest, "send \"initialize\" first (protocolVersion, role, bundleIdentifier)")
        }
        let hello = try Initialize.decode(params, limits: limits)
        // From the peer's process, whatever it says it is; once per connection, so a handshake
        // retried after a refusal gets the same answer.
        let sandbox = identifiedSandbox()
        if case .unidentified(let reason) = sandbox {
            log.info("client refused: sandbox unidentified", ["pid": peer.pid, "uid": peer.uid, "reason": reason])
            throw PeerSandbox.unidentifiedRefusal(reason)
        }
        let role: Role
        var bundle: String?
        switch hello.role {
        case .admin:
            if let refused = sandbox.roleRefusal("admin") { throw refused }
            guard context.mayAdminister(peer) else {
                throw SearchlightError(.permissionDenied,
                    "uid \(peer.uid) may not use the admin role; run as root, the daemon's user, or join the admin group")
            }
            role = .admin(AdminSession(client: self))
        case .extension:
            let session = try ExtensionSession.handshake(hello, client: self)
            bundle = session.bundle
            role = .extensionHost(session)
            log.debug("client initialized", ["role": "extension", "label": session.label, "pid": peer.pid, "uid": peer.uid, "sandbox": sandbox.logValue])
        case .app:
            let named = hello.bundleIdentifier ?? ""
            guard sandbox.mayUse(named) else { throw sandbox.refusal(named) }
            role = .app(AppSession(client: self, bundle: named))
        case .desktop:
            if let refused = sandbox.roleRefusal("desktop") { throw refused }
            role = .desktop(DesktopSession(client: self))
        }
        roleState.withLock { $0 = role }
        if bundle == nil { log.debug("client initialized", ["role": role.name, "pid": peer.pid, "uid": peer.uid, "sandbox": sandbox.logValue]) }
        return handshakeAnswer(bundle: bundle).result
    }

    /// The peer's sandbox, read from its process the first time it is asked for. A launched
    /// extension is authenticated by its socket, and its socketpair's peer is the daemon itself.
    private func identifiedSandbox() -> PeerSandbox {
        if let known = sandboxState.withLock({ $0 }) { return known }
        let found: PeerSandbox = spawned ? .none : (process?.identify() ?? .unidentified(reason: "its process was not pinned"))
        sandboxState.withLock { $0 = found }
        return found
    }

    private func handshakeAnswer(bundle: String?) -> Initialize.Response {
        Initialize.Response(
            serverVersion: Version.string,
            // `mode`: under a system daemon an app's first write claims a bundle for its uid, so a
            // client that writes for other apps (the RecentFiles sample) keeps to its own bundle.
            capabilities: ["batches": true, "userQueries": true, "suggestions": true, "extensions": true,
                           "mode": .string(context.config.system ? "system" : "user")],
            limits: [
                "maxFrameBytes": .number(Double(limits.maxFrameBytes)),
                "maxItemBytes": .number(Double(limits.maxItemBytes)),
                "maxIdentifiersPerCall": .number(Double(limits.maxIdentifiersPerCall)),
                "maxQueryBytes": .number(Double(limits.maxQueryBytes)),
                "maxClientStateBytes": .number(Double(limits.maxClientStateBytes)),
                "maxQueryTerms": .number(Double(limits.maxQueryTerms)),
                "maxQueryPredicates": .number(Double(limits.maxQueryPredicates)),
                "maxFilterQueries": .number(Double(limits.maxFilterQueries)),
                "queryTimeoutSeconds": .number(context.config.queryTimeout),
            ],
            bundleIdentifier: bundle)
    }

    // MARK: - Recovery and the gate

    /// The calls retried once after a recovery: each applies nothing when it fails, so a retry
    /// cannot apply twice. `index.endBatch` is not among them: its batch ended with the failure.
    static let retriedAfterRecovery: Set<String> = [
        Method.indexItems, Method.indexDeleteIdentifiers, Method.indexDeleteDomains, Method.indexDeleteAll,
        Method.indexFetchLastClientState, Method.querySearch, Method.queryUser,
    ]

    /// Runs a call inside the registry's gate (an index file is never swapped under it: a swap
    /// waits for it, and holds it back until the new file is open), with the stores it leased
    /// given back when it ends. A call on one bundle's open index that fails with
    /// indexUnavailable runs once more when the index's file was swapped under it, or when the
    /// index turned out damaged, after the recovery (bounded wait) replaced or repaired it: the
    /// caller gets an answer from the fresh file (`incomplete: true` while it is refilled)
    /// instead of the error. Each attempt is gated on its own, so the wait holds no swap back.
    private func runRecovering(_ method: String, _ params: JSONValue, targets target: (bundle: String, index: String)?,
                               _ body: () throws(SearchlightError) -> WireAnswer) throws(SearchlightError) -> WireAnswer {
        func gated() throws(SearchlightError) -> WireAnswer {
            defer { callLeases.release() }
            return try context.registry.gate.serving { () throws(SearchlightError) -> WireAnswer in try body() }
        }
        var served: (bundle: String, index: String, store: IndexStore)?
        if Self.retriedAfterRecovery.contains(method), let target,
           let store = context.registry.servedStore(bundle: target.bundle, index: target.index) {
            served = (target.bundle, target.index, store)
        }
        do {
            return try gated()
        } catch {
            guard error.code == .indexUnavailable, let served else { throw error }
            if context.registry.servedStore(bundle: served.bundle, index: served.index) !== served.store {
                // The file was swapped under the call (a recovery or migration closed the store it used).
                log.info("call answered after recovery", ["method": method, "bundle": served.bundle, "pid": peer.pid, "cause": "swapped"])
                return try gated()
            }
            guard served.store.detectedDamage != nil,
                  context.recovery.awaitRecovery(of: served.store, bundle: served.bundle, index: served.index) else { throw error }
            log.info("call answered after recovery", ["method": method, "bundle": served.bundle, "pid": peer.pid, "cause": "damaged"])
            return try gated()
        }
    }

    /// A call failed because its index cannot be written or opened (disk full, I/O error, damage):
    /// the operator must see it, but a client retrying in a loop must not flood the log, so one
    /// line per 10 s, counting the failures it stands for.
    private func logUnavailable(_ method: String, _ error: SearchlightError) {
        let now = Date()
        let suppressed: Int? = unavailableLogGate.withLock { gate in
            gate.count += 1
            guard now.timeIntervalSince(gate.last) >= 10 else { return nil }
            defer { gate = (now, 0) }
            return gate.count - 1
        }
        guard let suppressed else { return }
        log.warning("call failed: index unavailable", ["method": method, "pid": peer.pid, "error": error.message,
            "similar_since_last": suppressed])
    }
}

extension ClientSession.Role {
    /// The handler of `method` in this role's table; methods of another role are refused the
    /// way the protocol says (an admin method needs the admin role), others are unknown.
    func handler(for method: String) throws(SearchlightError) -> RoleHandler {
        let found: RoleHandler? = switch self {
        case .app(let s): s.handler(for: method)
        case .extensionHost(let s): s.handler(for: method)
        case .admin(let s): s.handler(for: method)
        case .desktop(let s): s.handler(for: method)
        }
        if let found { return found }
        if case .desktop = self, method != Method.initialize {
            throw SearchlightError(.permissionDenied, DesktopSession.refusal + "; \(method.prefix(64)) needs the app or admin role")
        }
        if method == Method.initialize {
            throw SearchlightError(.invalidRequest, "already initialized; open a new connection for another role")
        }
        if method.hasPrefix("admin.") {
            if case .admin = self { throw SearchlightError(.methodNotFound, "unknown admin method \"\(method.prefix(64))\"; see Docs/Protocol.md") }
            throw SearchlightError(.permissionDenied, "\(method) needs the admin role: connect as root, the daemon's user or a member of the admin group")
        }
        throw SearchlightError(.methodNotFound, "unknown method \"\(method.prefix(64))\"; see Docs/Protocol.md")
    }

    /// The one index a call acts on, read from its raw params without decoding them (for the
    /// retry after a recovery); nil for an administrator's call across every bundle.
    func target(of method: String, _ params: JSONValue) -> (bundle: String, index: String)? {
        guard ClientSession.retriedAfterRecovery.contains(method), let index = try? Names.index(params["index"]) else { return nil }
        switch self {
        case .app(let s): return (s.bundle, index)
        case .extensionHost(let s): return (s.bundle, index)
        case .admin, .desktop:
            guard let bundle = params["bundle"], !bundle.isNull, let b = try? Names.bundle(bundle) else { return nil }
            return (b, index)
        }
    }
}

/// A count shared between a session and the tasks answering its deferred calls.
final class SharedCount: Sendable {
    private let count = Mutex(0)
    var value: Int { count.withLock { $0 } }
    func add(_ n: Int) { count.withLock { $0 += n } }
}

public enum Version {
    public static let string = "0.1.0"
}
