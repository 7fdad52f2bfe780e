import Foundation
import SearchlightStore
import SearchlightWire
import Synchronization

/// The last "index unavailable" log line, and the failures since (shared by every connection).
private let unavailableLogGate = Mutex<(last: Date, count: Int)>((.distantPast, 0))

/// One client connection. Messages are handled in order on the connection's own reader thread,
/// so a slow or malicious client delays only itself.
final class ClientSession: @unchecked Sendable {
    enum Role: Equatable {
        case app(bundle: String)
        case extensionHost(bundle: String, label: String)
        case admin

        var name: String {
            switch self {
            case .app: "app"
            case .extensionHost: "extension"
            case .admin: "admin"
            }
        }
    }

    let context: ServiceContext
    let connection: RPCConnection
    let peer: PeerCredentials
    private(set) var role: Role?
    /// Open batches by index name: the calls between beginBatch and endBatch. Locked because the
    /// scheduler discards an extension's batches when a request ends (`discardBatches`).
    private var batches: [String: [Mutation]] = [:]
    private let batchLock = NSLock()
    /// For an extension's connection: its host (set for a spawned one at once, for an attached
    /// one by its handshake). Its donations and progress reset the inactivity timer.
    weak var extensionHost: ExtensionHost?
    /// True for the socketpair of an extension the supervisor launched: authenticated by it.
    let spawned: Bool
    /// Deferred calls (answered from a task) outstanding on this connection, at most
    /// `maxDeferredCalls`: past that the reader thread waits for one to be answered, so a client
    /// that pipelines them without reading its answers stops being read (its own writes block)
    /// instead of piling up tasks and memory in the daemon.
    private let deferredSlots = DispatchSemaphore(value: ClientSession.maxDeferredCalls)
    static let maxDeferredCalls = 64
    /// Deferred answers are written here, one at a time, never from the task pool: a client that
    /// does not read blocks that write (up to the send timeout), and a blocked pool thread would
    /// stall every task in the daemon (found by the never-reading deferred flood test).
    private let deferredReplies = DispatchQueue(label: "searchlightd.deferred-replies")
    /// Deferred calls not yet answered (a connection with one is never idle).
    private let deferredOutstanding = SharedCount()
    /// The stores the call being handled uses, given back when it is answered (`gatedDispatch`).
    let callLeases: IndexLeases

    init(context: ServiceContext, connection: RPCConnection, peer: PeerCredentials, spawnedFor host: ExtensionHost? = nil) {
        self.context = context
        self.connection = connection
        self.peer = peer
        extensionHost = host
        spawned = host != nil
        callLeases = IndexLeases(context.registry)
    }

    /// Whether the connection may be closed for idleness once nothing has come or gone on it for
    /// `--idle-timeout` (asked by its reader thread, which is then waiting for input, so no call
    /// is being handled). Never an extension's connection (spawned or attached: it waits for the
    /// daemon's requests), nor one with an open batch, a deferred call outstanding (item data, a
    /// waited reindex) or an `admin.monitor` stream.
    var idle: Bool {
        if spawned { return false }
        if case .extensionHost? = role { return false }
        if batchLock.withLock({ !batches.isEmpty }) { return false }
        if deferredOutstanding.value > 0 { return false }
        return !context.events.isSubscribed(connection)
    }

    /// Drops every open batch (nothing of them is applied); returns how many there were. Called
    /// when a supervisor request to this extension ends, so that a handler that threw inside a
    /// batch cannot leave it open for the retry, whose donations would then never commit.
    @discardableResult
    func discardBatches() -> Int {
        batchLock.withLock {
            defer { batches.removeAll() }
            return batches.count
        }
    }

    /// The connection closed: an admin monitor stops receiving events, and an extension attached
    /// by hand stops being sent requests.
    func closed(_ reason: RPCConnection.CloseReason) {
        context.events.unsubscribe(connection)
        context.scheduler?.removeWaiters(owner: ObjectIdentifier(connection))
        extensionConnectionClosed(reason)
    }

    var log: Logger { context.log }

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
    var limits: Limits { context.config.limits }

