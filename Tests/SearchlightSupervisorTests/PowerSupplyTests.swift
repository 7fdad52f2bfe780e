#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
@testable import SearchlightSupervisor

/// A fake `/sys/class/power_supply` in a temp dir: tests write the supplies the daemon reads.
/// Entries are directories elsewhere in the dir, linked in as the kernel's are (symlinks into
/// /sys/devices).
final class FakePowerSupply: @unchecked Sendable {
    let dir: String
    var root: String { dir + "/class" }

    init() throws {
        var template = Array("/tmp/sl-power-XXXXXX".utf8CString)
        dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/devices", withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: dir) }

    /// Creates (or rewrites) supply `name` with these attributes; each file is replaced by a rename.
    func supply(_ name: String, _ attributes: [String: String]) throws {
        let device = dir + "/devices/" + name
        try FileManager.default.createDirectory(atPath: device, withIntermediateDirectories: true)
        if (try? FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + name)) == nil {
            try FileManager.default.createSymbolicLink(atPath: root + "/" + name, withDestinationPath: device)
        }
        for (key, value) in attributes {
            try (value + "\n").write(toFile: device + "/" + key, atomically: true, encoding: .utf8)
        }
    }

    func mains(online: Bool, name: String = "AC") throws { try supply(name, ["type": "Mains", "online": online ? "1" : "0"]) }

    func battery(_ name: String = "BAT0", status: String, capacity: Int, extra: [String: String] = [:]) throws {
        try supply(name, ["type": "Battery", "status": status, "capacity": String(capacity)].merging(extra) { $1 })
    }

    /// AC plugged in (or out) and the battery's status to match.
    func plug(_ online: Bool, capacity: Int) throws {
        try mains(online: online)
        try battery(status: online ? "Charging" : "Discharging", capacity: capacity)
    }

    var reading: PowerReading { PowerSupplyReader(root: root).read().reading }
}

@Suite("The power supply reader", .onOwnThreads)
struct PowerSupplyTests {
    @Test("a laptop on AC: not on battery, whatever the charge")
    func acOnline() throws {
        let fake = try FakePowerSupply()
        try fake.plug(true, capacity: 12)
        #expect(fake.reading == PowerReading(onBattery: false, percent: 12, batteries: 1))
    }

    @Test("on battery, high and low: the charge is the battery's capacity")
    func onBattery() throws {
        let fake = try FakePowerSupply()
        try fake.plug(false, capacity: 80)
        #expect(fake.reading == PowerReading(onBattery: true, percent: 80, batteries: 1))
        try fake.battery(status: "Discharging", capacity: 23)
        #expect(fake.reading == PowerReading(onBattery: true, percent: 23, batteries: 1))
    }

    @Test("a desktop: no battery, or no tree at all, is never on battery")
    func noBattery() throws {
        let fake = try FakePowerSupply()
        #expect(fake.reading == .noBattery)
        try fake.mains(online: true)
        #expect(fake.reading == .noBattery)
        #expect(PowerSupplyReader(root: fake.dir + "/absent").read().reading == .noBattery)
    }

    @Test("a mouse's or headset's battery (scope=Device) is not the machine's")
    func deviceBatteriesIgnored() throws {
        let fake = try FakePowerSupply()
        try fake.battery("hidpp_battery_0", status: "Discharging", capacity: 5, extra: ["scope": "Device"])
        #expect(fake.reading == .noBattery)
        try fake.plug(false, capacity: 90)
        #expect(fake.reading == PowerReading(onBattery: true, percent: 90, batteries: 1))
    }

    @Test("several batteries: their charge weighted by energy_full when each has it, else their mean")
    func severalBatteries() throws {
        let fake = try FakePowerSupply()
        try fake.mains(online: false)
        try fake.battery("BAT0", status: "Discharging", capacity: 20, extra: ["energy_full": "30000000"])
        try fake.battery("BAT1", status: "Discharging", capacity: 80, extra: ["energy_full": "10000000"])
        #expect(fake.reading == PowerReading(onBattery: true, percent: 35, batteries: 2))
        try fake.supply("BAT1", ["energy_full": "nonsense"])
        #expect(fake.reading == PowerReading(onBattery: true, percent: 50, batteries: 2))
    }

