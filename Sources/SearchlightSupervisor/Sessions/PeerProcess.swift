#if canImport(Glibc)
import Glibc
#endif
import CPeerProcess
import Foundation
import SearchlightWire
import Synchronization

/// The process at the other end of a client connection, pinned when the connection is accepted,
/// and its sandbox, read from its root when it says who it is (DESIGN §14, Docs/Operations.md
/// "Who may use a bundle"). Modelled on how xdg-desktop-portal identifies a Flatpak app.
///
/// - **Pinning.** A pidfd for the peer: `SO_PEERPIDFD` (Linux 6.5 and later) names the very
///   process that connected; before that, `pidfd_open` of the `SO_PEERCRED` pid. Reading through
///   `/proc/PID` and then finding the pidfd's process still running proves that what was read was
///   that process's (a pid is not reused while its process runs).
/// - **The root.** `/proc/PID/root` opened as a path (`O_PATH`). The same root as the daemon's:
///   not sandboxed, whatever files the process has (a `.flatpak-info` in the host's root says
///   nothing). Another root: its `.flatpak-info`,
///   opened relative to that root without following a symbolic link, a regular file of at most
///   64 KiB, names the Flatpak app; no such file: not a sandbox the daemon recognises.
/// - **Refused, never waved through:** a peer that exited before it was identified, whose
///   `.flatpak-info` is not a valid one, that is outside the daemon's pid namespace, or whose root
///   cannot be read while it runs in a pid namespace of its own (Flatpak always makes one).
///
/// The reading runs on the connection's own thread (at `initialize`), so a peer whose root is slow
/// to read (a FUSE file system it serves itself) stalls only its own connection. It is cheap
/// enough for every connection: a few system calls, tens of microseconds.
final class PeerProcess: Sendable {
    let pid: Int32
    /// The peer's uid and gid (`SO_PEERCRED`): a root daemon reads the peer's `/proc` entry with
    /// them as its file-system ids (`withPeerFileIDs`), as the portal reads it as the same user.
    let uid: uid_t?
    let gid: gid_t?
    /// How the process was pinned: the pidfd, or why there is none.
    private let pin: Mutex<Pin>

    enum Pin {
        case pidfd(Int32)
        /// No pidfd: the errno of the last attempt.
        case failed(Int32)
        case closed
    }

