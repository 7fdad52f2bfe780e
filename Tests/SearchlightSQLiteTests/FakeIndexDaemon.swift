#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// A stand-in for `searchlightd` that keeps indexes in memory with the daemon's batch rules:
/// calls between `index.beginBatch` and `index.endBatch` are held per connection and applied at
/// `endBatch` only if `expectedClientState` matches (else `mismatchedClientState`, nothing
/// applied); a batch whose connection closes is discarded; `deleteAll` resets the client state.
/// It records every committed state transition, so tests can check that history ranges tile
/// without overlap, and it can fail on command at each point of a batch.
final class FakeIndexDaemon: @unchecked Sendable {
    /// Where to fail (the daemon "crashing" from the client's point of view: the connection drops).
    enum Fault: Sendable, Equatable {
        /// Drop the connection when this method arrives, before handling it.
        case dropBefore(String)
        /// Handle `endBatch` (commit it), then drop the connection without answering.
        case dropAfterCommit
        /// Answer this method with an error.
        case fail(String, ErrorCode)
    }

    struct Index: Sendable {
        var items: [String: SearchableItem] = [:]
        var state: Data?
    }

    /// One committed batch: the client state before and after.
    struct Transition: Sendable, Equatable {
        var from: Data?
        var to: Data
        var deletedAll: Bool
    }

    let path: String
    private let directory: String
    private let listener: UnixSocket
    private let lock = NSLock()
    private var indexes: [String: Index] = [:]
    private var batches: [ObjectIdentifier: [String: [JSONValue]]] = [:]
    private var connections: [RPCConnection] = []
    private var pendingFaults: [Fault] = []
    private var log: [Transition] = []
    private var methodCounts: [String: Int] = [:]
    private var refusing = false

    init() throws {
        directory = NSTemporaryDirectory() + "sl-sqlite-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/searchlightd.sock"
        listener = try UnixSocket.listen(path: path)
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "fake-index-daemon"
        thread.start()
    }

