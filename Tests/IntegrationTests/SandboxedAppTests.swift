#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads

/// What a sandbox can do, and how to build one as Flatpak does: `bwrap` (Debian's bubblewrap) with
/// a tmpfs root, the host's /usr and Swift's runtime read-only, /proc, the daemon's socket folder,
/// and a `.flatpak-info` bound read-only at the root.
enum Sandbox {
    static let bwrap = "/usr/bin/bwrap"

    /// Why the sandbox tests cannot run here, or nil when they can: bwrap missing, or user
    /// namespaces unavailable (as an unprivileged uid would need them).
    static let unavailable: String? = {
        guard getuid() == 0 else { return "not root: the tests switch uids with setpriv" }
        guard FileManager.default.isExecutableFile(atPath: bwrap) else { return "bwrap is missing: apt-get install bubblewrap (make test-deps does)" }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else { return "setpriv is missing" }
        let probe = try? runCLI(["--reuid=65534", "--regid=65534", "--clear-groups", "--", bwrap, "--unshare-user", "--unshare-pid",
                                 "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                                 "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--", "/usr/bin/true"],
                                socket: nil, executable: "/usr/bin/setpriv")
        guard let probe, probe.status == 0 else {
            return "bwrap cannot make a user namespace as an unprivileged user here (\(probe?.stderr ?? "did not run")): kernel.unprivileged_userns_clone or user.max_user_namespaces"
        }
        return nil
    }()

    /// The folder of the Swift runtime the products link (bound into the sandbox when outside /usr).
    static let swiftRuntime: String? = {
        // To its end: a /proc file reports a size of 0.
        guard let data = FileHandle(forReadingAtPath: "/proc/self/maps")?.readDataToEndOfFile() else { return nil }
        let maps = String(decoding: data, as: UTF8.self)
        for line in maps.split(separator: "\n") where line.hasSuffix("/libswiftCore.so") {
            guard let path = line.split(separator: " ").last else { continue }
            return (String(path) as NSString).deletingLastPathComponent
        }
        return nil
    }()

    /// The argv (after `bwrap`) of a Flatpak-like sandbox around `command`. `info`: the file bound
    /// at `/.flatpak-info` (nil: none), `infoAsLink`: bound as a symbolic link to it instead;
    /// `userNamespace: false` (root only): a sandbox without one, as a setuid bwrap makes.
    static func arguments(info: String?, infoAsLink: Bool = false, userNamespace: Bool = true, shared: String, command: [String]) -> [String] {
        var a = (userNamespace ? ["--unshare-user"] : []) + ["--unshare-pid", "--unshare-ipc", "--die-with-parent",
                 "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                 "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
                 "--proc", "/proc", "--dev", "/dev",
                 "--ro-bind", Products.directory, Products.directory,
                 "--bind", shared, shared]
        if let runtime = swiftRuntime, !runtime.hasPrefix("/usr/") { a += ["--ro-bind", runtime, runtime] }
        if let info { a += infoAsLink ? ["--symlink", info, "/.flatpak-info"] : ["--ro-bind", info, "/.flatpak-info"] }
        return a + ["--chdir", "/", "--"] + command
    }

    /// A `.flatpak-info` as Flatpak writes one, for `appID`.
    static func info(_ dir: TempDir, _ name: String, appID: String) throws -> String {
        let path = dir.path + "/" + name + ".flatpak-info"
        try "[Application]\nname=\(appID)\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id=1\n"
            .write(toFile: path, atomically: false, encoding: .utf8)
        chmod(path, 0o644)
        return path
    }
}

/// One `searchlight-test-client probe` answer: `init=… write=… read=… message=…`.
struct ProbeResult: CustomStringConvertible {
    var fields: [String: String] = [:]
    var raw: String
    init(_ r: CLIResult) {
        raw = r.stdout + r.stderr
        let line = r.stdout.split(separator: "\n").last.map(String.init) ?? ""
        if let m = line.range(of: " message=") {
            fields["message"] = String(line[m.upperBound...])
            for pair in line[..<m.lowerBound].split(separator: " ") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                if kv.count == 2 { fields[String(kv[0])] = String(kv[1]) }
            }
        }
    }
    var initialized: Bool { fields["init"] == "ok" }
    var refused: Bool { fields["init"] == "-3001" }
    var wroteAndRead: Bool { fields["init"] == "ok" && fields["write"] == "ok" && (fields["read"] ?? "").hasPrefix("ok:") }
    var message: String { fields["message"] ?? "" }
    /// Refused by the uid rules: the app handshake is answered (it names no one's bundle yet), and
    /// every call on the bundle gets the one "not yours" (`BundleAccess.denied`), no sandbox named.
    func deniedByUid(_ bundle: String) -> Bool {
        initialized && fields["write"] == "-3001" && fields["read"] == "-3001"
            && message.contains("permission denied for bundle \(bundle): this user may not") && !message.contains("Flatpak")
    }
    var description: String { raw }
}

