#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// Accepts client connections on the daemon's socket and gives each its own session and thread.
final class ClientServer: @unchecked Sendable {
    let context: ServiceContext
    let listener: UnixSocket
    private let lock = NSLock()
    private var sessions: [ObjectIdentifier: ClientSession] = [:]
    private let drained = NSCondition()
    private var _turns: UInt64 = 0

    init(context: ServiceContext, listener: UnixSocket) {
        self.context = context
        self.listener = listener
    }

    var log: Logger { context.log }

    func start() {
        let thread = Thread { [self] in self.acceptLoop() }
        thread.name = "accept"
        thread.start()
    }

    /// How many times the accept loop went round (the systemd watchdog's health probe).
    var turns: UInt64 { lock.withLock { _turns } }

    private func acceptLoop() {
        while true {
            let socket: UnixSocket
            do {
                let accepted = try listener.accept()
                lock.withLock { _turns &+= 1 }
                guard let s = accepted else { return }
                socket = s
            } catch {
                log.error("accept failed", ["error": "\(error)"])
                usleep(100_000)  // EMFILE and friends: back off rather than spin
                continue
            }
            serve(socket)
        }
    }

    private func serve(_ socket: UnixSocket) {
        guard let peer = try? socket.peerCredentials() else {
            socket.close()
            return
        }
        guard context.connectionOpened() else {
            log.warning("connection refused: too many connections", ["pid": peer.pid, "uid": peer.uid, "limit": context.config.maxConnections])
            let refusal = RPCMessage.response(id: .number(0), result: .failure(SearchlightError(.indexUnavailable,
                "searchlightd has \(context.config.maxConnections) connections, its limit; retry later")))
            try? socket.writeAll(refusal.frame())
            socket.close()
            return
        }
        // A client that stops reading its answers, or stops halfway through a frame, cannot hold
        // its thread and connection slot forever.
        socket.setSendTimeout(seconds: 30)
        let timeout = context.config.incompleteFrameTimeout
        socket.setReceiveTimeout(seconds: timeout)
        let limits = context.config.limits
        let connection = RPCConnection(
            socket: socket, maxFrameBytes: limits.maxFrameBytes, maxDepth: limits.maxJSONDepth, incompleteFrameTimeout: timeout)
        let session = ClientSession(context: context, connection: connection, peer: peer)
        let key = ObjectIdentifier(connection)
        lock.withLock { sessions[key] = session }
        connection.start(name: "client-\(peer.pid)", onMessage: { _, message in session.handle(message) }) { [self] _, reason in
            switch reason {
            case .frameTooLarge, .incompleteFrame, .readError:
                log.warning("client connection closed", ["pid": peer.pid, "uid": peer.uid, "reason": reason])
            default:
                log.debug("client connection closed", ["pid": peer.pid, "reason": reason])
            }
            session.closed(reason)
            lock.withLock { sessions[key] = nil }
            context.connectionClosed()
            drained.lock()
            drained.broadcast()
            drained.unlock()
        }
    }

    /// Stops accepting, closes every connection and waits (bounded) for their threads to finish
    /// the request they are handling.
    func stop(deadline: TimeInterval = 10) {
        listener.shutdown()
        listener.close()
        let open = lock.withLock { Array(sessions.values) }
        for s in open { s.connection.close() }
        let until = Date().addingTimeInterval(deadline)
        drained.lock()
        while lock.withLock({ !sessions.isEmpty }), Date() < until {
            _ = drained.wait(until: min(until, Date().addingTimeInterval(0.2)))
        }
        drained.unlock()
    }
}
