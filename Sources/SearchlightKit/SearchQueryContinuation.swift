/// A search the user started in the desktop's search and asked to continue in the app: Core
/// Spotlight's `CSQueryContinuationActionType` and `CSSearchQueryString`, on Linux (DESIGN §14,
/// Docs/Desktop.md "Continuing a search in the app").
///
/// An app declares that it continues searches with the unit key `ContinuesSearch` (with
/// `OpenWith`); GNOME Shell's "search in the app" (LaunchSearch) then launches its `OpenWith`
/// desktop file with one URI argument, `searchlight-query:TEXT`, the text percent-encoded. The
/// app reads it back with `init?(uri:)` or `fromLaunchArguments()`.
public struct SearchQueryContinuation: Sendable, Hashable {
    /// The URI scheme of a continued search.
    public static let uriScheme = "searchlight-query"
    /// The longest text a continuation carries, in UTF-8 bytes (the desktop's own query limit).
    public static let maximumTextBytes = 1024

    /// What the user typed, as one line of text.
    public var text: String

    /// Nil when `text` is empty, longer than `maximumTextBytes` or has control characters.
    public init?(text: String) {
        guard !text.isEmpty, text.utf8.count <= Self.maximumTextBytes,
              !text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return nil }
        self.text = text
    }

    /// `searchlight-query:TEXT`, every byte of the text but `A-Z a-z 0-9 - . _ ~` percent-encoded.
    public var uri: String { Self.uriScheme + ":" + SearchableItemActivity.percentEncode(text) }

    /// Reads a `searchlight-query:` URI (the scheme in any letter case); nil for another scheme,
    /// bad percent-encoding, bytes that are not UTF-8, or a text `init?(text:)` refuses.
    public init?(uri: String) {
        let prefix = Self.uriScheme + ":"
        guard uri.utf8.count > prefix.utf8.count, uri.utf8.count <= prefix.utf8.count + 3 * Self.maximumTextBytes,
              uri.prefix(prefix.count).lowercased() == prefix,
              let text = SearchableItemActivity.percentDecode(uri.dropFirst(prefix.count))
        else { return nil }
        self.init(text: text)
    }

    /// The search named by the first `searchlight-query:` URI among an app's launch arguments.
    public static func fromLaunchArguments(_ arguments: [String] = CommandLine.arguments) -> SearchQueryContinuation? {
        arguments.dropFirst().lazy.compactMap { SearchQueryContinuation(uri: $0) }.first
    }
}
