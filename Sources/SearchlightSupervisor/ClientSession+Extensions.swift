import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire

/// The extension side of a session: the extension handshake, and the methods answered later
/// because they wait on an extension (item data, `admin.reindex` with `wait`).
extension ClientSession {
    /// The unit an `initialize` in the extension role speaks for. A launched extension is its
    /// host's unit (authenticated by the inherited socket); a hand-started one names its label
    /// and must run as the unit's user (or root).
    func extensionUnit(_ params: JSONValue) throws(SearchlightError) -> ExtensionUnit {
        let claimed = params["label"]?.stringValue
        if spawned, let host = extensionHost {
            if let claimed, claimed != host.label {
                throw .invalidParams("this connection belongs to \(host.label), not \(claimed.prefix(255))")
            }
            return host.unit
        }
        guard let label = claimed, !label.isEmpty else {
            throw .invalidParams("an extension attaching by hand must send its unit's \"label\"")
        }
        guard let unit = context.catalog.unit(label: String(label.prefix(255))), !unit.disabled,
              let host = context.scheduler?.host(label: unit.label) else {
            throw SearchlightError(.unknownExtension,
                "no enabled unit has the label \(label.prefix(255)); install its unit file (Docs/Units.md) and run `searchlight units`")
        }
        let owner = context.unitOwner(unit)
        guard peer.uid == owner || peer.uid == 0 else {
            throw SearchlightError(.permissionDenied, "uid \(peer.uid) may not attach as \(unit.label): run the extension as its unit's user (UserName) or as root")
        }
        extensionHost = host
        return unit
    }

    /// After the `initialize` answer is on the wire: only then may requests flow to the extension.
    func extensionHandshakeAnswered() {
        guard case .extensionHost? = role, let host = extensionHost else { return }
        if spawned { host.handshakeCompleted(self) } else { host.attach(self) }
    }

    /// The connection of an extension attached by hand closed. Spawned extensions' connections
    /// are watched by their host itself.
    func extensionConnectionClosed(_ reason: RPCConnection.CloseReason) {
        guard !spawned, case .extensionHost? = role, let host = extensionHost else { return }
        host.attachedConnectionClosed(connection, reason: reason)
    }

    /// The methods whose answer waits on an extension, as a closure to run in a task; nil for the rest.
    func deferredMethod(_ method: String, _ params: JSONValue) -> (@Sendable () async throws -> JSONValue)? {
        switch method {
        case Method.indexFetchData where role != .desktop, Method.indexFetchFileURL where role != .desktop:
            return { [self] in try await self.fetchFromExtension(method, params) }
        case Method.adminReindex where role == .admin:
            return { [self] in try await self.reindex(params) }
        case Method.adminRestartExtension where role == .admin:
            return { [self] in try await self.restartExtension(params) }
        default:
            return nil
        }
    }

    private func fetchFromExtension(_ method: String, _ params: JSONValue) async throws -> JSONValue {
        let bundle = try targetBundle(params)
        try authorize(bundle, write: false)
        guard let identifier = params["identifier"]?.stringValue, !identifier.isEmpty, identifier.utf8.count <= limits.maxIdentifierBytes else {
            throw SearchlightError.invalidParams("\"identifier\" must be a non-empty string of at most \(limits.maxIdentifierBytes) bytes")
        }
        guard let type = params["typeIdentifier"]?.stringValue, !type.isEmpty, type.utf8.count <= 255 else {
            throw SearchlightError.invalidParams("\"typeIdentifier\" must be a UTI string such as \"public.plain-text\"")
        }
        guard let scheduler = context.scheduler, let host = scheduler.host(bundle: bundle) else {
            throw SearchlightError(.unknownExtension, "no index extension serves \(bundle); install a unit for it to provide item data")
        }
        var forward: [String: JSONValue] = ["identifier": .string(identifier), "typeIdentifier": .string(type)]
        let extensionMethod: String
        if method == Method.indexFetchData {
            extensionMethod = Method.extensionDataForItem
        } else {
            extensionMethod = Method.extensionFileURLForItem
            forward["inPlace"] = .bool(params["inPlace"]?.boolValue ?? false)
        }
        let answer = try await scheduler.call(host, extensionMethod, .object(forward))
        if method == Method.indexFetchData {
            guard let data = answer["data"]?.stringValue, Data(base64Encoded: data) != nil else {
                throw SearchlightError(.extensionFailed, "\(host.label) answered \(extensionMethod) without base64 \"data\"")
            }
            return ["data": .string(data)]
        }
        guard let url = answer["url"]?.stringValue, URL(string: url) != nil else {
            throw SearchlightError(.extensionFailed, "\(host.label) answered \(extensionMethod) without a \"url\"")
        }
        return ["url": .string(url)]
    }

    /// `admin.restartExtension {label}` → `{label, previousPid?, pid}` once the new copy has
    /// completed its handshake.
    private func restartExtension(_ params: JSONValue) async throws -> JSONValue {
        guard let label = params["label"]?.stringValue, !label.isEmpty else {
            throw SearchlightError.invalidParams("\"label\" must name an extension unit's label")
        }
        guard let host = context.scheduler?.host(label: String(label.prefix(255))) else {
            throw SearchlightError(.unknownExtension, "no enabled extension unit has the label \(label.prefix(255)); see `searchlight units`")
        }
        let (previous, pid) = try await host.restart()
        context.log.notice("extension restarted", ["label": host.label, "previous_pid": previous.map { "\($0)" } ?? "-", "pid": pid,
            "by_uid": peer.uid])
        var answer: [String: JSONValue] = ["label": .string(host.label), "pid": .number(Double(pid))]
        if let previous { answer["previousPid"] = .number(Double(previous)) }
        return .object(answer)
    }

