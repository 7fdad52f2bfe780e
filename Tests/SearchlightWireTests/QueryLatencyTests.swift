import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// The daemon's query threads ask for a short time slice (issue 32 item 2: a fresh query's thread
/// waited up to 3 ms, p99, on the run queue to wake up, behind the daemon's own settling).
@Suite("Query threads' time slice", .onOwnThreads)
struct QueryLatencyTests {
    /// This kernel's default slice for a new thread, in microseconds, and whether it takes a slice
    /// of its own (EEVDF, Linux 6.12 and later): probed with an explicit 500 µs on a thread of its
    /// own, which ends with it (not through the daemon's switches, which are off by default).
    static func kernelSlices() -> (defaultMicroseconds: Int, settable: Bool) {
        let result = Mutex((0, false))
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let before = QueryLatency.currentThreadSliceMicroseconds
            QueryLatency.setCurrentThreadSlice(microseconds: 500)
            let after = QueryLatency.currentThreadSliceMicroseconds
            result.withLock { $0 = (before, before > 0 && after == 500 && after != before) }
            done.signal()
        }
        thread.start()
        done.wait()
        return result.withLock { $0 }
    }

    @Test("a background thread takes the long slice when it is switched on, else keeps the kernel's default")
    func backgroundSlice() throws {
        let kernel = Self.kernelSlices()
        guard kernel.settable else {
            withKnownIssue("this kernel does not take a thread's own slice (before Linux 6.12): nothing to check") { throw SliceUnsupported() }
            return
        }
        let queue = BackgroundQueue(label: "test-slice")
        let slice = Mutex(-1)
        let done = DispatchSemaphore(value: 0)
        queue.async {
            slice.withLock { $0 = QueryLatency.currentThreadSliceMicroseconds }
            done.signal()
        }
        done.wait()
        let expected = QueryLatency.backgroundSliceMicroseconds > 0 ? QueryLatency.backgroundSliceMicroseconds : kernel.defaultMicroseconds
        #expect(slice.withLock { $0 } == expected)
    }

    @Test("a connection that answers queries reads on a thread with the short slice when it is switched on; another keeps the default")
    func readerSlice() async throws {
        let kernel = Self.kernelSlices()
        guard kernel.settable else {
            withKnownIssue("this kernel does not take a thread's own slice (before Linux 6.12): nothing to check") { throw SliceUnsupported() }
            return
        }
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
            if answersQueries && QueryLatency.sliceMicroseconds > 0 {
                #expect(got == QueryLatency.sliceMicroseconds)
            } else {
                #expect(got == kernel.defaultMicroseconds, "the default slice (\(got) µs)")
            }
            theirs.close()
            await server.waitUntilClosed()
        }
    }
}

struct SliceUnsupported: Error {}

/// Setting a thread's slice changes nothing else about its scheduling (the second review of
/// issue 32: the switch reset the thread's policy to SCHED_OTHER).
@Suite("A thread's slice alone", .onOwnThreads)
struct ThreadSliceKeepsPolicyTests {
    /// SCHED_BATCH (linux/sched.h): Swift's Glibc does not see it (a _GNU_SOURCE name).
    static let schedBatch: Int32 = 3

    @Test("a batch thread at a raised nice keeps its policy and its nice when it takes a slice")
    func keepsPolicyAndNice() throws {
        guard QueryLatencyTests.kernelSlices().settable else {
            withKnownIssue("this kernel does not take a thread's own slice (before Linux 6.12): nothing to check") { throw SliceUnsupported() }
            return
        }
        let seen = Mutex<(set: Bool, policy: Int32, nice: Int32, slice: Int)>((false, -1, -1, -1))
        let setup = Mutex<(ok: Bool, nice: Int32)>((false, -1))
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            var param = sched_param()
            let batch = sched_setscheduler(0, Self.schedBatch, &param) == 0
            // Above whatever nice the runner has (a `nice make test` starts at 10): raising it
            // needs no privilege.
            let target = min(19, max(7, getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0) + 1))
            let niced = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, target) == 0
            setup.withLock { $0 = (batch && niced, target) }
            let set = batch && niced && QueryLatency.setCurrentThreadSlice(microseconds: 3_000)
            seen.withLock { $0 = (set, sched_getscheduler(0), getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0), QueryLatency.currentThreadSliceMicroseconds) }
            done.signal()
        }
        thread.start()
        done.wait()
        let got = seen.withLock { $0 }
        let prepared = setup.withLock { $0 }
        try #require(prepared.ok, "the test could not make its thread SCHED_BATCH at nice \(prepared.nice)")
        #expect(got.set)
        #expect(got.policy == Self.schedBatch, "policy \(got.policy)")
        #expect(got.nice == prepared.nice)
        #expect(got.slice == 3_000)
    }
}
