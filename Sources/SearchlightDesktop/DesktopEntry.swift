import Foundation
import SearchlightKit
#if canImport(Glibc)
import Glibc
#endif

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

    /// The path of the desktop file with this id, or nil when none is installed or the one found
    /// cannot be trusted (`resolve(desktopID:)` says why).
    public func path(forDesktopID id: String) -> String? {
        try? resolve(desktopID: id).get()
    }

    /// Why no desktop file is used for an id.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// Not a desktop-file id (a path, `..`, an empty component): refused before any lookup.
        case invalidID(String)
        /// No file of that id in any applications folder.
        case notInstalled(String)
        /// A file was found, but it is not one to launch (why, and where).
        case untrusted(String)

        public var description: String {
            switch self {
            case .invalidID(let s), .notInstalled(let s), .untrusted(let s): s
            }
        }
    }

    /// The real path of the installed desktop file with this id, the way the desktop finds it
    /// (first match wins), checked before anything launches it (issue 29, D1):
    /// - the id is an id (`Names.validDesktopFileID`: no `/`, no `.`/`..` or empty component);
    /// - the file, after symlinks, lies in an applications folder (one of those searched, or a
    ///   `share/applications` folder such as Flatpak's exports point into);
    /// - its last step opens with `O_NOFOLLOW` as a regular file, owned by root or by the user
    ///   opening it (`uid`) and writable by nobody else, in folders each owned by root or that
    ///   user and not writable by all (unless sticky): no other local user can have planted or
    ///   swapped it.
    /// A match that fails a check is refused, not skipped: a later folder's file of the same id
    /// is not what the desktop would launch either.
    public func resolve(desktopID id: String, uid: uid_t = geteuid()) -> Result<String, Refusal> {
        guard Names.validDesktopFileID(id) else {
            return .failure(.invalidID("'\(id.prefix(80))' is not a desktop-file id (letters, digits, '.', '-', '_' ending in .desktop, with no empty, '.' or '..' component)"))
        }
        let directories = applicationDirectories
        for dir in directories {
            if let found = Self.find(id[...], in: dir) {
                return Self.trusted(found, in: directories, uid: uid)
            }
        }
        return .failure(.notInstalled("\(id) is not installed under \(directories.joined(separator: ", "))"))
    }

    /// `candidate`'s real path when it is a desktop file to launch as `uid`, else why not.
    static func trusted(_ candidate: String, in directories: [String], uid: uid_t) -> Result<String, Refusal> {
        func refuse(_ why: String) -> Result<String, Refusal> { .failure(.untrusted(why)) }
        guard let real = realPath(candidate) else { return refuse("\(candidate) cannot be resolved") }
        let roots = directories.compactMap(realPath)
        guard roots.contains(where: { real.hasPrefix($0 + "/") }) || real.contains("/share/applications/") else {
            return refuse("\(candidate) resolves to \(real), outside the applications folders; not launched")
        }
        let fd = open(real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return refuse("\(real) cannot be opened (\(String(cString: strerror(errno)))); not launched") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return refuse("\(real) is not a regular file; not launched") }
        guard st.st_uid == 0 || st.st_uid == uid, st.st_mode & S_IWOTH == 0 else {
            return refuse("\(real) is owned by uid \(st.st_uid) or writable by every user, so another user may have written it; not launched")
        }
        var dir = (real as NSString).deletingLastPathComponent
        while true {
            var d = stat()
            guard lstat(dir, &d) == 0, d.st_mode & S_IFMT == S_IFDIR else { return refuse("\(dir) cannot be checked; not launched") }
            guard d.st_uid == 0 || d.st_uid == uid, d.st_mode & S_IWOTH == 0 || d.st_mode & S_ISVTX != 0 else {
                return refuse("\(real) lies in \(dir), which another user may change (owner uid \(d.st_uid), mode \(String(d.st_mode & 0o7777, radix: 8))); not launched")
            }
            if dir == "/" || dir.isEmpty { break }
            dir = (dir as NSString).deletingLastPathComponent
        }
        return .success(real)
    }

    private static func realPath(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
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
