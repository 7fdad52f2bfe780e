import Foundation
import Synchronization
import Testing
import TestThreads
import SearchlightWire

/// The connection's writer: a peer that reads slowly, or not at all, costs only its own
/// connection, never a thread of Swift's cooperative pool (where the daemon's scheduler runs).
@Suite("RPC connection writer", .onOwnThreads)
struct RPCWriterTests {
    /// A raw peer end read on its own thread (never on the cooperative pool).
    final class Peer: @unchecked Sendable {
        let socket: UnixSocket
        private let lock = NSLock()
        private var received: [UInt8] = []
        private let done = DispatchSemaphore(value: 0)

        init(_ socket: UnixSocket) { self.socket = socket }

        /// Reads `chunk` bytes every `pause` until the connection closes.
        func read(chunk: Int, pause: TimeInterval, after start: DispatchSemaphore? = nil) {
            Thread { [self] in
                start?.wait()
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 1)
                defer { buffer.deallocate() }
                while let n = try? socket.read(into: buffer), n > 0 {
                    lock.withLock { received += buffer[0..<n] }
                    if pause > 0 { Thread.sleep(forTimeInterval: pause) }
                }
                done.signal()
            }.start()
        }

        func waitForEnd() { done.wait() }
        var lines: [String] { lock.withLock { String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init) } }
    }

    static func blob(_ bytes: Int) -> JSONValue { ["blob": .string(String(repeating: "x", count: bytes))] }

    @Test("calls to a peer that does not read return to the pool at once: other tasks keep running")
    func slowReaderHoldsNoPoolThread() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        // Longer than the daemon's (30 s): a blocking write would hold its thread that long, far
        // past the safety net below, so the net tells a held pool from a pool that other suites
        // of the same test process keep busy for a while (seen: 26 s at load 12).
        mine.setSendTimeout(seconds: 600)
        let connection = RPCConnection(socket: mine, outboxLimit: .close(bytes: 64 << 20))
        connection.start(onMessage: { _, _ in })
        let peer = Peer(theirs)
        // More calls than the pool has threads, each larger than the socket buffer.
        let calls = (0..<8).map { _ in Task { try await connection.call("test.big", Self.blob(1 << 20)) } }
        // This task needs a pool thread to go on: it gets one only if the calls above hold none.
        let probe = DispatchSemaphore(value: 0)
        let stalled = Mutex(false)
        let watcher = Thread {
            // Safety net only: with the fix the probe comes within milliseconds on a quiet
            // machine, within seconds when other suites hold the pool; with the bug, not before
            // the 600 s send timeout.
            if probe.wait(timeout: .now() + 240) == .timedOut { stalled.withLock { $0 = true } }
            theirs.close()
        }
        watcher.start()
        try await Task.sleep(for: .milliseconds(200))
        probe.signal()
        for call in calls {
            await #expect(throws: SearchlightError.self) { try await call.value }
        }
        #expect(!stalled.withLock { $0 }, "the cooperative pool was held by writes to a peer that does not read")
        _ = peer
        connection.close()
    }

    @Test("a peer that reads a trickle is cut off once a frame takes longer than the send timeout")
    func trickleReaderIsCutOff() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        mine.setSendTimeout(seconds: 1)
        let connection = RPCConnection(socket: mine, outboxLimit: .close(bytes: 64 << 20))
        let closed = DispatchSemaphore(value: 0)
        let reason = Mutex<RPCConnection.CloseReason?>(nil)
        connection.start(onMessage: { _, _ in }, onClose: { _, r in
            reason.withLock { $0 = r }
            closed.signal()
        })
        // 1 KiB every 20 ms: always some progress (SO_SNDTIMEO never fires), 4 MiB would take minutes.
        let peer = Peer(theirs)
        peer.read(chunk: 1024, pause: 0.02)
        try connection.notify("test.big", Self.blob(4 << 20))
        // Safety net only: the deadline is 1 s.
        let waited = await Task.detached { closed.wait(timeout: .now() + 30) }.value
        #expect(waited == .success, "the connection to a trickling reader stayed open")
        let why = reason.withLock { $0 }
        guard case .unreadAnswers = why else {
            Issue.record("closed for \(String(describing: why)), not unreadAnswers")
            return
        }
        peer.waitForEnd()
    }

    @Test("past its outbox limit the daemon's side closes the connection, and says why")
    func outboxLimitCloses() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        mine.setSendTimeout(seconds: 60)
        let connection = RPCConnection(socket: mine, outboxLimit: .close(bytes: 1 << 20))
        let closed = DispatchSemaphore(value: 0)
        let reason = Mutex<RPCConnection.CloseReason?>(nil)
        connection.start(onMessage: { _, _ in }, onClose: { _, r in
            reason.withLock { $0 = r }
            closed.signal()
        })
        var refused = false
        for _ in 0..<8 {
            do { try connection.notify("test.big", Self.blob(600 << 10)) } catch {
                refused = true
                break
            }
        }
        #expect(refused)
        let waited = await Task.detached { closed.wait(timeout: .now() + 30) }.value
        #expect(waited == .success)
        #expect(reason.withLock { $0 } == .outboxFull(bytes: 1 << 20))
        theirs.close()
    }

    @Test("the SDK's side waits for room: every frame arrives, in order, and a close flushes what was queued")
    func waitingSenderKeepsOrder() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let connection = RPCConnection(socket: mine, outboxLimit: .wait(bytes: 256 << 10))
        connection.start(onMessage: { _, _ in })
        let peer = Peer(theirs)
        peer.read(chunk: 16 << 10, pause: 0.001)
        let count = 120
        for k in 0..<count {
            try connection.notify("test.n", ["k": .number(Double(k)), "pad": .string(String(repeating: "y", count: 40 << 10))])
        }
        connection.close()
        await Task.detached { peer.waitForEnd() }.value
        let ks = peer.lines.compactMap { line -> Int? in
            guard let range = line.range(of: #""k":"#) else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
        #expect(ks == Array(0..<count))
    }

    /// The bytes waiting on `socket` now, without waiting for more.
    static func readyBytes(_ socket: UnixSocket) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(socket.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard n > 0 else { return out }
            out += buffer[0..<n]
        }
    }

    @Test("a frame the socket has room for is on the wire when send returns: no hand-off to the writer queue")
    func roomyFrameIsWrittenAtOnce() throws {
        let (mine, theirs) = try UnixSocket.pair()
        mine.setSendTimeout(seconds: 60)
        let connection = RPCConnection(socket: mine, outboxLimit: .close(bytes: 64 << 20))
        connection.start(onMessage: { _, _ in })
        for k in 0..<50 {
            try connection.send(.response(id: .number(k), result: .success(["k": .number(Double(k))])))
            // Read at once, without waiting: a frame left to the writer queue would not be there yet
            // (or only sometimes), this one always is.
            let line = String(decoding: Self.readyBytes(theirs), as: UTF8.self)
            #expect(line.hasSuffix("\n") && line.contains(#""id":\#(k),"#) && line.contains(#""k":\#(k)"#), "answer \(k): \(line)")
        }
        connection.close()
        theirs.close()
    }

    @Test("a frame larger than the socket's room: its rest, and frames sent after it, follow in order without blocking the sender")
    func partialWriteKeepsOrder() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        mine.setSendTimeout(seconds: 60)
        let connection = RPCConnection(socket: mine, outboxLimit: .close(bytes: 64 << 20))
        connection.start(onMessage: { _, _ in })
        let start = ContinuousClock.now
        // Nobody reads yet: the first frame fills the socket's buffer and the rest waits in the outbox.
        try connection.notify("test.big", ["k": 0, "pad": .string(String(repeating: "z", count: 2 << 20))])
        for k in 1...20 { try connection.notify("test.n", ["k": .number(Double(k))]) }
        #expect(ContinuousClock.now - start < .seconds(5), "the sender waited for a peer that does not read")
        let peer = Peer(theirs)
        peer.read(chunk: 64 << 10, pause: 0)
        connection.close()
        await Task.detached { peer.waitForEnd() }.value
        let lines = peer.lines
        let ks = lines.compactMap { line -> Int? in
            guard let range = line.range(of: #""k":"#) else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
        #expect(ks == Array(0...20))
        #expect(lines.first.map { $0.utf8.count > 2 << 20 && (try? JSONValue.parse($0)) != nil } == true, "the large frame arrived whole")
    }
}
