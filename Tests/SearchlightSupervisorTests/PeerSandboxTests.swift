#if canImport(Glibc)
import Glibc
#endif
import Foundation
import CPeerProcess
import Testing
import TestThreads
import SearchlightWire
@testable import SearchlightSupervisor

/// Issue 34 item 1, the pure parts: what a `.flatpak-info` names, which bundles an app id may
/// use, and how a peer process that is not sandboxed, or has exited, is classed. The real
/// sandbox (bwrap) is in IntegrationTests' SandboxedAppTests.
@Suite("A peer's sandbox, from its process", .onOwnThreads)
struct PeerSandboxTests {
    static let flatpakInfo = """
        [Application]
        name=org.example.Notes
        runtime=runtime/org.gnome.Platform/x86_64/46

        [Instance]
        instance-id=123456
        app-path=/var/lib/flatpak/app/org.example.Notes/x86_64/stable/abc/files
        """

    @Test("the [Application] name of a .flatpak-info is the app id")
    func parsesApplicationName() throws {
        #expect(try FlatpakInfo.appID(Array(Self.flatpakInfo.utf8)) == "org.example.Notes")
        // GKeyFile's leniencies: comments, blank lines, spaces around "=".
        let spaced = "# written by flatpak\n\n[Application]\n  name = org.example.Spaced\n"
        #expect(try FlatpakInfo.appID(Array(spaced.utf8)) == "org.example.Spaced")
    }

    @Test("a runtime run as itself is named by its [Runtime] group, as xdg-desktop-portal reads it")
    func parsesRuntimeName() throws {
        let text = "[Application]\nname=org.example.Decoy\n[Runtime]\nname=org.gnome.Sdk\n"
        #expect(try FlatpakInfo.appID(Array(text.utf8)) == "org.gnome.Sdk")
    }

    @Test("a .flatpak-info that is not a key file, names no app or an invalid app id, or is too large is refused")
    func refusesBadFiles() {
        let bad: [(String, [UInt8])] = [
            ("no group", Array("name=org.example.App\n".utf8)),
            ("no name", Array("[Application]\nruntime=x\n".utf8)),
            ("garbage line", Array("[Application]\nname=org.example.App\nthis is not a key\n".utf8)),
            ("bad header", Array("[Application\nname=org.example.App\n".utf8)),
            ("two elements", Array("[Application]\nname=org.example\n".utf8)),
            ("a slash", Array("[Application]\nname=org.example/../x\n".utf8)),
            ("a digit first", Array("[Application]\nname=org.9example.App\n".utf8)),
            ("a dash not last", Array("[Application]\nname=org.ex-ample.App\n".utf8)),
            ("empty element", Array("[Application]\nname=org..App\n".utf8)),
            ("not UTF-8", [0x5B, 0xFF, 0x5D]),
            ("too large", Array(("[Application]\nname=org.example.App\n" + String(repeating: "#", count: FlatpakInfo.maxBytes)).utf8)),
        ]
        for (what, bytes) in bad {
            #expect(throws: FlatpakInfo.Invalid.self, "\(what)") { try FlatpakInfo.appID(bytes) }
        }
        #expect(FlatpakInfo.isValidAppID("org.example.My-App"))
        #expect(!FlatpakInfo.isValidAppID(String(repeating: "a.", count: 128) + "b"))
    }

    @Test("a Flatpak app may use its own bundle and bundles under it, nothing else")
    func bundleScope() {
        let app = PeerSandbox.flatpak(appID: "org.example.Notes")
        #expect(app.mayUse("org.example.Notes"))
        #expect(app.mayUse("org.example.Notes.sync"))
        #expect(app.mayUse("org.example.Notes.a.b"))
        #expect(!app.mayUse("org.example.NotesX"))
        #expect(!app.mayUse("org.example.Note"))
        #expect(!app.mayUse("org.example"))
        #expect(!app.mayUse("org.example.Other"))
        #expect(!app.mayUse(""))
        #expect(PeerSandbox.none.mayUse("org.example.Other"))
        #expect(!PeerSandbox.unidentified(reason: "x").mayUse("org.example.Notes"))
        #expect(app.roleRefusal("desktop")?.code == .permissionDenied)
        #expect(PeerSandbox.none.roleRefusal("admin") == nil)
        #expect(app.refusal("org.example.Other").message.contains("org.example.Notes"))
    }

    @Test("a peer in the daemon's own root is not sandboxed, pinned by SO_PEERPIDFD or by pidfd_open")
    func ownRootIsNotSandboxed() throws {
        for peerPidfd in [true, false] {
            let (a, b) = try UnixSocket.pair()
            defer { a.close(); b.close() }
            let process = PeerProcess(socket: a, pid: getpid(), peerPidfd: peerPidfd)
            #expect(process.identify() == .none, "peerPidfd: \(peerPidfd)")
            // Once: the pidfd is closed after, and a second look is refused rather than guessed.
            if case .unidentified = process.identify() {} else { Issue.record("identified twice") }
        }
        // A .flatpak-info in the host's root would say nothing either: the root is compared first.
        #expect(PeerProcess.readSandbox(pid: getpid()) == .none)
    }

    @Test("a peer that exited before it was identified is refused, not taken for an unsandboxed one")
    func exitedPeerIsRefused() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        try child.run()
        child.waitUntilExit()
        let (a, b) = try UnixSocket.pair()
        defer { a.close(); b.close() }
        let process = PeerProcess(socket: a, pid: child.processIdentifier, peerPidfd: false)
        guard case .unidentified(let reason) = process.identify() else {
            Issue.record("an exited peer was identified")
            return
        }
        #expect(reason.contains("pinned") || reason.contains("exited"), "\(reason)")
        #expect(PeerProcess.readSandbox(pid: child.processIdentifier) != .none)
    }

    @Test("a pidfd tells whether its process still runs")
    func pidfdSeesExit() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["30"]
        try child.run()
        let fd = sl_pidfd_open(child.processIdentifier)
        #expect(fd >= 0)
        defer { close(fd) }
        #expect(!PeerProcess.hasExited(pidfd: fd))
        // SIGKILL: the test process's threads may block SIGTERM, and a child inherits that mask.
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(PeerProcess.hasExited(pidfd: fd))
    }
}