    func handle(_ message: RPCMessage) {
        switch message {
        case .request(let id, let method, let params):
            context.countRequest()
            extensionHost?.noteActivity()
            if role != nil, let deferred = deferredMethod(method, params) {
                // Answered later from a task (waits on an extension); the connection keeps reading
                // while fewer than maxDeferredCalls are outstanding.
                let connection = self.connection
                let slots = deferredSlots, replies = deferredReplies, outstanding = deferredOutstanding
                slots.wait()
                outstanding.add(1)
                Task {
                    let result: Result<JSONValue, SearchlightError>
                    do {
                        result = .success(try await deferred())
                    } catch let error as SearchlightError {
                        result = .failure(error)
                    } catch {
                        result = .failure(SearchlightError(.extensionFailed, "\(error)"))
                    }
                    replies.async {
                        connection.reply(to: id, result)
                        outstanding.add(-1)
                        slots.signal()
                    }
                }
                return
            }
            if let delay = donationPacing(method) { Thread.sleep(forTimeInterval: delay) }
            let result: Result<JSONValue, SearchlightError>
            do {
                result = .success(try dispatchRecovering(method, params))
            } catch {
                result = .failure(error)
                if error.code == .indexUnavailable { logUnavailable(method, error) }
            }
            connection.reply(to: id, result)
            if method == Method.initialize, case .success = result { extensionHandshakeAnswered() }
        case .notification(let method, let params):
            if method == Method.progress, let host = extensionHost {
                host.noteActivity()
                // Only for the request this extension is working on, with counts in range: anything
                // else is ignored (a notification has no answer to carry an error).
                do {
                    if let id = params["requestId"]?.stringValue.flatMap({ Int64($0) }), host.isCurrentRequest(id),
                       let done = try NumericParameter.integer(params["completed"], field: "completed", in: 0...NumericParameter.maxCount) {
                        let total = try NumericParameter.integer(params["total"], field: "total", in: 0...NumericParameter.maxCount)
                        context.scheduler?.reportProgress(requestID: id, completed: done, total: total)
                    }
                } catch {
                    log.debug("progress ignored", ["label": host.label, "error": error.message])
                }
                return
            }
            log.debug("notification ignored", ["method": method, "pid": peer.pid])
        case .response:
            break
        }
    }

    /// Index calls of an extension serving a background request while the throttle is not normal
    /// wait this long before they are processed (DESIGN §6: pacing of a throttled extension's
    /// donations). Only this connection's thread waits: other clients and extensions go on.
    private func donationPacing(_ method: String) -> TimeInterval? {
        guard method.hasPrefix("index."), method != Method.indexFetchLastClientState else { return nil }
        return extensionHost?.donationDelay()
    }

    func dispatch(_ method: String, _ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard case .object = params else { throw .invalidParams("\"params\" must be an object") }
        if method == Method.initialize { return try initialize(params) }
        guard let role else {
            throw SearchlightError(.invalidRequest, "send \"initialize\" first (protocolVersion, role, bundleIdentifier)")
        }
        switch method {
        case Method.indexItems: return try indexItems(params)
        case Method.indexDeleteIdentifiers: return try deleteIdentifiers(params)
        case Method.indexDeleteDomains: return try deleteDomains(params)
        case Method.indexDeleteAll: return try mutate(params, .deleteAll)
        case Method.indexBeginBatch: return try beginBatch(params)
        case Method.indexEndBatch: return try endBatch(params)
        case Method.indexFetchLastClientState: return try fetchLastClientState(params)
        case Method.querySearch: return try querySearch(params)
        case Method.queryUser: return try queryUser(params)
        case Method.queryEngaged: return try queryEngaged(params)
        default:
            guard method.hasPrefix("admin.") else {
                throw SearchlightError(.methodNotFound, "unknown method \"\(method.prefix(64))\"; see Docs/Protocol.md")
            }
            guard role == .admin else {
                throw SearchlightError(.permissionDenied, "\(method) needs the admin role: connect as root, the daemon's user or a member of the admin group")
            }
            return try AdminMethods(session: self).dispatch(method, params)
        }
    }

    // MARK: - Handshake

