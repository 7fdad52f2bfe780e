import Foundation
import Testing
import TestThreads
@testable import SearchlightStore
@testable import SearchlightSupervisor
import SearchlightWire

/// When idle maintenance may run, driven by an injected clock and throttle samples.
@Suite("Maintenance schedule", .onOwnThreads)
struct MaintenanceScheduleTests {
    let t0 = Date(timeIntervalSince1970: 1_800_000_000)
    func quiet() -> Pressure { Pressure(cpu: 1, io: 0, memory: 0, source: .psi) }
    func busy() -> Pressure { Pressure(cpu: 30, io: 0, memory: 0, source: .psi) }

    @Test("not due before the interval since the last run, whatever the load")
    func notDue() {
        var s = MaintenanceSchedule(interval: 3600, idleAfter: 60, lastRun: t0)
        let throttle = Throttle(now: t0)
        do {
            let started = s.shouldStart(at: t0.addingTimeInterval(3599), throttle: throttle)
            #expect(!started)
        }
        #expect(s.watchingSince == nil, "nothing is watched (nor sampled) before it is due")
    }

    @Test("due: starts only after idle-after seconds of low pressure, watched from when it became due")
    func idleAfter() {
        var s = MaintenanceSchedule(interval: 3600, idleAfter: 60, lastRun: t0)
        // The throttle has been quiet since t0, but nobody sampled: that proves nothing.
        var throttle = Throttle(now: t0)
        let due = t0.addingTimeInterval(3600)
        _ = throttle.update(quiet(), at: due)
        do {
            let started = s.shouldStart(at: due, throttle: throttle)
            #expect(!started)
        }
        #expect(s.watchingSince == due)
        _ = throttle.update(quiet(), at: due.addingTimeInterval(59))
        do {
            let started = s.shouldStart(at: due.addingTimeInterval(59), throttle: throttle)
            #expect(!started)
        }
        _ = throttle.update(quiet(), at: due.addingTimeInterval(60))
        do {
            let started = s.shouldStart(at: due.addingTimeInterval(60), throttle: throttle)
            #expect(started)
        }
    }

    @Test("pressure above a throttle mark restarts the idle period")
    func pressureResets() {
        var s = MaintenanceSchedule(interval: 10, idleAfter: 30, lastRun: t0)
        var throttle = Throttle(marks: { var m = ThrottleMarks(); m.resumeAfter = 5; return m }(), now: t0)
        let due = t0.addingTimeInterval(10)
        _ = throttle.update(quiet(), at: due)
        do {
            let started = s.shouldStart(at: due, throttle: throttle)
            #expect(!started)
        }
        _ = throttle.update(busy(), at: due.addingTimeInterval(20))
        do {
            let started = s.shouldStart(at: due.addingTimeInterval(20), throttle: throttle)
            #expect(!started)
        }
        // Quiet again from +22; the throttle steps back to normal after resume-after (5 s).
        for t in stride(from: 22.0, through: 51, by: 1) {
            _ = throttle.update(quiet(), at: due.addingTimeInterval(t))
            do {
                let started = s.shouldStart(at: due.addingTimeInterval(t), throttle: throttle)
                #expect(!started, "at +\(t)")
            }
        }
        _ = throttle.update(quiet(), at: due.addingTimeInterval(52))
        #expect(throttle.state == .normal)
        do {
            let started = s.shouldStart(at: due.addingTimeInterval(52), throttle: throttle)
            #expect(started)
        }
    }

    @Test("after a run the next is due one interval later; a run that gave way stays due")
    func afterRun() {
        var s = MaintenanceSchedule(interval: 100, idleAfter: 0, lastRun: t0)
        var throttle = Throttle(now: t0)
        let due = t0.addingTimeInterval(100)
        _ = throttle.update(quiet(), at: due)
        do {
            let started = s.shouldStart(at: due, throttle: throttle)
            #expect(started)
        }
        s.yielded()
        #expect(s.isDue(at: due.addingTimeInterval(1)))
        s.ran(at: due.addingTimeInterval(5))
        #expect(!s.isDue(at: due.addingTimeInterval(104)))
        #expect(s.nextDue == due.addingTimeInterval(105))
    }

