@_exported import SearchlightWire
import Foundation

/// A connection to `searchlightd` in one role. Connects on first use, performs the `initialize`
/// handshake, and reconnects after the daemon restarts. Apps rarely use it directly:
/// `SearchableIndex` and the query types do; the CLI uses it for admin methods, and an
/// `IndexExtension` is served over one in the extension role.
public actor SearchlightConnection {
    public enum Role: Sendable, Equatable {
        case app(bundleIdentifier: String)
        case admin
        /// An index extension attaching under its unit's label (a hand-started extension, or one
        /// launched by the supervisor with its socket inherited).
        case `extension`(label: String)
        /// The desktop's search (DESIGN §12): reads every bundle the caller's uid may read, except
        /// those hidden from the desktop; never writes (but records engagement).
        case desktop
    }

    /// Receives the server's notifications (`$/progress`, `admin.event`, `extension.*`).
    public typealias NotificationHandler = @Sendable (_ method: String, _ params: JSONValue) -> Void
    /// Receives the server's requests; must call `reply` exactly once, from any thread.
    public typealias RequestHandler = @Sendable (_ method: String, _ params: JSONValue,
        _ reply: @escaping @Sendable (Result<JSONValue, SearchlightError>) -> Void) -> Void

    public let socketPath: String
    public let role: Role
    private var rpc: RPCConnection?
    /// The descriptor of a socket inherited from the supervisor; used once, never reconnected.
    private var inheritedDescriptor: Int32?
    private let reconnects: Bool
    private let onNotification: NotificationHandler?
    private let onRequest: RequestHandler?
    private let onClose: (@Sendable () -> Void)?
    /// What the daemon answered to `initialize`.
    public private(set) var serverInfo: JSONValue?

    /// `socketPath` defaults to `SEARCHLIGHT_SOCKET`, then the user daemon's socket, then the system one.
    public init(role: Role, socketPath: String? = nil, onNotification: NotificationHandler? = nil) {
        self.role = role
        self.socketPath = socketPath ?? DefaultPaths.clientSocket()
        self.onNotification = onNotification
        onRequest = nil
        onClose = nil
        reconnects = true
    }

    /// An extension's connection: over the socket inherited from the supervisor when
    /// `inheritedDescriptor` is given, else to the daemon socket. It is never reconnected: when it
    /// closes, `onClose` runs and the extension should exit.
    init(extensionLabel: String, socketPath: String?, inheritedDescriptor: Int32?,
         onNotification: @escaping NotificationHandler, onRequest: @escaping RequestHandler,
         onClose: @escaping @Sendable () -> Void) {
        role = .extension(label: extensionLabel)
        self.socketPath = socketPath ?? DefaultPaths.clientSocket()
        self.inheritedDescriptor = inheritedDescriptor
        self.onNotification = onNotification
        self.onRequest = onRequest
        self.onClose = onClose
        reconnects = false
    }

    /// Calls a method and returns its result; a JSON-RPC error answer throws `SearchlightError`.
    ///
    /// The daemon closes a connection left idle (`--idle-timeout`), announcing it with `$/closing`
    /// and reading nothing after: a call that fails because it crossed that close was never
    /// processed, so it is sent once more on a new connection, and the caller sees nothing of it.
    public func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        try await resending { connection in try await connection.call(method, params) }
    }

    /// `call`, its result read straight from the answer's bytes by `decode` (`RPCConnection.call(_:_:decode:)`).
    public func call<T: Sendable>(_ method: String, _ params: JSONValue = [:],
                                  decode: @escaping @Sendable (UnsafeBufferPointer<UInt8>) throws -> T) async throws -> T {
        try await resending { connection in try await connection.call(method, params, decode: decode) }
    }

    /// `call`, its result read as a `T` from the answer's bytes, in one pass when the result is
    /// the answer's last member (`RPCConnection.call(_:_:as:)`).
    public func call<T: WireResultDecodable>(_ method: String, _ params: JSONValue = [:], as type: T.Type) async throws -> T {
        try await resending { connection in try await connection.call(method, params, as: type) }
    }

    /// `call(_:_:as:)` with the params already written (`RPCConnection.call(_:encodedParams:as:)`).
    public func call<T: WireResultDecodable>(_ method: String, encodedParams: [UInt8], as type: T.Type) async throws -> T {
        try await resending { connection in try await connection.call(method, encodedParams: encodedParams, as: type) }
    }

    /// Runs `call` on the connection, once more on a new one after an announced close (see `call`).
    private func resending<T: Sendable>(_ call: (RPCConnection) async throws -> T) async throws -> T {
        var connection = try await connected()
        var resent = 0
        while true {
            do {
                return try await call(connection)
            } catch let error as SearchlightError where error.code == .remoteConnection && reconnects && resent < Self.maximumResends {
                // Every message the daemon sent before closing is read before the reader ends.
                await connection.waitUntilClosed()
                guard connection.closeAnnouncement != nil else { throw error }
                resent += 1
                connection = try await connected()
            }
        }
    }

    /// Times a call is sent again after announced closes. More than one only when the new
    /// connection itself idles out before the call goes (a very short `--idle-timeout` on a
    /// loaded machine); each resend is safe, since an announced close processed nothing after it.
    static let maximumResends = 3

    /// Sends a request whose params are already encoded, at once, and returns its call to await
    /// later: calls submitted in turn are on the wire in that order (see `RPCConnection.submit`).
    /// With `previous` (the connection of calls still in flight), the call goes on that connection
    /// or not at all (`ConnectionChanged`), so that calls in flight on a connection the daemon
    /// closed can be sent again first and the order holds.
    func submit(_ method: String, encodedParams: [UInt8], sameConnectionAs previous: RPCConnection? = nil) async throws -> SubmittedCall {
        if let previous, previous.isClosed || previous.closeAnnouncement != nil { throw ConnectionChanged() }
        let rpc = try await connected()
        if let previous, rpc !== previous { throw ConnectionChanged() }
        do {
            return try rpc.submit(method, encodedParams: encodedParams)
        } catch let error as SearchlightError where error.code == .remoteConnection && reconnects {
            // The write failed: the daemon may have closed the connection as idle, its
            // `$/closing` still to be read (a write can fail before the reader reaches it). Once
            // the reader has read to the end, an announced close is a changed connection (this
            // call was never read; it goes again on a new one), else the failure stands.
            await rpc.waitUntilClosed()
            if rpc.closeAnnouncement != nil { throw ConnectionChanged() }
            throw error
        }
    }

    /// `submit` was asked for the connection of earlier calls, and that one is closed: nothing was sent.
    struct ConnectionChanged: Error {}

    /// Sends a typed request (SearchlightWire's messages) and decodes its answer.
    public func send<R: WireRequest>(_ request: R) async throws -> R.Response {
        try R.Response(result: try await call(R.method, request.params))
    }

    /// Sends a notification (no answer).
    public func notify(_ method: String, _ params: JSONValue = [:]) async throws {
        try await connected().notify(method, params)
    }

    /// Connects and performs the handshake now, returning the server's `initialize` answer.
    @discardableResult
    public func open() async throws -> JSONValue {
        _ = try await connected()
        return serverInfo ?? [:]
    }

    /// Drops the connection (an open batch on it is abandoned).
    public func close() {
        rpc?.close()
        rpc = nil
    }

    /// The connection being opened, so that concurrent first calls share it (the actor is
    /// re-entered while the handshake is awaited).
    private var connecting: Task<RPCConnection, any Error>?

    private func connected() async throws -> RPCConnection {
        // A connection whose close the daemon announced is as good as closed.
        if let rpc, (!rpc.isClosed && rpc.closeAnnouncement == nil) || !reconnects { return rpc }
        if let connecting { return try await connecting.value }
        let task = Task { try await self.openConnection() }
        connecting = task
        defer { connecting = nil }
        return try await task.value
    }

    private func openConnection() async throws -> RPCConnection {
        let connection: RPCConnection
        if let fd = inheritedDescriptor {
            inheritedDescriptor = nil
            connection = RPCConnection(socket: UnixSocket(fd: fd))
        } else {
            do {
                // An app's, the CLI's or the desktop's calls read their own answers (RPCConnection's
                // `callerReads`): a call's one wake-up is its own thread's. An extension's
                // (never reconnected) serves the daemon's requests on its reader thread, as before.
                connection = try RPCConnection.connect(path: socketPath, callerReads: reconnects ? .standard : nil)
            } catch {
                throw SearchlightError(.remoteConnection,
                    "cannot reach searchlightd at \(socketPath) (\(error)); start it (`make run`, or `systemctl --user start searchlightd`) or set SEARCHLIGHT_SOCKET")
            }
        }
        let notificationHandler = onNotification, requestHandler = onRequest, closeHandler = onClose
        connection.start(name: "searchlight-client", onMessage: { rpc, message in
            switch message {
            case .notification(let method, let params):
                notificationHandler?(method, params)
            case .request(let id, let method, let params):
                guard let requestHandler else {
                    rpc.reply(to: id, .failure(SearchlightError(.methodNotFound, "this client serves no requests (\(method))")))
                    return
                }
                requestHandler(method, params) { result in rpc.reply(to: id, result) }
            case .response:
                break
            }
        }, onClose: { _, _ in closeHandler?() })
        let hello: Initialize = switch role {
        case .app(let bundle): Initialize(role: .app, bundleIdentifier: bundle)
        case .admin: Initialize(role: .admin)
        case .desktop: Initialize(role: .desktop)
        case .extension(let label):
            Initialize(role: .extension, label: label, capabilities: ["dataForItem": true, "fileURLForItem": true, "progress": true])
        }
        do {
            serverInfo = try await connection.call(Initialize.method, hello.params)
        } catch {
            connection.close()
            throw error
        }
        rpc = connection
        return connection
    }
}
