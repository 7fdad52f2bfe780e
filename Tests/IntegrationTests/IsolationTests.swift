#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import SearchlightKit

/// System mode: one uid cannot read, write or erase another uid's bundle (DESIGN §6). Runs as
/// root, with two unprivileged uids that need no passwd entry (`setpriv` switches to them).
@Suite("System-mode isolation between users", .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct IsolationTests {
    static let alice: UInt32 = 64_101
    static let bob: UInt32 = 64_102

    func cli(as uid: UInt32, _ arguments: [String], socket: String) throws -> CLIResult {
        try runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket] + arguments,
            socket: nil, executable: "/usr/bin/setpriv")
    }

    @Test("another uid's bundle cannot be read, written, erased or administered")
    func isolation() throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try DaemonProcess(arguments: ["--system"], dir: dir)
        let items = dir.path + "/items.jsonl"
        try #"{"uniqueIdentifier":"secret-1","attributeSet":{"title":"alice private note"}}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)

        let imported = try cli(as: Self.alice, ["import", "com.alice.notes", items], socket: daemon.socket)
        #expect(imported.status == 0, "\(imported.stderr)")
        let own = try cli(as: Self.alice, ["query", "com.alice.notes", #"title == "*private*""#], socket: daemon.socket)
        #expect(own.status == 0 && own.stdout.contains("secret-1"), "\(own.stderr)")

        let read = try cli(as: Self.bob, ["query", "com.alice.notes", #"title == "*""#], socket: daemon.socket)
        #expect(read.status == 1)
        #expect(!read.stdout.contains("secret"))
        #expect(read.stderr.contains("belongs to uid \(Self.alice)"), "\(read.stderr)")

        let write = try cli(as: Self.bob, ["import", "com.alice.notes", items], socket: daemon.socket)
        #expect(write.status == 1 && write.stderr.contains("belongs to uid"), "\(write.stderr)")
        let delete = try cli(as: Self.bob, ["delete", "com.alice.notes", "--all"], socket: daemon.socket)
        #expect(delete.status == 1)
        let search = try cli(as: Self.bob, ["search", "com.alice.notes", "private"], socket: daemon.socket)
        #expect(search.status == 1 && !search.stdout.contains("secret"))

        // Admin methods (status, erase, search across bundles) are for root and the daemon's user.
        for args in [["status"], ["erase", "com.alice.notes"], ["search", "private"]] {
            let r = try cli(as: Self.bob, args, socket: daemon.socket)
            #expect(r.status == 1, "\(args): \(r.stdout) \(r.stderr)")
            #expect(!r.stdout.contains("secret"))
        }
        // Bob's own bundle works, and Alice's data is intact.
        let bobs = try cli(as: Self.bob, ["import", "com.bob.notes", items], socket: daemon.socket)
        #expect(bobs.status == 0, "\(bobs.stderr)")
        let still = try cli(as: Self.alice, ["query", "com.alice.notes", #"uniqueIdentifier == "secret-1""#], socket: daemon.socket)
        #expect(still.status == 0 && still.stdout.contains("secret-1"))
    }

    @Test("members of --admin-group may use admin methods; other users may not",
        .enabled(if: getgrnam("adm") != nil))
    func adminGroup() throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try DaemonProcess(arguments: ["--system", "--admin-group", "adm"], dir: dir)
        let admGID = getgrnam("adm")!.pointee.gr_gid
        let member = try runCLI(["--reuid=\(Self.bob)", "--regid=\(admGID)", "--clear-groups", "--", Products.path("searchlight"),
            "--socket", daemon.socket, "status", "--json"], socket: nil, executable: "/usr/bin/setpriv")
        #expect(member.status == 0, "\(member.stderr)")
        #expect(member.stdout.contains("\"mode\""))
        let other = try cli(as: Self.bob, ["status"], socket: daemon.socket)
        #expect(other.status == 1)
        #expect(other.stderr.contains("admin"), "\(other.stderr)")
    }

    @Test("system-mode files and socket have the modes of the design")
    func modes() throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try DaemonProcess(arguments: ["--system"], dir: dir)
        var st = stat()
        #expect(stat(daemon.socket, &st) == 0 && st.st_mode & 0o777 == 0o666)
        let index = daemon.stateDir + "/indexes/com.alice.notes/_default.sqlite"
        let items = dir.path + "/one.jsonl"
        try #"{"uniqueIdentifier":"x"}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)
        #expect(try cli(as: Self.alice, ["import", "com.alice.notes", items], socket: daemon.socket).status == 0)
        #expect(stat(index, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(daemon.stateDir + "/indexes/com.alice.notes", &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(stat(daemon.stateDir + "/supervisor.sqlite", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }
}
