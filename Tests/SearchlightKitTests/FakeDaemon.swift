#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// A stand-in for `searchlightd` on a socket in a temp directory: answers `initialize` the way
/// the daemon does, records every message, and answers other calls with the test's `answer`.
/// The SDK is tested against the wire, not against a mock of its own types.
final class FakeDaemon: @unchecked Sendable {
    struct Received: Sendable {
        var connection: Int
        var method: String
        var params: JSONValue
    }

    let path: String
    private let directory: String
    private let listener: UnixSocket
    private let answer: @Sendable (String, JSONValue) -> Result<JSONValue, SearchlightError>
    private let lock = NSLock()
    private var received: [Received] = []
    private var connections: [RPCConnection] = []
    private var idleCloses = 0

    init(answer: @escaping @Sendable (String, JSONValue) -> Result<JSONValue, SearchlightError> = { _, _ in .success([:]) }) throws {
        directory = NSTemporaryDirectory() + "sl-kit-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        path = directory + "/searchlightd.sock"
        listener = try UnixSocket.listen(path: path)
        self.answer = answer
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "fake-daemon"
        thread.start()
    }

    private func acceptLoop() {
        while let socket = try? listener.accept() {
            let rpc = RPCConnection(socket: socket)
            let number: Int = lock.withLock {
                connections.append(rpc)
                return connections.count
            }
            rpc.start(name: "fake-daemon-\(number)", onMessage: { [self] rpc, message in
                switch message {
                case .request(let id, let method, let params):
                    record(number, method, params)
                    if method != Method.initialize, takeIdleClose() {
                        // As the daemon does when it found the connection idle just before this
                        // request arrived: announce the close and read (and answer) nothing more.
                        try? rpc.notify(Method.closing, ["reason": "idle", "seconds": 1])
                        rpc.close()
                    } else if method == Method.initialize {
                        rpc.reply(to: id, .success(["protocolVersion": .number(Double(Protocol.version)), "capabilities": [:]]))
                    } else {
                        rpc.reply(to: id, answer(method, params))
                    }
                case .notification(let method, let params):
                    record(number, method, params)
                case .response:
                    break
                }
            })
        }
    }

    private func record(_ connection: Int, _ method: String, _ params: JSONValue) {
        lock.withLock { received.append(Received(connection: connection, method: method, params: params)) }
    }

    /// The next `count` calls (other than `initialize`) each meet an idle close instead of an answer.
    func closeAsIdle(nextCalls count: Int) { lock.withLock { idleCloses = count } }

    private func takeIdleClose() -> Bool {
        lock.withLock {
            guard idleCloses > 0 else { return false }
            idleCloses -= 1
            return true
        }
    }

    /// Every request and notification received so far, in order, `initialize` included.
    var messages: [Received] { lock.withLock { received } }

    /// The params of every call of `method`, in order.
    func calls(_ method: String) -> [JSONValue] { messages.filter { $0.method == method }.map(\.params) }

    /// Closes every connection, as a daemon that stops does (the listener stays).
    func dropConnections() {
        let open: [RPCConnection] = lock.withLock { connections }
        for c in open { c.close() }
    }

    func stop() {
        listener.close()
        dropConnections()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
