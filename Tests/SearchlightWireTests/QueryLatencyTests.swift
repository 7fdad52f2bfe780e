import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// The daemon's query threads ask for a short time slice (issue 32 item 2: a fresh query's thread
/// waited up to 3 ms, p99, on the run queue to wake up, behind the daemon's own settling).
@Suite("Query threads' time slice", .onOwnThreads)
struct QueryLatencyTests {
    /// Whether this kernel takes a slice of its own (EEVDF, Linux 6.12 and later): tried on a
    /// thread of its own, which ends with it.
    static func kernelTakesSlices() -> Bool {
        let supported = Mutex(false)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let before = QueryLatency.currentThreadSliceMicroseconds
            QueryLatency.shortenCurrentThreadSlice()
            let after = QueryLatency.currentThreadSliceMicroseconds
            supported.withLock { $0 = before > 0 && after == QueryLatency.sliceMicroseconds && after != before }
            done.signal()
        }
        thread.start()
        done.wait()
        return supported.withLock { $0 }
    }

    @Test("a background thread takes the long slice")
    func backgroundSlice() throws {
        guard QueryLatency.backgroundSliceMicroseconds > 0, Self.kernelTakesSlices() else { return }
        let queue = BackgroundQueue(label: "test-slice")
        let slice = Mutex(-1)
        let done = DispatchSemaphore(value: 0)
        queue.async {
            slice.withLock { $0 = QueryLatency.currentThreadSliceMicroseconds }
            done.signal()
        }
        done.wait()
        #expect(slice.withLock { $0 } == QueryLatency.backgroundSliceMicroseconds)
    }

    @Test("a connection that answers queries reads on a thread with the short slice; another keeps the default")
    func readerSlice() async throws {
        guard QueryLatency.sliceMicroseconds > 0, Self.kernelTakesSlices() else { return }
        for answersQueries in [true, false] {
            let (mine, theirs) = try UnixSocket.pair()
            let server = RPCConnection(socket: mine)
            let slice = Mutex(-1)
            let seen = DispatchSemaphore(value: 0)
            server.start(name: "rpc", answersQueries: answersQueries, onMessage: { _, _ in
                slice.withLock { $0 = QueryLatency.currentThreadSliceMicroseconds }
                seen.signal()
            })
            try theirs.writeAll(RPCMessage.notification(method: "$/progress", params: ["completed": 1]).frame())
            #expect(seen.wait(timeout: .now() + 60) == .success)
            let got = slice.withLock { $0 }
            if answersQueries {
                #expect(got == QueryLatency.sliceMicroseconds)
            } else {
                #expect(got > QueryLatency.sliceMicroseconds, "the default slice (\(got) µs)")
            }
            theirs.close()
            await server.waitUntilClosed()
        }
    }
}
