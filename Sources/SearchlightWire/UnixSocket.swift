#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// A POSIX error with the call that failed, e.g. `connect(/run/x.sock): No such file or directory`.
public struct SystemError: Error, Sendable, CustomStringConvertible {
    public var call: String
    public var errno: Int32
    public init(_ call: String, errno: Int32 = Glibc.errno) {
        self.call = call
        self.errno = errno
    }
    public var description: String { "\(call): \(String(cString: strerror(errno)))" }
}

/// The credentials of the process at the other end of a Unix socket (`SO_PEERCRED`).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

/// An owned `AF_UNIX` stream socket file descriptor. Closing is explicit and idempotent.
public final class UnixSocket: @unchecked Sendable {
    private let lock = NSLock()
    private var _fd: Int32
    /// `accept` calls waiting on `_fd`: while there are any, a close shuts the socket down (which
    /// ends their wait) and leaves the descriptor's release to the last of them (`releasing`),
    /// so its number cannot be reused under a waiting accept.
    private var accepting = 0
    private var releasing: Int32 = -1

    public init(fd: Int32) { _fd = fd }

    deinit { if _fd >= 0 { Glibc.close(_fd) } }

    public var fd: Int32 { lock.withLock { _fd } }

    /// `accept` calls waiting on this listener now (tests).
    var acceptsWaiting: Int { lock.withLock { accepting } }

