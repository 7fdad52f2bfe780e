#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightSemantic

@Suite("work meter", .onOwnThreads)
struct WorkMeterTests {
    /// This thread's CPU seconds.
    static func threadSeconds() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    @Test("a thread's CPU time is counted while it runs, not only when it is done, and nothing outside measure")
    func live() {
        let meter = WorkMeter()
        #expect(meter.seconds == 0)
        let start = Self.threadSeconds()
        // Spins until the meter, read from inside, shows 20 ms: it only can if it reads live.
        // (A meter counting at the end only would never get there: the 2 s of CPU stop it.)
        let seen = meter.measure { () -> Double in
            var x = 0.0
            while meter.seconds < 0.02, Self.threadSeconds() - start < 2 { x += 1 }
            return meter.seconds + x * 0
        }
        #expect(seen >= 0.02)
        #expect(Self.threadSeconds() - start < 2)
        let done = meter.seconds
        #expect(done >= 0.02)
        // Work outside measure is not counted.
        let outside = Self.threadSeconds()
        while Self.threadSeconds() - outside < 0.02 {}
        #expect(meter.seconds == done)
    }

    @Test("threads measured at once add up")
    func threads() {
        let meter = WorkMeter()
        DispatchQueue.concurrentPerform(iterations: 2) { _ in
            meter.measure {
                let start = Self.threadSeconds()
                while Self.threadSeconds() - start < 0.03 {}
            }
        }
        #expect(meter.seconds >= 0.06)
    }
}
