import Foundation

/// One value of a column of the app's database, as SQLite stores it (GRDB's `DatabaseValue`).
public enum DatabaseValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])

    /// The value as text: integers and reals in decimal, text as is; nil for NULL and blobs.
    public var stringValue: String? {
        switch self {
        case .text(let s): s
        case .integer(let n): String(n)
        case .real(let d): d.rounded() == d && abs(d) < 1e15 ? String(Int64(d)) : String(d)
        case .null, .blob: nil
        }
    }

    /// Integers, whole reals, and text that spells an integer.
    public var int64Value: Int64? {
        switch self {
        case .integer(let n): n
        case .real(let d): d.rounded() == d && abs(d) < 9e18 ? Int64(d) : nil
        case .text(let s): Int64(s.trimmingCharacters(in: .whitespaces))
        case .null, .blob: nil
        }
    }

    /// Numbers, and text that spells one.
    public var doubleValue: Double? {
        switch self {
        case .integer(let n): Double(n)
        case .real(let d): d
        case .text(let s): Double(s.trimmingCharacters(in: .whitespaces))
        case .null, .blob: nil
        }
    }

    public var isNull: Bool { self == .null }

    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let n): String(n)
        case .real(let d): String(d)
        case .text(let s): "'" + s.replacingOccurrences(of: "'", with: "''") + "'"
        case .blob(let b): "x'" + b.map { String(format: "%02x", $0) }.joined() + "'"
        }
    }
}

extension DatabaseValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(floatLiteral value: Double) { self = .real(value) }
    public init(nilLiteral: ()) { self = .null }
}