    public static func makeAddress(_ path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else {
            throw SystemError("socket path too long (\(bytes.count) bytes, limit \(capacity - 1)): \(path)", errno: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return addr
    }

    /// Connects to a listening socket at `path`.
    public static func connect(path: String) throws -> UnixSocket {
        var addr = try makeAddress(path)
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError("socket") }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard rc == 0 else {
            let e = errno
            Glibc.close(fd)
            throw SystemError("connect(\(path))", errno: e)
        }
        return UnixSocket(fd: fd)
    }

    /// Binds and listens at `path`, replacing a stale socket file (but never another kind of file).
    public static func listen(path: String, backlog: Int32 = 128, mode: mode_t = 0o600) throws -> UnixSocket {
        var addr = try makeAddress(path)
        var st = stat()
        if lstat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFSOCK else {
                throw SystemError("bind(\(path)): a file that is not a socket is in the way", errno: EEXIST)
            }
            // A live daemon answers on it; a stale file refuses the connection.
            if let probe = try? connect(path: path) {
                probe.close()
                throw SystemError("bind(\(path)): another searchlightd is already listening", errno: EADDRINUSE)
            }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError("socket") }
        // The file bind creates is never more open than `mode`: Linux gives it the socket inode's
        // mode less the umask, and fchmod sets that mode. Not by changing the umask around bind:
        // the umask is the whole process's, and every file, folder and child process another
        // thread made meanwhile got 0177 (a folder without search permission for its owner; the
        // test process's helpers running as other users then could not create their files).
        guard fchmod(fd, mode & 0o777) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw SystemError("fchmod(\(path))", errno: e)
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        let bindErrno = errno
        guard rc == 0 else {
            Glibc.close(fd)
            throw SystemError("bind(\(path))", errno: bindErrno)
        }
        chmod(path, mode)
        guard Glibc.listen(fd, backlog) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw SystemError("listen(\(path))", errno: e)
        }
        return UnixSocket(fd: fd)
    }

    /// A connected pair (for extensions on fd 3, and for tests).
    public static func pair() throws -> (UnixSocket, UnixSocket) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SystemError("socketpair")
        }
        return (UnixSocket(fd: fds[0]), UnixSocket(fd: fds[1]))
    }

    /// Accepts one connection; retries on EINTR. Returns nil when the listener was closed.
    ///
    /// Waits in `poll` on a descriptor it pins (`accepting`), then accepts under the lock without
    /// blocking. A `close()` from another thread shuts the socket down, which ends the wait, and
    /// leaves the release of the number to this call: the number can never be reused by another
    /// socket of the process while an accept waits on it. (It was: closed and at once reused by
    /// another listener, the old loop accepted, took, that listener's connection; issue 30.)
    /// No timeout: an idle daemon's accept loop wakes for connections only.
    public func accept() throws -> UnixSocket? {
        let listener: Int32 = lock.withLock {
            guard _fd >= 0 else { return -1 }
            accepting += 1
            return _fd
        }
        guard listener >= 0 else { return nil }
        defer {
            lock.withLock {
                accepting -= 1
                if accepting == 0, releasing >= 0 {
                    Glibc.close(releasing)
                    releasing = -1
                }
            }
        }
        while true {
            var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            if poll(&ready, 1, -1) < 0 {
                if errno == EINTR { continue }
                throw SystemError("poll")
            }
            let (c, error): (Int32, Int32) = lock.withLock {
                guard _fd == listener else { return (-1, EBADF) }
                let flags = fcntl(listener, F_GETFL)
                if flags >= 0, flags & O_NONBLOCK == 0 { _ = fcntl(listener, F_SETFL, flags | O_NONBLOCK) }
                // The accepted socket blocks (on Linux accept does not pass O_NONBLOCK on).
                let c = Glibc.accept(listener, nil, nil)
                guard c >= 0 else { return (c, errno) }
                _ = fcntl(c, F_SETFD, FD_CLOEXEC)
                return (c, 0)
            }
            if c >= 0 { return UnixSocket(fd: c) }
            switch error {
            case EINTR, ECONNABORTED, EAGAIN, EWOULDBLOCK: continue
            case EBADF, EINVAL: return nil
            default: throw SystemError("accept", errno: error)
            }
        }
    }

    /// The receive timeout (`setReceiveTimeout`) passed with nothing to read.
    public struct ReceiveTimeout: Error, Sendable {}

    /// Reads up to `max` bytes into `buffer`; 0 means the peer closed. Retries on EINTR; throws
    /// `ReceiveTimeout` when a receive timeout is set and passes.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n >= 0 { return n }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { throw ReceiveTimeout() }
            if errno == ECONNRESET || errno == EBADF { return 0 }
            throw SystemError("recv")
        }
    }

    /// Reads what has arrived, without waiting (MSG_DONTWAIT): nil when nothing has, 0 at the
    /// stream's end (or a reset), else the byte count.
    public func readAvailable(into buffer: UnsafeMutableRawBufferPointer) throws -> Int? {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
            if n >= 0 { return n }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { return nil }
            if errno == ECONNRESET || errno == EBADF { return 0 }
            throw SystemError("recv")
        }
    }

    /// The send timeout set with `setSendTimeout`, if any: the most one frame may take to write.
    public var sendTimeout: Int? { lock.withLock { _sendTimeout } }
    private var _sendTimeout: Int?

    /// The peer did not take a whole frame within the send timeout.
    public struct SendTimeout: Error, Sendable, CustomStringConvertible {
        public var seconds: Int
        public var written: Int
        public var total: Int
        public var description: String { "send: \(written) of \(total) bytes written in \(seconds) s, the send timeout" }
    }

    /// Writes all bytes (MSG_NOSIGNAL: a vanished peer is an error, never SIGPIPE). With a send
    /// timeout set, that is an overall deadline for the whole of `bytes`: the writes do not block
    /// (MSG_DONTWAIT) and `poll` waits for room for what is left of it, so a peer that reads a
    /// trickle (which keeps a blocking `send` with `SO_SNDTIMEO` alive for ever) is cut off too.
    public func writeAll(_ bytes: [UInt8]) throws {
        BlockingCheck.blocking("UnixSocket.writeAll")
        let seconds = sendTimeout
        let deadline = seconds.map { ContinuousClock.now + .seconds($0) }
        try bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let flags = Int32(MSG_NOSIGNAL) | (deadline == nil ? 0 : Int32(MSG_DONTWAIT))
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, flags)
                if n < 0 {
                    if errno == EINTR { continue }
                    if let deadline, let seconds, errno == EAGAIN || errno == EWOULDBLOCK {
                        let left = ContinuousClock.now.duration(to: deadline)
                        guard left > .zero else { throw SendTimeout(seconds: seconds, written: offset, total: raw.count) }
                        let ms = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
                        var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        if poll(&p, 1, ms) < 0, errno != EINTR { throw SystemError("poll") }
                        continue
                    }
                    throw SystemError("send")
                }
                offset += n
            }
        }
    }

    /// Writes what the socket takes now, without waiting (MSG_DONTWAIT, MSG_NOSIGNAL): the
    /// number of bytes written, 0 when its buffer is full. Throws when the write fails (the peer
    /// is gone). Lets a connection write a frame on the thread that made it when the peer is
    /// keeping up, and leave only the rest, if any, to a writer that may wait.
    public func writeAvailable(_ bytes: UnsafeRawBufferPointer) throws -> Int {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return 0 }
        var offset = 0
        while offset < bytes.count {
            let n = send(fd, base + offset, bytes.count - offset, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return offset }
                throw SystemError("send")
            }
            offset += n
        }
        return offset
    }

    public func peerCredentials() throws -> PeerCredentials {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (needs _GNU_SOURCE in C, so spelt out here)
        var cred: (Int32, UInt32, UInt32) = (0, 0, 0)
        var len = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 else { throw SystemError("getsockopt(SO_PEERCRED)") }
        return PeerCredentials(pid: cred.0, uid: cred.1, gid: cred.2)
    }

    /// Sets a send timeout so that a peer that never reads cannot block a writer forever.
    public func setSendTimeout(seconds: Int) {
        lock.withLock { _sendTimeout = seconds > 0 ? seconds : nil }
        var tv = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Makes a blocked `read` give up after `seconds` (then it throws `ReceiveTimeout`).
    public func setReceiveTimeout(seconds: Int) {
        var tv = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// True when the connection is gone for good: the peer closed its end (or shut down both
    /// directions), this end was shut down or closed, or the socket failed. A peer that only
    /// stopped writing (`shutdown(SHUT_WR)`, and still reads its answers) is not hung up. One
    /// `poll` with no wait; the daemon asks it while a query runs, to stop work nobody awaits.
    public var isHungUp: Bool {
        let f = fd
        guard f >= 0 else { return true }
        var p = pollfd(fd: f, events: 0, revents: 0)
        guard poll(&p, 1, 0) >= 0 else { return false }
        return p.revents & Int16(POLLHUP | POLLERR | POLLNVAL) != 0
    }

    /// Stops both directions without releasing the descriptor (wakes a blocked reader). Under
    /// the lock that `close` takes: a shutdown racing a close must never reach the descriptor
    /// number the close freed, which the next `accept` may already have handed to another
    /// connection (seen: a new client's connection shut down by a late shutdown of an old one).
    public func shutdown() {
        lock.withLock {
            if _fd >= 0 { Glibc.shutdown(_fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Closes this process's descriptor only, without shutting the socket down: for the end
    /// handed to a child process, which keeps using its inherited copy. On a listener with an
    /// `accept` waiting, it is `close()`: only a shutdown ends that wait (a listener this process
    /// accepts on is not one it handed on), and without it the accept would wait for ever.
    public func closeDescriptor() {
        lock.withLock {
            if _fd >= 0 {
                if accepting > 0 { Glibc.shutdown(_fd, Int32(SHUT_RDWR)) }
                release(_fd)
            }
            _fd = -1
        }
    }

    public func close() {
        lock.withLock {
            if _fd >= 0 {
                Glibc.shutdown(_fd, Int32(SHUT_RDWR))
                release(_fd)
            }
            _fd = -1
        }
    }

    /// Closes the descriptor now, or, while an `accept` waits on it, when the last one returns.
    /// Under the lock.
    private func release(_ fd: Int32) {
        if accepting > 0 { releasing = fd } else { Glibc.close(fd) }
    }
}
