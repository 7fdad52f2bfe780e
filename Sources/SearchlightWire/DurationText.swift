/// A duration as people read it in messages and tables: "13s", "2m 43s", "1h 5m", "2d 3h".
public enum DurationText {
    public static func of(seconds: Double) -> String {
        guard seconds.isFinite else { return "forever" }
        let s = Int(max(0, seconds).rounded())
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m \(s % 60)s" }
        if s < 86400 { return "\(s / 3600)h \(s % 3600 / 60)m" }
        return "\(s / 86400)d \(s % 86400 / 3600)h"
    }
}

extension Duration {
    /// The duration in seconds, fractions included (what messages and log fields print).
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