/// Issue 34 item 1 (DESIGN §14, Docs/Operations.md "Who may use a bundle"): a Flatpak app, found
/// from its process (its root's `.flatpak-info`), uses only its own bundle and those under it;
/// the desktop and admin roles are refused to it; a process outside any sandbox keeps the uid
/// rules, whatever it claims. Real sandboxes (bwrap), a real system-mode daemon as root, real
/// uids through setpriv.
@Suite("Sandboxed apps are bound to their own bundle", .onOwnThreads, .serialized,
    .enabled(if: Sandbox.unavailable == nil, "\(Sandbox.unavailable ?? "")"))
struct SandboxedAppTests {
    static let alice: UInt32 = 64_201
    static let bob: UInt32 = 64_202
    static let notes = "org.example.Notes"

    /// `probe ROLE BUNDLE` as `uid` (nil: root), inside a sandbox with `info` at its root when
    /// `sandboxed`, else as a plain process (optionally in `cwd`, with `environment`).
    static func probe(_ daemon: DaemonProcess, as uid: UInt32?, sandbox info: String?, infoAsLink: Bool = false, userNamespace: Bool = true,
                      _ role: String, _ bundle: String, plain: Bool = false, cwd: String? = nil, environment: [String] = []) async throws -> ProbeResult {
        let client = [Products.path("searchlight-test-client"), "probe", daemon.socket, role, bundle]
        var command: [String]
        if plain {
            command = ["/usr/bin/env"] + (cwd.map { ["-C", $0] } ?? []) + environment + client
        } else {
            command = [Sandbox.bwrap] + Sandbox.arguments(info: info, infoAsLink: infoAsLink, userNamespace: userNamespace, shared: daemon.dir.path, command: client)
        }
        let uidSwitch = uid.map { ["--reuid=\($0)", "--regid=\($0)", "--clear-groups"] } ?? ["--reuid=0"]
        let r = try await runCLI(uidSwitch + ["--"] + command, socket: nil, executable: "/usr/bin/setpriv")
        return ProbeResult(r)
    }

    static func systemDaemon() async throws -> DaemonProcess {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        return try await DaemonProcess(arguments: ["--system"], dir: dir)
    }

    @Test("as root, a sandboxed app uses its own bundle and APPID.*, and is refused another app's bundle, the desktop and the admin role")
    func rootSandbox() async throws {
        let daemon = try await Self.systemDaemon()
        let info = try Sandbox.info(daemon.dir, "notes", appID: Self.notes)
        let own = try await Self.probe(daemon, as: nil, sandbox: info, "app", Self.notes)
        #expect(own.wroteAndRead, "\(own)")
        let sub = try await Self.probe(daemon, as: nil, sandbox: info, "app", Self.notes + ".sync")
        #expect(sub.wroteAndRead, "\(sub)")
        for (role, bundle) in [("app", "org.example.Other"), ("app", "org.example.NotesX"), ("app", "org.example"), ("desktop", "-"), ("admin", "-")] {
            let r = try await Self.probe(daemon, as: nil, sandbox: info, role, bundle)
            #expect(r.refused, "\(role) \(bundle): \(r)")
            #expect(r.message.contains("Flatpak app \(Self.notes)"), "\(role) \(bundle): \(r.message)")
        }
        // The same client outside the sandbox, same uid: root's rights, untouched.
        for (role, bundle) in [("app", "org.example.Other"), ("desktop", "-"), ("admin", "-")] {
            let r = try await Self.probe(daemon, as: nil, sandbox: nil, role, bundle, plain: true)
            #expect(r.initialized, "\(role) \(bundle) outside: \(r)")
        }
        #expect(daemon.log.contains { $0.contains("sandbox=flatpak:\(Self.notes)") }, "the log names the app")
    }