    private func initialize(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard role == nil else { throw SearchlightError(.invalidRequest, "already initialized; open a new connection for another role") }
        guard let version = try NumericParameter.integer(params["protocolVersion"], field: "protocolVersion", in: 1...NumericParameter.maxCount) else {
            throw .invalidParams("\"protocolVersion\" must be an integer (this daemon speaks \(Protocol.version))")
        }
        guard version <= Protocol.version else {
            throw SearchlightError(.invalidRequest,
                "protocolVersion \(version) is not supported; this daemon speaks \(Protocol.version): upgrade searchlightd or use an older SDK")
        }
        guard let roleName = params["role"]?.stringValue, Protocol.roles.contains(roleName) else {
            throw .invalidParams("\"role\" must be \"app\", \"extension\" or \"admin\"")
        }
        switch roleName {
        case "admin":
            guard context.mayAdminister(peer) else {
                throw SearchlightError(.permissionDenied,
                    "uid \(peer.uid) may not use the admin role; run as root, the daemon's user, or join the admin group")
            }
            role = .admin
        case "extension":
            let unit = try extensionUnit(params)
            role = .extensionHost(bundle: unit.bundleIdentifier, label: unit.label)
            log.debug("client initialized", ["role": roleName, "label": unit.label, "pid": peer.pid, "uid": peer.uid])
            return handshakeAnswer(bundle: unit.bundleIdentifier)
        default:
            role = .app(bundle: try Names.bundle(params["bundleIdentifier"]))
        }
        log.debug("client initialized", ["role": roleName, "pid": peer.pid, "uid": peer.uid])
        return handshakeAnswer(bundle: nil)
    }

