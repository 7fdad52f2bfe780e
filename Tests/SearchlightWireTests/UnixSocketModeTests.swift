import Foundation
import Glibc
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// `UnixSocket.listen` gives the socket file its mode without touching the process's umask: the
/// umask is shared by every thread, so a temporary one made files and folders that other threads
/// created at that moment unusable (a folder made while it was 0177 got mode 0600: not even its
/// owner could create in it). Seen as six tests running helpers as other uids failing at once.
@Suite("Unix socket files get their mode without the process umask changing", .serialized, .onOwnThreads)
struct UnixSocketModeTests {
    /// The umask as the kernel reports it, read without changing it (`umask(2)` can only set).
    static func currentUmask() -> mode_t? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }) else { return nil }
        return mode_t(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8)
    }

    /// (Under the test process's own umask: a test must not change it, for the reason above.)
    @Test("the socket has the mode asked for, looser or stricter than the umask allows")
    func modes() throws {
        let dir = NSTemporaryDirectory() + "slumask-\(getpid())"
        mkdir(dir, 0o700)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let mask = Self.currentUmask()
        for mode: mode_t in [0o666, 0o600, 0o660] {
            let path = dir + "/s.sock"
            let socket = try UnixSocket.listen(path: path, mode: mode)
            var st = stat()
            #expect(stat(path, &st) == 0)
            #expect(st.st_mode & 0o777 == mode, "asked \(String(mode, radix: 8)), got \(String(st.st_mode & 0o777, radix: 8))")
            #expect(Self.currentUmask() == mask)
            socket.close()
            unlink(path)
        }
    }

    @Test("binding never changes the umask another thread sees")
    func umaskUntouched() throws {
        let dir = NSTemporaryDirectory() + "slumask2-\(getpid())"
        mkdir(dir, 0o700)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        guard let before = Self.currentUmask() else {
            Issue.record("no Umask line in /proc/self/status")
            return
        }
        let done = Atomic<Bool>(false)
        let seen = Mutex<Set<mode_t>>([])
        let watcher = Thread {
            while !done.load(ordering: .acquiring) {
                if let m = Self.currentUmask() { _ = seen.withLock { $0.insert(m) } }
            }
        }
        watcher.start()
        for i in 0..<2_000 {
            let path = dir + "/s\(i % 4).sock"
            unlink(path)
            let socket = try UnixSocket.listen(path: path, mode: 0o600)
            socket.close()
        }
        done.store(true, ordering: .releasing)
        while !watcher.isFinished { usleep(1_000) }
        #expect(seen.withLock { $0 } == [before])
    }
}
