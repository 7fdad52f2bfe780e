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
        /// Samples applied so far (`sampleCount`), this one included.
        var sample: Int
    }

    let monitor: LoadMonitor
    let interval: TimeInterval
    /// The state machine, the last sample's time, and how many samples it was fed (counted
    /// with the update, under the same lock, so that a count read before the state proves the
    /// state was not yet changed by any later sample).
    private let machine: Mutex<(throttle: Throttle, lastSample: Date?, samples: Int)>

    init(monitor: LoadMonitor, marks: ThrottleMarks, interval: TimeInterval, now: Date = Date()) {
        self.monitor = monitor
        self.interval = interval
        machine = Mutex((Throttle(marks: marks, now: now), nil, 0))
    }

    var state: Throttle.State { machine.withLock { $0.throttle.state } }
    var snapshot: Throttle { machine.withLock { $0.throttle } }
    /// Samples fed to the state machine so far: background work records it when it starts a
    /// step, so a log can show that no step began after the sample that saw pressure
    /// (Docs/SemanticSearch.md, "Refinement").
    var sampleCount: Int { machine.withLock { $0.samples } }
    /// When the load was last sampled (nil: never).
    var lastSampleTime: Date? { machine.withLock { $0.lastSample } }

    /// Samples when work is waiting (`needed`) or the state has yet to step back down to normal,
    /// and the last sample is `interval` old. Otherwise nothing is read: a quiet daemon sleeps.
    func refresh(now: Date, needed work: Bool) -> Sampled {
        let (needed, due): (Bool, Bool) = machine.withLock { m in
            let needed = work || m.throttle.state != .normal
            return (needed, needed && (m.lastSample.map { now.timeIntervalSince($0) >= interval } ?? true))
        }
        // Read outside the lock: a slow /proc must not hold up status requests.
        let pressure = due ? monitor.sample(at: now) : nil
        return machine.withLock { m in
            var transition: Throttle.Transition?
            if due {
                m.lastSample = now
                m.samples += 1
                transition = m.throttle.update(pressure, at: now)
            }
            let next = needed || m.throttle.state != .normal ? (m.lastSample ?? now).addingTimeInterval(interval) : nil
            return Sampled(state: m.throttle.state, transition: transition, nextSample: next, sample: m.samples)
        }
    }

    /// `admin.status`'s `throttle` object.
    var statusJSON: JSONValue {
        let (t, samples) = machine.withLock { ($0.throttle, $0.samples) }
        var o: [String: JSONValue] = ["state": .string(t.state.rawValue), "since": .string(ISO8601.format(t.since)),
            "reason": .string(t.reason), "samples": .number(Double(samples))]
        if let p = t.pressure {
            o["cpu"] = .number(p.cpu)
            o["io"] = .number(p.io)
            o["memory"] = .number(p.memory)
            o["source"] = .string(p.source.rawValue)
            if p.source == .loadavg { o["ownLoad"] = .number(p.own) }
        }
        return .object(o)
    }
}
