#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// The values one figure was measured as (one per run); the table shows the median with min and max.
struct Figure {
    var values: [Double]
    init(_ values: [Double]) { self.values = values }
    var median: Double {
        guard !values.isEmpty else { return .nan }
        let s = values.sorted()
        return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }
    var min: Double { values.min() ?? .nan }
    var max: Double { values.max() ?? .nan }
    /// Nearest-rank percentile, p in 0...1.
    func percentile(_ p: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let s = values.sorted()
        let rank = Int((Double(s.count) * p).rounded(.up)) - 1
        return s[Swift.max(0, Swift.min(s.count - 1, rank))]
    }
}

/// One line of the table and of bench-results.json.
struct Row {
    var scenario: String
    var figure: Figure
    var unit: String
    /// The same operation done the plain way in the same process and run (raw FTS5).
    var baseline: Figure?
    var higherIsBetter: Bool
    /// The corpus size the figure belongs to (the chart's x axis), when it has one.
    var size: Int?
    /// The series in the chart ("reindex-all", "query: term p99", …), when it is charted.
    var series: String?
    /// The target from the performance issue, as text ("≥ 0.8× raw", "≤ 5 ms"), and whether it holds.
    var target: String?
    var met: Bool?
    /// False for figures that are only charted (and kept in the JSON).
    var inTable = true
    /// A note kept in the JSON beside the figure (a per-query p99).
    var detail: String?

    /// Ratios measured pairwise (each value against the baseline measured right around it); when
    /// set, `ratio` is their median, which a machine whose load changes during the run disturbs least.
    var pairedRatios: [Double]?

    /// Figure relative to the baseline, > 1 meaning better than the baseline is impossible for
    /// most rows: for throughput figure / baseline, for latency baseline / figure.
    var ratio: Double? {
        if let pairedRatios, !pairedRatios.isEmpty { return Figure(pairedRatios).median }
        guard let baseline, baseline.median > 0, figure.median > 0 else { return nil }
        return higherIsBetter ? figure.median / baseline.median : baseline.median / figure.median
    }
}

func now() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
}

/// Milliseconds that `body` took.
func milliseconds(_ body: () throws -> Void) rethrows -> Double {
    let t = now()
    try body()
    return (now() - t) * 1000
}

func milliseconds(_ body: () async throws -> Void) async rethrows -> Double {
    let t = now()
    try await body()
    return (now() - t) * 1000
}

/// The calling thread's CPU time so far, in ms.
func threadCPUMilliseconds() -> Double {
    var t = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return Double(t.tv_sec) * 1000 + Double(t.tv_nsec) / 1e6
}

/// A line on stdout as the bench goes, so a long run shows where it is.
func progress(_ message: String) {
    print(message)
    fflush(nil)  // all streams: a pipe to `tee` sees each line as it happens
}

/// The 1, 5 and 15-minute load averages (`/proc/loadavg`), for a figure's line.
func loadAverage() -> String {
    guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return "?" }
    return text.split(separator: " ").prefix(3).joined(separator: " ")
}
