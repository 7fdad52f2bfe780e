/// A page's bytes as UTF-8, from the encoding it declares: a byte order mark first, then
/// `<meta charset>` or `<meta http-equiv="Content-Type" content="…; charset=…">` in the first
/// 1024 bytes (WHATWG's prescan, simplified), UTF-8 when it says nothing. UTF-8, UTF-16 (by BOM),
/// windows-1252 and the labels WHATWG maps to it (ISO-8859-1, Latin-1, US-ASCII) are read; any
/// other label is read as UTF-8 with a warning. Invalid bytes become U+FFFD, with a warning.
public enum PageDecoder {
    public enum Encoding: String, Sendable { case utf8 = "UTF-8", utf16LE = "UTF-16LE", utf16BE = "UTF-16BE", windows1252 = "windows-1252" }

    public struct Decoded: Sendable {
        public var utf8: [UInt8]
        public var encoding: Encoding
        public var warnings: [String]
    }

    public static func decode(_ bytes: [UInt8]) -> Decoded {
        var warnings: [String] = []
        let (encoding, bomLength) = sniff(bytes, warnings: &warnings)
        let body = bytes.dropFirst(bomLength)
        let utf8: [UInt8]
        var invalid = false
        switch encoding {
        case .utf8:
            let text = String(decoding: body, as: UTF8.self)
            invalid = !isValidUTF8(body)
            utf8 = invalid ? Array(text.utf8) : Array(body)
        case .utf16LE, .utf16BE:
            var units: [UInt16] = []
            units.reserveCapacity(body.count / 2)
            var j = body.startIndex
            while j + 1 < body.endIndex {
                let (a, b) = (UInt16(body[j]), UInt16(body[j + 1]))
                units.append(encoding == .utf16LE ? a | b << 8 : a << 8 | b)
                j += 2
            }
            var iterator = units.makeIterator()
            var codec = UTF16()
            scan: while true {
                switch codec.decode(&iterator) {
                case .scalarValue: continue
                case .emptyInput: break scan
                case .error: invalid = true
                }
            }
            var text = String(decoding: units, as: UTF16.self)
            if body.count % 2 == 1 { invalid = true; text += "\u{FFFD}" }
            utf8 = Array(text.utf8)
        case .windows1252:
            var out: [UInt8] = []
            out.reserveCapacity(body.count)
            for b in body {
                if b < 0x80 { out.append(b); continue }
                let scalar = b >= 0xA0 ? Unicode.Scalar(b) : (windows1252High[Int(b - 0x80)] ?? "\u{FFFD}")
                if b < 0xA0, windows1252High[Int(b - 0x80)] == nil { invalid = true }
                out.append(contentsOf: String(Character(scalar)).utf8)
            }
            utf8 = out
        }
        if invalid { warnings.append("invalid \(encoding.rawValue) bytes were replaced with U+FFFD") }
        return Decoded(utf8: utf8, encoding: encoding, warnings: warnings)
    }

    /// windows-1252's 0x80–0x9F (nil: undefined).
    private static let windows1252High: [Unicode.Scalar?] = [
        "\u{20AC}", nil, "\u{201A}", "\u{0192}", "\u{201E}", "\u{2026}", "\u{2020}", "\u{2021}",
        "\u{02C6}", "\u{2030}", "\u{0160}", "\u{2039}", "\u{0152}", nil, "\u{017D}", nil,
        nil, "\u{2018}", "\u{2019}", "\u{201C}", "\u{201D}", "\u{2022}", "\u{2013}", "\u{2014}",
        "\u{02DC}", "\u{2122}", "\u{0161}", "\u{203A}", "\u{0153}", nil, "\u{017E}", "\u{0178}",
    ]

    static func sniff(_ bytes: [UInt8], warnings: inout [String]) -> (Encoding, Int) {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { return (.utf8, 3) }
        if bytes.starts(with: [0xFF, 0xFE]) { return (.utf16LE, 2) }
        if bytes.starts(with: [0xFE, 0xFF]) { return (.utf16BE, 2) }
        guard let label = declaredCharset(bytes.prefix(1024)) else { return (.utf8, 0) }
        switch label {
        case "utf-8", "utf8", "unicode-1-1-utf-8": return (.utf8, 0)
        case "windows-1252", "cp1252", "iso-8859-1", "iso8859-1", "iso_8859-1", "latin1", "l1", "us-ascii", "ascii",
             "x-cp1252", "iso-ir-100", "csisolatin1", "ibm819", "cp819":
            return (.windows1252, 0)
        // WHATWG: a meta saying UTF-16 in an ASCII-compatible page is read as UTF-8.
        case "utf-16", "utf-16le", "utf-16be": return (.utf8, 0)
        default:
            warnings.append("the charset \"\(label.prefix(40))\" is not supported; read as UTF-8")
            return (.utf8, 0)
        }
    }

    /// The charset label of the first `<meta charset>` or Content-Type `<meta>`, lowercased.
    static func declaredCharset(_ head: ArraySlice<UInt8>) -> String? {
        var tokenizer = HTMLTokenizer(utf8: Array(head))
        while let token = tokenizer.next() {
            guard case .startTag("meta", let attributes, _) = token else { continue }
            let value = { (name: String) in attributes.first { $0.0 == name }?.1 }
            if let charset = value("charset") { return charset.trimmingASCIISpaces.lowercased() }
            if value("http-equiv")?.lowercased() == "content-type", let content = value("content")?.lowercased(),
               let range = content.range(of: "charset=") {
                let label = content[range.upperBound...].prefix { $0 != ";" && $0 != " " && $0 != "\"" && $0 != "'" }
                if !label.isEmpty { return String(label) }
            }
        }
        return nil
    }

    private static func isValidUTF8(_ bytes: ArraySlice<UInt8>) -> Bool {
        var iterator = bytes.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }
}

extension String {
    var trimmingASCIISpaces: String {
        var s = Substring(self)
        while let f = s.utf8.first, isSpace(f) { s = s.dropFirst() }
        while let l = s.utf8.last, isSpace(l) { s = s.dropLast() }
        return String(s)
    }
}
