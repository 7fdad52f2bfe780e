import Foundation
import SearchlightWire

/// The `$time.…` values of the query language, resolved against an injected clock and calendar
/// so that queries (and tests) are deterministic.
public struct QueryTime: Sendable {
    public var now: Date
    /// The calendar (with its time zone) that defines "today", "this week"…
    public var calendar: Calendar

    public init(now: Date = Date(), calendar: Calendar = .current) {
        self.now = now
        self.calendar = calendar
    }

    /// The forms, by the name after `$time.`.
    public enum Form: String, Sendable, CaseIterable {
        case now, today, yesterday, iso
        case thisWeek = "this_week"
        case thisMonth = "this_month"
        case thisYear = "this_year"
    }

    /// Resolves a counted form: `now(±seconds)`, `today(±days)`, `yesterday`,
    /// `this_week(±weeks)`, `this_month(±months)`, `this_year(±years)`. The period forms are the
    /// start of that period in `calendar`, shifted by `count` periods.
    public func resolve(_ form: Form, count: Double = 0) -> Date? {
        let n = Int(count)
        switch form {
        case .now:
            return now.addingTimeInterval(count)
        case .today:
            return calendar.date(byAdding: .day, value: n, to: calendar.startOfDay(for: now))
        case .yesterday:
            return calendar.date(byAdding: .day, value: n - 1, to: calendar.startOfDay(for: now))
        case .thisWeek:
            return start(of: .weekOfYear, adding: n)
        case .thisMonth:
            return start(of: .month, adding: n)
        case .thisYear:
            return start(of: .year, adding: n)
        case .iso:
            return nil
        }
    }

    private func start(of component: Calendar.Component, adding n: Int) -> Date? {
        guard let interval = calendar.dateInterval(of: component, for: now) else { return nil }
        return calendar.date(byAdding: component, value: n, to: interval.start)
    }

    /// Parses `$time.iso(…)`'s argument, quoted or not.
    public static func iso(_ text: String) -> Date? {
        var t = Substring(text)
        if t.count >= 2, t.first == "\"", t.last == "\"" { t = t.dropFirst().dropLast() }
        return ISO8601.parse(String(t))
    }
}