    /// Pins the peer of an accepted connection (cheap: no file is read). `peerPidfd: false` skips
    /// `SO_PEERPIDFD`, as on a kernel before 6.5 (tests).
    init(socket: UnixSocket, pid: Int32, uid: uid_t? = nil, gid: gid_t? = nil, peerPidfd: Bool = true) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        var fd: Int32 = -1
        var error: Int32 = 0
        if peerPidfd {
            fd = sl_peer_pidfd(socket.fd)
            if fd < 0 { error = errno }
        }
        if fd < 0, pid > 0 {
            fd = sl_pidfd_open(pid)
            if fd < 0 { error = errno }
        }
        pin = Mutex(fd >= 0 ? .pidfd(fd) : .failed(error))
    }

    deinit {
        if case .pidfd(let fd) = pin.withLock({ $0 }) { close(fd) }
    }

    /// The peer's sandbox. Reads the process's root once; the pidfd is closed after.
    func identify() -> PeerSandbox {
        let pinned: Int32?
        switch pin.withLock({ p -> Pin in defer { p = .closed }; return p }) {
        case .pidfd(let fd): pinned = fd
        case .failed(let e) where e == ENOSYS: pinned = nil  // Linux before 5.3: the race stays open
        case .failed(let e): return .unidentified(reason: pid <= 0 ? "it is outside the daemon's pid namespace" : "it could not be pinned: \(String(cString: strerror(e)))")
        case .closed: return .unidentified(reason: "it was already identified")
        }
        defer { if let pinned { close(pinned) } }
        guard pid > 0 else { return .unidentified(reason: "it is outside the daemon's pid namespace") }
        var found = Self.withPeerFileIDs(uid: uid, gid: gid) { Self.readSandbox(pid: pid) }
        // What was read is the pinned process's only if that process still runs now.
        if let pinned, Self.hasExited(pidfd: pinned) { return .unidentified(reason: "it exited while it was being identified") }
        if case .unidentified(let reason) = found, reason == Self.vanishedReason, pinned != nil {
            // Still running, yet its /proc entry is not there for us: hidden (`hidepid`), e.g.
            // a process that made itself not dumpable. Refused: never taken as unsandboxed.
            found = .unidentified(reason: "its /proc entry is hidden from the daemon (a process that is not dumpable?)")
        }
        return found
    }

    static let vanishedReason = "it exited before it was identified"

    /// Runs `body` with this thread's effective uid and gid (and so its file-system ids) set to
    /// the peer's, when the daemon is root and the peer is not. A root daemon under the shipped
    /// unit has no `CAP_SYS_PTRACE` (and `ProtectProc=invisible`): another user's `/proc/PID` is
    /// hidden from it and its `root` unreadable (ptrace access), and a sandbox in a user namespace
    /// of its own is open only to that namespace's owner (its euid). As the peer's own user, like
    /// xdg-desktop-portal, it may look. Per thread (the raw system calls, not glibc's process-wide
    /// set*id); the real and saved ids stay 0, so the effective ones, and the capabilities with
    /// them, come back before this returns.
    static func withPeerFileIDs<T>(uid: uid_t?, gid: gid_t?, _ body: () -> T) -> T {
        guard geteuid() == 0, let uid, let gid, uid != 0 else { return body() }
        // Without CAP_SETGID/CAP_SETUID (a root confined otherwise) it looks as itself: the
        // rules for a root it may not look into then apply (readSandbox).
        guard sl_thread_setegid(gid) == 0 else { return body() }
        guard sl_thread_seteuid(uid) == 0 else {
            _ = sl_thread_setegid(0)
            return body()
        }
        defer {
            // The uid first: back at euid 0 the thread has its capabilities again, the gid's too.
            if sl_thread_seteuid(0) != 0 || sl_thread_setegid(0) != 0 {
                fatalError("cannot restore the thread's effective ids to root: \(String(cString: strerror(errno)))")
            }
        }
        return body()
    }

    /// Whether the process a pidfd refers to has exited (a pidfd polls readable then).
    static func hasExited(pidfd: Int32) -> Bool {
        var p = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) != 0
    }

    /// The sandbox of process `pid`, from its root (see the type's comment for the rule).
    static func readSandbox(pid: Int32, proc: String = "/proc") -> PeerSandbox {
        let root = sl_open_directory_path("\(proc)/\(pid)/root")
        guard root >= 0 else {
            let e = errno
            switch e {
            case ENOENT, ESRCH:
                return .unidentified(reason: vanishedReason)
            case EACCES, EPERM:
                // The daemon may not look (another user's process, seen by a daemon that is not
                // root). Flatpak always gives an app a pid namespace of its own: in one, refused.
                if let theirs = pidNamespaceDepth(pid: pid, proc: proc), let ours = pidNamespaceDepth(pid: nil, proc: proc), theirs <= ours {
                    return .none
                }
                return .unidentified(reason: "its root cannot be read and it runs in a pid namespace of its own")
            default:
                return .unidentified(reason: "its root cannot be read: \(String(cString: strerror(e)))")
            }
        }
        defer { close(root) }
        var theirs = stat(), ours = stat()
        guard fstat(root, &theirs) == 0, stat("/", &ours) == 0 else {
            return .unidentified(reason: "its root cannot be examined: \(String(cString: strerror(errno)))")
        }
        if theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino { return .none }
        let info = openat(root, ".flatpak-info", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard info >= 0 else {
            let e = errno
            // Another root without the file: a container or a sandbox other than Flatpak's, which
            // the daemon does not recognise (Docs/Operations.md).
            if e == ENOENT { return .none }
            return .unidentified(reason: "its /.flatpak-info cannot be opened: \(String(cString: strerror(e)))")
        }
        defer { close(info) }
        var st = stat()
        guard fstat(info, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            return .unidentified(reason: "its /.flatpak-info is not a regular file")
        }
        guard st.st_size <= FlatpakInfo.maxBytes else { return .unidentified(reason: "its /.flatpak-info is over \(FlatpakInfo.maxBytes) bytes") }
        var bytes = [UInt8](repeating: 0, count: FlatpakInfo.maxBytes + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(info, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { return .unidentified(reason: "its /.flatpak-info cannot be read: \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            count += n
        }
        do {
            return .flatpak(appID: try FlatpakInfo.appID(Array(bytes[..<count])))
        } catch {
            return .unidentified(reason: "its \(error.description)")
        }
    }

    /// How deeply nested a process's pid namespace is: the number of pids on the `NSpid:` line of
    /// its status (readable without the right to look inside the process); nil when unknown.
    static func pidNamespaceDepth(pid: Int32?, proc: String = "/proc") -> Int? {
        let path = proc + "/" + (pid.map(String.init) ?? "self") + "/status"
        // Read to its end with read(2): a /proc file reports a size of 0.
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 16_384)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { break }
            count += n
        }
        let text = String(decoding: bytes[..<count], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("NSpid:") {
            return line.dropFirst(6).split(whereSeparator: { $0 == " " || $0 == "\t" }).count
        }
        return nil
    }
}
