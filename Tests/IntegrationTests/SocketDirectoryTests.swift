import Foundation
import Testing
import TestThreads

@Suite("The socket's directory", .onOwnThreads)
struct SocketDirectoryTests {
    @Test("a socket in an existing shared directory leaves the directory's mode alone; the socket itself is private")
    func existingDirectoryUntouched() throws {
        let dir = TempDir()
        // A directory like /tmp: sticky, everyone may write. The daemon used to make it 0700.
        #expect(chmod(dir.path, 0o1777) == 0)
        let daemon = try DaemonProcess(dir: dir)
        defer { daemon.stop() }
        var st = stat()
        #expect(stat(dir.path, &st) == 0)
        #expect(st.st_mode & 0o7777 == 0o1777, "mode \(String(st.st_mode & 0o7777, radix: 8))")
        #expect(stat(daemon.socket, &st) == 0)
        #expect(st.st_mode & 0o077 == 0, "socket mode \(String(st.st_mode & 0o7777, radix: 8))")
    }

    @Test("a socket directory the daemon creates is private in user mode")
    func createdDirectoryPrivate() throws {
        let dir = TempDir()
        let socketDir = dir.path + "/run"
        let daemon = try DaemonProcess(arguments: ["--socket", socketDir + "/d.sock"], dir: dir)
        defer { daemon.stop() }
        var st = stat()
        #expect(stat(socketDir, &st) == 0)
        #expect(st.st_mode & 0o7777 == 0o700, "mode \(String(st.st_mode & 0o7777, radix: 8))")
    }
}
