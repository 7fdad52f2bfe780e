import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// A write that fails because the peer closed must not cost what the peer sent before it closed
/// (issue 30: the SDK's resend after the daemon's idle close). The daemon announces an idle
/// close with `$/closing` and closes with the client's pipelined calls unread (a reset); the
/// client's next write then fails, often before its reader has read the announcement. The
/// reader used to stop at the close that failure requested, after the first frame it handled:
/// a frame before `$/closing` in the same read, and the announcement was lost (the SDK then
/// gave the donation up as an unannounced loss).
@Suite("The peer's last frames after a failed write", .onOwnThreads)
struct PeerCloseReadTests {
    @Test("after a write fails because the peer closed, every frame it sent before is handled, $/closing included")
    func lastFramesRead() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let client = RPCConnection(socket: mine)
        // A call the peer never reads (its close with it unread resets the connection).
        let call = try client.submit("index.items", encodedParams: Array(#"{"items":[]}"#.utf8))
        // The peer's last words in one write (one read takes both), then its close.
        try theirs.writeAll(RPCMessage.notification(method: "$/progress", params: ["completed": 1]).frame()
            + RPCMessage.notification(method: Method.closing, params: ["reason": "idle", "seconds": 1]).frame())
        theirs.close()
        // The next write fails before the reader has read anything (it has not started).
        _ = try? client.submit("index.items", encodedParams: Array(#"{"items":[]}"#.utf8))
        let seen = Mutex<[String]>([])
        client.start(onMessage: { _, message in
            if case .notification(let method, _) = message { seen.withLock { $0.append(method) } }
        })
        await #expect(throws: SearchlightError.self) { _ = try await call.value() }
        await client.waitUntilClosed()
        #expect(client.closeAnnouncement == "idle", "the announcement was read")
        #expect(seen.withLock { $0 } == ["$/progress", Method.closing])
    }

    @Test("a request read after the failed write is not handed to the handler (no answer could be written)")
    func requestsDropped() async throws {
        let (mine, theirs) = try UnixSocket.pair()
        let client = RPCConnection(socket: mine)
        _ = try client.submit("index.items", encodedParams: Array(#"{"items":[]}"#.utf8))
        try theirs.writeAll(RPCMessage.request(id: .number(7), method: "extension.shutdown", params: [:]).frame()
            + RPCMessage.notification(method: Method.closing, params: ["reason": "idle"]).frame())
        theirs.close()
        _ = try? client.submit("index.items", encodedParams: Array(#"{"items":[]}"#.utf8))
        let requests = Mutex(0)
        client.start(onMessage: { _, message in
            if case .request = message { requests.withLock { $0 += 1 } }
        })
        await client.waitUntilClosed()
        #expect(client.closeAnnouncement == "idle")
        #expect(requests.withLock { $0 } == 0)
    }
}
