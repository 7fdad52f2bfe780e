#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// Operator logs, shaped like swift-log's `Logger`: one line per event, a constant message, then
/// `key=value` metadata. When stderr is the journal (`JOURNAL_STREAM`), lines carry the sd-daemon
/// priority prefix (`<3>` error … `<7>` debug) instead of a timestamp.
public struct Logger: Sendable {
    public enum Level: Int, Sendable, Comparable {
        case debug = 7, info = 6, notice = 5, warning = 4, error = 3
        public static func < (a: Level, b: Level) -> Bool { a.rawValue > b.rawValue }
        var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            }
        }
    }

    public typealias Metadata = KeyValuePairs<String, CustomStringConvertible>

    public let label: String
    public var logLevel: Level
    let journal: Bool
    /// Where lines go instead of stderr: tests read what the daemon's parts log (nil: fd 2).
    let sink: (@Sendable (String) -> Void)?

    public init(label: String, level: Level = .info) {
        self.init(label: label, level: level, sink: nil)
    }

    init(label: String, level: Level = .info, sink: (@Sendable (String) -> Void)?) {
        self.label = label
        self.logLevel = level
        self.sink = sink
        journal = sink == nil && ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil
    }

    public func log(_ level: Level, _ message: String, _ metadata: Metadata = [:]) {
        guard level >= logLevel else { return }
        write(level, message, metadata.map { ($0.key, $0.value.description) })
    }

    /// A line whose fields were rendered already (a log line decided under a lock, written after).
    func log(_ level: Level, _ message: String, fields: [(String, String)]) {
        guard level >= logLevel else { return }
        write(level, message, fields)
    }

    private func write(_ level: Level, _ message: String, _ fields: [(String, String)]) {
        var line = journal ? "<\(level.rawValue)>" : "\(ISO8601Short.now()) \(level.name) "
        line += LogText.line(message)
        // A value a client chose can add no field and no line (`LogText`).
        for (k, s) in fields { line += " \(k)=" + LogText.value(s) }
        line += "\n"
        if let sink { return sink(line) }
        let bytes = Array(line.utf8)
        // One write(2) per line so concurrent lines never interleave.
        bytes.withUnsafeBytes { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }

    public func debug(_ m: String, _ md: Metadata = [:]) { log(.debug, m, md) }
    public func info(_ m: String, _ md: Metadata = [:]) { log(.info, m, md) }
    public func notice(_ m: String, _ md: Metadata = [:]) { log(.notice, m, md) }
    public func warning(_ m: String, _ md: Metadata = [:]) { log(.warning, m, md) }
    public func error(_ m: String, _ md: Metadata = [:]) { log(.error, m, md) }
}

enum ISO8601Short {
    static func now() -> String {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        var secs = t.tv_sec
        var tm = Glibc.tm()
        gmtime_r(&secs, &tm)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
            tm.tm_hour, tm.tm_min, tm.tm_sec, Int(t.tv_nsec / 1_000_000))
    }
}
