#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Where the daemon keeps its state and socket (DESIGN §2), shared by the daemon, SDK and CLI so
/// that they always agree.
public enum DefaultPaths {
    public static func environment(_ name: String) -> String? {
        guard let v = ProcessInfo.processInfo.environment[name], !v.isEmpty else { return nil }
        return v
    }

    static var home: String { environment("HOME") ?? NSHomeDirectory() }

    /// The daemon's socket. User mode: `$XDG_RUNTIME_DIR/searchlight/searchlightd.sock`, else
    /// `/tmp/searchlight-$UID/searchlightd.sock`; system mode: `$RUNTIME_DIRECTORY` or `/run/searchlight`.
    public static func socket(system: Bool) -> String {
        if system {
            let dir = environment("RUNTIME_DIRECTORY")?.split(separator: ":").first.map(String.init) ?? "/run/searchlight"
            return dir + "/searchlightd.sock"
        }
        if let runtime = environment("XDG_RUNTIME_DIR") { return runtime + "/searchlight/searchlightd.sock" }
        return "/tmp/searchlight-\(getuid())/searchlightd.sock"
    }

    /// The socket a client should use: `SEARCHLIGHT_SOCKET`, else the user daemon's socket if it
    /// exists, else the system daemon's.
    /// The `/tmp` fallback is taken only from a folder this uid owns that no one else may write
    /// (any local user can create `/tmp/searchlight-0` and listen in it for root's clients).
    public static func clientSocket() -> String {
        if let explicit = environment("SEARCHLIGHT_SOCKET") { return explicit }
        let user = socket(system: false)
        let inTmp = environment("XDG_RUNTIME_DIR") == nil
        if access(user, F_OK) == 0 && (!inTmp || ownedPrivately(folder: (user as NSString).deletingLastPathComponent, uid: getuid())) {
            return user
        }
        let system = socket(system: true)
        if access(system, F_OK) == 0 { return system }
        return user
    }

    /// Whether `folder` is a real folder (not a link) owned by `uid` that neither its group nor
    /// others may write.
    static func ownedPrivately(folder: String, uid: uid_t) -> Bool {
        var st = stat()
        guard lstat(folder, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return false }
        return st.st_uid == uid && st.st_mode & 0o022 == 0
    }

    public static func stateDirectory(system: Bool) -> String {
        if system {
            return environment("STATE_DIRECTORY")?.split(separator: ":").first.map(String.init) ?? "/var/lib/searchlight"
        }
        return (environment("XDG_STATE_HOME") ?? home + "/.local/state") + "/searchlight"
    }

    /// Where unit files are looked for, first match of a label wins (DESIGN §2). User mode:
    /// `$XDG_CONFIG_HOME/searchlight/extensions.d`, `$XDG_DATA_HOME/searchlight/extensions.d`;
    /// system mode: `/etc/searchlight/extensions.d`, `/usr/lib/searchlight/extensions.d`.
    public static func unitDirectories(system: Bool) -> [String] {
        if system { return ["/etc/searchlight/extensions.d", "/usr/lib/searchlight/extensions.d"] }
        let config = environment("XDG_CONFIG_HOME") ?? home + "/.config"
        let data = environment("XDG_DATA_HOME") ?? home + "/.local/share"
        return [config + "/searchlight/extensions.d", data + "/searchlight/extensions.d"]
    }
}
