/// Character references: numeric ones (`&#233;`, `&#xE9;`) and the common named ones — HTML 4's
/// Latin-1 set plus the punctuation and symbols pages use most. An unknown name stays as written.
public enum HTMLEntities {
    /// The Latin-1 entities of HTML 4, U+00A0 to U+00FF in order.
    private static let latin1 = """
        nbsp iexcl cent pound curren yen brvbar sect uml copy ordf laquo not shy reg macr deg plusmn sup2 sup3 \
        acute micro para middot cedil sup1 ordm raquo frac14 frac12 frac34 iquest Agrave Aacute Acirc Atilde \
        Auml Aring AElig Ccedil Egrave Eacute Ecirc Euml Igrave Iacute Icirc Iuml ETH Ntilde Ograve Oacute Ocirc \
        Otilde Ouml times Oslash Ugrave Uacute Ucirc Uuml Yacute THORN szlig agrave aacute acirc atilde auml aring \
        aelig ccedil egrave eacute ecirc euml igrave iacute icirc iuml eth ntilde ograve oacute ocirc otilde ouml \
        divide oslash ugrave uacute ucirc uuml yacute thorn yuml
        """.split(separator: " ")

    static let named: [String: Unicode.Scalar] = {
        var table: [String: Unicode.Scalar] = [
            "amp": "&", "lt": "<", "gt": ">", "quot": "\"", "apos": "'",
            "ndash": "\u{2013}", "mdash": "\u{2014}", "lsquo": "\u{2018}", "rsquo": "\u{2019}", "sbquo": "\u{201A}",
            "ldquo": "\u{201C}", "rdquo": "\u{201D}", "bdquo": "\u{201E}", "hellip": "\u{2026}", "bull": "\u{2022}",
            "trade": "\u{2122}", "euro": "\u{20AC}", "dagger": "\u{2020}", "Dagger": "\u{2021}", "permil": "\u{2030}",
            "lsaquo": "\u{2039}", "rsaquo": "\u{203A}", "prime": "\u{2032}", "Prime": "\u{2033}", "larr": "\u{2190}",
            "rarr": "\u{2192}", "uarr": "\u{2191}", "darr": "\u{2193}", "harr": "\u{2194}", "rArr": "\u{21D2}",
            "minus": "\u{2212}", "le": "\u{2264}", "ge": "\u{2265}", "ne": "\u{2260}", "infin": "\u{221E}",
            "ensp": "\u{2002}", "emsp": "\u{2003}", "thinsp": "\u{2009}", "zwnj": "\u{200C}", "zwj": "\u{200D}",
            "OElig": "\u{0152}", "oelig": "\u{0153}", "Scaron": "\u{0160}", "scaron": "\u{0161}", "Yuml": "\u{0178}",
            "fnof": "\u{0192}", "circ": "\u{02C6}", "tilde": "\u{02DC}", "alpha": "\u{03B1}", "beta": "\u{03B2}",
            "pi": "\u{03C0}", "mu": "\u{03BC}", "lambda": "\u{03BB}", "sigma": "\u{03C3}", "Omega": "\u{03A9}",
        ]
        for (offset, name) in latin1.enumerated() { table[String(name)] = Unicode.Scalar(0xA0 + UInt8(offset)) }
        return table
    }()

    /// The text of `bytes` (UTF-8) with its character references replaced. In an attribute, a
    /// named reference without `;` followed by `=` or an alphanumeric stays as written (WHATWG's
    /// rule that keeps `?a=1&copy=2` in URLs).
    public static func decode(_ bytes: ArraySlice<UInt8>, inAttribute: Bool) -> String {
        guard bytes.contains(UInt8(ascii: "&")) else { return String(decoding: bytes, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let c = bytes[i]
            guard c == UInt8(ascii: "&"), let (scalar, length) = reference(bytes[(i + 1)...], inAttribute: inAttribute) else {
                out.append(c)
                i += 1
                continue
            }
            out.append(contentsOf: String(Character(scalar)).utf8)
            i += 1 + length
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The character a reference after `&` stands for, and how many bytes it took.
    private static func reference(_ s: ArraySlice<UInt8>, inAttribute: Bool) -> (Unicode.Scalar, Int)? {
        guard let first = s.first else { return nil }
        if first == UInt8(ascii: "#") { return numeric(s.dropFirst()) }
        var name: [UInt8] = []
        var j = s.startIndex
        while j < s.endIndex, name.count < 10, isASCIILetter(s[j]) || (s[j] >= 0x30 && s[j] <= 0x39) {
            name.append(s[j])
            j += 1
        }
        guard !name.isEmpty, let scalar = named[String(decoding: name, as: UTF8.self)] else { return nil }
        if j < s.endIndex, s[j] == UInt8(ascii: ";") { return (scalar, name.count + 1) }
        if inAttribute, j < s.endIndex, s[j] == UInt8(ascii: "=") || isASCIILetter(s[j]) || (s[j] >= 0x30 && s[j] <= 0x39) { return nil }
        return (scalar, name.count)  // `&copy 2024`: browsers accept the legacy form
    }

    /// `#233;` or `#xE9;` (after the `&`); out-of-range, NUL and surrogates read as U+FFFD.
    private static func numeric(_ s: ArraySlice<UInt8>) -> (Unicode.Scalar, Int)? {
        var j = s.startIndex
        var hex = false
        if j < s.endIndex, s[j] | 0x20 == UInt8(ascii: "x") { hex = true; j += 1 }
        var value: UInt32 = 0
        var digits = 0
        while j < s.endIndex, let d = digit(s[j], hex: hex) {
            value = min(value &* (hex ? 16 : 10) &+ d, 0x110000)
            digits += 1
            j += 1
        }
        guard digits > 0 else { return nil }
        var length = 1 + (hex ? 1 : 0) + digits
        if j < s.endIndex, s[j] == UInt8(ascii: ";") { length += 1 }
        let scalar = value == 0 ? nil : Unicode.Scalar(value)
        return (scalar ?? "\u{FFFD}", length)
    }

    private static func digit(_ c: UInt8, hex: Bool) -> UInt32? {
        switch c {
        case 0x30...0x39: UInt32(c - 0x30)
        case 0x61...0x66 where hex: UInt32(c - 0x61 + 10)
        case 0x41...0x46 where hex: UInt32(c - 0x41 + 10)
        default: nil
        }
    }
}
