/// Structure-aware mutations for text protocols: besides byte flips, splices and truncation it
/// plants what breaks parsers — deep nesting, huge numbers, invalid and overlong UTF-8, lone
/// surrogate escapes, NUL, a BOM, duplicate keys — and the target's own tokens (`dictionary`).
public struct FuzzMutator: Sendable {
    public var dictionary: [[UInt8]]
    /// Mutants are cut to this length, so that one input's work stays bounded.
    public var maxLength: Int

    public init(dictionary: [String], maxLength: Int = 64 << 10) {
        self.dictionary = dictionary.map { Array($0.utf8) }
        self.maxLength = maxLength
    }

    /// Byte sequences that are not valid UTF-8 (overlong forms, encoded surrogates, values over
    /// U+10FFFF, stray continuation bytes, truncated sequences) and valid but awkward ones.
    static let awkwardUTF8: [[UInt8]] = [
        [0xC0, 0x80], [0xC1, 0xBF], [0xE0, 0x80, 0x80], [0xF0, 0x80, 0x80, 0x80], [0xED, 0xA0, 0x80],
        [0xED, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80], [0x80], [0xBF],
        [0xFE], [0xFF], [0xE2, 0x82], [0xF0, 0x9F, 0x98], [0x00], [0xEF, 0xBB, 0xBF], [0xE2, 0x80, 0xAE],
        [0xCC, 0x81], [0xF0, 0x9F, 0x98, 0x80], [0xE6, 0x98, 0x9F], [0x0D], [0x0A], [0x09], [0x1B],
    ]

    static let escapes: [String] = [
        "\\ud800", "\\udc00", "\\ud800\\udc00", "\\udbff\\udfff", "\\ud800\\u0041", "\\u0000", "\\u00",
        "\\uZZZZ", "\\x41", "\\", "\\\"", "\\/", "\\u00e9", "\\uFEFF", "\\u2028",
    ]

    static let numbers: [String] = [
        "0", "-0", "1e309", "-1e309", "1e-400", "4.9e-324", "1.7976931348623157e308", "9007199254740993",
        "-9223372036854775809", "18446744073709551616", "123456789012345678901234567890123456789",
        "0.1e99999999999", "1E+2", "01", "1.", ".5", "-", "+1", "NaN", "Infinity", "1e", "0x10",
    ]

    /// Applies one to four mutations to `input`; `others` are spliced from.
    public func mutate(_ input: [UInt8], others: [[UInt8]], random: inout FuzzRandom) -> [UInt8] {
        var bytes = input
        for _ in 0...random.below(4) { mutateOnce(&bytes, others: others, random: &random) }
        if bytes.count > maxLength { bytes.removeLast(bytes.count - maxLength) }
        return bytes
    }

    func mutateOnce(_ bytes: inout [UInt8], others: [[UInt8]], random: inout FuzzRandom) {
        let position = bytes.isEmpty ? 0 : random.below(bytes.count + 1)
        func insert(_ piece: [UInt8]) { bytes.insert(contentsOf: piece, at: position) }
        switch random.below(16) {
        case 0 where !bytes.isEmpty:
            let i = random.below(bytes.count)
            bytes[i] ^= UInt8(1 << random.below(8))
        case 1 where !bytes.isEmpty:
            bytes[random.below(bytes.count)] = random.pick([0x00, 0xFF, 0x7F, 0x80, 0x22, 0x5C, 0x7B, 0x7D, 0x5B,
                                                            0x5D, 0x3A, 0x2C, 0x0A, 0x20, UInt8(random.below(256))])
        case 2 where !dictionary.isEmpty, 3 where !dictionary.isEmpty:
            insert(random.pick(dictionary))
        case 4 where !bytes.isEmpty:
            let start = random.below(bytes.count)
            let end = min(bytes.count, start + 1 + random.below(random.oneIn(4) ? bytes.count : 16))
            bytes.removeSubrange(start..<end)
        case 5 where !bytes.isEmpty:
            let start = random.below(bytes.count)
            let piece = Array(bytes[start..<min(bytes.count, start + 1 + random.below(32))])
            let times = random.oneIn(8) ? 1 + random.below(2000) : 1 + random.below(4)
            for _ in 0..<times where bytes.count < maxLength { bytes.insert(contentsOf: piece, at: position) }
        case 6 where !others.isEmpty:
            let other = random.pick(others)
            let cut = bytes.isEmpty ? 0 : random.below(bytes.count + 1)
            let from = other.isEmpty ? 0 : random.below(other.count + 1)
            bytes = Array(bytes[..<cut]) + other[from...]
        case 7 where !bytes.isEmpty:
            bytes.removeLast(1 + random.below(bytes.count))
        case 8:
            nest(&bytes, at: position, random: &random)
        case 9:
            insert(Array(random.pick(Self.numbers).utf8))
        case 10, 11:
            insert(random.pick(Self.awkwardUTF8))
        case 12:
            insert(Array(random.pick(Self.escapes).utf8))
        case 13:
            bytes.insert(contentsOf: random.oneIn(2) ? [0xEF, 0xBB, 0xBF] : [0x00], at: random.oneIn(2) ? 0 : position)
        case 14:
            // A duplicate key right after an object's opening brace.
            if let brace = bytes.indices.filter({ bytes[$0] == 0x7B }).randomElement(using: &random) {
                let key = random.pick(["id", "method", "params", "jsonrpc", "uniqueIdentifier", "items", "Label"])
                bytes.insert(contentsOf: Array("\"\(key)\":\(random.pick(["1", "null", "\"x\"", "{}"])),".utf8), at: brace + 1)
            } else {
                insert(Array("{\"a\":1,\"a\":2}".utf8))
            }
        default:
            if let last = bytes.indices.randomElement(using: &random) { bytes[last] = UInt8(truncatingIfNeeded: random.next()) }
        }
    }

    /// Wraps a stretch in many levels of arrays or objects, often past the depth limits.
    func nest(_ bytes: inout [UInt8], at position: Int, random: inout FuzzRandom) {
        let depth = random.pick([2, 10, 63, 64, 65, 127, 128, 129, 200, 1000, 5000])
        let (open, close): ([UInt8], [UInt8]) = switch random.below(3) {
        case 0: (Array("[".utf8), Array("]".utf8))
        case 1: (Array("{\"a\":".utf8), Array("}".utf8))
        default: (Array("(".utf8), Array(")".utf8))
        }
        // Balanced two times in three: the opening run at `position`, the closing one further on.
        if !random.oneIn(3) {
            let end = position + random.below(bytes.count - position + 1)
            bytes.insert(contentsOf: Array([[UInt8]](repeating: close, count: depth).joined()), at: end)
        }
        bytes.insert(contentsOf: Array([[UInt8]](repeating: open, count: depth).joined()), at: position)
    }
}
