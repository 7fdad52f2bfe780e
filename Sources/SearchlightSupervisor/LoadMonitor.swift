import Foundation
import Synchronization

/// The machine's load as the throttle sees it: percentages of stall (PSI `some avg10`) per resource.
public struct Pressure: Sendable, Equatable {
    /// Where the figures came from: `/proc/pressure/*` or the 1-minute load average per CPU.
    public enum Source: String, Sendable { case psi, loadavg }

    public var cpu: Double
    public var io: Double
    public var memory: Double
    public var source: Source
    /// With `loadavg`: the daemon's own background work, in runnable threads, subtracted from the
    /// load average before it was divided by the CPUs (`OwnLoad`); 0 otherwise.
    public var own: Double

    public init(cpu: Double, io: Double, memory: Double, source: Source, own: Double = 0) {
        self.cpu = cpu
        self.io = io
        self.memory = memory
        self.source = source
        self.own = own
    }
}

/// The daemon's own background work as the kernel's 1-minute load average counts it: the average
/// number of its threads running (CPU seconds per second, from a `WorkMeter`), smoothed the way
/// the kernel smooths runnable threads (an exponential average with a 60 s time constant), so
/// that it can be subtracted from the load average. Without this, refinement's own busy thread
/// (50 % of 2 CPUs) would cross the 25 % throttle mark and stop refinement after its first batches.
///
/// It counts CPU time, not runnable time: on a machine whose CPUs are all taken, the daemon's
/// threads wait runnable too and the kernel counts them more than this does, so the discount is
/// then smaller than the daemon's real share (background work yields sooner, never later). Pure:
/// the caller passes the time and the meter's reading.
public struct OwnLoad: Sendable, Equatable {
    /// The kernel's 1-minute average (`EXP_1` in kernel/sched/loadavg.c: e^(-5/60) per 5 s).
    public static let window: TimeInterval = 60

    public private(set) var load: Double = 0
    private var lastSeconds: Double
    private var lastTime: Date

    public init(seconds: Double, at now: Date) {
        lastSeconds = seconds
        lastTime = now
    }

    /// Takes the meter's reading `seconds` at `now`: the work's rate since the last reading,
    /// folded in as the kernel would have over that time. Returns the new figure.
    public mutating func update(seconds: Double, at now: Date) -> Double {
        let dt = now.timeIntervalSince(lastTime)
        guard dt > 0, seconds.isFinite else { return load }
        let rate = max(0, seconds - lastSeconds) / dt
        let decay = exp(-dt / Self.window)
        load = load * decay + rate * (1 - decay)
        lastSeconds = seconds
        lastTime = now
        return load
    }
}

/// Reads the machine's pressure from `<proc-root>/pressure/{cpu,io,memory}` (DESIGN §6), falling
/// back to `<proc-root>/loadavg` divided by the CPU count when PSI is absent or unreadable. The
/// load average is taken less the daemon's own background work (`ownWork`, through `OwnLoad`):
/// PSI counts only time that tasks wait, so the daemon alone does not raise it, but the load
/// average counts every running thread, the daemon's included.
///
/// Every file is treated as hostile: anything that does not parse is unreadable, never a crash,
/// and is logged once per kind of problem rather than at every sample.
public final class LoadMonitor: Sendable {
    let procRoot: String
    let cpuCount: Int
    private let log: Logger?
    /// What the samples keep: warnings already logged, how many samples, the own work's average.
    private struct State {
        var reported: Set<String> = []
        var samples = 0
        var ownLoad: OwnLoad
    }

    private let state: Mutex<State>
    /// CPU seconds of the daemon's background work so far (`WorkMeter.seconds`); nil: none counted.
    private let ownWork: (@Sendable () -> Double)?

    public init(procRoot: String, cpuCount: Int = ProcessInfo.processInfo.activeProcessorCount, log: Logger? = nil,
                ownWork: (@Sendable () -> Double)? = nil, now: Date = Date()) {
        self.procRoot = procRoot
        self.cpuCount = max(1, cpuCount)
        self.log = log
        self.ownWork = ownWork
        state = Mutex(State(ownLoad: OwnLoad(seconds: ownWork?() ?? 0, at: now)))
    }

    /// How many times `sample()` ran: tests use it to prove an idle daemon does not poll.
    public var samples: Int { state.withLock { $0.samples } }

    /// The current pressure, or nil when neither PSI nor loadavg can be read (then nothing is throttled).
    /// `now` is the time of the sample (the own work's average is kept whichever source is read).
    public func sample(at now: Date = Date()) -> Pressure? {
        let seconds = ownWork?()
        let own = state.withLock { state in
            state.samples += 1
            return seconds.map { state.ownLoad.update(seconds: $0, at: now) } ?? 0
        }
        if let cpu = psi("cpu"), let io = psi("io"), let memory = psi("memory") {
            return Pressure(cpu: cpu, io: io, memory: memory, source: .psi)
        }
        guard let text = read("loadavg") else { return nil }
        guard let load = Self.parseLoadAverage(text) else {
            warnOnce("loadavg", "cannot parse the load average; load throttling is off until it can", ["file": procRoot + "/loadavg"])
            return nil
        }
        let percent = min(100, max(0, load - own) / Double(cpuCount) * 100)
        // The load average does not tell resources apart: it stands for cpu and io.
        return Pressure(cpu: percent, io: percent, memory: 0, source: .loadavg, own: own)
    }

    private func psi(_ resource: String) -> Double? {
        guard let text = read("pressure/" + resource) else { return nil }
        guard let value = Self.parsePSI(text) else {
            warnOnce("psi-" + resource, "cannot parse a pressure file; using the load average", ["file": procRoot + "/pressure/" + resource])
            return nil
        }
        return value
    }

    /// Small files only: a hostile /proc replacement must not make the daemon read gigabytes.
    private func read(_ name: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: procRoot + "/" + name) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 4096) else { return nil }
        return String(bytes: data, encoding: .utf8)
    }

    private func warnOnce(_ key: String, _ message: String, _ fields: Logger.Metadata) {
        let first = state.withLock { $0.reported.insert(key).inserted }
        if first { log?.warning(message, fields) }
    }

    /// `some avg10=1.23 avg60=… avg300=… total=…` (first line of a PSI file) -> 1.23.
    static func parsePSI(_ text: String) -> Double? {
        guard let line = text.split(separator: "\n", omittingEmptySubsequences: true).first(where: { $0.hasPrefix("some ") }) else { return nil }
        for field in line.split(separator: " ") where field.hasPrefix("avg10=") {
            return percentage(field.dropFirst("avg10=".count))
        }
        return nil
    }

    /// `0.52 0.58 0.59 1/467 12345` -> 0.52 (the 1-minute average).
    static func parseLoadAverage(_ text: String) -> Double? {
        guard let first = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first,
              let value = Double(first), value.isFinite, value >= 0, value < 1_000_000 else { return nil }
        return value
    }

    private static func percentage(_ s: Substring) -> Double? {
        guard s.count <= 16, let value = Double(s), value.isFinite, value >= 0, value <= 100 else { return nil }
        return value
    }
}
