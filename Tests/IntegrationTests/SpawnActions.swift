#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// File actions for the harness's own `posix_spawn` calls, which start processes that outlive
/// the moment (a daemon for a whole test, a CPU hog): the child gets 0–2 as the caller sets them
/// and **no other descriptor of the test process**. Foundation's `Process` closes them; a bare
/// `posix_spawn` does not, and the test process holds descriptors opened without
/// `O_CLOEXEC` (Foundation's atomic `write(toFile:)` opens its temporary file so). A daemon
/// that inherited the descriptor of a recorder script another test was writing kept it open for
/// writing for its whole life, so that `gio launch` of that script failed with ETXTBSY (exit 0,
/// nothing run) and the desktop test waited for a line that never came (CI, stop 44).
enum SpawnActions {
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// glibc 2.34+'s posix_spawn_file_actions_addclosefrom_np, which Swift's Glibc module does
    /// not declare.
    private static let addCloseFrom: AddCloseFrom? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()

    /// Closes every descriptor from `lowest` up in the child (after the actions added before).
    static func closeFrom(_ actions: inout posix_spawn_file_actions_t, _ lowest: Int32) {
        if let addCloseFrom {
            _ = addCloseFrom(&actions, lowest)
            return
        }
        // Older glibc: the descriptors open now (a descriptor opened between this and the spawn
        // may still leak; every glibc this project supports has the call above).
        let open = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).compactMap { Int32($0) }
        for fd in open where fd >= lowest { posix_spawn_file_actions_addclose(&actions, fd) }
    }

    /// Actions that give the child /dev/null as stdin and stdout and nothing above 2.
    static func quiet() -> posix_spawn_file_actions_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        closeFrom(&actions, 3)
        return actions
    }
}
