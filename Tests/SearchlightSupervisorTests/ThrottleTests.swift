#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// A fake `/proc` in a temp dir: tests write the pressure files the daemon's monitor reads.
final class FakeProc: @unchecked Sendable {
    let path: String

    init() throws {
        var template = Array("/tmp/sl-proc-XXXXXX".utf8CString)
        path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        try FileManager.default.createDirectory(atPath: path + "/pressure", withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func write(_ name: String, _ text: String) throws {
        try text.write(toFile: path + "/" + name, atomically: true, encoding: .utf8)
    }

    func psi(cpu: Double, io: Double, memory: Double) throws {
        for (name, v) in [("cpu", cpu), ("io", io), ("memory", memory)] {
            try write("pressure/" + name, "some avg10=\(v) avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        }
    }
}

@Suite("load monitor", .onOwnThreads)
struct LoadMonitorTests {
    @Test("PSI some avg10 is read per resource")
    func psi() throws {
        let proc = try FakeProc()
        try proc.psi(cpu: 12.5, io: 3, memory: 0.25)
        #expect(LoadMonitor(procRoot: proc.path).sample() == Pressure(cpu: 12.5, io: 3, memory: 0.25, source: .psi))
    }

    @Test("without PSI the 1-minute load average per CPU stands in, as a percentage")
    func loadavg() throws {
        let proc = try FakeProc()
        try proc.write("loadavg", "1.00 0.50 0.20 1/300 4242\n")
        #expect(LoadMonitor(procRoot: proc.path, cpuCount: 4).sample() == Pressure(cpu: 25, io: 25, memory: 0, source: .loadavg))
    }

    @Test("garbage PSI falls back to loadavg; garbage everywhere reads as unreadable")
    func garbage() throws {
        let proc = try FakeProc()
        try proc.psi(cpu: 1, io: 1, memory: 1)
        try proc.write("pressure/io", "some avg10=nan avg60=1\n")
        try proc.write("loadavg", "2.0 1 1 1/1 1\n")
        #expect(LoadMonitor(procRoot: proc.path, cpuCount: 2).sample()?.source == .loadavg)
        try proc.write("loadavg", "\u{0}\u{1}zzz\n")
        #expect(LoadMonitor(procRoot: proc.path, cpuCount: 2).sample() == nil)
    }

    @Test("PSI parsing refuses out-of-range, missing and oversized figures")
    func parsing() {
        #expect(LoadMonitor.parsePSI("some avg10=0.00 avg60=0.00 avg300=0.00 total=0") == 0)
        #expect(LoadMonitor.parsePSI("full avg10=5.00") == nil)
        #expect(LoadMonitor.parsePSI("some avg10=-1") == nil)
        #expect(LoadMonitor.parsePSI("some avg10=101") == nil)
        #expect(LoadMonitor.parsePSI("some avg10=inf") == nil)
        #expect(LoadMonitor.parsePSI("some avg60=3") == nil)
        #expect(LoadMonitor.parsePSI("some avg10=" + String(repeating: "1", count: 5000)) == nil)
        #expect(LoadMonitor.parsePSI("") == nil)
        #expect(LoadMonitor.parseLoadAverage("-3 1 1") == nil)
        #expect(LoadMonitor.parseLoadAverage("0.52 0.58 0.59 1/467 12345") == 0.52)
    }
}

@Suite("throttle state machine", .onOwnThreads)
struct ThrottleTests {
    let t0 = Date(timeIntervalSince1970: 1_000_000)
    func p(_ cpu: Double, io: Double = 0, memory: Double = 0) -> Pressure { Pressure(cpu: cpu, io: io, memory: memory, source: .psi) }

    @Test("pressure past a throttle mark throttles at once, past a pause mark pauses at once")
    func upward() {
        var t = Throttle(now: t0)
        #expect(t.update(p(10), at: t0) == nil)
        let throttled = t.update(p(0, io: 20), at: t0.addingTimeInterval(2))
        #expect(throttled?.to == .throttled)
        #expect(throttled?.reason == "io 20 % >= throttle mark 20 %")
        #expect(t.update(p(0, memory: 31), at: t0.addingTimeInterval(4))?.to == .paused)
        #expect(t.state == .paused)
        var u = Throttle(now: t0)
        #expect(u.update(p(60), at: t0)?.to == .paused)
    }

    @Test("no step down before resume-after below the mark, one state per period after")
    func hysteresis() {
        var t = Throttle(now: t0)
        _ = t.update(p(70), at: t0)
        #expect(t.update(p(5), at: t0.addingTimeInterval(1)) == nil)
        #expect(t.update(p(5), at: t0.addingTimeInterval(20)) == nil)
        let down = t.update(p(5), at: t0.addingTimeInterval(21))
        #expect(down?.from == .paused && down?.to == .throttled)
        #expect(t.update(p(5), at: t0.addingTimeInterval(40)) == nil)
        #expect(t.update(p(5), at: t0.addingTimeInterval(41))?.to == .normal)
    }

    @Test("a blip back over the mark restarts the resume period")
    func blip() {
        var t = Throttle(now: t0)
        _ = t.update(p(30), at: t0)
        _ = t.update(p(5), at: t0.addingTimeInterval(1))
        _ = t.update(p(30), at: t0.addingTimeInterval(15))
        #expect(t.update(p(5), at: t0.addingTimeInterval(22)) == nil)
        #expect(t.update(p(5), at: t0.addingTimeInterval(41)) == nil)
        #expect(t.update(p(5), at: t0.addingTimeInterval(42))?.to == .normal)
    }

    @Test("unreadable pressure throttles nothing")
    func unreadable() {
        var t = Throttle(now: t0)
        #expect(t.update(nil, at: t0) == nil)
        #expect(t.state == .normal)
    }

    @Test("idle once every pressure stayed below the throttle marks for idle-after")
    func idle() {
        var t = Throttle(now: t0)
        _ = t.update(p(40), at: t0)
        #expect(!t.isIdle(at: t0.addingTimeInterval(100), idleAfter: 60))
        _ = t.update(p(1), at: t0.addingTimeInterval(100))
        #expect(!t.isIdle(at: t0.addingTimeInterval(159), idleAfter: 60))
        #expect(t.isIdle(at: t0.addingTimeInterval(160), idleAfter: 60))
    }

    @Test("the controller samples only while background work is waiting, once per interval")
    func noBusyPolling() throws {
        let proc = try FakeProc()
        try proc.psi(cpu: 1, io: 1, memory: 1)
        let monitor = LoadMonitor(procRoot: proc.path)
        let c = ThrottleController(monitor: monitor, marks: ThrottleMarks(), interval: 2, now: t0)
        for second in 0..<100 {
            let s = c.refresh(now: t0.addingTimeInterval(Double(second)), needed: false)
            #expect(s.nextSample == nil)
        }
        #expect(monitor.samples == 0)
        for tenth in 0..<100 { _ = c.refresh(now: t0.addingTimeInterval(Double(tenth) / 10), needed: true) }
        #expect(monitor.samples == 5)
        try proc.psi(cpu: 65, io: 1, memory: 1)
        #expect(c.refresh(now: t0.addingTimeInterval(10), needed: true).transition?.to == .paused)
    }
}
