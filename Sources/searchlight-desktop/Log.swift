import Foundation
import SearchlightWire

/// One line per event on stderr (the journal, when the session bus started us): a constant
/// message, then `key=value`, with the journald priority prefix (`<5>`) the daemon's logs use.
enum Log {
    nonisolated(unsafe) static var debugEnabled = false

    static func debug(_ message: String, _ fields: [String: Any] = [:]) { if debugEnabled { write(7, message, fields) } }
    static func info(_ message: String, _ fields: [String: Any] = [:]) { write(6, message, fields) }
    static func notice(_ message: String, _ fields: [String: Any] = [:]) { write(5, message, fields) }
    static func warning(_ message: String, _ fields: [String: Any] = [:]) { write(4, message, fields) }
    static func error(_ message: String, _ fields: [String: Any] = [:]) { write(3, message, fields) }

    private static func write(_ priority: Int, _ message: String, _ fields: [String: Any]) {
        var line = "<\(priority)>searchlight-desktop: " + LogText.line(message)
        // What the Shell or a search term put in a value can add no field and no line (`LogText`).
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) { line += " \(key)=" + LogText.value("\(value)") }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
