#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// System mode: one uid cannot read, write or erase another uid's bundle (DESIGN §6). Runs as
/// root, with two unprivileged uids that need no passwd entry (`setpriv` switches to them).
@Suite("System-mode isolation between users", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct IsolationTests {
    static let alice: UInt32 = 64_101
    static let bob: UInt32 = 64_102

    func cli(as uid: UInt32, _ arguments: [String], socket: String) async throws -> CLIResult {
        try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", Products.path("searchlight"), "--socket", socket] + arguments,
            socket: nil, executable: "/usr/bin/setpriv")
    }

    @Test("another uid's bundle cannot be read, written, erased or administered")
    func isolation() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        let items = dir.path + "/items.jsonl"
        try #"{"uniqueIdentifier":"secret-1","attributeSet":{"title":"alice private note"}}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)

        let imported = try await cli(as: Self.alice, ["import", "com.alice.notes", items], socket: daemon.socket)
        #expect(imported.status == 0, "\(imported.stderr)")
        let own = try await cli(as: Self.alice, ["query", "com.alice.notes", #"title == "*private*""#], socket: daemon.socket)
        #expect(own.status == 0 && own.stdout.contains("secret-1"), "\(own.stderr)")

        let read = try await cli(as: Self.bob, ["query", "com.alice.notes", #"title == "*""#], socket: daemon.socket)
        #expect(read.status == 1)
        #expect(!read.stdout.contains("secret"))
        // Refused without naming the owner (issue 13: nothing that helps enumerate other users' bundles).
        #expect(read.stderr.contains("permission denied for bundle com.alice.notes") && !read.stderr.contains(String(Self.alice)), "\(read.stderr)")

        let write = try await cli(as: Self.bob, ["import", "com.alice.notes", items], socket: daemon.socket)
        #expect(write.status == 1 && write.stderr.contains("permission denied for bundle com.alice.notes"), "\(write.stderr)")
        let delete = try await cli(as: Self.bob, ["delete", "com.alice.notes", "--all"], socket: daemon.socket)
        #expect(delete.status == 1)
        let search = try await cli(as: Self.bob, ["search", "com.alice.notes", "private"], socket: daemon.socket)
        #expect(search.status == 1 && !search.stdout.contains("secret"))

        // Admin methods (status, erase, search across bundles) are for root and the daemon's user.
        for args in [["status"], ["erase", "com.alice.notes"], ["search", "private"]] {
            let r = try await cli(as: Self.bob, args, socket: daemon.socket)
            #expect(r.status == 1, "\(args): \(r.stdout) \(r.stderr)")
            #expect(!r.stdout.contains("secret"))
        }
        // Bob's own bundle works, and Alice's data is intact.
        let bobs = try await cli(as: Self.bob, ["import", "com.bob.notes", items], socket: daemon.socket)
        #expect(bobs.status == 0, "\(bobs.stderr)")
        let still = try await cli(as: Self.alice, ["query", "com.alice.notes", #"uniqueIdentifier == "secret-1""#], socket: daemon.socket)
        #expect(still.status == 0 && still.stdout.contains("secret-1"))
    }

    @Test("members of --admin-group may use admin methods; other users may not",
        .enabled(if: getgrnam("adm") != nil))
    func adminGroup() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system", "--admin-group", "adm"], dir: dir)
        let admGID = getgrnam("adm")!.pointee.gr_gid
        let member = try await runCLI(["--reuid=\(Self.bob)", "--regid=\(admGID)", "--clear-groups", "--", Products.path("searchlight"),
            "--socket", daemon.socket, "status", "--json"], socket: nil, executable: "/usr/bin/setpriv")
        #expect(member.status == 0, "\(member.stderr)")
        #expect(member.stdout.contains("\"mode\""))
        let other = try await cli(as: Self.bob, ["status"], socket: daemon.socket)
        #expect(other.status == 1)
        #expect(other.stderr.contains("admin"), "\(other.stderr)")
    }

    @Test("system-mode files and socket have the modes of the design")
    func modes() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        var st = stat()
        #expect(stat(daemon.socket, &st) == 0 && st.st_mode & 0o777 == 0o666)
        let index = daemon.stateDir + "/indexes/com.alice.notes/_default.sqlite"
        let items = dir.path + "/one.jsonl"
        try #"{"uniqueIdentifier":"x"}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)
        await #expect(try cli(as: Self.alice, ["import", "com.alice.notes", items], socket: daemon.socket).status == 0)
        #expect(stat(index, &st) == 0 && st.st_mode & 0o777 == 0o600)
        #expect(stat(daemon.stateDir + "/indexes/com.alice.notes", &st) == 0 && st.st_mode & 0o777 == 0o700)
        #expect(stat(daemon.stateDir + "/supervisor.sqlite", &st) == 0 && st.st_mode & 0o777 == 0o600)
    }

    @Test("a unit with UserName runs as that user, its bundle belongs to that user, and it cannot write another user's bundle")
    func unitUser() async throws {
        let userA = "searchlight-test-a", userB = "searchlight-test-b"
        let a = try #require(testUser(userA), "could not create \(userA) with useradd")
        let b = try #require(testUser(userB), "could not create \(userB) with useradd")
        let unit = {
            var unit = TestUnit("org.example.test.usera", bundle: "org.example.usera")
            unit.userName = userA
            return unit
        }()
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"], shared: true)
        try await bench.waitForAcknowledgement(unit.label)
        let control = bench.control(unit.label)

        // The extension process runs as the unit's user (real, effective, saved and fs uid).
        let pid = try #require(control.received.first?.pid)
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let uids = try #require(status.split(separator: "\n").first { $0.hasPrefix("Uid:") })
        #expect(uids.split(whereSeparator: { $0 == "\t" || $0 == " " }).dropFirst().map { UInt32($0) } == [a, a, a, a], "\(uids)")

        // B owns a bundle of its own; the extension (as A) tries to donate into it.
        let items = bench.dir.path + "/b.jsonl"
        try #"{"uniqueIdentifier":"b-1","attributeSet":{"title":"b private"}}"#.write(toFile: items, atomically: false, encoding: .utf8)
        chmod(items, 0o644)
        let imported = try await cli(as: b, ["import", "org.example.bobs", items], socket: bench.socket)
        #expect(imported.status == 0, "\(imported.stderr)")
        try control.setMode("foreign:org.example.bobs")
        let mark = bench.mark
        let r = try await bench.cli(["reindex", unit.label, "--identifiers", "own-1", "--timeout", "60"])
        #expect(r.status == 0, "\(r.stderr)")
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        for kind in ["foreign-write", "foreign-delete", "foreign-client-state"] {
            let attempt = try #require(control.received.last { $0.kind == kind }, "\(kind)")
            #expect(attempt.uid == a)
            let outcome = attempt.detail?["outcome"]?.stringValue ?? ""
            #expect(outcome.contains("permission denied for bundle org.example.bobs") && !outcome.contains(String(b)), "\(kind): \(outcome)")
        }
        let bobs = try await cli(as: b, ["query", "org.example.bobs", #"uniqueIdentifier == "*""#], socket: bench.socket)
        #expect(bobs.status == 0 && bobs.stdout.contains("b-1") && !bobs.stdout.contains("stolen"), "\(bobs.stdout) \(bobs.stderr)")

        // The unit's bundle belongs to A: A reads it, B may not.
        let own = try await cli(as: a, ["query", unit.bundle, #"uniqueIdentifier == "own-1""#], socket: bench.socket)
        #expect(own.status == 0 && own.stdout.contains("own-1"), "\(own.stderr)")
        let denied = try await cli(as: b, ["query", unit.bundle, #"uniqueIdentifier == "*""#], socket: bench.socket)
        #expect(denied.status == 1 && !denied.stdout.contains("own-1"))
        #expect(denied.stderr.contains("permission denied for bundle \(unit.bundle)") && !denied.stderr.contains(String(a)), "\(denied.stderr)")
        let write = try await cli(as: b, ["import", unit.bundle, items], socket: bench.socket)
        #expect(write.status == 1, "\(write.stderr)")
    }

    @Test("in system mode a unit whose program is writable by others is refused with the fix")
    func writableProgramRefused() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let program = dir.path + "/ext"
        try FileManager.default.copyItem(atPath: TestUnit.program, toPath: program)
        chmod(program, 0o777)
        let units = dir.path + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: true)
        let plist = TestUnit("org.example.test.writable", bundle: "org.example.writable").plist(control: dir.path)
            .replacingOccurrences(of: TestUnit.program, with: program)
        try plist.write(toFile: units + "/org.example.test.writable.plist", atomically: false, encoding: .utf8)
        let daemon = try await DaemonProcess(arguments: ["--system", "--units-dir", units], dir: dir)
        let unitsList = try await runCLI(["units"], socket: daemon.socket)
        let text = unitsList.stdout + unitsList.stderr
        #expect(text.contains("writable by group or others") && text.contains("chmod go-w \(program)"), "\(text)")
        #expect(!daemon.log.contains { $0.contains("extension launched") && $0.contains("org.example.test.writable") })
    }
}
