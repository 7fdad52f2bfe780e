import Foundation
import SearchlightKit

/// The table on stdout (Markdown, so Docs/Performance.md can take it as it is) and bench-results.json.
enum Report {
    static func number(_ v: Double, unit: String) -> String {
        guard v.isFinite else { return "" }
        switch unit {
        case "items/s", "wakeups/min": return grouped(Int(v.rounded()))
        case "MiB": return String(format: "%.1f", v)
        case "ratio": return String(format: "%.2f", v)
        case "ms": return v < 10 ? String(format: "%.3f", v) : String(format: "%.1f", v)
        default: return String(format: "%.3f", v)
        }
    }

    /// 37 397 → "37 397" (a thin space keeps columns readable without a locale).
    static func grouped(_ n: Int) -> String {
        let digits = String(abs(n))
        var out = ""
        for (i, c) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(" ") }
            out.append(c)
        }
        return (n < 0 ? "-" : "") + out
    }

    static func table(_ rows: [Row]) -> String {
        var lines = [
            "| scenario | median | min | max | unit | vs baseline | target |",
            "|---|---:|---:|---:|---|---:|---|",
        ]
        for r in rows where r.inTable {
            let target = r.target.map { t in r.met.map { "\(t) \($0 ? "✓" : "✗ missed")" } ?? t } ?? ""
            if r.figure.values.isEmpty {
                lines.append("| \(r.scenario) | n/a | | | \(r.unit) | | \(target) |")
                continue
            }
            let many = r.figure.values.count > 1
            // Throughput: the fraction of the baseline's rate. Latency: how many times the
            // in-process query's time, and that time.
            var ratio = ""
            if let baseline = r.baseline, let value = r.ratio {
                ratio = r.higherIsBetter ? String(format: "%.2f×", value)
                    : String(format: "%.1f× (%@ %@)", 1 / value, number(baseline.median, unit: r.unit), r.unit)
            }
            lines.append("| \(r.scenario) | \(number(r.figure.median, unit: r.unit)) | \(many ? number(r.figure.min, unit: r.unit) : "")"
                + " | \(many ? number(r.figure.max, unit: r.unit) : "") | \(r.unit) | \(ratio) | \(target) |")
        }
        return lines.joined(separator: "\n")
    }

    static func json(_ rows: [Row], corpus: Corpus, options: Options) -> JSONValue {
        func number(_ v: Double) -> JSONValue { v.isFinite ? .number(v) : .null }
        return [
            "corpus": .string(corpus.name), "corpusItems": .number(Double(corpus.entries.count)),
            "runs": .number(Double(options.runs)), "sizes": .array(options.sizes.map { .number(Double($0)) }),
            "cores": .number(Double(ProcessInfo.processInfo.activeProcessorCount)),
            "date": .string(ISO8601.format(Date())),
            "results": .array(rows.map { r in
                var e: [String: JSONValue] = [
                    "scenario": .string(r.scenario), "unit": .string(r.unit),
                    "median": number(r.figure.median), "min": number(r.figure.min), "max": number(r.figure.max),
                    "values": .array(r.figure.values.map(number)),
                ]
                if let b = r.baseline { e["baselineMedian"] = number(b.median) }
                if let ratio = r.ratio { e["ratioToBaseline"] = .number(ratio) }
                if let size = r.size { e["size"] = .number(Double(size)) }
                if let series = r.series { e["series"] = .string(series) }
                if let target = r.target { e["target"] = .string(target) }
                if let met = r.met { e["met"] = .bool(met) }
                if let detail = r.detail { e["detail"] = .string(detail) }
                return .object(e)
            }),
        ]
    }

    static func write(_ rows: [Row], corpus: Corpus, options: Options) throws {
        try Data(json(rows, corpus: corpus, options: options).serialized(sortedKeys: true) + [0x0A])
            .write(to: URL(fileURLWithPath: options.output))
        try Data(Chart(rows: rows, title: "Searchlight bench: \(corpus.name), \(ProcessInfo.processInfo.activeProcessorCount) cores").svg.utf8)
            .write(to: URL(fileURLWithPath: options.chart))
    }
}
