import Foundation

/// Which app (bundle) a recent-files entry belongs to: the application's desktop file, found by
/// its program. recently-used.xbel names an application by `name` (GLib's application name,
/// `g_get_application_name`, e.g. `gedit`) and `exec` (`'gedit %u'`); a desktop file whose `Exec`
/// runs the same program (its first word's file name), or whose id is the name, is the app, and
/// its id without `.desktop` is the bundle when it is reverse-DNS (`org.gnome.gedit.desktop` ->
/// `org.gnome.gedit`), the freedesktop convention for an app's id. Anything else (no desktop file,
/// an id that is not reverse-DNS) has no bundle of its own.
public struct ApplicationMap: Sendable {
    /// Program file name -> desktop-file id; the first applications folder wins, as in the spec.
    private var byProgram: [String: String] = [:]
    private var ids: Set<String> = []

    /// The applications folders: `$XDG_DATA_HOME/applications`, then each of `$XDG_DATA_DIRS`.
    public static func folders(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let home = environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        let dirs = (environment["XDG_DATA_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share")
            .split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
        return ([home] + dirs).map { $0 + "/applications" }
    }

    public init(folders: [String]) {
        for folder in folders {
            let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasSuffix(".desktop") }.sorted()
            for name in names.prefix(5000) where !ids.contains(name) {
                ids.insert(name)
                guard let text = Self.readSmall(folder + "/" + name), let program = Self.execProgram(text) else { continue }
                if byProgram[program] == nil { byProgram[program] = name }
            }
        }
    }

    /// The bundle of an application, or nil.
    public func bundle(for app: RecentApplication) -> String? {
        let id = app.program.flatMap { byProgram[$0] } ?? (ids.contains(app.name + ".desktop") ? app.name + ".desktop" : nil)
        guard let id else { return nil }
        let bundle = String(id.dropLast(".desktop".count))
        return Self.isReverseDNS(bundle) ? bundle : nil
    }

    static func isReverseDNS(_ s: String) -> Bool {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        return s.utf8.count <= 255 && parts.count >= 2 && parts.allSatisfy { p in
            !p.isEmpty && p.utf8.allSatisfy { c in
                (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || c == 0x2D || c == 0x5F
            }
        }
    }

    /// The program of the `[Desktop Entry]` group's `Exec` (its first word's file name).
    static func execProgram(_ text: String) -> String? {
        var inEntry = false
        for line in text.split(separator: "\n") {
            let l = line.trimmingCharacters(in: .whitespaces)
            if l.hasPrefix("[") { inEntry = l == "[Desktop Entry]"; continue }
            guard inEntry, l.hasPrefix("Exec=") else { continue }
            return RecentApplication(name: "", exec: String(l.dropFirst(5))).program
        }
        return nil
    }

    /// A desktop file's text, when it is a small regular file.
    static func readSmall(_ path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              attributes[.type] as? FileAttributeType == .typeRegular,
              (attributes[.size] as? Int ?? Int.max) <= 64 << 10 else { return nil }
        return try? String(contentsOfFile: path, encoding: .utf8)
    }
}
