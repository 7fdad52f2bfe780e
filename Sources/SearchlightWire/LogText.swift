/// How a log line's text is written (logfmt: `message key=value key="quoted value"`), scalar by
/// scalar: values a client chose (an identifier, a bundle, a path) can add no field and no line.
/// String comparison would not do: Foundation's search on Linux skips a `"` or a newline that a
/// combining mark follows, and a `Character` of a space and a combining mark is not `" "`.
public enum LogText {
    /// A value as it follows `key=`: bare when it is plain, else quoted, with `\` and `"`
    /// escaped and every control, format or separator character written as an escape.
    public static func value(_ s: String) -> String {
        let plain = !s.isEmpty && s.unicodeScalars.allSatisfy { !needsQuotes($0) }
        if plain { return s }
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            default: append(scalar, to: &out)
            }
        }
        return out + "\""
    }

    /// The message (or any text outside a value): one line, its controls escaped.
    public static func line(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: isEscaped) else { return s }
        var out = ""
        for scalar in s.unicodeScalars { append(scalar, to: &out) }
        return out
    }

    private static func append(_ scalar: Unicode.Scalar, to out: inout String) {
        switch scalar {
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where isEscaped(scalar): out += "\\u{" + String(scalar.value, radix: 16) + "}"
        default: out.unicodeScalars.append(scalar)
        }
    }

    /// Controls (C0, DEL, C1), format characters (bidi overrides, zero-width ones) and the
    /// line and paragraph separators.
    private static func isEscaped(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator: true
        default: false
        }
    }

    private static func needsQuotes(_ scalar: Unicode.Scalar) -> Bool {
        scalar == " " || scalar == "\"" || scalar == "=" || scalar == "\\" || scalar.properties.isWhitespace || isEscaped(scalar)
    }
}
