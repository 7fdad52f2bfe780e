import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// Calls that read their own answers (`RPCConnection(callerReads:)`, the SDK's side): the read
/// role passes between the reader thread and one caller at a time, and nothing the peer sends is
/// lost, reordered or handled on a caller's thread. Each test waits on events (a request
/// received, the role's state, a handler run), never on timing: the waits that bound a caller are
/// set to a minute where the test needs them not to expire, or to 50 ms where it needs them to,
/// and the linger (after which the reader thread takes the role back by itself) to ten minutes,
/// longer than any wait here: what the thread must do at once, it cannot do late and pass.
/// The tests of a caller's read run twice: sleeping in `poll` at once (spin 0), and spinning
/// (non-blocking reads) for the whole of its minute, so that each path alone must deliver.
/// Serialized: a caller given a minute holds a thread of the cooperative pool while it reads, and
/// two such tests at once could hold the whole pool, each waiting for a task of the other.
@Suite("RPC connection: callers reading their own answers", .serialized, .onOwnThreads)
struct CallerReadsTests {
    static let readerName = "rpc-reader-test"

    /// The reader thread of `connection` (`start` it with `trackingReader`), learnt from a
    /// notification it handled before any call (Foundation on Linux does not name the thread).
    final class ReaderThread: Sendable {
        private let id = Mutex<pthread_t?>(nil)
        func record() { id.withLock { if $0 == nil { $0 = pthread_self() } } }
        var known: pthread_t? { id.withLock { $0 } }
        func isCurrent() -> Bool { id.withLock { $0 } == pthread_self() }
    }

    /// Sends `hello` before any call and waits until the reader thread handled it.
    static func learnReader(_ reader: ReaderThread, _ peer: Peer) async throws {
        try peer.write(notification("hello"))
        #expect(await waitUntil { reader.known != nil })
    }

    /// The peer's end, read on its own thread: it records each request and answers as `script`
    /// says (raw frames to write, each with its newline), or not at all (nil).
    final class Peer: @unchecked Sendable {
        let socket: UnixSocket
        private let condition = NSCondition()
        private var requests: [(id: Int, method: String)] = []

        init(_ socket: UnixSocket, script: @escaping @Sendable (_ received: [(id: Int, method: String)]) -> [UInt8]?) {
            self.socket = socket
            Thread { [self] in
                var decoder = FrameDecoder()
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 1)
                defer { buffer.deallocate() }
                while let n = try? socket.read(into: buffer), n > 0 {
                    decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                    while let frame = try? decoder.next() {
                        guard let message = try? JSONValue.parse(frame), let id = message["id"]?.intValue,
                              let method = message["method"]?.stringValue else { continue }
                        let all: [(id: Int, method: String)] = condition.withLock {
                            requests.append((id, method))
                            condition.broadcast()
                            return requests
                        }
                        if let bytes = script(all) { try? socket.writeAll(bytes) }
                    }
                }
            }.start()
        }

        func write(_ text: String) throws { try socket.writeAll(Array(text.utf8)) }

        var received: [(id: Int, method: String)] { condition.withLock { requests } }

