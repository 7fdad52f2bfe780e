#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The machine's power as background work sees it: on AC or on battery, and the system
/// batteries' combined charge.
public struct PowerReading: Sendable, Equatable {
    /// True when the machine runs on its batteries (no external supply online).
    public var onBattery: Bool
    /// The system batteries' combined charge in percent (nil: no battery, or none readable).
    public var percent: Double?
    /// System batteries found (`scope=Device` ones, a mouse's or a headset's, are not counted).
    public var batteries: Int

    public init(onBattery: Bool, percent: Double?, batteries: Int) {
        self.onBattery = onBattery
        self.percent = percent
        self.batteries = batteries
    }

    /// A machine without a system battery: a desktop, a server, a container.
    public static let noBattery = PowerReading(onBattery: false, percent: nil, batteries: 0)
}

/// Reads the power state from `/sys/class/power_supply` (a root tests replace with a fake
/// tree, as `--proc-root` replaces /proc): each entry's `type`; an external supply (`Mains`,
/// `USB*`, `Wireless`, `BrickID`) is on AC when its `online` is not 0; a `Battery` whose `scope`
/// is not `Device` counts with its `status` and `capacity` (else `energy_now`/`energy_full`,
/// `charge_now`/`charge_full`). Several batteries: their charge weighted by `energy_full` when
/// every one has it, else their mean.
///
/// UPower is not asked: the daemon has no D-Bus client (only searchlight-desktop links sd-bus,
/// on the session bus), and UPower reads this same tree. Every file is treated as hostile: at
/// most `maxEntries` entries, attributes opened without following a symlink, regular files of at
/// most `maxFileBytes` only; anything else is unreadable, never a crash.
public struct PowerSupplyReader: Sendable {
    public static let defaultRoot = "/sys/class/power_supply"
    static let maxEntries = 32
    static let maxFileBytes = 64
    static let externalTypes: Set<String> = ["Mains", "USB", "USB_C", "USB_PD", "USB_PD_DRP", "USB_DCP", "USB_CDP", "USB_ACA",
                                             "USB_HVDCP", "USB_HVDCP_3", "USB_HVDCP_3P5", "Wireless", "BrickID"]

    public let root: String

    public init(root: String = Self.defaultRoot) { self.root = root }

    /// What was read, and the problems met on the way (files that did not parse), for a log line.
    public struct Result: Sendable, Equatable {
        public var reading: PowerReading
        public var problems: [String]
    }

    /// The current state; no entry (or no root) reads as `noBattery`.
    public func read() -> Result {
        var problems: [String] = []
        var externalOnline = false, externalOffline = false, discharging = false
        var charges: [(percent: Double, energyFull: Double?)] = []
        var batteries = 0
        for name in entries() {
            let dir = root + "/" + name
            guard let type = Self.attribute(dir, "type") else {
                problems.append("\(name)/type unreadable")
                continue
            }
            if Self.externalTypes.contains(type) {
                guard let online = Self.attribute(dir, "online").flatMap(Self.integer) else {
                    problems.append("\(name)/online unreadable")
                    continue
                }
                if online != 0 { externalOnline = true } else { externalOffline = true }
            } else if type == "Battery" {
                if Self.attribute(dir, "scope") == "Device" { continue }
                batteries += 1
                if Self.attribute(dir, "status") == "Discharging" { discharging = true }
                if let percent = Self.charge(dir) {
                    charges.append((percent, Self.attribute(dir, "energy_full").flatMap(Self.integer).map(Double.init)))
                } else {
                    problems.append("\(name)/capacity unreadable")
                }
            }
        }
        guard batteries > 0 else { return Result(reading: .noBattery, problems: problems) }
        let onBattery = !externalOnline && (discharging || externalOffline)
        return Result(reading: PowerReading(onBattery: onBattery, percent: Self.combined(charges), batteries: batteries), problems: problems)
    }

    /// The entries' names, sorted, at most `maxEntries`, directories only (a real tree's are
    /// symlinks into /sys/devices, so the entry itself may be one).
    private func entries() -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: root) else { return [] }
        return names.filter { !$0.hasPrefix(".") }.sorted().prefix(Self.maxEntries).filter { name in
            var st = stat()
            return stat(root + "/" + name, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
        }
    }

    private static func combined(_ charges: [(percent: Double, energyFull: Double?)]) -> Double? {
        guard !charges.isEmpty else { return nil }
        let weights = charges.map(\.energyFull)
        if weights.allSatisfy({ ($0 ?? 0) > 0 }) {
            let total = weights.reduce(0) { $0 + $1! }
            return charges.reduce(0) { $0 + $1.percent * $1.energyFull! } / total
        }
        return charges.reduce(0) { $0 + $1.percent } / Double(charges.count)
    }

    /// `capacity` (0–100), else `energy_now/energy_full` or `charge_now/charge_full`.
    private static func charge(_ dir: String) -> Double? {
        if let text = attribute(dir, "capacity") {
            guard let v = integer(text), v <= 100 else { return nil }
            return Double(v)
        }
        for (now, full) in [("energy_now", "energy_full"), ("charge_now", "charge_full")] {
            if let n = attribute(dir, now).flatMap(integer), let f = attribute(dir, full).flatMap(integer), f > 0 {
                return min(100, Double(n) / Double(f) * 100)
            }
        }
        return nil
    }

    /// A non-negative integer of at most 15 digits (a µWh figure fits; nothing overflows).
    static func integer(_ text: String) -> Int64? {
        guard !text.isEmpty, text.count <= 15, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int64(text)
    }

    /// One attribute's text, trimmed: a regular file of at most `maxFileBytes`, opened without
    /// following a symlink and without blocking (a FIFO put there gives nothing); else nil.
    static func attribute(_ dir: String, _ name: String) -> String? {
        let fd = open(dir + "/" + name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        var buffer = [UInt8](repeating: 0, count: maxFileBytes + 1)
        var count = 0
        while count < buffer.count {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { break }
            count += n
        }
        // More than fits: not a sysfs attribute; never read on.
        guard count <= maxFileBytes, let text = String(bytes: buffer[..<count], encoding: .utf8) else { return nil }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
