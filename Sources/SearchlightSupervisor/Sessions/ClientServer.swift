#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire
import Synchronization

/// Accepts client connections on the daemon's socket and gives each its own session and thread.
final class ClientServer: Sendable {
    let context: ServiceContext
    let listener: UnixSocket
    /// The sessions being served, and how many times the accept loop went round.
    private let lock = Mutex<(sessions: [ObjectIdentifier: ClientSession], turns: UInt64)>(([:], 0))
    /// Broadcast when a session ends (the stop waits for them).
    private let drained = NSCondition()

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
    var turns: UInt64 { lock.withLock { $0.turns } }

    private func acceptLoop() {
        while true {
            let socket: UnixSocket
            do {
                let accepted = try listener.accept()
                lock.withLock { $0.turns &+= 1 }
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
        let config = context.config
        let admin = context.mayAdminister(peer)
        do {
            try context.connectionOpened(uid: peer.uid, admin: admin)
        } catch {
            refuse(socket, peer, error)
            return
        }
        // A client that stops reading its answers, stops halfway through a frame, or just sits
        // idle cannot hold its thread and connection slot forever. The receive timeout is the
        // tick at which the reader looks at both clocks.
        socket.setSendTimeout(seconds: config.sendTimeout)
        let timeout = config.incompleteFrameTimeout
        socket.setReceiveTimeout(seconds: min(timeout, config.idleTimeout))
        let limits = config.limits
        let connection = RPCConnection(
            socket: socket, maxFrameBytes: limits.maxFrameBytes, maxDepth: limits.maxJSONDepth, incompleteFrameTimeout: timeout,
            outboxLimit: limits.outboxLimit)
        // Pinned now, while the peer most likely still runs; identified at its handshake.
        let process = PeerProcess(socket: socket, pid: peer.pid, uid: peer.uid, gid: peer.gid)
        let session = ClientSession(context: context, connection: connection, peer: peer, process: process)
        connection.setIdlePolicy(.init(seconds: config.idleTimeout, mayClose: { [weak session] in session?.idle ?? true }))
        let key = ObjectIdentifier(connection)
        lock.withLock { $0.sessions[key] = session }
        connection.start(name: "client-\(peer.pid)", answersQueries: true, onMessage: { _, message in session.handle(message) }) { [self] _, reason in
            switch reason {
            case .frameTooLarge, .incompleteFrame, .readError, .unreadAnswers, .malformedFrames, .outboxFull:
                log.warning("client connection closed", ["pid": peer.pid, "uid": peer.uid, "reason": reason])
            case .idle:
                log.info("client connection closed", ["pid": peer.pid, "uid": peer.uid, "reason": reason])
            default:
                log.debug("client connection closed", ["pid": peer.pid, "reason": reason])
            }
            session.closed(reason)
            lock.withLock { $0.sessions[key] = nil }
            context.connectionClosed(uid: peer.uid, admin: admin)
            drained.lock()
            drained.broadcast()
            drained.unlock()
        }
    }

    /// Answers a connection that gets no slot with one error, then closes it.
    private func refuse(_ socket: UnixSocket, _ peer: PeerCredentials, _ refusal: ServiceContext.ConnectionRefusal) {
        let config = context.config
        let error: SearchlightError
        switch refusal {
        case .daemonFull:
            log.warning("connection refused: too many connections", ["pid": peer.pid, "uid": peer.uid, "limit": config.maxConnections])
            error = SearchlightError(.indexUnavailable, "searchlightd has \(config.maxConnections) connections, its limit; retry later")
        case .userFull:
            log.warning("connection refused: too many connections of one user", ["pid": peer.pid, "uid": peer.uid,
                "limit": config.maxConnectionsPerUser])
            error = SearchlightError(.quotaExceeded,
                "uid \(peer.uid) has \(config.maxConnectionsPerUser) connections to searchlightd, the most one user may (--max-connections-per-user); close some (each SearchableIndex holds one) and retry")
        }
        socket.setSendTimeout(seconds: 1)
        try? socket.writeAll(RPCMessage.response(id: .number(0), result: .failure(error)).frame())
        socket.close()
    }

    /// Stops accepting, closes every connection and waits (bounded) for their threads to finish
    /// the request they are handling.
    func stop(deadline: TimeInterval = 10) {
        listener.shutdown()
        listener.close()
        let open = lock.withLock { Array($0.sessions.values) }
        for s in open { s.connection.close() }
        let until = Date().addingTimeInterval(deadline)
        drained.lock()
        while lock.withLock({ !$0.sessions.isEmpty }), Date() < until {
            _ = drained.wait(until: min(until, Date().addingTimeInterval(0.2)))
        }
        drained.unlock()
    }
}
