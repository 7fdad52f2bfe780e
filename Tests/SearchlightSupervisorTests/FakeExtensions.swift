#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightUnits
import SearchlightWire
@testable import SearchlightSupervisor

/// What a fake extension does with one request from the daemon, decided by the test.
enum FakeAnswer: Sendable {
    case acknowledge
    /// An error answer: a negative acknowledgement.
    case nack(String)
    /// It dies by SIGSEGV without answering.
    case crash
    /// It never answers.
    case hang
    /// It writes a line that is not JSON, and never answers.
    case garbage
    /// It donates `count` items (`index.items`), then acknowledges.
    case donate(count: Int)
}

/// A request a fake extension received.
struct FakeRequest: Sendable {
    var pid: Int32
    var method: String
    var requestID: String?
    var reason: String?
    var identifiers: [String]
}

/// The launcher the tests inject: each launch is a `FakeExtension` in this process, on the other
/// end of a real socketpair, speaking the real protocol to a real `ClientSession`.
final class FakeLauncher: ExtensionLauncher {
    private struct State {
        var nextPID: Int32 = 4_000_001
        var launches: [FakeExtension] = []
        var received: [FakeRequest] = []
        var notifications: [(pid: Int32, method: String)] = []
        var answer: @Sendable (FakeRequest) -> FakeAnswer = { _ in .acknowledge }
        /// The next launches fail to start with this error.
        var failure: String?
        /// New launches say `initialize` (false: they never complete their handshake).
        var handshake = true
        /// New launches are stuck: they ignore SIGTERM and `extension.shutdown` (only SIGKILL ends them).
        var ignoresTerm = false
    }

    private let state = Mutex(State())
    let clock: ManualClock

    init(clock: ManualClock) { self.clock = clock }

    func launch(_ unit: ExtensionUnit, stderrTail: StderrTail) throws -> (process: any ExtensionProcess, socket: UnixSocket) {
        let (pid, failure, handshake, ignoresTerm) = state.withLock { s in
            defer { s.nextPID += 1 }
            return (s.nextPID, s.failure, s.handshake, s.ignoresTerm)
        }
        if let failure { throw SearchlightError(.extensionFailed, failure) }
        let (daemonEnd, fakeEnd) = try UnixSocket.pair()
        let fake = FakeExtension(pid: pid, label: unit.label, socket: fakeEnd, launcher: self, handshake: handshake, ignoresTerm: ignoresTerm)
        state.withLock { $0.launches.append(fake) }
        return (fake, daemonEnd)
    }

    /// How every fake answers from now on.
    func answer(_ decide: @escaping @Sendable (FakeRequest) -> FakeAnswer) { state.withLock { $0.answer = decide } }
    func failLaunches(_ message: String?) { state.withLock { $0.failure = message } }
    func setHandshake(_ on: Bool) { state.withLock { $0.handshake = on } }
    func setIgnoresTerm(_ on: Bool) { state.withLock { $0.ignoresTerm = on } }

    var launches: [FakeExtension] { state.withLock { $0.launches } }
    var received: [FakeRequest] { state.withLock { $0.received } }
    /// Requests of one method (`extension.reindexAll`, …).
    func received(_ method: String) -> [FakeRequest] { received.filter { $0.method == method } }
    func notifications(_ method: String) -> [Int32] { state.withLock { $0.notifications.filter { $0.method == method }.map(\.pid) } }

    fileprivate func record(_ request: FakeRequest) -> FakeAnswer {
        state.withLock { s in
            s.received.append(request)
            return s.answer(request)
        }
    }

    fileprivate func record(notification method: String, pid: Int32) {
        state.withLock { $0.notifications.append((pid, method)) }
    }
}

/// One launched copy of a fake extension. It ends when it crashes on command, is sent SIGKILL
/// (or SIGTERM, unless it ignores it), or is asked to exit with `extension.shutdown`.
final class FakeExtension: ExtensionProcess {
    let pid: Int32
    let label: String
    let rpc: RPCConnection
    private let launcher: FakeLauncher
    private let ignoresTerm: Bool
    private let ended = Promise<Termination>()
    private let signals = Mutex<[(signal: Int32, at: Date)]>([])

    fileprivate init(pid: Int32, label: String, socket: UnixSocket, launcher: FakeLauncher, handshake: Bool, ignoresTerm: Bool) {
        self.pid = pid
        self.label = label
        self.launcher = launcher
        self.ignoresTerm = ignoresTerm
        rpc = RPCConnection(socket: socket)
        rpc.start(name: "fake-\(pid)", onMessage: { [weak self] _, message in self?.handle(message) })
        if handshake {
            let rpc = self.rpc
            Task { _ = try? await rpc.call(Method.initialize, ["protocolVersion": 1, "role": "extension", "label": .string(label)]) }
        }
    }

