import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// A stand-in for the kernel's load average: every 5 s, the 1-minute figure moves toward the
/// number of runnable threads by e^(-5/60) (kernel/sched/loadavg.c), written to a fake `/proc`.
private struct FakeKernel {
    var load = 0.0
    var lastTick = 0.0
    /// Only the outside threads, averaged the same way: what an honest discount should leave.
    var outsideLoad = 0.0

    mutating func advance(to t: Double, own: Double, outside: Double) {
        while lastTick + 5 <= t {
            lastTick += 5
            let e = exp(-5.0 / 60)
            load = load * e + (own + outside) * (1 - e)
            outsideLoad = outsideLoad * e + outside * (1 - e)
        }
    }

    func write(_ proc: FakeProc) throws {
        try proc.write("loadavg", String(format: "%.2f 0.00 0.00 1/300 4242\n", load))
    }
}

/// The daemon's background work's CPU seconds, advanced by the test.
private final class FakeMeter: Sendable {
    let value = Mutex(0.0)
    var seconds: Double { value.withLock { $0 } }
    func add(_ s: Double) { value.withLock { $0 += s } }
}

@Suite("load average less the daemon's own work", .onOwnThreads)
struct OwnLoadTests {
    let t0 = Date(timeIntervalSince1970: 2_000_000)

    @Test("the own load follows the kernel's 1-minute average of a steady busy thread")
    func ownLoadAverage() {
        var own = OwnLoad(seconds: 0, at: t0)
        // One thread busy for a minute: 1 - 1/e of it, whatever the sampling.
        #expect(abs(own.update(seconds: 60, at: t0.addingTimeInterval(60)) - (1 - exp(-1))) < 1e-9)
        var stepped = OwnLoad(seconds: 0, at: t0)
        for s in stride(from: 2.0, through: 60, by: 2) { _ = stepped.update(seconds: s, at: t0.addingTimeInterval(s)) }
        #expect(abs(stepped.load - own.load) < 1e-9)
        // Then idle for a minute: decays by 1/e.
        let before = own.load
        #expect(abs(own.update(seconds: 60, at: t0.addingTimeInterval(120)) - before * exp(-1)) < 1e-9)
        // A clock going backwards or a meter going back changes nothing, and never goes negative.
        #expect(own.update(seconds: 100, at: t0.addingTimeInterval(100)) == own.load)
        #expect(own.update(seconds: 0, at: t0.addingTimeInterval(130)) >= 0)
    }

    /// Runs the fake kernel and the controller together, one step a second for `seconds`, the
    /// controller sampling every 2 s; `own` and `outside` give the runnable threads at time t.
    private func drive(_ c: ThrottleController, _ kernel: inout FakeKernel, _ proc: FakeProc, _ meter: FakeMeter?,
                       from start: Int, seconds: Int, own: (Int) -> Double, outside: (Int) -> Double,
                       check: (Int, ThrottleController.Sampled, FakeKernel) -> Void) throws {
        for t in start..<(start + seconds) {
            meter?.add(own(t))  // the second just gone: own(t) threads busy
            kernel.advance(to: Double(t + 1), own: own(t), outside: outside(t))
            try kernel.write(proc)
            let s = c.refresh(now: t0.addingTimeInterval(Double(t + 1)), needed: true)
            check(t + 1, s, kernel)
        }
    }

    @Test("refinement's own busy thread does not throttle it without PSI; without the discount it would")
    func ownWorkAlone() throws {
        let proc = try FakeProc()
        try FileManager.default.removeItem(atPath: proc.path + "/pressure")
        let meter = FakeMeter()
        var kernel = FakeKernel()
        try kernel.write(proc)
        let c = ThrottleController(monitor: LoadMonitor(procRoot: proc.path, cpuCount: 2, ownWork: { meter.seconds }, now: t0),
            marks: ThrottleMarks(), interval: 2, now: t0)
        var highest = 0.0, seen = 0.0
        // One busy refinement thread on 2 CPUs for 5 minutes (the load average reaches 1.0: 50 %),
        // then two for 2 minutes, then none for 3.
        try drive(c, &kernel, proc, meter, from: 0, seconds: 600, own: { $0 < 300 ? 1 : $0 < 420 ? 2 : 0 }, outside: { _ in 0 }) { _, s, k in
            #expect(s.state == .normal)
            highest = max(highest, c.snapshot.pressure?.cpu ?? 0)
            seen = max(seen, k.load)
        }
        #expect(seen > 1.5, "the fake kernel's load average reached \(seen)")
        // The kernel samples every 5 s, the discount every 2 s: they differ by at most a tick's step.
        #expect(highest < 10, "cpu reached \(highest) %")
        #expect(c.snapshot.pressure?.source == .loadavg)

        // The same load average read without the discount: throttled, then paused.
        let plain = ThrottleController(monitor: LoadMonitor(procRoot: proc.path, cpuCount: 2, now: t0), marks: ThrottleMarks(), interval: 2, now: t0)
        var worst = Throttle.State.normal
        var k2 = FakeKernel()
        try drive(plain, &k2, proc, nil, from: 0, seconds: 420, own: { $0 < 300 ? 1 : 2 }, outside: { _ in 0 }) { _, s, _ in worst = max(worst, s.state) }
        #expect(worst == .paused)
    }

    @Test("an outside load still throttles and pauses at the first sample after the load average shows it")
    func outsideLoad() throws {
        let proc = try FakeProc()
        try FileManager.default.removeItem(atPath: proc.path + "/pressure")
        let meter = FakeMeter()
        var kernel = FakeKernel()
        try kernel.write(proc)
        let c = ThrottleController(monitor: LoadMonitor(procRoot: proc.path, cpuCount: 2, ownWork: { meter.seconds }, now: t0),
            marks: ThrottleMarks(), interval: 2, now: t0)
        // Refinement alone for 3 minutes: normal.
        try drive(c, &kernel, proc, meter, from: 0, seconds: 180, own: { _ in 1 }, outside: { _ in 0 }) { _, s, _ in #expect(s.state == .normal) }
        // Then two outside threads (a build): throttled once the outside share of the load average
        // is clearly past 20 %, paused once it is past 50 % (the load average stands for cpu and
        // io, so io's marks, the lower, decide); neither before it reaches the mark less the
        // discount's error (a tick's step, 4 %). Refinement keeps running meanwhile (the worst
        // case: its share stays in the load average).
        var throttledAt: Int?, pausedAt: Int?
        try drive(c, &kernel, proc, meter, from: 180, seconds: 120, own: { _ in 1 }, outside: { _ in 2 }) { t, s, k in
            let outside = k.outsideLoad / 2 * 100
            if s.state >= .throttled, throttledAt == nil { throttledAt = t }
            if s.state == .paused, pausedAt == nil { pausedAt = t }
            if outside < 16 { #expect(s.state == .normal, "throttled at \(outside) % outside load (t = \(t))") }
            if outside < 46 { #expect(s.state < .paused, "paused at \(outside) % outside load (t = \(t))") }
            // Seen at the first sample (odd seconds) after the kernel's figure passed the mark.
            if outside >= 24, t % 2 == 1 { #expect(s.state >= .throttled, "not throttled at \(outside) % outside load (t = \(t))") }
            if outside >= 54, t % 2 == 1 { #expect(s.state == .paused, "not paused at \(outside) % outside load (t = \(t))") }
        }
        #expect(throttledAt != nil && pausedAt != nil)
        #expect(c.snapshot.pressure?.own ?? 0 > 0.9)
    }
}