    private func handshakeAnswer(bundle: String?) -> JSONValue {
        var answer: JSONValue = [
            "protocolVersion": .number(Double(Protocol.version)),
            "server": "searchlightd",
            "serverVersion": .string(Version.string),
            "capabilities": [
                "batches": true, "userQueries": true, "suggestions": true, "extensions": true,
            ],
            "limits": [
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
        ]
        if let bundle, case .object(var o) = answer {
            o["bundleIdentifier"] = .string(bundle)
            answer = .object(o)
        }
        return answer
    }

    // MARK: - Targets and permissions

    /// The bundle a call acts on: the app's or extension's own; an admin names it with "bundle".
    func targetBundle(_ params: JSONValue) throws(SearchlightError) -> String {
        switch role {
        case .app(let b)?, .extensionHost(let b, _)?: return b
        case .admin?: return try Names.bundle(params["bundle"])
        case nil: throw SearchlightError(.invalidRequest, "send \"initialize\" first")
        }
    }

    /// Checks that the peer may touch the bundle, before any other check of it (`BundleAccess`);
    /// a write records its owner (or claims a new bundle for the peer).
    func authorize(_ bundle: String, write: Bool) throws(SearchlightError) {
        let caller: BundleAccess.Caller
        switch role {
        case .admin?:
            caller = .admin
        case .extensionHost(_, let label)?:
            guard let unit = extensionHost?.unit ?? context.catalog.unit(label: label) else { throw BundleAccess.denied(bundle) }
            caller = .extensionUnit(unit)
        case .app?, nil:
            caller = .app(peer)
        }
        try BundleAccess(context: context).authorize(bundle, by: caller, write: write)
    }

    /// The bundle, index and store a call acts on, after the permission check; the store is
    /// leased to this call (`callLeases`) until its answer. A write may create the index, within
    /// `--max-indexes-per-bundle` for an app.
    func store(_ params: JSONValue, write: Bool) throws(SearchlightError) -> (bundle: String, index: String, store: IndexStore?) {
        let bundle = try targetBundle(params)
        let index = try Names.index(params["index"])
        try authorize(bundle, write: write)
        if write, case .app? = role, peer.uid != 0, peer.uid != context.daemonUID,
           context.registry.servedStore(bundle: bundle, index: index) == nil,
           !FileManager.default.fileExists(atPath: context.registry.path(bundle: bundle, index: index)) {
            let limit = context.config.maxIndexesPerBundle
            let existing = context.registry.indexes(of: bundle).count
            if existing >= limit, !context.mayAdminister(peer) {
                throw SearchlightError(.quotaExceeded,
                    "\(bundle) has \(existing) indexes, the most an app may create (--max-indexes-per-bundle \(limit)); write to one of them (\"index\")")
            }
        }
        return (bundle, index, try context.registry.store(bundle: bundle, index: index, create: write, lease: callLeases))
    }

    // MARK: - Index methods

    private func indexItems(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let items = try ItemValidator(limits: limits).validate(items: params["items"])
        return try mutate(params, .items(items))
    }

    func identifiers(_ value: JSONValue?, name: String) throws(SearchlightError) -> [String] {
        guard let array = value?.arrayValue else { throw .invalidParams("\"\(name)\" must be an array of strings") }
        guard array.count <= limits.maxIdentifiersPerCall else {
            throw .invalidParams("\"\(name)\" has \(array.count) entries; send at most \(limits.maxIdentifiersPerCall) per call")
        }
        var out: [String] = []
        out.reserveCapacity(array.count)
        for (i, v) in array.enumerated() {
            guard let s = v.stringValue, !s.isEmpty, s.utf8.count <= limits.maxIdentifierBytes else {
                throw .invalidParams("\(name)[\(i)] must be a non-empty string of at most \(limits.maxIdentifierBytes) bytes")
            }
            out.append(s)
        }
        return out
    }

    private func deleteIdentifiers(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        try mutate(params, .deleteIdentifiers(identifiers(params["identifiers"], name: "identifiers")))
    }

    private func deleteDomains(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let domains = try identifiers(params["domains"], name: "domains")
        let validator = ItemValidator(limits: limits)
        for d in domains where !validator.validDomain(d) {
            throw .invalidParams("domain \"\(d.prefix(80))\" must be dot-separated non-empty components")
        }
        return try mutate(params, .deleteDomains(domains))
    }

    /// Applies one mutation now, or adds it to the open batch of that index.
    private func mutate(_ params: JSONValue, _ mutation: Mutation) throws(SearchlightError) -> JSONValue {
        let bundle = try targetBundle(params)
        let index = try Names.index(params["index"])
        // The permission check comes first: a refused caller must not learn that indexing is off.
        try authorize(bundle, write: true)
        if case .items = mutation, context.state.bundle(bundle)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported, "indexing is off for \(bundle); turn it on with `searchlight indexing on \(bundle)`")
        }
        let batched: Bool = batchLock.withLock {
            guard batches[index] != nil else { return false }
            batches[index]!.append(mutation)
            return true
        }
        if batched { return ["batched": true] }
        let r = try applyToIndex(params, [mutation])
        return ["indexed": .number(Double(r.indexed)), "updatesDropped": .number(Double(r.updatesDropped)), "deleted": .number(Double(r.deleted))]
    }

    private func beginBatch(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let bundle = try targetBundle(params)
        let index = try Names.index(params["index"])
        try authorize(bundle, write: true)
        let opened: Bool = batchLock.withLock {
            guard batches[index] == nil else { return false }
            batches[index] = []
            return true
        }
        guard opened else {
            throw SearchlightError(.invalidRequest, "a batch is already open for this index; end it with index.endBatch first")
        }
        return [:]
    }

    private func clientState(_ value: JSONValue?, name: String) throws(SearchlightError) -> [UInt8]? {
        switch value {
        case nil, .null?: return nil
        case .string(let s)?:
            guard let data = Data(base64Encoded: s) else {
                throw SearchlightError(.invalidClientState, "\"\(name)\" must be base64")
            }
            guard data.count <= limits.maxClientStateBytes else {
                throw SearchlightError(.invalidClientState, "\"\(name)\" is \(data.count) bytes; the limit is \(limits.maxClientStateBytes)")
            }
            return Array(data)
        default: throw SearchlightError(.invalidClientState, "\"\(name)\" must be a base64 string")
        }
    }

    private func endBatch(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        let index = try Names.index(params["index"])
        // The batch ends here whatever happens: a failed batch applies nothing and must be redone.
        guard let mutations = batchLock.withLock({ batches.removeValue(forKey: index) }) else {
            throw SearchlightError(.invalidRequest, "no batch is open for this index; call index.beginBatch first")
        }
        guard let newState = try clientState(params["newClientState"], name: "newClientState") else {
            throw SearchlightError(.invalidClientState, "\"newClientState\" is required (base64, at most \(limits.maxClientStateBytes) bytes)")
        }
        var expectation = ClientStateExpectation.any
        if let expected = params["expectedClientState"] {
            expectation = .equals(try clientState(expected, name: "expectedClientState"))
        }
        let r = try applyToIndex(params, mutations, expecting: expectation, newClientState: newState)
        return ["indexed": .number(Double(r.indexed)), "updatesDropped": .number(Double(r.updatesDropped)), "deleted": .number(Double(r.deleted))]
    }

    private func fetchLastClientState(_ params: JSONValue) throws(SearchlightError) -> JSONValue {
        guard let store = try store(params, write: false).store, let state = try store.clientState() else {
            return ["clientState": .null]
        }
        return ["clientState": .string(Data(state).base64EncodedString())]
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