    var hasExited: Bool { ended.current != nil }
    var termination: Termination? { ended.current }
    /// The signals it was sent while it lived, with the clock's time.
    var signalsReceived: [(signal: Int32, at: Date)] { signals.withLock { $0 } }

    func signal(_ signal: Int32) -> Bool {
        guard !hasExited else { return false }
        signals.withLock { $0.append((signal, launcher.clock.now)) }
        if signal == SIGKILL || (signal == SIGTERM && !ignoresTerm) { end(.signaled(signal, coreDumped: false)) }
        return true
    }

    func waitForExit() async -> Termination {
        await ended.value() ?? .exited(-1)
    }

    func killLeftovers() {}

    /// Dies: its exit is reported first, then its socket closes, as the kernel would close it.
    func end(_ termination: Termination) {
        guard ended.current == nil else { return }
        ended.fulfil(termination)
        rpc.close()
    }

    /// Donates `count` items to its bundle's index.
    func donate(_ count: Int, prefix: String = "item") async throws {
        let items: [JSONValue] = (0..<count).map { i in
            ["uniqueIdentifier": .string("\(prefix)-\(i)"), "attributeSet": ["title": .string("fake item \(i)")]]
        }
        _ = try await rpc.call(Method.indexItems, ["items": .array(items)])
    }

    private func handle(_ message: RPCMessage) {
        switch message {
        case .request(let id, let method, let params):
            let request = FakeRequest(pid: pid, method: method, requestID: params["requestId"]?.stringValue,
                reason: params["reason"]?.stringValue, identifiers: params["identifiers"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            let ack: JSONValue = ["requestId": params["requestId"] ?? .null]
            switch launcher.record(request) {
            case .acknowledge: rpc.reply(to: id, .success(ack))
            case .nack(let message): rpc.reply(to: id, .failure(SearchlightError(.extensionFailed, message)))
            case .crash: end(.signaled(SIGSEGV, coreDumped: false))
            case .hang: break
            case .garbage: try? rpc.socket.writeAll(Array("}{ this is not JSON\n".utf8))
            case .donate(let count):
                // Not on the reader thread: the answers to its own calls arrive there.
                Task { [rpc] in
                    try? await self.donate(count)
                    rpc.reply(to: id, .success(ack))
                }
            }
        case .notification(let method, _):
            launcher.record(notification: method, pid: pid)
            if method == Method.extensionShutdown, !ignoresTerm { end(.exited(0)) }
        case .response:
            break
        }
    }
}

/// A copy of an extension started by hand (under a debugger): it connects like a client and
/// attaches under its label. The test answers (or not) what it is sent.
final class AttachedFake: Sendable {
    let rpc: RPCConnection
    let session: ClientSession
    private let requests = Locked<[(id: RPCID, method: String, params: JSONValue)]>([])

    init(label: String, context: ServiceContext, pid: Int32 = 4_100_000) throws {
        self.label = label
        let (daemonEnd, fakeEnd) = try UnixSocket.pair()
        let connection = RPCConnection(socket: daemonEnd)
        // The fake runs in this process: that is the process the daemon end finds (not sandboxed).
        let session = ClientSession(context: context, connection: connection, peer: PeerCredentials(pid: pid, uid: getuid(), gid: getgid()),
                                    process: PeerProcess(socket: daemonEnd, pid: getpid()))
        self.session = session
        // As `ClientServer` serves a client: the session hears of the close.
        connection.start(name: "attached-\(pid)", onMessage: { _, message in session.handle(message) }) { _, reason in session.closed(reason) }
        rpc = RPCConnection(socket: fakeEnd)
        rpc.start(name: "attached-fake-\(pid)", onMessage: { [requests] _, message in
            if case .request(let id, let method, let params) = message { requests.withLock { $0.append((id, method, params)) } }
        })
    }

    let label: String

    func attach() async throws {
        _ = try await rpc.call(Method.initialize, ["protocolVersion": 1, "role": "extension", "label": .string(label)])
    }

    var received: [(id: RPCID, method: String, params: JSONValue)] { requests.withLock { $0 } }

    /// Answers every request received so far (the breakpoint is left).
    func acknowledgeAll() {
        for r in requests.withLock({ s in defer { s.removeAll() }; return s }) {
            rpc.reply(to: r.id, .success(["requestId": r.params["requestId"] ?? .null]))
        }
    }

    func close() { rpc.close() }
}
