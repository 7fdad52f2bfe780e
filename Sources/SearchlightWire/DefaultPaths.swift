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
    public static func clientSocket() -> String {
        if let explicit = environment("SEARCHLIGHT_SOCKET") { return explicit }
        let user = socket(system: false)
        if access(user, F_OK) == 0 { return user }
        let system = socket(system: true)
        if access(system, F_OK) == 0 { return system }
        return user
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