    @Test("the last run and each index's scrub cursor survive a restart; a first start waits one interval")
    func persisted() throws {
        let path = NSTemporaryDirectory() + "slmaint-" + UUID().uuidString + ".sqlite"
        defer { for s in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + s) } }
        do {
            let record = try MaintenanceRecord(path: path)
            #expect(record.lastRun(orRecord: t0) == t0)
            try record.recordRun(at: t0.addingTimeInterval(50), summary: ["purged": 3])
            try record.setCursor(ScrubCursor(itemRowID: 42, table: 3), bundle: "org.example.a", index: "")
        }
        let reopened = try MaintenanceRecord(path: path)
        #expect(reopened.lastRun(orRecord: t0.addingTimeInterval(999)) == t0.addingTimeInterval(50))
        #expect(reopened.lastSummary?["purged"]?.intValue == 3)
        #expect(reopened.cursor(bundle: "org.example.a", index: "") == ScrubCursor(itemRowID: 42, table: 3))
        #expect(reopened.cursor(bundle: "org.example.b", index: "") == ScrubCursor())
    }
}

/// A maintenance run over a real (in-process) service context: what it records, and how it gives way.
@Suite("Maintenance run", .onOwnThreads)
struct MaintenanceRunTests {
    final class Fixture: @unchecked Sendable {
        let dir = NSTemporaryDirectory() + "slmaintrun-" + UUID().uuidString
        let context: ServiceContext
        let maintenance: Maintenance
        let start = Date(timeIntervalSince1970: 1_800_000_000)

        init() throws {
            var config = Configuration(system: false)
            config.stateDirectory = dir
            config.unitDirectories = [dir + "/units"]
            config.fullSync = false
            config.modelDirectory = dir + "/no-model"  // not this machine's model folder
            context = try ServiceContext(config: config, log: Logger(label: "test", level: .error))
            maintenance = try Maintenance(context: context, now: start)
            for bundle in ["org.example.a", "org.example.b"] {
                let item = try ItemValidator().validate(item: ["uniqueIdentifier": "x", "attributeSet": ["title": "an item"]])
                try context.registry.withStore(bundle: bundle, index: "", create: true) { (store) throws(SearchlightError) in _ = try store?.applySync([.items([item])]) }
            }
        }

        var lastRun: Date { try! MaintenanceRecord(path: dir + "/supervisor.sqlite").lastRun(orRecord: .distantFuture) }

        deinit {
            context.registry.closeAll()
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    @Test("a complete run over every index is recorded as the last run; one over a single bundle is not")
    func recorded() throws {
        let f = try Fixture()
        let one = f.maintenance.run(bundle: "org.example.a", trigger: "simulate")
        #expect(one.indexes == 1 && !one.yielded)
        #expect(f.lastRun == f.start)
        let all = f.maintenance.run(bundle: nil, trigger: "idle")
        #expect(all.indexes == 2 && all.optimized == 2 && all.checkpointed == 2 && all.rowsScrubbed == 2)
        #expect(f.lastRun != f.start, "recorded at the time of the run")
    }

    @Test("a run gives way when asked between steps, and is then not recorded")
    func yields() throws {
        let f = try Fixture()
        let asked = Counter()
        // Busy from the third question on: the first index is begun, then the run stops.
        let summary = f.maintenance.run(bundle: nil, trigger: "idle", yieldNow: { asked.next() >= 3 })
        #expect(summary.yielded)
        #expect(summary.indexes == 1 && summary.optimized == 0, "\(summary.fields)")
        #expect(f.lastRun == f.start)
    }
}

final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func next() -> Int { lock.withLock { n += 1; return n } }
}
