#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// systemd socket activation (sd_listen_fds(3)) in plain Swift: the listening socket systemd
/// passes as fd 3 when `LISTEN_PID` is our pid.
enum SocketActivation {
    static let firstDescriptor: Int32 = 3

    /// The passed listening socket, or nil when not socket-activated (no `LISTEN_FDS`, or
    /// `LISTEN_PID` names another process: the variables were inherited, not meant for us).
    /// Throws when the passed descriptor is not an AF_UNIX stream socket that listens. The
    /// `LISTEN_*` variables are removed from this process's environment either way (when it is
    /// the one read), so children never see them.
    ///
    /// An explicit `environment` (tests) leaves the process's environment alone: `unsetenv`
    /// rewrites `environ` in place, and a test process reading it at the same time on another
    /// thread (Foundation's `Process.run` copies it) crashed on it (SIGSEGV in memcpy).
    static func adopt(environment: [String: String]? = nil, pid: pid_t = getpid(), log: Logger) throws -> UnixSocket? {
        defer { if environment == nil { for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) } } }
        let environment = environment ?? ProcessInfo.processInfo.environment
        guard let count = environment["LISTEN_FDS"].flatMap(Int32.init), count > 0 else { return nil }
        guard let listenPID = environment["LISTEN_PID"].flatMap(pid_t.init), listenPID == pid else {
            log.warning("LISTEN_FDS ignored: LISTEN_PID is not our pid", ["LISTEN_PID": environment["LISTEN_PID"] ?? "", "pid": pid])
            return nil
        }
        let names = environment["LISTEN_FDNAMES"]?.split(separator: ":", omittingEmptySubsequences: false).map(String.init) ?? []
        if count > 1 {
            log.warning("socket activation passed several descriptors; using the first", ["count": count, "names": names.joined(separator: ":")])
        }
        let fd = firstDescriptor
        try check(fd)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        // The others are not ours to use; close them so they do not leak into children.
        if count > 1 { for other in (fd + 1)..<(fd + count) { Glibc.close(other) } }
        log.info("socket activation", ["fd": fd, "name": names.first ?? "", "path": localPath(fd) ?? ""])
        return UnixSocket(fd: fd)
    }

    /// The descriptor must be an AF_UNIX stream socket in the listening state.
    static func check(_ fd: Int32) throws {
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(fd, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        let problem = "socket activation: fd \(fd) must be a listening AF_UNIX stream socket (ListenStream= with a path in searchlightd.socket)"
        guard let domain = option(SO_DOMAIN) else { throw SystemError(problem + "; getsockopt failed") }
        guard domain == AF_UNIX else { throw SystemError(problem + "; it has address family \(domain)", errno: EINVAL) }
        guard option(SO_TYPE) == Int32(SOCK_STREAM.rawValue) else { throw SystemError(problem + "; it is not SOCK_STREAM", errno: EINVAL) }
        guard option(SO_ACCEPTCONN) == 1 else { throw SystemError(problem + "; it does not listen", errno: EINVAL) }
    }

    /// The path the socket is bound to (getsockname), for the logs and status.
    static func localPath(_ fd: Int32) -> String? {
        var addr = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let rc = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard rc == 0 else { return nil }
        return withUnsafeBytes(of: addr.sun_path) { raw in
            let bytes = raw.prefix(while: { $0 != 0 })
            return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self)
        }
    }
}
