import Foundation

/// A hand-written SVG of the charted rows: throughput (items/s) and latency (ms, log scale)
/// against corpus size (log scale), one line per series, medians as points, min–max as whiskers.
struct Chart {
    let rows: [Row]
    let title: String

    private struct Series {
        var name: String
        var points: [(size: Double, median: Double, min: Double, max: Double)]
    }

    private static let palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
    private static let panelWidth = 470.0, panelHeight = 300.0, top = 50.0, left = 70.0

    var svg: String {
        let width = 2 * Self.panelWidth + 2 * Self.left + 20, height = Self.top + Self.panelHeight + 150
        var out = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="sans-serif" font-size="11">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(Int(width / 2))" y="22" text-anchor="middle" font-size="15">\(escape(title))</text>

            """
        out += panel(unit: "items/s", heading: "Throughput (items/s, higher is better)", x0: Self.left, logY: false)
        out += panel(unit: "ms", heading: "Query latency through the socket (ms, log scale)", x0: 2 * Self.left + Self.panelWidth + 20, logY: true)
        return out + "</svg>\n"
    }

    private func series(unit: String) -> [Series] {
        var byName: [String: Series] = [:]
        var order: [String] = []
        for r in rows where r.unit == unit && !r.figure.values.isEmpty {
            guard let name = r.series, let size = r.size else { continue }
            if byName[name] == nil { order.append(name); byName[name] = Series(name: name, points: []) }
            byName[name]!.points.append((Double(size), r.figure.median, r.figure.min, r.figure.max))
        }
        return order.map { name in
            var s = byName[name]!
            s.points.sort { $0.size < $1.size }
            return s
        }
    }

    private func panel(unit: String, heading: String, x0: Double, logY: Bool) -> String {
        let all = series(unit: unit)
        let sizes = all.flatMap { $0.points.map(\.size) }
        let values = all.flatMap { $0.points.flatMap { [$0.min, $0.max] } }.filter { $0 > 0 }
        var out = "<text x=\"\(Int(x0 + Self.panelWidth / 2))\" y=\"\(Int(Self.top - 12))\" text-anchor=\"middle\" font-size=\"13\">\(escape(heading))</text>\n"
        out += "<rect x=\"\(x0)\" y=\"\(Self.top)\" width=\"\(Self.panelWidth)\" height=\"\(Self.panelHeight)\" fill=\"none\" stroke=\"#888\"/>\n"
        guard let minSize = sizes.min(), let maxSize = sizes.max(), let maxValue = values.max() else {
            return out + "<text x=\"\(Int(x0 + 20))\" y=\"\(Int(Self.top + 30))\">no data in this run</text>\n"
        }
        // x: log10 of the size, padded by a third of a decade on each side.
        let lx0 = log10(minSize) - 0.3, lx1 = max(log10(maxSize) + 0.3, lx0 + 0.6)
        func x(_ size: Double) -> Double { x0 + (log10(size) - lx0) / (lx1 - lx0) * Self.panelWidth }
        // y: linear from 0, or log over whole decades.
        let ly0 = floor(log10(max(values.min() ?? 0.01, 1e-3))), ly1 = ceil(log10(maxValue * 1.05))
        let yMax = Self.niceCeiling(maxValue * 1.1)
        func y(_ v: Double) -> Double {
            let f = logY ? (log10(max(v, pow(10, ly0))) - ly0) / max(ly1 - ly0, 1) : v / yMax
            return Self.top + Self.panelHeight * (1 - f)
        }
        // Grid and tick labels.
        let ticks: [Double] = logY ? stride(from: ly0, through: ly1, by: 1).map { pow(10, $0) } : (0...5).map { yMax * Double($0) / 5 }
        for t in ticks {
            let label = logY ? (t < 1 ? String(format: "%g", t) : String(Int(t))) : Report.grouped(Int(t))
            out += "<line x1=\"\(x0)\" x2=\"\(x0 + Self.panelWidth)\" y1=\"\(fmt(y(t)))\" y2=\"\(fmt(y(t)))\" stroke=\"#eee\"/>"
            out += "<text x=\"\(fmt(x0 - 6))\" y=\"\(fmt(y(t) + 4))\" text-anchor=\"end\">\(label)</text>\n"
        }
        for size in Set(sizes).sorted() {
            out += "<line x1=\"\(fmt(x(size)))\" x2=\"\(fmt(x(size)))\" y1=\"\(Self.top)\" y2=\"\(Self.top + Self.panelHeight)\" stroke=\"#eee\"/>"
            out += "<text x=\"\(fmt(x(size)))\" y=\"\(fmt(Self.top + Self.panelHeight + 16))\" text-anchor=\"middle\">\(sizeLabel(Int(size)))</text>\n"
        }
        out += "<text x=\"\(fmt(x0 + Self.panelWidth / 2))\" y=\"\(fmt(Self.top + Self.panelHeight + 34))\" text-anchor=\"middle\">items in the index (log scale)</text>\n"
        // Series, then the legend under the panel.
        // p50 and p99 of one query share a colour (p99 dashed).
        var bases: [String] = []
        for s in all {
            let base = Self.baseName(s.name)
            if !bases.contains(base) { bases.append(base) }
        }
        for (i, s) in all.enumerated() {
            let color = Self.palette[(bases.firstIndex(of: Self.baseName(s.name)) ?? i) % Self.palette.count]
            let dash = s.name.hasSuffix("p50") ? "" : (s.name.hasSuffix("p99") ? " stroke-dasharray=\"5,3\"" : "")
            if s.points.count > 1 {
                let path = s.points.map { "\(fmt(x($0.size))),\(fmt(y($0.median)))" }.joined(separator: " ")
                out += "<polyline points=\"\(path)\" fill=\"none\" stroke=\"\(color)\" stroke-width=\"2\"\(dash)/>\n"
            }
            for p in s.points {
                if p.max > p.min {
                    out += "<line x1=\"\(fmt(x(p.size)))\" x2=\"\(fmt(x(p.size)))\" y1=\"\(fmt(y(p.min)))\" y2=\"\(fmt(y(p.max)))\" stroke=\"\(color)\"/>"
                }
                out += "<circle cx=\"\(fmt(x(p.size)))\" cy=\"\(fmt(y(p.median)))\" r=\"3.5\" fill=\"\(color)\"><title>\(escape(s.name)) at \(sizeLabel(Int(p.size))): \(Report.number(p.median, unit: unit)) \(unit)</title></circle>\n"
            }
            let lx = x0 + Double(i % 2) * Self.panelWidth / 2, ly = Self.top + Self.panelHeight + 56 + Double(i / 2) * 16
            out += "<line x1=\"\(fmt(lx))\" x2=\"\(fmt(lx + 22))\" y1=\"\(fmt(ly - 4))\" y2=\"\(fmt(ly - 4))\" stroke=\"\(color)\" stroke-width=\"2\"\(dash)/>"
            out += "<text x=\"\(fmt(lx + 28))\" y=\"\(fmt(ly))\">\(escape(s.name))</text>\n"
        }
        return out
    }

    static func baseName(_ series: String) -> String {
        series.hasSuffix(" p50") || series.hasSuffix(" p99") ? String(series.dropLast(4)) : series
    }

    /// 1, 2 or 5 times a power of ten, at least `v`.
    static func niceCeiling(_ v: Double) -> Double {
        guard v > 0 else { return 1 }
        let p = pow(10, floor(log10(v)))
        for m in [1.0, 2, 5, 10] where m * p >= v { return m * p }
        return 10 * p
    }

    private func fmt(_ v: Double) -> String { String(format: "%.1f", v) }

    private func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }
}