    @Test("without a capacity file, energy_now/energy_full or charge_now/charge_full give the charge")
    func chargeFromEnergy() throws {
        let fake = try FakePowerSupply()
        try fake.supply("BAT0", ["type": "Battery", "status": "Discharging", "energy_now": "25000000", "energy_full": "50000000"])
        #expect(fake.reading == PowerReading(onBattery: true, percent: 50, batteries: 1))
        try fake.supply("BAT1", ["type": "Battery", "status": "Discharging", "charge_now": "1000", "charge_full": "4000"])
        #expect(fake.reading.percent == 37.5)
    }

    @Test("a USB-C charger online is AC; a battery not discharging with no supply listed is not on battery")
    func otherSupplies() throws {
        let fake = try FakePowerSupply()
        try fake.battery(status: "Not charging", capacity: 60)
        #expect(fake.reading.onBattery == false)
        try fake.battery(status: "Discharging", capacity: 60)
        #expect(fake.reading.onBattery == true)
        try fake.supply("ucsi-source-psy-USBC000:001", ["type": "USB", "online": "1"])
        #expect(fake.reading.onBattery == false)
    }

    @Test("hostile files: huge, non-numeric, out of range, symlinked, a FIFO: unreadable, never believed, never a hang")
    func hostileFiles() throws {
        let fake = try FakePowerSupply()
        try fake.mains(online: false)
        // Huge: never read past the bound; the capacity is unknown, not 100.
        try fake.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "1" + String(repeating: "0", count: 1 << 20)])
        var result = PowerSupplyReader(root: fake.root).read()
        #expect(result.reading == PowerReading(onBattery: true, percent: nil, batteries: 1))
        #expect(result.problems == ["BAT0/capacity unreadable"])
        for bad in ["abc", "-5", "101", "5e1", "0x32", "", "99999999999999999999"] {
            try fake.supply("BAT0", ["capacity": bad])
            #expect(fake.reading.percent == nil, "capacity \(bad.debugDescription)")
        }
        // A symlinked attribute (here to a file that says 100) is not followed.
        let elsewhere = fake.dir + "/full"
        try "100\n".write(toFile: elsewhere, atomically: true, encoding: .utf8)
        let capacity = fake.dir + "/devices/BAT0/capacity"
        try FileManager.default.removeItem(atPath: capacity)
        try FileManager.default.createSymbolicLink(atPath: capacity, withDestinationPath: elsewhere)
        #expect(fake.reading.percent == nil)
        // A FIFO: opened without blocking, refused as not a regular file.
        try FileManager.default.removeItem(atPath: capacity)
        #expect(mkfifo(capacity, 0o600) == 0)
        #expect(fake.reading.percent == nil)
        // A huge or non-numeric `online` leaves that supply out (the battery says discharging).
        try fake.supply("AC", ["online": String(repeating: "1", count: 100)])
        result = PowerSupplyReader(root: fake.root).read()
        #expect(result.reading.onBattery == true)
        #expect(result.problems.contains("AC/online unreadable"))
        // A `type` that is a directory, and a regular file as an entry: skipped.
        try FileManager.default.createDirectory(atPath: fake.dir + "/devices/odd/type", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: fake.root + "/odd", withDestinationPath: fake.dir + "/devices/odd")
        try "Battery".write(toFile: fake.root + "/plain", atomically: true, encoding: .utf8)
        #expect(fake.reading.batteries == 1)
    }

    @Test("at most 32 entries are looked at: a tree of thousands costs the same")
    func entryBound() throws {
        let fake = try FakePowerSupply()
        for i in 0..<40 { try fake.battery(String(format: "BAT%02d", i), status: "Discharging", capacity: 50) }
        #expect(fake.reading.batteries == PowerSupplyReader.maxEntries)
    }
}
