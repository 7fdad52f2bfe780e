import Foundation
import Synchronization
import SearchlightWire

/// The daemon's power gate: reads the power supply (`PowerSupplyReader`) only while background
/// work waits or runs, at most once per `interval` (never on a timer of its own: the scheduler's
/// loop asks it, as it asks the load throttle), feeds the `PowerPolicy`, and tells what changed.
/// With the battery rule off it reads nothing.
final class PowerGate: Sendable {
    struct Refreshed: Sendable {
        var state: PowerPolicy.State
        var transition: PowerPolicy.Transition?
        /// When the next read is due, if work still waits.
        var nextRead: Date?
    }

    let reader: PowerSupplyReader
    let interval: TimeInterval
    private let log: Logger?
    private struct Machine {
        var policy: PowerPolicy
        var lastRead: Date?
        var reads = 0
        var reported: Set<String> = []
    }
    private let machine: Mutex<Machine>

    init(reader: PowerSupplyReader, threshold: Double?, interval: TimeInterval, log: Logger? = nil, now: Date = Date()) {
        self.reader = reader
        self.interval = interval
        self.log = log
        machine = Mutex(Machine(policy: PowerPolicy(threshold: threshold, now: now)))
    }

    /// The power re-read period while background work waits: five load intervals (10 s by
    /// default). A plugged-in charger is seen within it; a daemon deferring for hours on battery
    /// wakes no more than that for it.
    static func interval(loadInterval: TimeInterval) -> TimeInterval { loadInterval * 5 }

    var state: PowerPolicy.State { machine.withLock { $0.policy.state } }
    /// True while background work is deferred by the power rule.
    var defers: Bool { state == .deferred }
    /// Why background work is deferred (nil: it is not).
    var deferReason: String? { machine.withLock { $0.policy.state == .deferred ? $0.policy.reason : nil } }
    /// Times the power supply was read (tests prove an idle daemon reads nothing).
    var reads: Int { machine.withLock { $0.reads } }

    /// Reads when work is waiting or running (`needed`) and the last read is `interval` old.
    func refresh(now: Date, needed: Bool) -> Refreshed {
        let due: Bool = machine.withLock { m in
            m.policy.threshold != nil && needed && (m.lastRead.map { now.timeIntervalSince($0) >= interval } ?? true)
        }
        // Read outside the lock: a slow sysfs must not hold up status requests.
        let result = due ? reader.read() : nil
        let (refreshed, newProblems): (Refreshed, [String]) = machine.withLock { m in
            var transition: PowerPolicy.Transition?
            var fresh: [String] = []
            if let result {
                m.lastRead = now
                m.reads += 1
                transition = m.policy.update(result.reading, at: now)
                fresh = result.problems.filter { m.reported.insert($0).inserted }
            }
            let next = needed && m.policy.threshold != nil ? (m.lastRead ?? now).addingTimeInterval(interval) : nil
            return (Refreshed(state: m.policy.state, transition: transition, nextRead: next), fresh)
        }
        for problem in newProblems {
            log?.warning("cannot read a power supply attribute; that supply is left out", ["root": reader.root, "problem": problem])
        }
        return refreshed
    }

    /// `admin.status`'s `power` object.
    var statusJSON: JSONValue {
        let (p, reads, lastRead) = machine.withLock { ($0.policy, $0.reads, $0.lastRead) }
        var o: [String: JSONValue] = ["state": .string(p.state.rawValue), "since": .string(ISO8601.format(p.since)),
            "reason": .string(p.reason), "reads": .number(Double(reads)), "source": .string("sysfs"), "root": .string(reader.root)]
        // The state is as of this read: the power is read only while background work waits.
        if let lastRead { o["lastRead"] = .string(ISO8601.format(lastRead)) }
        o["threshold"] = p.threshold.map { .number($0) } ?? .null
        if let r = p.reading {
            o["onBattery"] = .bool(r.onBattery)
            o["batteries"] = .number(Double(r.batteries))
            if let percent = r.percent { o["percent"] = .number(percent) }
        }
        return .object(o)
    }
}
