/// Numbers read from a message's parameters, checked once at the wire boundary. A JSON number is
/// a Double: one that is huge (1e308, 2^63), negative, fractional or subnormal must never reach
/// `Int(_:)`, `Duration.seconds(_:)` or a count, which trap or misbehave on it (`admin.reindex`
/// with `timeout: 1e308` once crashed the daemon). Every check answers `invalidParams` naming the
/// field, its range and what was sent; absent and `null` mean "not given".
///
/// Free functions over `JSONValue?` so that typed wire messages can call them from their decoders.
public enum NumericParameter {
    /// The largest count any parameter takes: far above every limit, far below 2^53 (where a
    /// Double stops holding every integer).
    public static let maxCount = Int(Int32.max)

    /// An exact integer in `range`, or nil when absent or null.
    public static func integer(_ value: JSONValue?, field: String, in range: ClosedRange<Int>) throws(SearchlightError) -> Int? {
        guard let value, !value.isNull else { return nil }
        guard let n = value.intValue, range.contains(n) else {
            throw .invalidParams("\"\(field)\" must be an integer from \(range.lowerBound) to \(range.upperBound); got \(describe(value))")
        }
        return n
    }

    /// An exact integer in `range`, or `defaultValue` when absent or null.
    public static func integer(_ value: JSONValue?, field: String, in range: ClosedRange<Int>, default defaultValue: Int) throws(SearchlightError) -> Int {
        try integer(value, field: field, in: range) ?? defaultValue
    }

    /// A finite number of seconds in `range` (both ends finite and positive or zero), or nil when
    /// absent or null. The result converts to `Duration` safely.
    public static func seconds(_ value: JSONValue?, field: String, in range: ClosedRange<Double>) throws(SearchlightError) -> Double? {
        guard let value, !value.isNull else { return nil }
        guard let s = value.doubleValue, s.isFinite, range.contains(s) else {
            throw .invalidParams("\"\(field)\" must be a number of seconds from \(format(range.lowerBound)) to \(format(range.upperBound)); got \(describe(value))")
        }
        return s
    }

    /// A finite number in `range` (a fraction, a weight).
    public static func number(_ value: JSONValue?, field: String, in range: ClosedRange<Double>) throws(SearchlightError) -> Double? {
        guard let value, !value.isNull else { return nil }
        guard let s = value.doubleValue, s.isFinite, range.contains(s) else {
            throw .invalidParams("\"\(field)\" must be a number from \(format(range.lowerBound)) to \(format(range.upperBound)); got \(describe(value))")
        }
        return s
    }

    /// `seconds` as a `Duration`.
    public static func duration(_ value: JSONValue?, field: String, in range: ClosedRange<Double>) throws(SearchlightError) -> Duration? {
        try seconds(value, field: field, in: range).map { .milliseconds(Int64(($0 * 1000).rounded(.up))) }
    }

    /// What was sent, short: the number as JSON writes it, or the type for anything else.
    static func describe(_ value: JSONValue) -> String {
        switch value {
        case .number(let n): format(n)
        case .string(let s): "the string \"\(s.prefix(24))\(s.count > 24 ? "…" : "")\""
        default: "a value of type \(value.typeName)"
        }
    }

    static func format(_ n: Double) -> String {
        var out: [UInt8] = []
        JSONValue.writeNumber(n, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}
