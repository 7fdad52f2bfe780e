import Foundation
import Synchronization
import SearchlightWire

/// The daemon's throttle: samples the `LoadMonitor` only while background work waits or runs
/// (never on a timer of its own), feeds the `Throttle` state machine, and tells what changed.
final class ThrottleController: Sendable {
    struct Sampled: Sendable {
        var state: Throttle.State
        /// A state change for the caller to announce (log, event, extensions).
        var transition: Throttle.Transition?
        /// When the next sample is due, if sampling continues.
        var nextSample: Date?
    }

    let monitor: LoadMonitor
    let interval: TimeInterval
    private let machine: Mutex<(throttle: Throttle, lastSample: Date?)>

    init(monitor: LoadMonitor, marks: ThrottleMarks, interval: TimeInterval, now: Date = Date()) {
        self.monitor = monitor
        self.interval = interval
        machine = Mutex((Throttle(marks: marks, now: now), nil))
    }

    var state: Throttle.State { machine.withLock { $0.throttle.state } }
    var snapshot: Throttle { machine.withLock { $0.throttle } }

    /// Samples when work is waiting (`needed`) or the state has yet to step back down to normal,
    /// and the last sample is `interval` old. Otherwise nothing is read: a quiet daemon sleeps.
    func refresh(now: Date, needed work: Bool) -> Sampled {
        let (needed, due): (Bool, Bool) = machine.withLock { m in
            let needed = work || m.throttle.state != .normal
            return (needed, needed && (m.lastSample.map { now.timeIntervalSince($0) >= interval } ?? true))
        }
        // Read outside the lock: a slow /proc must not hold up status requests.
        let pressure = due ? monitor.sample() : nil
        return machine.withLock { m in
            var transition: Throttle.Transition?
            if due {
                m.lastSample = now
                transition = m.throttle.update(pressure, at: now)
            }
            let next = needed || m.throttle.state != .normal ? (m.lastSample ?? now).addingTimeInterval(interval) : nil
            return Sampled(state: m.throttle.state, transition: transition, nextSample: next)
        }
    }

    /// `admin.status`'s `throttle` object.
    var statusJSON: JSONValue {
        let t = snapshot
        var o: [String: JSONValue] = ["state": .string(t.state.rawValue), "since": .string(ISO8601.format(t.since)),
            "reason": .string(t.reason)]
        if let p = t.pressure {
            o["cpu"] = .number(p.cpu)
            o["io"] = .number(p.io)
            o["memory"] = .number(p.memory)
            o["source"] = .string(p.source.rawValue)
        }
        return .object(o)
    }
}
