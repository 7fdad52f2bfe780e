/// The item a desktop search result stands for, as the app that donated it receives it when the
/// user opens that result: Core Spotlight's `continueUserActivity` with `CSSearchableItemActionType`
/// and `CSSearchableItemActivityIdentifier`, on Linux (DESIGN §12, Docs/Desktop.md).
///
/// An app declares the desktop file its items open with (unit key `OpenWith`, or `searchlight
/// register BUNDLE --open-with ID`); opening a result launches that desktop file with one URI
/// argument, `searchlight-item:BUNDLE/IDENTIFIER`, the identifier percent-encoded. The app reads it
/// back with `init?(uri:)` or `fromLaunchArguments()`. The same `BUNDLE/IDENTIFIER` string is the
/// result id the desktop's search interfaces (GNOME Shell, KRunner) see.
public struct SearchableItemActivity: Sendable, Hashable {
    /// The URI scheme of an opened item.
    public static let uriScheme = "searchlight-item"

    /// The app (bundle) that donated the item.
    public var bundleIdentifier: String
    /// The item's `uniqueIdentifier`.
    public var uniqueIdentifier: String

    public init(bundleIdentifier: String, uniqueIdentifier: String) {
        self.bundleIdentifier = bundleIdentifier
        self.uniqueIdentifier = uniqueIdentifier
    }

    /// `BUNDLE/IDENTIFIER`, both percent-encoded (every byte but `A-Z a-z 0-9 - . _ ~`), so the
    /// first `/` always separates them.
    public var resultID: String { Self.percentEncode(bundleIdentifier) + "/" + Self.percentEncode(uniqueIdentifier) }

    /// `searchlight-item:BUNDLE/IDENTIFIER`.
    public var uri: String { Self.uriScheme + ":" + resultID }

    /// Reads a result id; nil when it is not `BUNDLE/IDENTIFIER` with valid percent-encoding,
    /// a valid bundle identifier and a non-empty identifier.
    public init?(resultID: String) {
        guard let slash = resultID.firstIndex(of: "/"),
              let bundle = Self.percentDecode(resultID[..<slash]), Names.validBundle(bundle),
              let identifier = Self.percentDecode(resultID[resultID.index(after: slash)...]), !identifier.isEmpty
        else { return nil }
        self.init(bundleIdentifier: bundle, uniqueIdentifier: identifier)
    }

    /// Reads a `searchlight-item:` URI (the scheme in any letter case, as RFC 3986 allows).
    public init?(uri: String) {
        let prefix = Self.uriScheme + ":"
        guard uri.utf8.count > prefix.utf8.count, uri.prefix(prefix.count).lowercased() == prefix else { return nil }
        self.init(resultID: String(uri.dropFirst(prefix.count)))
    }

    /// The item named by the first `searchlight-item:` URI among an app's launch arguments.
    public static func fromLaunchArguments(_ arguments: [String] = CommandLine.arguments) -> SearchableItemActivity? {
        arguments.dropFirst().lazy.compactMap { SearchableItemActivity(uri: $0) }.first
    }

    static func percentEncode(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for byte in s.utf8 {
            if Self.unreserved(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = Array("0123456789ABCDEF".utf8)
                out.unicodeScalars.append(Unicode.Scalar(UInt8(ascii: "%")))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                out.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0xF)]))
            }
        }
        return out
    }

    /// Strict: a `%` must start two hex digits, and the bytes must be UTF-8.
    static func percentDecode(_ s: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(s.utf8.count)
        var it = s.utf8.makeIterator()
        while let c = it.next() {
            guard c == UInt8(ascii: "%") else {
                bytes.append(c)
                continue
            }
            guard let h = it.next().flatMap(hexValue), let l = it.next().flatMap(hexValue) else { return nil }
            bytes.append(h << 4 | l)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func unreserved(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A)
            || c == UInt8(ascii: "-") || c == UInt8(ascii: ".") || c == UInt8(ascii: "_") || c == UInt8(ascii: "~")
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }
}
