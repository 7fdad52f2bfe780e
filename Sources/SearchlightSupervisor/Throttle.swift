import Foundation

/// The marks of the throttle (DESIGN §6), in percent of stall per resource, and the hysteresis.
public struct ThrottleMarks: Sendable, Equatable {
    public var throttleCPU = 25.0, throttleIO = 20.0, throttleMemory = 10.0
    public var pauseCPU = 60.0, pauseIO = 50.0, pauseMemory = 30.0
    /// Seconds the pressure must stay below the current state's mark before stepping down one state.
    public var resumeAfter: TimeInterval = 20
    public init() {}
}

/// Background work's permission to run, from the machine's pressure: normal -> throttled -> paused.
///
/// Rising pressure moves up at once (to the highest state whose mark any resource reaches);
/// falling pressure steps down one state at a time, each after `resumeAfter` seconds below the
/// current state's marks, so a load that hovers at a mark does not flap. Pure logic: the caller
/// passes the time, so tests drive every transition with an injected clock.
public struct Throttle: Sendable {
    public enum State: String, Sendable, Comparable {
        case normal, throttled, paused
        var rank: Int { self == .normal ? 0 : self == .throttled ? 1 : 2 }
        public static func < (a: State, b: State) -> Bool { a.rank < b.rank }
    }

    /// A change of state and the pressure that caused it.
    public struct Transition: Sendable, Equatable {
        public let from: State
        public let to: State
        public let pressure: Pressure?
        /// The resource and figure that crossed a mark, e.g. "cpu 63.0 % >= pause mark 60 %".
        public let reason: String
    }

    public let marks: ThrottleMarks
    public private(set) var state: State = .normal
    public private(set) var since: Date
    public private(set) var reason = "pressure below every mark"
    public private(set) var pressure: Pressure?
    /// Since when the pressure has been below the current state's marks (nil: it is not).
    private var belowSince: Date?
    /// Since when every pressure has been below the throttle marks: the machine is idle from then.
    public private(set) var quietSince: Date?

    public init(marks: ThrottleMarks = ThrottleMarks(), now: Date) {
        self.marks = marks
        since = now
        quietSince = now
    }

    /// The state this pressure alone calls for, and why. Unreadable pressure throttles nothing.
    func target(_ p: Pressure?) -> (State, String) {
        guard let p else { return (.normal, "pressure unreadable") }
        let checks: [(String, Double, Double, Double)] = [
            ("cpu", p.cpu, marks.throttleCPU, marks.pauseCPU),
            ("io", p.io, marks.throttleIO, marks.pauseIO),
            ("memory", p.memory, marks.throttleMemory, marks.pauseMemory),
        ]
        if let c = checks.first(where: { $0.1 >= $0.3 }) { return (.paused, "\(c.0) \(Self.format(c.1)) % >= pause mark \(Self.format(c.3)) %") }
        if let c = checks.first(where: { $0.1 >= $0.2 }) { return (.throttled, "\(c.0) \(Self.format(c.1)) % >= throttle mark \(Self.format(c.2)) %") }
        return (.normal, "pressure below every mark")
    }

    /// Feeds one sample; returns the transition it caused, if any.
    public mutating func update(_ p: Pressure?, at now: Date) -> Transition? {
        pressure = p
        let (wanted, why) = target(p)
        if wanted == .normal {
            if quietSince == nil { quietSince = now }
        } else {
            quietSince = nil
        }
        if wanted > state {
            belowSince = nil
            return move(to: wanted, why, p, now)
        }
        if wanted == state {
            belowSince = nil
            return nil
        }
        guard let below = belowSince else {
            belowSince = now
            return nil
        }
        guard now.timeIntervalSince(below) >= marks.resumeAfter else { return nil }
        let next: State = state == .paused ? .throttled : .normal
        // The next step down needs its own quiet period.
        belowSince = wanted < next ? now : nil
        return move(to: next, "pressure below the \(state.rawValue) marks for \(Self.format(marks.resumeAfter)) s", p, now)
    }

    /// True once every pressure stayed below the throttle marks for `idleAfter` seconds.
    public func isIdle(at now: Date, idleAfter: TimeInterval) -> Bool {
        guard let quietSince else { return false }
        return now.timeIntervalSince(quietSince) >= idleAfter
    }

    private mutating func move(to new: State, _ why: String, _ p: Pressure?, _ now: Date) -> Transition {
        let t = Transition(from: state, to: new, pressure: p, reason: why)
        state = new
        since = now
        reason = why
        return t
    }

    static func format(_ v: Double) -> String { String(format: "%.1f", v).replacingOccurrences(of: ".0", with: "") }
}
