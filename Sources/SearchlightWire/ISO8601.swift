#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// ISO 8601 dates on the wire: `2026-11-22T10:15:30.250Z`. Parsing accepts an optional fraction
/// and `Z` or a `±HH:MM` offset; formatting always writes UTC with milliseconds.
public enum ISO8601 {
    public static func format(_ date: Date) -> String {
        let t = date.timeIntervalSince1970
        // Years 1970-9999 (every item's expiration): the civil date by arithmetic into 24 bytes.
        // gmtime_r and string interpolation cost about 9 000 instructions per date, and every
        // item a query returns carries at least one.
        if let (seconds, millis) = fastParts(t) {
            return String(unsafeUninitializedCapacity: 24) { b in
                put(seconds: seconds, millis: millis, into: UnsafeMutableBufferPointer(rebasing: b[0..<24]))
                return 24
            }
        }
        return formatSlow(t)
    }

    /// `format` of the date `t` seconds after 1970, quoted, appended to a JSON text being written
    /// (the daemon's answers: no `String` per date).
    public static func writeQuoted(_ t: Double, to out: inout [UInt8]) {
        guard let (seconds, millis) = fastParts(t) else {
            JSONValue.writeString(formatSlow(t), to: &out)
            return
        }
        // Written on the stack and appended in one copy: appending 26 repeated quotes and then
        // writing into the array cost twice as much (a generic append, a uniqueness check).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 26) { b in
            b[0] = UInt8(ascii: "\"")
            put(seconds: seconds, millis: millis, into: UnsafeMutableBufferPointer(rebasing: b[1..<25]))
            b[25] = UInt8(ascii: "\"")
            out.append(contentsOf: UnsafeBufferPointer(b))
        }
    }

    /// Whole seconds and milliseconds of `t`, when it is in years 1970-9999.
    private static func fastParts(_ t: Double) -> (Int, Int)? {
        guard t >= 0, t < 253_402_300_800 else { return nil }
        var seconds = Int(t.rounded(.down))
        var millis = Int(((t - Double(seconds)) * 1000).rounded())
        if millis >= 1000 { seconds += 1; millis -= 1000 }
        return seconds < 253_402_300_800 ? (seconds, millis) : nil
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` of a non-negative second count before year 10000 (Howard
    /// Hinnant's civil-from-days), into 24 bytes.
    private static func put(seconds: Int, millis: Int, into b: UnsafeMutableBufferPointer<UInt8>) {
        let days = seconds / 86_400, rest = seconds % 86_400
        let z = days + 719_468
        let era = z / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        let base = b.startIndex
        func put(_ v: Int, _ at: Int, _ width: Int) {
            var v = v
            for k in stride(from: base + at + width - 1, through: base + at, by: -1) {
                b[k] = UInt8(0x30 + v % 10)
                v /= 10
            }
        }
        put(year, 0, 4); b[base + 4] = 0x2D; put(month, 5, 2); b[base + 7] = 0x2D; put(day, 8, 2); b[base + 10] = 0x54
        put(rest / 3600, 11, 2); b[base + 13] = 0x3A; put(rest / 60 % 60, 14, 2); b[base + 16] = 0x3A; put(rest % 60, 17, 2)
        b[base + 19] = 0x2E; put(millis, 20, 3); b[base + 23] = 0x5A
    }

    private static func formatSlow(_ t: Double) -> String {
        var seconds = time_t(t.rounded(.down))
        var millis = Int(((t - Double(seconds)) * 1000).rounded())
        if millis >= 1000 { seconds += 1; millis -= 1000 }
        var tm = Glibc.tm()
        gmtime_r(&seconds, &tm)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
        }
        let ms = String(millis)
        return "\(pad(tm.tm_year + 1900, 4))-\(pad(tm.tm_mon + 1, 2))-\(pad(tm.tm_mday, 2))T"
            + "\(pad(tm.tm_hour, 2)):\(pad(tm.tm_min, 2)):\(pad(tm.tm_sec, 2))."
            + String(repeating: "0", count: 3 - ms.count) + ms + "Z"
    }

    /// Parses an ISO 8601 date-time (or a plain `YYYY-MM-DD`, taken as UTC midnight).
    ///
    /// On the string's UTF-8 bytes in place, with a cursor struct: the SDK parses every item's
    /// `expirationDate` of every answer, and copying the text into an array and counting through
    /// closures that capture the index (a boxed variable, checked for exclusive access on every
    /// byte) and `Character.asciiValue` cost about 5 700 instructions per date, a quarter of a
    /// term query's page on the client (`git show 8eae301:Docs/Performance.md`,
    /// "The SDK's side, profiled").
    public static func parse(_ text: String) -> Date? {
        var text = text
        return text.withUTF8 { bytes in parse(bytes: bytes) }
    }

    /// `parse` of a date's UTF-8 bytes (a string of an answer, read in place).
    static func parse(bytes: UnsafeBufferPointer<UInt8>) -> Date? {
        var scanner = DateScanner(b: bytes)
        return scanner.parse()
    }
}

/// The cursor of `ISO8601.parse` over a date's UTF-8 bytes.
private struct DateScanner {
    let b: UnsafeBufferPointer<UInt8>
    var i = 0

    init(b: UnsafeBufferPointer<UInt8>) { self.b = b }

    mutating func number(_ width: Int) -> Int? {
        guard i + width <= b.count else { return nil }
        var v = 0
        for k in 0..<width {
            let c = b[i + k]
            guard c >= 0x30, c <= 0x39 else { return nil }
            v = v * 10 + Int(c - 0x30)
        }
        i += width
        return v
    }

    mutating func expect(_ c: UInt8) -> Bool {
        guard i < b.count, b[i] == c else { return false }
        i += 1
        return true
    }

    mutating func parse() -> Date? {
        guard let year = number(4), expect(0x2D), let month = number(2), expect(0x2D), let day = number(2),
            (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var hour = 0, minute = 0, second = 0
        var fraction = 0.0
        var offset = 0
        if i < b.count {
            guard b[i] == UInt8(ascii: "T") || b[i] == UInt8(ascii: " ") else { return nil }
            i += 1
            guard let h = number(2), expect(UInt8(ascii: ":")), let m = number(2), h < 24, m < 60 else { return nil }
            hour = h
            minute = m
            if expect(UInt8(ascii: ":")) {
                guard let s = number(2), s <= 60 else { return nil }
                second = s
                if expect(UInt8(ascii: ".")) || expect(UInt8(ascii: ",")) {
                    var scale = 0.1
                    var digits = 0
                    while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                        fraction += Double(b[i] - 0x30) * scale
                        scale /= 10
                        i += 1
                        digits += 1
                    }
                    guard digits > 0 else { return nil }
                }
            }
            if expect(UInt8(ascii: "Z")) || expect(UInt8(ascii: "z")) {
            } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
                let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
                i += 1
                guard let oh = number(2), oh < 24 else { return nil }
                _ = expect(UInt8(ascii: ":"))
                guard let om = number(2), om < 60 else { return nil }
                offset = sign * (oh * 3600 + om * 60)
            } else {
                return nil  // a time without a zone is ambiguous; say which zone
            }
        }
        guard i == b.count else { return nil }
        // Days since the epoch (Howard Hinnant's civil-from-days inverse).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        let seconds = Double(days * 86400 + hour * 3600 + minute * 60 + second - offset) + fraction
        return Date(timeIntervalSince1970: seconds)
    }
}
