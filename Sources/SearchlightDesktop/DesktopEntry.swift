import Foundation

/// The `[Desktop Entry]` group of a desktop file (the freedesktop.org desktop entry
/// specification): the keys opening an item and presenting an app need. Localized variants
/// (`Name[de]`) and other groups (actions) are skipped; values are unescaped (`\s \n \t \r \\`).
public struct DesktopEntry: Sendable, Equatable {
    /// Where it was read from.
    public var path: String
    public var type: String?
    public var name: String?
    /// A theme icon name, or an absolute path.
    public var icon: String?
    public var exec: String?
    /// `DBusActivatable=true`: the app is started over D-Bus (`org.freedesktop.Application`).
    public var dbusActivatable = false
    public var noDisplay = false
    public var hidden = false

    /// Desktop files larger than this (256 KiB) are refused unread.
    public static let maximumFileSize = 256 << 10

    public init(path: String, type: String? = nil, name: String? = nil, icon: String? = nil, exec: String? = nil) {
        self.path = path
        self.type = type
        self.name = name
        self.icon = icon
        self.exec = exec
    }

    /// Reads a desktop file; nil when it cannot be read, is too large, or has no `[Desktop Entry]`.
    public init?(contentsOf path: String) {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              (attributes[.size] as? NSNumber)?.intValue ?? Int.max <= Self.maximumFileSize,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        self.init(parsing: String(decoding: data, as: UTF8.self), path: path)
    }

    /// Parses the text of a desktop file; nil without a `[Desktop Entry]` group.
    public init?(parsing text: String, path: String) {
        self.init(path: path)
        var inEntry = false, sawEntry = false
        for raw in text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                inEntry = line == "[Desktop Entry]"
                sawEntry = sawEntry || inEntry
                continue
            }
            guard inEntry, let eq = line.firstIndex(of: "=") else { continue }
            let key = line[..<eq].trimmingCharacters(in: .whitespaces)
            let value = Self.unescape(line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces))
            // The first occurrence of a key counts (a duplicate is an error the spec lets us ignore).
            switch key {
            case "Type" where type == nil: type = value
            case "Name" where name == nil: name = value
            case "Icon" where icon == nil: icon = value
            case "Exec" where exec == nil: exec = value
            case "DBusActivatable": dbusActivatable = value == "true"
            case "NoDisplay": noDisplay = value == "true"
            case "Hidden": hidden = value == "true"
            default: break
            }
        }
        guard sawEntry else { return nil }
    }

    static func unescape(_ s: String) -> String {
        guard s.contains("\\") else { return s }
        var out = ""
        var escaping = false
        for c in s {
            if escaping {
                switch c {
                case "s": out.append(" ")
                case "n": out.append("\n")
                case "t": out.append("\t")
                case "r": out.append("\r")
                default: out.append(c)
                }
                escaping = false
            } else if c == "\\" {
                escaping = true
            } else {
                out.append(c)
            }
        }
        return out
    }
}

/// Finds installed desktop files by desktop-file id, the way the desktop does: under
/// `applications/` of `$XDG_DATA_HOME` (default `~/.local/share`), then of each of
/// `$XDG_DATA_DIRS` (default `/usr/local/share:/usr/share`), first match wins; an id's `-` may
/// stand for a subdirectory (`kde-foo.desktop` is also `kde/foo.desktop`).
public struct DesktopEntryLocator: Sendable {
    public var environment: [String: String]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// The `applications` directories searched, in order.
    public var applicationDirectories: [String] {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home + "/.local/share"
        let dataDirs = (environment["XDG_DATA_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share")
            .split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
        return ([dataHome] + dataDirs).map { ($0.hasSuffix("/") ? String($0.dropLast()) : $0) + "/applications" }
    }

    /// The path of the desktop file with this id, or nil when none is installed.
    public func path(forDesktopID id: String) -> String? {
        guard id.hasSuffix(".desktop"), !id.contains("/"), !id.hasPrefix(".") else { return nil }
        for dir in applicationDirectories {
            if let found = Self.find(id[...], in: dir) { return found }
        }
        return nil
    }

    /// The entry with this id, or nil when none is installed or it is not a desktop file.
    public func entry(forDesktopID id: String) -> DesktopEntry? {
        path(forDesktopID: id).flatMap(DesktopEntry.init(contentsOf:))
    }

    /// `name` as a file in `dir`, or with a prefix up to one of its `-` as a subdirectory.
    private static func find(_ name: Substring, in dir: String) -> String? {
        let direct = dir + "/" + name
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: direct, isDirectory: &isDirectory), !isDirectory.boolValue { return direct }
        var i = name.startIndex
        while let dash = name[i...].firstIndex(of: "-") {
            let sub = dir + "/" + name[..<dash]
            if dash > name.startIndex, FileManager.default.fileExists(atPath: sub, isDirectory: &isDirectory), isDirectory.boolValue,
               let found = find(name[name.index(after: dash)...], in: sub) {
                return found
            }
            i = name.index(after: dash)
        }
        return nil
    }
}
