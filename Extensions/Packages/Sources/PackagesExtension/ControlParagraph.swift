#if canImport(Glibc)
import Glibc
#endif

/// Scans one deb822 paragraph for the fields the index needs, by byte offsets: a field line is
/// `Name: value`, and lines starting with a space or tab continue the field above.
struct ControlParagraph {
    /// The fields we read; every other field is skipped without being looked at twice.
    enum Field: Int, CaseIterable {
        case package, status, section, tag, priority, version, architecture, installedSize, description, multiArch

        var name: StaticString {
            switch self {
            case .package: "Package"
            case .status: "Status"
            case .section: "Section"
            case .tag: "Tag"
            case .priority: "Priority"
            case .version: "Version"
            case .architecture: "Architecture"
            case .installedSize: "Installed-Size"
            case .description: "Description"
            case .multiArch: "Multi-Arch"
            }
        }
    }

    /// Where a field's first-line value and its continuation lines lie in the paragraph.
    struct Span {
        var value: Range<Int>
        /// From the first continuation line to the end of the field (empty if it has none).
        var continuation: Range<Int>
    }

    let bytes: UnsafeBufferPointer<UInt8>
    private(set) var spans: [Span?]

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        spans = Array(repeating: nil, count: Field.allCases.count)
        var current: Field?
        var lineStart = 0
        while lineStart < bytes.count {
            let lineEnd = Self.lineEnd(in: bytes, from: lineStart)
            let first = bytes[lineStart]
            if first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
                // A continuation line: it extends the current field, if that is one we read.
                if let field = current {
                    if spans[field.rawValue]!.continuation.isEmpty {
                        spans[field.rawValue]!.continuation = lineStart..<lineEnd
                    } else {
                        spans[field.rawValue]!.continuation = spans[field.rawValue]!.continuation.lowerBound..<lineEnd
                    }
                }
            } else if let colon = Self.index(of: UInt8(ascii: ":"), in: bytes, from: lineStart, to: lineEnd) {
                current = Self.field(named: bytes, lineStart..<colon)
                // A repeated field keeps its first value, as dpkg would have refused the file.
                if let field = current, spans[field.rawValue] == nil {
                    spans[field.rawValue] = Span(value: Self.trimmed(bytes, colon + 1..<lineEnd), continuation: lineEnd..<lineEnd)
                } else {
                    current = nil
                }
            } else {
                current = nil  // not deb822 (a stray line); skip it rather than refuse the file
            }
            lineStart = lineEnd + 1
        }
    }

    /// The field's first-line value, or nil when the paragraph lacks it.
    func value(_ field: Field) -> UnsafeBufferPointer<UInt8>? {
        guard let span = spans[field.rawValue] else { return nil }
        return UnsafeBufferPointer(rebasing: bytes[span.value])
    }

    func string(_ field: Field) -> String? {
        value(field).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The field's continuation lines, each still starting with its space or tab.
    func continuation(_ field: Field) -> UnsafeBufferPointer<UInt8>? {
        guard let span = spans[field.rawValue], !span.continuation.isEmpty else { return nil }
        return UnsafeBufferPointer(rebasing: bytes[span.continuation])
    }

    /// Whether the first-line value ends with `suffix` (`Status` ends in ` installed`).
    func value(_ field: Field, endsWith suffix: StaticString) -> Bool {
        guard let v = value(field), v.count >= suffix.utf8CodeUnitCount else { return false }
        return memcmp(v.baseAddress! + v.count - suffix.utf8CodeUnitCount, suffix.utf8Start, suffix.utf8CodeUnitCount) == 0
    }

    // MARK: - Bytes

    static func lineEnd(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        index(of: UInt8(ascii: "\n"), in: bytes, from: start, to: bytes.count) ?? bytes.count
    }

    /// `memchr`: the C library's scan is vectorised, which a byte loop is not in a debug build.
    static func index(of byte: UInt8, in bytes: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) -> Int? {
        guard start < end, let found = memchr(bytes.baseAddress! + start, Int32(byte), end - start) else { return nil }
        return UnsafeRawPointer(bytes.baseAddress!).distance(to: UnsafeRawPointer(found))
    }

    static func trimmed(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Range<Int> {
        var lower = range.lowerBound, upper = range.upperBound
        while lower < upper, bytes[lower] == UInt8(ascii: " ") || bytes[lower] == UInt8(ascii: "\t") { lower += 1 }
        while upper > lower, bytes[upper - 1] == UInt8(ascii: " ") || bytes[upper - 1] == UInt8(ascii: "\t")
            || bytes[upper - 1] == UInt8(ascii: "\r") { upper -= 1 }
        return lower..<upper
    }

    /// The field a name denotes; deb822 field names are case-insensitive.
    static func field(named bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) -> Field? {
        // Length and first letter leave one candidate; one comparison confirms it.
        let candidate: Field
        switch range.count {
        case 3: candidate = .tag
        case 6: candidate = .status
        case 7:
            switch bytes[range.lowerBound] | 0x20 {  // ASCII lower case
            case UInt8(ascii: "p"): candidate = .package
            case UInt8(ascii: "s"): candidate = .section
            case UInt8(ascii: "v"): candidate = .version
            default: return nil
            }
        case 8: candidate = .priority
        case 10: candidate = .multiArch
        case 11: candidate = .description
        case 12: candidate = .architecture
        case 14: candidate = .installedSize
        default: return nil
        }
        let name = UnsafeRawPointer(bytes.baseAddress! + range.lowerBound).assumingMemoryBound(to: CChar.self)
        let known = UnsafeRawPointer(candidate.name.utf8Start).assumingMemoryBound(to: CChar.self)
        return strncasecmp(name, known, range.count) == 0 ? candidate : nil
    }

    /// The quick test of `StatusFileReader.countInstalled`: a `Status:` line (as dpkg spells
    /// it) ending in ` installed`.
    static func isInstalled(statusLineIn paragraph: UnsafeBufferPointer<UInt8>) -> Bool {
        var line = 0
        while line < paragraph.count {
            let end = lineEnd(in: paragraph, from: line)
            if end - line > 7, memcmp(paragraph.baseAddress! + line, "Status:", 7) == 0 {
                let value = trimmed(paragraph, line + 7..<end)
                return value.count >= 10 && memcmp(paragraph.baseAddress! + value.upperBound - 10, " installed", 10) == 0
            }
            line = end + 1
        }
        return false
    }
}
