import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

@Suite("The power policy", .onOwnThreads)
struct PowerPolicyTests {
    let t0 = Date(timeIntervalSince1970: 1_000_000)
    func battery(_ percent: Double?) -> PowerReading { PowerReading(onBattery: true, percent: percent, batteries: 1) }
    func ac(_ percent: Double) -> PowerReading { PowerReading(onBattery: false, percent: percent, batteries: 1) }

    @Test("on battery at or below the threshold, background work is deferred and the reason says so")
    func defersBelowThreshold() {
        var p = PowerPolicy(threshold: 50, now: t0)
        let t = p.update(battery(23), at: t0.addingTimeInterval(5))
        #expect(t == PowerPolicy.Transition(from: .allowed, to: .deferred, reason: "on battery at 23 % (below 50 %)"))
        #expect(p.state == .deferred)
        #expect(p.since == t0.addingTimeInterval(5))
        #expect(PowerPolicy.evaluate(battery(50), threshold: 50) == (.deferred, "on battery at 50 % (not above 50 %)"))
        #expect(PowerPolicy.evaluate(battery(50.5), threshold: 50) == (.allowed, "on battery at 50.5 % (above 50 %)"))
    }

    @Test("on AC it resumes at once, whatever the charge; the next unplug defers again")
    func resumesOnAC() {
        var p = PowerPolicy(threshold: 50, now: t0)
        _ = p.update(battery(10), at: t0)
        let resumed = p.update(ac(10), at: t0.addingTimeInterval(60))
        #expect(resumed == PowerPolicy.Transition(from: .deferred, to: .allowed, reason: "on AC power"))
        #expect(p.since == t0.addingTimeInterval(60))
        #expect(p.update(ac(12), at: t0.addingTimeInterval(70)) == nil)
        #expect(p.update(battery(12), at: t0.addingTimeInterval(80))?.to == .deferred)
    }

    @Test("above the threshold on battery it runs, until the charge falls to it")
    func runsAboveThreshold() {
        var p = PowerPolicy(threshold: 50, now: t0)
        #expect(p.update(battery(80), at: t0) == nil)
        #expect(p.state == .allowed)
        #expect(p.reason == "on battery at 80 % (above 50 %)")
        #expect(p.update(battery(51), at: t0.addingTimeInterval(600)) == nil)
        #expect(p.update(battery(49), at: t0.addingTimeInterval(700))?.to == .deferred)
        // Still deferred as the charge falls: no transition, but the reason follows the reading.
        #expect(p.update(battery(40), at: t0.addingTimeInterval(800)) == nil)
        #expect(p.reason == "on battery at 40 % (below 50 %)")
        #expect(p.since == t0.addingTimeInterval(700))
    }

    @Test("no battery (a desktop), or the rule off: always allowed; on battery with the charge unknown: deferred")
    func edges() {
        #expect(PowerPolicy.evaluate(.noBattery, threshold: 50) == (.allowed, "no battery"))
        #expect(PowerPolicy.evaluate(nil, threshold: 50) == (.allowed, "no battery"))
        #expect(PowerPolicy.evaluate(battery(3), threshold: nil) == (.allowed, "battery rule off"))
        #expect(PowerPolicy.evaluate(battery(nil), threshold: 50) == (.deferred, "on battery, charge unknown (threshold 50 %)"))
        #expect(PowerPolicy.evaluate(battery(1), threshold: 0).0 == .allowed)
        #expect(PowerPolicy.evaluate(battery(100), threshold: 100).0 == .deferred)
    }
}

@Suite("The power gate", .onOwnThreads)
struct PowerGateTests {
    let t0 = Date(timeIntervalSince1970: 1_000_000)

    @Test("reads nothing while no background work waits; then once per interval; the rule off reads nothing ever")
    func readsOnlyWhenNeeded() throws {
        let fake = try FakePowerSupply()
        try fake.plug(false, capacity: 20)
        let gate = PowerGate(reader: PowerSupplyReader(root: fake.root), threshold: 50, interval: 10, now: t0)
        var r = gate.refresh(now: t0, needed: false)
        #expect(gate.reads == 0 && r.nextRead == nil && r.state == .allowed)
        r = gate.refresh(now: t0.addingTimeInterval(1), needed: true)
        #expect(gate.reads == 1)
        #expect(r.transition?.to == .deferred)
        #expect(r.nextRead == t0.addingTimeInterval(11))
        #expect(gate.deferReason == "on battery at 20 % (below 50 %)")
        try fake.plug(true, capacity: 20)
        r = gate.refresh(now: t0.addingTimeInterval(5), needed: true)
        #expect(gate.reads == 1 && r.state == .deferred, "not re-read within the interval")
        r = gate.refresh(now: t0.addingTimeInterval(11), needed: true)
        #expect(gate.reads == 2 && r.transition?.to == .allowed && gate.deferReason == nil)

        let off = PowerGate(reader: PowerSupplyReader(root: fake.root), threshold: nil, interval: 10, now: t0)
        r = off.refresh(now: t0, needed: true)
        #expect(off.reads == 0 && r.nextRead == nil && r.state == .allowed)
        #expect(off.statusJSON["reason"]?.stringValue == "battery rule off")
    }
}
