@_exported import SearchlightWire
import Foundation

/// A connection to `searchlightd` in one role. Connects on first use, performs the `initialize`
/// handshake, and reconnects after the daemon restarts. Apps rarely use it directly:
/// `SearchableIndex` and the query types do; the CLI uses it for admin methods.
public actor SearchlightConnection {
    public enum Role: Sendable, Equatable {
        case app(bundleIdentifier: String)
        case admin
    }

    public let socketPath: String
    public let role: Role
    private var rpc: RPCConnection?
    /// What the daemon answered to `initialize`.
    public private(set) var serverInfo: JSONValue?

    /// `socketPath` defaults to `SEARCHLIGHT_SOCKET`, then the user daemon's socket, then the system one.
    public init(role: Role, socketPath: String? = nil) {
        self.role = role
        self.socketPath = socketPath ?? DefaultPaths.clientSocket()
    }

    /// Calls a method and returns its result; a JSON-RPC error answer throws `SearchlightError`.
    public func call(_ method: String, _ params: JSONValue = [:]) async throws -> JSONValue {
        let connection = try await connected()
        return try await connection.call(method, params)
    }

    /// Drops the connection (an open batch on it is abandoned).
    public func close() {
        rpc?.close()
        rpc = nil
    }

    private func connected() async throws -> RPCConnection {
        if let rpc, !rpc.isClosed { return rpc }
        let connection: RPCConnection
        do {
            connection = try RPCConnection.connect(path: socketPath)
        } catch {
            throw SearchlightError(.remoteConnection,
                "cannot reach searchlightd at \(socketPath) (\(error)); start it (`make run`, or `systemctl --user start searchlightd`) or set SEARCHLIGHT_SOCKET")
        }
        connection.start(name: "searchlight-client", onMessage: { _, _ in })
        var params: [String: JSONValue] = ["protocolVersion": .number(Double(Protocol.version)), "capabilities": [:]]
        switch role {
        case .app(let bundle):
            params["role"] = "app"
            params["bundleIdentifier"] = .string(bundle)
        case .admin:
            params["role"] = "admin"
        }
        do {
            serverInfo = try await connection.call(Method.initialize, .object(params))
        } catch {
            connection.close()
            throw error
        }
        rpc = connection
        return connection
    }
}