    @Test("a root daemon with the shipped unit's capabilities only (no CAP_SYS_PTRACE) identifies another uid's sandboxed app")
    func unitCapabilities() async throws {
        // The capabilities of launchd-like-units/searchlightd.service: another uid's /proc/PID/root
        // is unreadable to such a root (ptrace access); the daemon reads it as the peer's user.
        let unit = try String(contentsOfFile: SessionBusHarness.repository + "/launchd-like-units/searchlightd.service", encoding: .utf8)
        let line = try #require(unit.split(separator: "\n").first { $0.hasPrefix("CapabilityBoundingSet=") })
        let caps = line.dropFirst("CapabilityBoundingSet=".count).split(separator: " ")
            .map { "+" + $0.lowercased().replacingOccurrences(of: "cap_", with: "") }
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir,
            launcher: ["/usr/bin/setpriv", "--bounding-set=-all," + caps.joined(separator: ","), "--inh-caps=-all", "--"])
        let info = try Sandbox.info(daemon.dir, "notes", appID: Self.notes)
        let own = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", Self.notes)
        #expect(own.wroteAndRead, "\(own)")
        let other = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", "com.alice.Private")
        #expect(other.refused && other.message.contains("Flatpak app \(Self.notes)"), "\(other)")
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", "com.alice.Private", plain: true).wroteAndRead)
    }

    @Test("as an unprivileged uid, the sandbox binds the app to its bundle; outside it the same uid keeps the uid rules")
    func unprivilegedSandbox() async throws {
        let daemon = try await Self.systemDaemon()
        let info = try Sandbox.info(daemon.dir, "notes", appID: Self.notes)
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", Self.notes).wroteAndRead)
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", Self.notes + ".cache").wroteAndRead)
        // Alice's own bundle, written outside the sandbox: her uid may, her sandboxed app may not.
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", "com.alice.Private", plain: true).wroteAndRead)
        let other = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", "com.alice.Private")
        #expect(other.refused && other.message.contains("Flatpak app \(Self.notes)"), "\(other)")
        let desktop = try await Self.probe(daemon, as: Self.alice, sandbox: info, "desktop", "-")
        #expect(desktop.refused, "\(desktop)")
        let plainDesktop = try await Self.probe(daemon, as: Self.alice, sandbox: nil, "desktop", "-", plain: true)
        #expect(plainDesktop.initialized && (plainDesktop.fields["read"] ?? "").hasPrefix("ok:"), "\(plainDesktop)")
    }

    @Test("a claim of an app id gives no extra rights: a forged .flatpak-info in a plain process's folder, FLATPAK_ID, or a sandbox of one's own")
    func claimsGiveNothing() async throws {
        let daemon = try await Self.systemDaemon()
        let info = try Sandbox.info(daemon.dir, "notes", appID: Self.notes)
        // Bob's Notes app writes its bundle from its sandbox: bob owns it.
        #expect(try await Self.probe(daemon, as: Self.bob, sandbox: info, "app", Self.notes).wroteAndRead)

        // Alice, outside any sandbox, in a folder holding a forged .flatpak-info and with
        // FLATPAK_ID set: the uid rules alone, so Bob's bundle is refused and hers are not limited.
        let forged = daemon.dir.path + "/forged"
        try FileManager.default.createDirectory(atPath: forged, withIntermediateDirectories: true)
        chmod(forged, 0o755)
        try FileManager.default.copyItem(atPath: info, toPath: forged + "/.flatpak-info")
        let env = ["FLATPAK_ID=\(Self.notes)"]
        let bobs = try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", Self.notes, plain: true, cwd: forged, environment: env)
        #expect(bobs.deniedByUid(Self.notes), "\(bobs)")
        let hers = try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", "com.alice.Mine", plain: true, cwd: forged, environment: env)
        #expect(hers.wroteAndRead, "\(hers)")

        // Alice builds a sandbox of her own claiming to be Notes: it only loses rights.
        let claimed = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", Self.notes)
        #expect(claimed.deniedByUid(Self.notes), "Bob's bundle: \(claimed)")
        let lost = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", "com.alice.Mine")
        #expect(lost.refused, "her own other bundle, from the claimed sandbox: \(lost)")
        // Bob's items stayed his.
        let bobReads = try await Self.probe(daemon, as: Self.bob, sandbox: info, "app", Self.notes)
        #expect(bobReads.fields["read"] == "ok:1", "\(bobReads)")
    }

    @Test("a sandbox whose .flatpak-info is a symbolic link, or not a valid one, is refused every role, not taken for unsandboxed")
    func unidentifiedSandboxIsRefused() async throws {
        let daemon = try await Self.systemDaemon()
        let info = try Sandbox.info(daemon.dir, "notes", appID: Self.notes)
        let linked = try await Self.probe(daemon, as: Self.alice, sandbox: info, infoAsLink: true, "app", Self.notes)
        #expect(linked.refused && linked.message.contains("could not identify"), "\(linked)")
        let garbage = daemon.dir.path + "/garbage.flatpak-info"
        try "not a key file\n".write(toFile: garbage, atomically: false, encoding: .utf8)
        chmod(garbage, 0o644)
        for role in ["app", "desktop"] {
            let r = try await Self.probe(daemon, as: Self.alice, sandbox: garbage, role, role == "app" ? "com.alice.Any" : "-")
            #expect(r.refused && r.message.contains("could not identify"), "\(role): \(r)")
        }
        // A sandbox with no .flatpak-info at all is not one the daemon recognises: the uid rules.
        let bare = try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", "com.alice.Bare")
        #expect(bare.wroteAndRead, "\(bare)")
    }

    @Test("a user-mode daemon running as an unprivileged uid identifies that uid's sandboxed app, and refuses a sandbox it may not look into")
    func userModeDaemon() async throws {
        let dir = TempDir()
        chown(dir.path, Self.alice, Self.alice)
        let daemon = try await DaemonProcess(dir: dir, launcher: ["/usr/bin/setpriv", "--reuid=\(Self.alice)", "--regid=\(Self.alice)", "--clear-groups", "--"],
                                             environment: ["HOME": dir.path, "XDG_RUNTIME_DIR": dir.path])
        let info = try Sandbox.info(dir, "notes", appID: Self.notes)
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", Self.notes).wroteAndRead)
        let other = try await Self.probe(daemon, as: Self.alice, sandbox: info, "app", "com.alice.Private")
        #expect(other.refused && other.message.contains("Flatpak app \(Self.notes)"), "\(other)")
        #expect(try await Self.probe(daemon, as: Self.alice, sandbox: nil, "app", "com.alice.Private", plain: true).wroteAndRead)

        // Root's processes are closed to alice's daemon (it may not read their root). A plain one,
        // in the daemon's pid namespace, keeps the uid rules; one in a pid namespace of its own
        // (a sandbox the daemon cannot look into) is refused, not waved through.
        let rootPlain = try await Self.probe(daemon, as: nil, sandbox: nil, "app", "org.example.RootTool", plain: true)
        #expect(rootPlain.wroteAndRead, "\(rootPlain)")
        // Without a user namespace: real root, which may read alice's folder (as a setuid bwrap runs).
        let rootSandboxed = try await Self.probe(daemon, as: nil, sandbox: info, userNamespace: false, "app", Self.notes)
        #expect(rootSandboxed.refused && rootSandboxed.message.contains("pid namespace of its own"), "\(rootSandboxed)")
    }
}
