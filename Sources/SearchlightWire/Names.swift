/// Validation of the names that become file paths: hostile input must never escape the state
/// directory (`../`, `/`, NUL, dot files).
public enum Names {
    /// Reverse-DNS style: letters, digits, `.`, `-`, `_`; 1–255 bytes; no leading dot, no `..`.
    public static func validBundle(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard !b.isEmpty, b.count <= 255, b[0] != UInt8(ascii: "."), !s.contains("..") else { return false }
        return b.allSatisfy(isNameByte)
    }

    /// An index name: `""` (the default index) or 1–64 bytes of letters, digits, `.`, `-`, `_`,
    /// not starting with `.` or `_` (`_default` is the file of the default index).
    public static func validIndex(_ s: String) -> Bool {
        if s.isEmpty { return true }
        let b = Array(s.utf8)
        guard b.count <= 64, b[0] != UInt8(ascii: "."), b[0] != UInt8(ascii: "_") else { return false }
        return b.allSatisfy(isNameByte)
    }

    /// A desktop-file id (the desktop entry specification's name of an application: the file's
    /// path under `applications/` with each `/` written `-`): 1-255 bytes of letters, digits, `.`,
    /// `-`, `_`, ending in `.desktop`. An id, never a path: since a `-` may stand for a `/`, no
    /// `-`-separated component may be empty, start with `.` (`.`, `..`, hidden files) or hold
    /// `..`, so no reading of the id can climb out of an applications folder (issue 29, D1).
    /// Unit key `OpenWith`, `desktop.register`, and again at open.
    public static func validDesktopFileID(_ s: String) -> Bool {
        let b = Array(s.utf8)
        guard b.count > ".desktop".count, b.count <= 255, s.hasSuffix(".desktop"), b.allSatisfy(isNameByte),
              !s.contains("..") else { return false }
        return s.split(separator: "-", omittingEmptySubsequences: false).allSatisfy { component in
            !component.isEmpty && component.first != "."
        }
    }

    public static func isNameByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            || c == UInt8(ascii: ".") || c == UInt8(ascii: "-") || c == UInt8(ascii: "_")
    }

    public static func fileName(index: String) -> String { (index.isEmpty ? "_default" : index) + ".sqlite" }

    /// An index name as logs and messages show it (`_default` for the default index).
    public static func display(index: String) -> String { index.isEmpty ? "_default" : index }

    public static func bundle(_ value: JSONValue?, field: String = "bundle") throws(SearchlightError) -> String {
        guard let s = value?.stringValue, validBundle(s) else {
            throw SearchlightError(.invalidParams,
                "\"\(field)\" must be a bundle identifier like com.example.app (letters, digits, '.', '-', '_')")
        }
        return s
    }

    public static func index(_ value: JSONValue?) throws(SearchlightError) -> String {
        switch value {
        case nil, .null?: return ""
        case .string(let s)? where validIndex(s): return s
        default:
            throw SearchlightError(.invalidParams,
                "\"index\" must be \"\" (the default index) or up to 64 letters, digits, '.', '-', '_' not starting with '.' or '_'")
        }
    }
}
