#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit

/// Where the CLI writes: results to stdout, everything else (errors, progress) to stderr, so that
/// stdout can be piped into another program.
enum Console {
    static func out(_ text: String) { print(text) }

    /// A JSON value as one line on stdout.
    static func out(_ json: JSONValue) { print(json.jsonString) }

    /// An error: `searchlight: ` and a message that says what to do.
    static func error(_ message: String) { errorLine("searchlight: " + message) }

    /// A line on stderr as is.
    static func errorLine(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Raw text on stderr (the progress bar redraws a line with `\r`).
    static func errorRaw(_ text: String) { FileHandle.standardError.write(Data(text.utf8)) }

    static var stderrIsTerminal: Bool { isatty(STDERR_FILENO) != 0 }
}

/// Columns of text, each padded to its widest cell; the last column is never padded.
struct Table {
    enum Alignment { case left, right }
    var alignments: [Alignment]
    var rows: [[String]] = []

    init(_ alignments: [Alignment]) { self.alignments = alignments }

    mutating func append(_ row: [String]) { rows.append(row) }

    func lines() -> [String] {
        let columns = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return rows.map { row in
            var cells: [String] = []
            for (i, cell) in row.enumerated() {
                let pad = String(repeating: " ", count: widths[i] - cell.count)
                let right = i < alignments.count && alignments[i] == .right
                cells.append(right ? pad + cell : (i == row.count - 1 ? cell : cell + pad))
            }
            return cells.joined(separator: "  ")
        }
    }

    func print() { for line in lines() { Console.out(line) } }
}

/// Human renderings of numbers, sizes, durations and attribute values.
enum Format {
    static func bytes(_ n: Int) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(n) B" : String(format: value < 10 ? "%.1f %@" : "%.0f %@", value, units[unit])
    }

    static func duration(_ seconds: Double) -> String { DurationText.of(seconds: seconds) }

    static func seconds(_ seconds: Double) -> String { String(format: "%.2fs", seconds) }

    static func rate(_ count: Int, _ seconds: Double) -> String {
        guard seconds > 0 else { return "-" }
        return String(format: "%.0f", Double(count) / seconds)
    }

    /// An attribute value on one line, at most `limit` characters.
    static func value(_ value: JSONValue?, limit: Int = 60) -> String {
        let text: String
        switch value {
        case nil, .null?: text = "-"
        case .string(let s)?: text = s
        case .bool(let b)?: text = b ? "yes" : "no"
        case .number?: text = value!.jsonString
        case .array(let a)?: text = a.map { Self.value($0, limit: .max) }.joined(separator: ", ")
        case .object?: text = value!.jsonString
        }
        return clip(text, limit)
    }

    static func clip(_ text: String, _ limit: Int) -> String {
        let flat = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return flat.count <= limit ? flat : String(flat.prefix(max(limit - 1, 0))) + "…"
    }

    static func indexName(_ name: String) -> String { name.isEmpty ? "(default)" : name }
}
