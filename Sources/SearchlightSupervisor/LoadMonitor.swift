import Foundation

/// The machine's load as the throttle sees it: percentages of stall (PSI `some avg10`) per resource.
public struct Pressure: Sendable, Equatable {
    /// Where the figures came from: `/proc/pressure/*` or the 1-minute load average per CPU.
    public enum Source: String, Sendable { case psi, loadavg }

    public var cpu: Double
    public var io: Double
    public var memory: Double
    public var source: Source

    public init(cpu: Double, io: Double, memory: Double, source: Source) {
        self.cpu = cpu
        self.io = io
        self.memory = memory
        self.source = source
    }
}

/// Reads the machine's pressure from `<proc-root>/pressure/{cpu,io,memory}` (DESIGN §6), falling
/// back to `<proc-root>/loadavg` divided by the CPU count when PSI is absent or unreadable.
///
/// Every file is treated as hostile: anything that does not parse is unreadable, never a crash,
/// and is logged once per kind of problem rather than at every sample.
public final class LoadMonitor: @unchecked Sendable {
    let procRoot: String
    let cpuCount: Int
    private let log: Logger?
    private let lock = NSLock()
    private var reported: Set<String> = []
    private var _samples = 0

    public init(procRoot: String, cpuCount: Int = ProcessInfo.processInfo.activeProcessorCount, log: Logger? = nil) {
        self.procRoot = procRoot
        self.cpuCount = max(1, cpuCount)
        self.log = log
    }

    /// How many times `sample()` ran: tests use it to prove an idle daemon does not poll.
    public var samples: Int { lock.withLock { _samples } }

    /// The current pressure, or nil when neither PSI nor loadavg can be read (then nothing is throttled).
    public func sample() -> Pressure? {
        lock.withLock { _samples += 1 }
        if let cpu = psi("cpu"), let io = psi("io"), let memory = psi("memory") {
            return Pressure(cpu: cpu, io: io, memory: memory, source: .psi)
        }
        guard let text = read("loadavg") else { return nil }
        guard let load = Self.parseLoadAverage(text) else {
            warnOnce("loadavg", "cannot parse the load average; load throttling is off until it can", ["file": procRoot + "/loadavg"])
            return nil
        }
        let percent = min(100, load / Double(cpuCount) * 100)
        // The load average does not tell resources apart: it stands for all three.
        return Pressure(cpu: percent, io: percent, memory: 0, source: .loadavg)
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
        let first = lock.withLock { reported.insert(key).inserted }
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
