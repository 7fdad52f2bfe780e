import Foundation

/// Background work's permission to run, from the power state: on battery it is deferred unless
/// the batteries' charge is above `threshold` percent (`--battery-threshold`; nil: the rule is
/// off); on AC, or without a battery, it runs. Work asked for by hand is never asked.
///
/// Pure logic, like `Throttle`: the caller passes the reading and the time, so tests drive every
/// transition with an injected clock. Separate from the load throttle on purpose: each gate that
/// holds background work (the scheduler's background requests, idle maintenance, the refinement
/// share) consults both.
public struct PowerPolicy: Sendable {
    public enum State: String, Sendable { case allowed, deferred }

    /// A change of state and why.
    public struct Transition: Sendable, Equatable {
        public let from: State
        public let to: State
        public let reason: String
    }

    public let threshold: Double?
    public private(set) var state: State = .allowed
    public private(set) var since: Date
    public private(set) var reason: String
    /// The last reading (nil: none yet).
    public private(set) var reading: PowerReading?

    public init(threshold: Double?, now: Date) {
        self.threshold = threshold
        since = now
        reason = threshold == nil ? "battery rule off" : "not read yet (read only while background work waits)"
    }

    /// The state this reading calls for, and why, e.g. "on battery at 23 % (below 50 %)".
    public static func evaluate(_ r: PowerReading?, threshold: Double?) -> (State, String) {
        guard let threshold else { return (.allowed, "battery rule off") }
        guard let r, r.batteries > 0 else { return (.allowed, "no battery") }
        guard r.onBattery else { return (.allowed, "on AC power") }
        let mark = format(threshold)
        guard let percent = r.percent else { return (.deferred, "on battery, charge unknown (threshold \(mark) %)") }
        if percent > threshold { return (.allowed, "on battery at \(format(percent)) % (above \(mark) %)") }
        return (.deferred, "on battery at \(format(percent)) % (\(percent < threshold ? "below" : "not above") \(mark) %)")
    }

    /// Feeds one reading; returns the transition it caused, if any. The reason follows the
    /// reading even without a change of state (the charge falls while deferred).
    public mutating func update(_ r: PowerReading?, at now: Date) -> Transition? {
        reading = r
        let (wanted, why) = Self.evaluate(r, threshold: threshold)
        reason = why
        guard wanted != state else { return nil }
        let t = Transition(from: state, to: wanted, reason: why)
        state = wanted
        since = now
        return t
    }

    static func format(_ v: Double) -> String { Throttle.format(v) }
}
