import Foundation

/// The desktop file that handles a URL scheme (`x-scheme-handler/SCHEME`), found as GLib finds
/// it, simplified: `[Default Applications]`, then `[Added Associations]`, of the `mimeapps.list`
/// files in `XDG_CONFIG_HOME`, `XDG_CONFIG_DIRS`, `XDG_DATA_HOME/applications` and
/// `XDG_DATA_DIRS/*/applications`; then the `MimeType=` lists of the desktop files installed in
/// the applications folders (`mimeinfo.cache` where a folder has one). A desktop id counts only
/// when its file is installed. Nothing is launched here.
public struct SchemeHandlers: Sendable {
    public var environment: [String: String]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// Schemes a page's app link may use: custom ones. `http(s)` is the web (the page itself is
    /// already local), and `file`, `data`, `javascript` and friends are never an app.
    public static func isAppScheme(_ scheme: String) -> Bool {
        let s = scheme.lowercased()
        guard let first = s.utf8.first, isASCIILetter(first), s.utf8.count <= 64,
              s.utf8.allSatisfy({ isASCIILetter($0) || ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") })
        else { return false }
        return !["http", "https", "file", "data", "javascript", "vbscript", "about", "blob", "ftp", "mailto", "searchlight-item",
                 "searchlight-activity", "searchlight-query"].contains(s)
    }

    /// The id (`org.example.App.desktop`) of the installed desktop file that handles `scheme`, or nil.
    public func desktopID(forScheme scheme: String) -> String? {
        guard Self.isAppScheme(scheme) else { return nil }
        let mime = "x-scheme-handler/" + scheme.lowercased()
        for section in ["Default Applications", "Added Associations"] {
            for list in mimeappsLists {
                for id in Self.entries(of: mime, section: section, in: list) where installedPath(of: id) != nil { return id }
            }
        }
        for directory in applicationDirectories {
            if let cache = Self.read(directory + "/mimeinfo.cache") {
                for id in Self.entries(of: mime, section: "MIME Cache", inText: cache) where installedPath(of: id) != nil { return id }
                continue
            }
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { continue }
            for name in names.sorted().prefix(5_000) where name.hasSuffix(".desktop") {
                guard let text = Self.read(directory + "/" + name) else { continue }
                let types = Self.value(of: "MimeType", inSection: "Desktop Entry", text: text)?.split(separator: ";").map(String.init) ?? []
                if types.contains(mime) { return name }
            }
        }
        return nil
    }

    var configDirectories: [String] {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let configHome = environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home + "/.config"
        let configDirs = (environment["XDG_CONFIG_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/xdg").split(separator: ":").map(String.init)
        return [configHome] + configDirs.filter { $0.hasPrefix("/") }
    }

    var applicationDirectories: [String] {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home + "/.local/share"
        let dataDirs = (environment["XDG_DATA_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share")
            .split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
        return ([dataHome] + dataDirs).map { ($0.hasSuffix("/") ? String($0.dropLast()) : $0) + "/applications" }
    }

    private var mimeappsLists: [String] {
        (configDirectories + applicationDirectories).map { $0 + "/mimeapps.list" }
    }

    /// The desktop file of `id` in the applications folders (`-` in an id may stand for `/`).
    func installedPath(of id: String) -> String? {
        guard id.hasSuffix(".desktop"), !id.contains("/"), !id.hasPrefix("."), !id.contains("..") else { return nil }
        for directory in applicationDirectories {
            let path = directory + "/" + id
            if FileManager.default.isReadableFile(atPath: path) { return path }
            let nested = directory + "/" + id.replacingOccurrences(of: "-", with: "/")
            if nested != path, FileManager.default.isReadableFile(atPath: nested) { return nested }
        }
        return nil
    }

    private static func entries(of mime: String, section: String, in path: String) -> [String] {
        read(path).map { entries(of: mime, section: section, inText: $0) } ?? []
    }

    static func entries(of mime: String, section: String, inText text: String) -> [String] {
        (value(of: mime, inSection: section, text: text) ?? "").split(separator: ";").map { String($0).trimmingASCIISpaces }.filter { !$0.isEmpty }
    }

    /// `key=value` in `[section]` of a desktop-entry-style file.
    static func value(of key: String, inSection section: String, text: String) -> String? {
        var current = ""
        for line in text.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("[") { current = String(trimmed.dropFirst().prefix { $0 != "]" }); continue }
            guard current == section, let eq = trimmed.firstIndex(of: "=") else { continue }
            if trimmed[..<eq].trimmingCharacters(in: .whitespaces) == key { return String(trimmed[trimmed.index(after: eq)...]) }
        }
        return nil
    }

    /// Small config files only.
    private static func read(_ path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              (attributes[.size] as? NSNumber)?.intValue ?? .max <= 1 << 20,
              let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
