import Foundation
import SearchlightKit

/// How idle maintenance reads on a terminal: `simulate idle`'s summary and the lines of `status`.
enum MaintenanceOutput {
    /// One line per finding of a run, e.g.
    /// `maintenance (simulate): 3 indexes in 41 ms`, then `purged 2 expired items`, …
    static func printSummary(_ s: JSONValue) {
        let count = { (key: String) in s[key]?.intValue ?? 0 }
        let ms = s["elapsedMilliseconds"]?.doubleValue ?? 0
        Console.out("maintenance (\(s["trigger"]?.stringValue ?? "?")): \(count("indexes")) indexes in \(Int(ms)) ms"
            + (s["yielded"]?.boolValue == true ? ", gave way to load before the end" : ""))
        Console.out("  purged \(count("purged")) expired items")
        Console.out("  asked to refresh \(count("refreshRequested")) items expiring within a day")
        Console.out("  scrubbed \(count("rowsScrubbed")) items, \(count("tablesChecked")) tables and \(count("fullTextChecked")) full-text indexes in "
            + String(format: "%.1f ms", s["scrubMilliseconds"]?.doubleValue ?? 0))
        Console.out("  \(count("checksumFailures")) checksum failures (deleted; \(count("corruptionRequested")) asked again from their extension)")
        Console.out("  \(count("ftsRebuilt")) full-text indexes rebuilt, \(count("damaged")) damaged files")
        Console.out("  \(count("optimized")) full-text indexes optimized, \(count("checkpointed")) logs checkpointed")
        for p in s["problems"]?.arrayValue ?? [] { Console.out("  problem: \(Format.value(p, limit: 200))") }
    }

    /// `maintenance last … (…), next due …, eligible … after idle`; nothing for daemons without it.
    static func statusLines(_ m: JSONValue?) -> [String] {
        guard let m, m.objectValue != nil else { return [] }
        var line = "maintenance "
        if m["running"]?.boolValue == true { line += "running; " }
        line += "last \(m["lastRun"]?.stringValue ?? "never")"
        if let s = m["lastSummary"], s.objectValue != nil {
            let count = { (key: String) in s[key]?.intValue ?? 0 }
            line += " (\(s["trigger"]?.stringValue ?? "?"): \(count("indexes")) indexes, purged \(count("purged")), "
                + "refresh \(count("refreshRequested")), scrubbed \(count("rowsScrubbed")), checksum failures \(count("checksumFailures")), "
                + "fts rebuilt \(count("ftsRebuilt")), damaged \(count("damaged")))"
        }
        return [line, "maintenance next due \(m["nextDue"]?.stringValue ?? "-"), runs when idle from \(m["nextEligible"]?.stringValue ?? "-")"]
    }
}
