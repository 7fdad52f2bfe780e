import SearchlightWire

/// What the daemon knows of a client's sandbox (DESIGN §14, Docs/Operations.md "Who may use a
/// bundle"), found from the client's process (`PeerProcess`), never from anything it sends.
///
/// A sandbox only ever takes rights away: a Flatpak app may use the bundles of its app id on top
/// of the uid rules (`BundleAccess`), never a bundle those rules refuse its uid.
enum PeerSandbox: Sendable, Equatable {
    /// Not in a sandbox the daemon recognises: the uid rules alone.
    case none
    /// A Flatpak app: only its own bundle (`appID`) and bundles under it (`appID.*`), in the app
    /// and extension roles.
    case flatpak(appID: String)
    /// A process that shows signs of a sandbox, or that exited before it could be identified:
    /// refused every role. `reason` says which, for the log and the error.
    case unidentified(reason: String)

    /// Whether a connection from this peer may use `bundle` at all (before the uid rules).
    func mayUse(_ bundle: String) -> Bool {
        switch self {
        case .none: true
        case .flatpak(let id): bundle == id || (bundle.hasPrefix(id) && bundle.dropFirst(id.count).first == ".")
        case .unidentified: false
        }
    }

    /// The log's name for it: `-`, `flatpak:APPID` or `unidentified`.
    var logValue: String {
        switch self {
        case .none: "-"
        case .flatpak(let id): "flatpak:" + id
        case .unidentified: "unidentified"
        }
    }

    /// The refusal of a bundle outside the sandbox's own: it names only the app id the daemon
    /// found and the bundle asked for, never whether that bundle exists or whose it is.
    func refusal(_ bundle: String) -> SearchlightError {
        switch self {
        case .none:
            BundleAccess.denied(bundle)
        case .flatpak(let id):
            SearchlightError(.permissionDenied,
                "permission denied for bundle \(bundle.prefix(255)): this process is the Flatpak app \(id), which may use only its own bundle \(id) and bundles under it (\(id).*)")
        case .unidentified(let reason):
            Self.unidentifiedRefusal(reason)
        }
    }

    /// The refusal of a role a sandboxed process may not take (desktop, admin).
    func roleRefusal(_ role: String) -> SearchlightError? {
        switch self {
        case .none:
            nil
        case .flatpak(let id):
            SearchlightError(.permissionDenied,
                "the Flatpak app \(id) may not use the \(role) role: a sandboxed app uses its own bundle (role app, bundleIdentifier \(id) or \(id).*)")
        case .unidentified(let reason):
            Self.unidentifiedRefusal(reason)
        }
    }

    static func unidentifiedRefusal(_ reason: String) -> SearchlightError {
        SearchlightError(.permissionDenied,
            "searchlightd could not identify this process's sandbox (\(reason)), so it refuses the connection; connect from a process that stays running, outside a container or from a Flatpak app")
    }
}

/// A Flatpak instance's `/.flatpak-info`, read the way xdg-desktop-portal reads it: a GKeyFile whose
/// `[Application]` group (or `[Runtime]`, when a runtime itself runs) names the app id.
enum FlatpakInfo {
    /// The most of the file that is read; Flatpak writes a few hundred bytes.
    static let maxBytes = 64 * 1024

    struct Invalid: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    /// The app id the file names. Throws when the file is not a key file, names no app, or names
    /// something that is not a valid Flatpak app id.
    static func appID(_ bytes: [UInt8]) throws(Invalid) -> String {
        guard bytes.count <= maxBytes else { throw Invalid(description: ".flatpak-info is over \(maxBytes) bytes") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw Invalid(description: ".flatpak-info is not UTF-8") }
        var groups: [String: [String: String]] = [:]
        var group: String?
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.drop { $0 == " " || $0 == "\t" }
            if line.isEmpty || line.first == "#" { continue }
            if line.first == "[" {
                guard line.last == "]", line.count > 2 else { throw Invalid(description: ".flatpak-info line \(n + 1): malformed group header") }
                let name = String(line.dropFirst().dropLast())
                guard !name.contains("[") && !name.contains("]") else { throw Invalid(description: ".flatpak-info line \(n + 1): malformed group header") }
                group = name
                groups[name, default: [:]] = groups[name, default: [:]]
                continue
            }
            guard let eq = line.firstIndex(of: "=") else { throw Invalid(description: ".flatpak-info line \(n + 1): neither a group, a key nor a comment") }
            guard let current = group else { throw Invalid(description: ".flatpak-info line \(n + 1): a key before the first group") }
            let key = line[..<eq].trimmingSuffix { $0 == " " || $0 == "\t" }
            let value = line[line.index(after: eq)...].drop { $0 == " " || $0 == "\t" }
            guard !key.isEmpty else { throw Invalid(description: ".flatpak-info line \(n + 1): an empty key") }
            groups[current]?[String(key)] = String(value)
        }
        let source = groups["Runtime"] != nil ? "Runtime" : "Application"
        guard let id = groups[source]?["name"] else { throw Invalid(description: ".flatpak-info names no app ([\(source)] name=)") }
        guard isValidAppID(id) else { throw Invalid(description: ".flatpak-info names an invalid app id") }
        return id
    }

    /// Flatpak's rule for an app id: 3 or more dot-separated elements of `[A-Za-z0-9_-]`, none
    /// empty or starting with a digit, `-` only in the last one, at most 255 bytes.
    static func isValidAppID(_ id: String) -> Bool {
        let bytes = Array(id.utf8)
        guard !bytes.isEmpty, bytes.count <= 255 else { return false }
        let elements = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard elements.count >= 3 else { return false }
        for (i, element) in elements.enumerated() {
            let last = i == elements.count - 1
            guard let first = element.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
            for c in element {
                let letter = (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(c) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(c)
                let digit = (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(c)
                guard letter || digit || c == UInt8(ascii: "_") || (last && c == UInt8(ascii: "-")) else { return false }
            }
        }
        return true
    }
}

private extension Substring {
    func trimmingSuffix(while drop: (Character) -> Bool) -> Substring {
        var end = endIndex
        while end > startIndex, drop(self[index(before: end)]) { end = index(before: end) }
        return self[startIndex..<end]
    }
}
