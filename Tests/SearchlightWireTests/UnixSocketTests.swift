import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// A listener's close from another thread while an `accept` waits on it (the daemon's and the
/// SDK fake's accept loops stop this way): the accept returns nil, whichever close is used.
@Suite("Unix socket listeners", .onOwnThreads)
struct UnixSocketTests {
    /// Starts an accept on a thread of its own, closes the listener with `close` once the
    /// accept waits, and tells whether the accept returned (nil) within `seconds`.
    static func acceptEnds(seconds: Double, close: (UnixSocket) -> Void) throws -> Bool {
        let dir = NSTemporaryDirectory() + "sl-unix-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let listener = try UnixSocket.listen(path: dir + "/l.sock")
        let returned = DispatchSemaphore(value: 0)
        let result = Mutex<String>("")
        let thread = Thread {
            let outcome: String
            do { outcome = try listener.accept() == nil ? "nil" : "a connection" } catch { outcome = "\(error)" }
            result.withLock { $0 = outcome }
            returned.signal()
        }
        thread.start()
        // The accept waits once it has pinned the descriptor (it polls from then on).
        let deadline = Date().addingTimeInterval(30)
        while listener.acceptsWaiting == 0, Date() < deadline { usleep(1000) }
        #expect(listener.acceptsWaiting == 1)
        close(listener)
        let ended = returned.wait(timeout: .now() + seconds) == .success
        if ended { #expect(result.withLock { $0 } == "nil") }
        return ended
    }

    @Test("close() ends an accept waiting on the listener")
    func closeEndsAccept() throws {
        #expect(try Self.acceptEnds(seconds: 10) { $0.close() })
    }

    @Test("closeDescriptor() ends an accept waiting on the listener too (it never woke it)")
    func closeDescriptorEndsAccept() throws {
        #expect(try Self.acceptEnds(seconds: 10) { $0.closeDescriptor() })
    }
}