    func stop() {
        listener.close()
        dropConnections()
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: - What tests look at and steer

    func index(_ name: String = "") -> Index { lock.withLock { indexes[name] ?? Index() } }
    var transitions: [Transition] { lock.withLock { log } }
    func count(_ method: String) -> Int { lock.withLock { methodCounts[method] ?? 0 } }

    /// The next calls meet these faults, in order (each once).
    func inject(_ faults: Fault...) { lock.withLock { pendingFaults.append(contentsOf: faults) } }

    /// While true, every connection attempt is dropped at once (a daemon that is down).
    func setRefusing(_ refusing: Bool) {
        lock.withLock { self.refusing = refusing }
        if refusing { dropConnections() }
    }

    /// Erases an index (`searchlight erase`): items and client state gone.
    func erase(_ name: String = "") { lock.withLock { indexes[name] = nil } }

    func dropConnections() {
        let open: [RPCConnection] = lock.withLock {
            defer { connections.removeAll() }
            return connections
        }
        for c in open { c.close() }
    }

    // MARK: - Serving

    private func acceptLoop() {
        while let socket = try? listener.accept() {
            let rpc = RPCConnection(socket: socket)
            let refused: Bool = lock.withLock {
                if refusing { return true }
                connections.append(rpc)
                return false
            }
            if refused {
                socket.close()
                continue
            }
            let key = ObjectIdentifier(rpc)
            rpc.start(name: "fake-index-daemon", onMessage: { [self] rpc, message in
                guard case .request(let id, let method, let params) = message else { return }
                handle(rpc, key, id, method, params)
            }, onClose: { [self] _, _ in
                _ = lock.withLock { batches.removeValue(forKey: key) }
            })
        }
    }

    private func handle(_ rpc: RPCConnection, _ key: ObjectIdentifier, _ id: RPCID, _ method: String, _ params: JSONValue) {
        let fault: Fault? = lock.withLock {
            methodCounts[method, default: 0] += 1
            guard let first = pendingFaults.first else { return nil }
            switch first {
            case .dropBefore(let m) where m == method, .fail(let m, _) where m == method:
                pendingFaults.removeFirst()
                return first
            case .dropAfterCommit where method == Method.indexEndBatch:
                pendingFaults.removeFirst()
                return first
            default:
                return nil
            }
        }
        switch fault {
        case .dropBefore?:
            lock.withLock { _ = batches.removeValue(forKey: key) }
            rpc.close()
            return
        case .fail(_, let code)?:
            rpc.reply(to: id, .failure(SearchlightError(code, "injected failure of \(method)")))
            return
        default:
            break
        }
        let result = lock.withLock { answer(key, method, params) }
        if fault == .dropAfterCommit {
            lock.withLock { _ = batches.removeValue(forKey: key) }
            rpc.close()
            return
        }
        rpc.reply(to: id, result)
    }

    /// Under the lock.
    private func answer(_ key: ObjectIdentifier, _ method: String, _ params: JSONValue) -> Result<JSONValue, SearchlightError> {
        let name = params["index"]?.stringValue ?? ""
        switch method {
        case Method.initialize:
            return .success(["protocolVersion": .number(Double(Protocol.version)), "capabilities": [:]])
        case Method.indexItems, Method.indexDeleteIdentifiers, Method.indexDeleteAll:
            // As the daemon: one invalid item fails the call, applies nothing, and leaves the batch open.
            if method == Method.indexItems {
                do throws(SearchlightError) {
                    _ = try ItemValidator().validate(items: params["items"])
                } catch {
                    return .failure(error)
                }
            }
            if batches[key]?[name] != nil {
                batches[key]![name]!.append(["method": .string(method), "params": params])
                return .success(["batched": true])
            }
            var index = indexes[name] ?? Index()
            Self.apply(method, params, to: &index)
            indexes[name] = index
            return .success([:])
        case Method.indexBeginBatch:
            guard batches[key]?[name] == nil else { return .failure(SearchlightError(.invalidRequest, "a batch is already open")) }
            batches[key, default: [:]][name] = []
            return .success([:])
        case Method.indexEndBatch:
            guard let calls = batches[key]?.removeValue(forKey: name) else {
                return .failure(SearchlightError(.invalidRequest, "no batch is open"))
            }
            var index = indexes[name] ?? Index()
            if let expected = params["expectedClientState"] {
                let wanted = expected.stringValue.flatMap { Data(base64Encoded: $0) }
                guard wanted == index.state else {
                    return .failure(SearchlightError(.mismatchedClientState, "the stored client state does not match expectedClientState"))
                }
            }
            let from = index.state
            var deletedAll = false
            for call in calls {
                let m = call["method"]?.stringValue ?? ""
                if m == Method.indexDeleteAll { deletedAll = true }
                Self.apply(m, call["params"] ?? [:], to: &index)
            }
            guard let new = params["newClientState"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else {
                return .failure(SearchlightError(.invalidClientState, "newClientState is required"))
            }
            index.state = new
            indexes[name] = index
            log.append(Transition(from: from, to: new, deletedAll: deletedAll))
            return .success([:])
        case Method.indexFetchLastClientState:
            return .success(["clientState": indexes[name]?.state.map { .string($0.base64EncodedString()) } ?? .null])
        default:
            return .failure(SearchlightError(.methodNotFound, "the fake does not serve \(method)"))
        }
    }

    private static func apply(_ method: String, _ params: JSONValue, to index: inout Index) {
        switch method {
        case Method.indexItems:
            for value in params["items"]?.arrayValue ?? [] {
                if let item = SearchableItem(wire: value) { index.items[item.uniqueIdentifier] = item }
            }
        case Method.indexDeleteIdentifiers:
            for id in params["identifiers"]?.arrayValue ?? [] { if let s = id.stringValue { index.items[s] = nil } }
        case Method.indexDeleteAll:
            index.items.removeAll()
            index.state = nil
        default:
            break
        }
    }
}