    /// The longest `timeout` an `admin.reindex` may wait: a week (the CLI's `--timeout` takes the same).
    static let maxReindexWait: Double = 7 * 86400

    /// `admin.reindex {target, all | identifiers, index?, reason?, background?, wait, timeout?}`.
    private func reindex(_ params: JSONValue) async throws -> JSONValue {
        guard let scheduler = context.scheduler else { throw SearchlightError(.indexUnavailable, "the daemon is starting; retry") }
        guard let target = params["target"]?.stringValue, !target.isEmpty else {
            throw SearchlightError.invalidParams("\"target\" must name an extension's label or its bundle")
        }
        guard let unit = context.catalog.unit(label: target).flatMap({ $0.disabled ? nil : $0 }) ?? context.catalog.unit(forBundle: target) else {
            throw SearchlightError(.unknownExtension, "no enabled extension unit has the label or bundle \(target.prefix(255)); see `searchlight units`")
        }
        if context.state.bundle(unit.bundleIdentifier)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported,
                "indexing is off for \(unit.bundleIdentifier), so \(unit.label) could not donate; turn it on with `searchlight indexing on \(unit.bundleIdentifier)`")
        }
        let index = try Names.index(params["index"])
        guard unit.indexExtension.indexNames.contains(index) else {
            throw SearchlightError.invalidParams("\(unit.label) serves the indexes \(unit.indexExtension.indexNames.map { "\"\($0)\"" }.joined(separator: ", ")), not \"\(index)\"")
        }
        let all = params["all"]?.boolValue ?? false
        let ids: [String]
        if all {
            ids = []
        } else if let list = params["identifiers"] {
            ids = try identifiers(list, name: "identifiers")
            guard !ids.isEmpty else { throw SearchlightError.invalidParams("\"identifiers\" is empty; name at least one, or send \"all\": true") }
        } else {
            throw SearchlightError.invalidParams("send \"all\": true or \"identifiers\": [..]")
        }
        let background = params["background"]?.boolValue ?? false
        let reason = params["reason"]?.stringValue.map { String($0.prefix(32)) } ?? (background ? "background" : "manual")
        let kind: ReindexRequest.Kind = all ? .all : .identifiers
        // Checked before anything is journaled: 1e308 once reached `Duration.seconds` and trapped.
        let timeout = try NumericParameter.duration(params["timeout"], field: "timeout", in: 0.001...Self.maxReindexWait)
        guard params["wait"]?.boolValue ?? false else {
            let queued = try scheduler.enqueue(bundle: unit.bundleIdentifier, index: index, kind: kind,
                identifiers: ids, reason: reason, background: background)
            var answer: [String: JSONValue] = ["requestId": .number(Double(queued.id)), "state": "pending",
                "label": .string(unit.label), "bundle": .string(unit.bundleIdentifier)]
            if queued.coalesced { answer["coalescedInto"] = .number(Double(queued.id)) }
            if let note = queued.note { answer["message"] = .string(note) }
            return .object(answer)
        }
        let connection = self.connection
        let once = Mutex(false)
        let claim: @Sendable () -> Bool = { once.withLock { done in defer { done = true }; return !done } }
        let requestID = Mutex<Int64?>(nil)
        return try await withCheckedThrowingContinuation { continuation in
            // The waiter is registered in the same step as the request, before the scheduler is
            // woken: a quick acknowledgement cannot slip past it.
            let waiter = RequestScheduler.Waiter(
                owner: ObjectIdentifier(connection),
                progress: { completed, total in
                    var p: [String: JSONValue] = ["completed": .number(Double(completed))]
                    if let id = requestID.withLock({ $0 }) { p["requestId"] = .number(Double(id)) }
                    if let total { p["total"] = .number(Double(total)) }
                    try? connection.notify(Method.progress, .object(p))
                },
                done: { result in if claim() { continuation.resume(with: result.mapError { $0 as any Error }) } })
            let queued: RequestJournal.Enqueued
            do {
                queued = try scheduler.enqueue(bundle: unit.bundleIdentifier, index: index, kind: kind,
                    identifiers: ids, reason: reason, background: background, waiter: waiter)
            } catch {
                if claim() { continuation.resume(throwing: error) }
                return
            }
            requestID.withLock { $0 = queued.id }
            // What it joined and what changed, before any progress (a `message` in `$/progress`,
            // as LSP's work-done progress carries one).
            if let note = queued.note {
                try? connection.notify(Method.progress, ["requestId": .number(Double(queued.id)), "message": .string(note)])
            }
            if let timeout {
                Task {
                    try? await Task.sleep(for: timeout)
                    if claim() {
                        continuation.resume(throwing: SearchlightError(.requestTimedOut,
                            "no acknowledgement within \(timeout.formatted()) ; request \(queued.id) stays journaled (`searchlight requests`)"))
                    }
                }
            }
        }
    }
}