        /// Waits (off the pool) until `count` requests came.
        func waitForRequests(_ count: Int) async -> [(id: Int, method: String)] {
            await offPool { [self] in
                condition.withLock {
                    let deadline = Date().addingTimeInterval(60)
                    while requests.count < count, condition.wait(until: deadline) {}
                    return requests
                }
            }
        }
    }

    static func answer(_ id: Int, _ result: String) -> String { #"{"jsonrpc":"2.0","id":\#(id),"result":\#(result)}"# + "\n" }
    static func notification(_ method: String) -> String { #"{"jsonrpc":"2.0","method":"\#(method)","params":{}}"# + "\n" }

    /// Runs `body` on a thread of its own (blocking waits never hold a thread of the pool).
    static func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    /// Waits (off the pool, at most a minute) until `condition` holds, then runs `then` there
    /// (with no thread of the pool needed, which a caller reading may hold).
    static func waitUntil(_ condition: @escaping @Sendable () -> Bool, then: @escaping @Sendable () -> Void = {}) async -> Bool {
        await offPool {
            let deadline = Date().addingTimeInterval(60)
            while !condition() {
                if Date() > deadline { return false }
                usleep(1000)
            }
            then()
            return true
        }
    }

    /// Whether a call's answer was decoded on the reader thread.
    static func decodedOnReader(_ connection: RPCConnection, _ reader: ReaderThread, _ method: String) async throws -> Bool {
        try await connection.call(method, [:], decode: { _ in reader.isCurrent() })
    }

    static func trackingReader(_ reader: ReaderThread, also: @escaping @Sendable (RPCMessage) -> Void = { _ in }) -> RPCConnection.MessageHandler {
        { _, message in
            if case .notification(let method, _) = message, method == "hello" { reader.record() }
            also(message)
        }
    }

    @Test("a call reads its own answer on its own thread, and the next one takes the free role without waking the reader", arguments: [0.0, 60.0])
    func callerReadsItsAnswer(spin: Double) async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 600, spinSeconds: spin, readers: CallerReaders()))
        let reader = ReaderThread()
        connection.start(name: Self.readerName, onMessage: Self.trackingReader(reader))
        defer { connection.close() }
        // The first answer only once the caller holds the role (else the reader thread, still
        // holding it, may read the answer first: then it resumes the caller as before).
        let peer = Peer(theirs) { received in received.count == 1 ? nil : Array(Self.answer(received.last!.id, #"{"ok":true}"#).utf8) }
        try await Self.learnReader(reader, peer)
        let first = Task { try await Self.decodedOnReader(connection, reader, "test.one") }
        #expect(await Self.waitUntil({ connection.readRole?.current.holder == .caller && peer.received.count == 1 },
                                     then: { try? peer.write(Self.answer(peer.received[0].id, "{}")) }))
        #expect(try await !first.value)
        for round in 1...3 {
            if round > 1 { #expect(try await !Self.decodedOnReader(connection, reader, "test.one")) }
            let state = try #require(connection.readRole?.current)
            // Free for the linger (a minute here): the next call takes it with no hand-over.
            #expect(state.holder == .free)
            #expect(state.releases == round)
        }
        #expect(try await connection.call("test.plain") == ["ok": true])
    }

    @Test("notifications arriving while a caller reads are handled on the reader thread, in order, and the calls get their answers", arguments: [0.0, 60.0])
    func notificationsDuringACallersRead(spin: Double) async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 600, spinSeconds: spin, readers: CallerReaders()))
        let seen = Mutex<[String]>([])
        let reader = ReaderThread()
        connection.start(name: Self.readerName, onMessage: Self.trackingReader(reader) { message in
            guard case .notification(let method, _) = message, method != "hello" else { return }
            seen.withLock { $0.append("\(method)@\(reader.isCurrent() ? "reader" : "elsewhere")") }
        })
        defer { connection.close() }
        let peer = Peer(theirs) { received in
            let id = received.last!.id
            // First call: two notifications, then the answer, in one write; second: the answer,
            // then a notification (left in the caller's buffer, which the thread must take now:
            // with a minute's linger, waiting for it would fail the wait below).
            let text = received.count == 1
                ? Self.notification("n1") + Self.notification("n2") + Self.answer(id, "1")
                : Self.answer(id, "2") + Self.notification("n3")
            return Array(text.utf8)
        }
        try await Self.learnReader(reader, peer)
        #expect(try await connection.call("test.first") == 1)
        #expect(try await connection.call("test.second") == 2)
        #expect(await Self.waitUntil { seen.withLock { $0.count } == 3 })
        #expect(seen.withLock { $0 } == ["n1@reader", "n2@reader", "n3@reader"])
    }

    @Test("two callers racing for the read both get their own answers, in whatever order they come", arguments: [0.0, 60.0])
    func twoCallersRace(spin: Double) async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 600, spinSeconds: spin, readers: CallerReaders()))
        connection.start(name: Self.readerName, onMessage: { _, _ in })
        defer { connection.close() }
        // Both requests in before any answer (one caller reads, the other waits), then both
        // answers in one write, in the order they came or the other: when the reading caller's
        // own answer comes first, the other's is left to the reader thread.
        _ = Peer(theirs) { received in
            guard received.count % 2 == 0 else { return nil }
            var answers = received.suffix(2).map { Self.answer($0.id, #""\#($0.method)""#) }
            if received.count % 4 == 0 { answers.reverse() }
            return Array(answers.joined().utf8)
        }
        for _ in 0..<20 {
            async let a = connection.call("test.a", [:])
            async let b = connection.call("test.b", [:])
            let (ra, rb) = try await (a, b)
            #expect(ra == "test.a")
            #expect(rb == "test.b")
        }
    }

    @Test("the peer closing while a caller reads fails the call and closes the connection", arguments: [0.0, 60.0])
    func peerClosesDuringACallersRead(spin: Double) async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 600, spinSeconds: spin, readers: CallerReaders()))
        let reason = Mutex<RPCConnection.CloseReason?>(nil)
        connection.start(name: Self.readerName, onMessage: { _, _ in }, onClose: { _, r in reason.withLock { $0 = r } })
        let peer = Peer(theirs) { _ in nil }
        let call = Task { try await connection.call("test.never") }
        _ = await peer.waitForRequests(1)
        // The caller holds the role (given a minute): the close reaches its read.
        #expect(await Self.waitUntil({ connection.readRole?.current.holder == .caller }, then: { theirs.shutdown() }))
        do {
            _ = try await call.value
            Issue.record("the call was answered")
        } catch let error as SearchlightError {
            #expect(error.code == .remoteConnection)
        }
        #expect(await Self.waitUntil { reason.withLock { $0 } != nil })
        #expect(reason.withLock { $0 } == .peerClosed)
        #expect(connection.isClosed)
    }

    @Test("closing the connection while a caller reads fails the call", arguments: [0.0, 60.0])
    func localCloseDuringACallersRead(spin: Double) async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 600, spinSeconds: spin, readers: CallerReaders()))
        let reason = Mutex<RPCConnection.CloseReason?>(nil)
        connection.start(name: Self.readerName, onMessage: { _, _ in }, onClose: { _, r in reason.withLock { $0 = r } })
        let peer = Peer(theirs) { _ in nil }
        let call = Task { try await connection.call("test.never") }
        _ = await peer.waitForRequests(1)
        #expect(await Self.waitUntil({ connection.readRole?.current.holder == .caller }, then: { connection.close() }))
        await #expect(throws: SearchlightError.self) { _ = try await call.value }
        #expect(await Self.waitUntil { reason.withLock { $0 } != nil })
        #expect(reason.withLock { $0 } == .closedLocally)
        await #expect(throws: SearchlightError.self) { _ = try await connection.call("test.after") }
    }

    @Test("after the linger the reader thread takes the free role back by itself, and a later notification is handled there")
    func lingerEnds() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 60, linger: 0.05, readers: CallerReaders()))
        let seen = Mutex<[String]>([])
        let reader = ReaderThread()
        connection.start(name: Self.readerName, onMessage: Self.trackingReader(reader) { message in
            guard case .notification(let method, _) = message, method != "hello" else { return }
            seen.withLock { $0.append("\(method)@\(reader.isCurrent() ? "reader" : "elsewhere")") }
        })
        defer { connection.close() }
        let peer = Peer(theirs) { received in Array(Self.answer(received.last!.id, "1").utf8) }
        try await Self.learnReader(reader, peer)
        #expect(try await connection.call("test.one") == 1)
        // On a loaded machine the reader thread can hold the role when the call asks for it and
        // deliver the answer itself (no caller read, no release: this test then waited its whole
        // 60 s in a full `make test`); call again until a caller has read its own answer.
        for _ in 0..<100 where (connection.readRole?.current.releases ?? 0) == 0 {
            #expect(try await connection.call("test.one") == 1)
        }
        #expect((connection.readRole?.current.releases ?? 0) >= 1, "no call was read by its caller in 100 tries")
        // No call follows: the thread takes the role once it has been free for 50 ms.
        #expect(await Self.waitUntil { connection.readRole.map { $0.current.releases >= 1 && $0.current.holder == .thread } ?? false })
        try peer.write(Self.notification("later"))
        #expect(await Self.waitUntil { seen.withLock { $0.count } == 1 })
        #expect(seen.withLock { $0 } == ["later@reader"])
    }

    @Test("when a caller's bounded wait expires, the reader thread takes the read over and delivers the answer")
    func boundedWaitExpires() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 0.05, linger: 600, readers: CallerReaders()))
        let reader = ReaderThread()
        connection.start(name: Self.readerName, onMessage: Self.trackingReader(reader))
        defer { connection.close() }
        let peer = Peer(theirs) { _ in nil }
        try await Self.learnReader(reader, peer)
        let call = Task { try await Self.decodedOnReader(connection, reader, "test.slow") }
        let id = try #require(await peer.waitForRequests(1).first?.id)
        // The caller gave the role back (its 50 ms passed) and the thread took it at once,
        // though the linger is a minute: a call waits for it.
        #expect(await Self.waitUntil { connection.readRole.map { $0.current.releases == 1 && $0.current.holder == .thread } ?? false })
        try peer.write(Self.answer(id, "1"))
        #expect(try await call.value)
    }

    @Test("a call cancelled after its bounded wait fails with CancellationError, and the connection stays usable")
    func cancelledAfterTheWait() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, callerReads: .init(waitSeconds: 0.05, linger: 600, readers: CallerReaders()))
        connection.start(name: Self.readerName, onMessage: { _, _ in })
        defer { connection.close() }
        let peer = Peer(theirs) { received in
            received.last!.method == "test.ok" ? Array(Self.answer(received.last!.id, "7").utf8) : nil
        }
        let call = Task { try await connection.call("test.never") }
        _ = await peer.waitForRequests(1)
        #expect(await Self.waitUntil { connection.readRole?.current.releases == 1 })
        call.cancel()
        await #expect(throws: CancellationError.self) { _ = try await call.value }
        #expect(try await connection.call("test.ok") == 7)
    }

    @Test("while one caller reads, a call on another connection sharing its token is read by that connection's thread")
    func oneCallerReadsAcrossConnections() async throws {
        let readers = CallerReaders()
        let (mine1, theirs1) = try UnixSocket.pair()
        let (mine2, theirs2) = try UnixSocket.pair()
        let first = RPCConnection(socket: mine1, callerReads: .init(waitSeconds: 60, linger: 600, readers: readers))
        let second = RPCConnection(socket: mine2, callerReads: .init(waitSeconds: 60, linger: 600, readers: readers))
        let reader2 = ReaderThread()
        first.start(name: Self.readerName, onMessage: { _, _ in })
        second.start(name: Self.readerName, onMessage: Self.trackingReader(reader2))
        defer {
            first.close()
            second.close()
        }
        let peer1 = Peer(theirs1) { _ in nil }
        let peer2 = Peer(theirs2) { received in Array(Self.answer(received.last!.id, "{}").utf8) }
        try await Self.learnReader(reader2, peer2)
        let held = Task { try await first.call("test.held") }
        #expect(await Self.waitUntil { first.readRole?.current.holder == .caller && peer1.received.count == 1 })
        // The token is taken: this call waits as before, and its connection's thread reads.
        #expect(try await Self.decodedOnReader(second, reader2, "test.other"))
        try peer1.write(Self.answer(peer1.received[0].id, "1"))
        #expect(try await held.value == 1)
    }

    @Test("the frame decoder gives back the frame it returned last, and the ones after it follow")
    func frameDecoderPutBack() throws {
        var decoder = FrameDecoder()
        decoder.append(Array("a\nbb\ncc".utf8))
        #expect(try decoder.next().map { Array($0) } == Array("a".utf8))
        #expect(try decoder.next().map { Array($0) } == Array("bb".utf8))
        decoder.putBackLastFrame()
        #expect(try decoder.next().map { Array($0) } == Array("bb".utf8))
        #expect(try decoder.next() == nil)
        decoder.append(Array("c\n".utf8))
        #expect(try decoder.next().map { Array($0) } == Array("ccc".utf8))
    }
}
