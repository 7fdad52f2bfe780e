#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The delegate's lines on the app's stderr, in the project's log shape (one line per event, a
/// constant message, `key=value` after). A library in someone else's app speaks rarely: warnings
/// only (the daemon unreachable, a row refused, a schema problem), and one line per processed
/// history range when `SEARCHLIGHT_SQLITE_DEBUG=1`.
enum DelegateLog {
    static let debugEnabled = ProcessInfo.processInfo.environment["SEARCHLIGHT_SQLITE_DEBUG"].map { $0 == "1" || $0 == "true" } ?? false

    static func warning(_ message: String, _ metadata: KeyValuePairs<String, CustomStringConvertible> = [:]) {
        write("warning", message, metadata)
    }

    static func debug(_ message: String, _ metadata: KeyValuePairs<String, CustomStringConvertible> = [:]) {
        guard debugEnabled else { return }
        write("debug", message, metadata)
    }

    private static func write(_ level: String, _ message: String, _ metadata: KeyValuePairs<String, CustomStringConvertible>) {
        var line = "searchlight-sqlite \(level) \(message) pid=\(getpid())"
        for (key, value) in metadata {
            let s = value.description
            let needsQuotes = s.isEmpty || s.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" })
            line += " \(key)=" + (needsQuotes ? "\"\(s.replacingOccurrences(of: "\"", with: "\\\""))\"" : s)
        }
        line = line.replacingOccurrences(of: "\n", with: "\\n") + "\n"
        // One write(2) per line, so lines of concurrent processes and threads never interleave.
        Array(line.utf8).withUnsafeBytes { _ = Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
