#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Testing
import TestThreads
@testable import SearchlightWire

/// `UnixSocket.listen` and the process's umask: `swift test` runs every test target in one
/// process, where fake daemons listen while integration tests make folders and start helpers as
/// other users. A listen that set the umask around `bind` gave whatever another thread made
/// meanwhile mode 0177 (a folder its owner could not create files in): six tests whose helpers
/// run as other uids failed together once in make test.
@Suite("UnixSocket.listen", .onOwnThreads)
struct UnixSocketListenTests {
    /// The process's umask as /proc shows it (reading it with umask(2) would set it).
    static func currentUmask() -> mode_t? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }) else { return nil }
        return mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
    }

    @Test("the socket file has the mode asked for, never more, and the process's umask is never changed meanwhile")
    func umaskUntouched() throws {
        let before = try #require(Self.currentUmask(), "no Umask: line in /proc/self/status")
        var template = Array("/tmp/sl-listen-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
        defer { try? FileManager.default.removeItem(atPath: dir) }

        // A thread watching the umask while this one listens 300 times (the old code's window,
        // bind alone, was seen from the watcher in every run of 300 listens).
        let stop = Mutex(false)
        let seen = Mutex<Set<mode_t>>([])
        let watcher = Thread {
            while !stop.withLock({ $0 }) {
                if let m = Self.currentUmask() { seen.withLock { _ = $0.insert(m) } }
            }
        }
        watcher.start()
        for i in 0..<300 {
            let mode: mode_t = i % 2 == 0 ? 0o600 : 0o666
            let path = dir + "/s\(i % 4).sock"
            unlink(path)
            let listener = try UnixSocket.listen(path: path, mode: mode)
            var st = stat()
            #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == mode, "\(path): \(String(st.st_mode & 0o777, radix: 8))")
            listener.close()
        }
        stop.withLock { $0 = true }
        while !watcher.isFinished { usleep(1000) }
        #expect(seen.withLock { $0 } == [before], "umasks seen while listening: \(seen.withLock { $0.map { String($0, radix: 8) } })")
        #expect(Self.currentUmask() == before)
    }
}
