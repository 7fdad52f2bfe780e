#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads

/// The shipped systemd units (launchd-like-units/searchlightd.{service,socket} and user/), as
/// `make install` installs them, checked by `systemd-analyze verify`. No systemd needs to run:
/// verify loads the files offline, and checks every key, every value and that ExecStart's
/// program exists and is executable.
enum SystemdAnalyze {
    static let path: String? = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
    static let missing = "systemd-analyze is not installed (Debian: apt-get install systemd); the units are not verified"

    struct Verdict {
        var status: Int32
        var output: String
        /// The lines that concern our units: an unknown key, a bad value, a missing program.
        var problems: [String] {
            output.split(separator: "\n").map(String.init).filter { $0.contains("searchlightd") }
        }
        var passed: Bool { status == 0 && problems.isEmpty }
    }

    /// `systemd-analyze [--user] verify --man=no FILE...`. A user manager's paths need
    /// `XDG_RUNTIME_DIR`, given a temp folder of its own.
    static func verify(_ files: [String], user: Bool, runtime: String) throws -> Verdict {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path!)
        p.arguments = (user ? ["--user"] : []) + ["verify", "--man=no"] + files
        var env = ProcessInfo.processInfo.environment
        env["XDG_RUNTIME_DIR"] = runtime
        env["SYSTEMD_LOG_COLOR"] = "0"
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return Verdict(status: p.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }
}

@Suite("systemd units", .onOwnThreads)
struct SystemdUnitTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// `make install-files` of the built products into `dir/prefix` (no DESTDIR, so ExecStart
    /// names the installed daemon, which exists: verify checks that).
    func install(into dir: TempDir) throws -> String {
        let prefix = dir.path + "/prefix"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["make", "-s", "-C", Self.root, "install-files", "PRODUCTS=\(Products.directory)",
                       "PREFIX=\(prefix)", "SYSCONFDIR=\(dir.path)/etc"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        try p.run()
        let log = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw HarnessError("make install-files failed:\n\(log)") }
        return prefix
    }

    @Test("make install puts the binaries, the mdutil link, both modes' units with ExecStart at BINDIR, and the extension unit folder")
    func installLayout() throws {
        let dir = TempDir()
        let prefix = try install(into: dir)
        let fm = FileManager.default
        for name in ["searchlightd", "searchlight", "mdutil"] {
            #expect(fm.isExecutableFile(atPath: "\(prefix)/bin/\(name)"), "\(name) not installed")
        }
        #expect((try? fm.destinationOfSymbolicLink(atPath: prefix + "/bin/mdutil")) == "searchlight")
        var isDirectory: ObjCBool = false
        #expect(fm.fileExists(atPath: dir.path + "/etc/searchlight/extensions.d", isDirectory: &isDirectory) && isDirectory.boolValue)
        for (mode, flags) in [("system", " --system"), ("user", "")] {
            let unit = try String(contentsOfFile: "\(prefix)/lib/systemd/\(mode)/searchlightd.service", encoding: .utf8)
            #expect(unit.contains("\nExecStart=\(prefix)/bin/searchlightd\(flags)\n"), "\(mode) unit's ExecStart not rewritten")
            #expect(fm.fileExists(atPath: "\(prefix)/lib/systemd/\(mode)/searchlightd.socket"))
        }
    }

    @Test("systemd-analyze verify passes the installed system and user units with no warning",
          .enabled(if: SystemdAnalyze.path != nil, Comment(rawValue: SystemdAnalyze.missing)))
    func verifyShippedUnits() throws {
        let dir = TempDir()
        let prefix = try install(into: dir)
        let runtime = dir.path + "/runtime"
        mkdir(runtime, 0o700)
        for mode in ["system", "user"] {
            let files = ["service", "socket"].map { "\(prefix)/lib/systemd/\(mode)/searchlightd.\($0)" }
            let verdict = try SystemdAnalyze.verify(files, user: mode == "user", runtime: runtime)
            #expect(verdict.passed, "\(mode) units: exit \(verdict.status)\n\(verdict.output)")
            print("systemd units (\(mode)): systemd-analyze verify exit \(verdict.status), \(verdict.problems.count) problems")
        }
    }

    @Test("The verify check fails a broken unit: an unknown key (only a warning to systemd) and a missing ExecStart program",
          .enabled(if: SystemdAnalyze.path != nil, Comment(rawValue: SystemdAnalyze.missing)))
    func verifyCatchesBrokenUnits() throws {
        let dir = TempDir()
        let prefix = try install(into: dir)
        let runtime = dir.path + "/runtime"
        mkdir(runtime, 0o700)
        let service = try String(contentsOfFile: prefix + "/lib/systemd/system/searchlightd.service", encoding: .utf8)
        let socket = prefix + "/lib/systemd/system/searchlightd.socket"
        let broken = [
            "unknown key": service.replacingOccurrences(of: "[Service]\n", with: "[Service]\nProtectSystm=strict\n"),
            "missing program": service.replacingOccurrences(of: prefix + "/bin/searchlightd", with: dir.path + "/nowhere/searchlightd"),
        ]
        for (what, text) in broken {
            #expect(text != service)
            let folder = dir.path + "/" + what.replacingOccurrences(of: " ", with: "-")
            mkdir(folder, 0o755)
            try text.write(toFile: folder + "/searchlightd.service", atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: socket, toPath: folder + "/searchlightd.socket")
            let verdict = try SystemdAnalyze.verify([folder + "/searchlightd.service", folder + "/searchlightd.socket"],
                                                    user: false, runtime: runtime)
            #expect(!verdict.passed, "\(what) not caught: exit \(verdict.status)\n\(verdict.output)")
            #expect(!verdict.problems.isEmpty, "\(what): no line names the unit\n\(verdict.output)")
        }
    }
}

/// The system unit's sandbox, as far as it can be set up without systemd: a mount namespace whose
/// root is read-only but for the test's folder (ProtectSystem=strict with the StateDirectory),
/// and `setpriv` with the unit's own CapabilityBoundingSet and NoNewPrivileges. The daemon runs as
/// root and must still do its job: run an extension as its unit's UserName, and signal it there.
/// Whether the sandbox can be emulated here, and how.
enum SandboxEmulation {
    /// Makes the root read-only in a new mount namespace, but for the folder "$1"; then runs the rest.
    static let script = #"mount --bind "$1" "$1" && mount -o remount,bind,ro / && shift && exec "$@""#

    /// Root, the tools, and a namespace that the script can set up (not in every container).
    static let possible: Bool = {
        guard getuid() == 0, ["/usr/bin/setpriv", "/usr/bin/unshare"].allSatisfy({ FileManager.default.isExecutableFile(atPath: $0) }) else {
            return false
        }
        let dir = TempDir("slns")
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        p.arguments = ["--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", dir.path, "/bin/true"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return false }
        p.waitUntilExit()
        if p.terminationStatus != 0 { print("sandbox emulation skipped: unshare --mount or the read-only remount is not permitted here") }
        return p.terminationStatus == 0
    }()
}

@Suite("The system unit's sandbox, emulated", .onOwnThreads, .serialized,
    .enabled(if: SandboxEmulation.possible, "needs root with mount namespaces (CAP_SYS_ADMIN), setpriv and unshare (util-linux)"))
struct SandboxedDaemonTests {
    static let unitFile = SystemdUnitTests.root + "/launchd-like-units/searchlightd.service"

    /// The value of `Key=` in the shipped system unit.
    static func setting(_ key: String) throws -> String {
        let text = try String(contentsOfFile: unitFile, encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix(key + "=") }, "no \(key)= in \(unitFile)")
        return String(line.dropFirst(key.count + 1))
    }

    /// Capability numbers of capabilities(7), for the names the unit keeps.
    static let numbers = ["CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24]

    /// `Key:` of /proc/PID/status.
    static func status(_ pid: Int32, _ key: String) throws -> String {
        let text = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix(key + ":") })
        return line.dropFirst(key.count + 1).trimmingCharacters(in: .whitespaces)
    }

    @Test("With the unit's capability bounding set, no_new_privs and a read-only root, a UserName extension runs as its user, is acknowledged, and is killed by the daemon when it hangs")
    func userNameExtensionUnderSandbox() async throws {
        let names = try Self.setting("CapabilityBoundingSet").split(separator: " ").map(String.init)
        #expect(try Self.setting("NoNewPrivileges") == "yes")
        #expect(try Self.setting("ProtectSystem") == "strict")
        let unknown = names.filter { Self.numbers[$0] == nil }
        #expect(unknown.isEmpty, "capabilities this test does not know: \(unknown)")
        let keep = "-all," + names.map { "+" + $0.dropFirst(4).lowercased() }.joined(separator: ",")
        // The bounding set the daemon should end with: the unit's, within the runner's own.
        let ours = UInt64(try Self.status(getpid(), "CapBnd"), radix: 16) ?? 0
        let expected = names.reduce(UInt64(0)) { $0 | (1 << UInt64(Self.numbers[$1] ?? 63)) } & ours

        let userName = "searchlight-test-a"
        let uid = try #require(testUser(userName), "could not create \(userName) with useradd")
        var unit = TestUnit("org.example.test.sandboxed", bundle: "org.example.sandboxed")
        unit.userName = userName
        unit.acknowledgementTimeout = 2
        // The bench's folder (state, socket, units, the fake's control files) stays writable.
        let script = SandboxEmulation.script
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"], shared: true) { dir in
            ["/usr/bin/unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", dir,
             "/usr/bin/setpriv", "--bounding-set", keep, "--no-new-privs", "--"]
        }
        try await bench.waitForAcknowledgement(unit.label)
        let daemonPID = try #require(bench.daemon.process?.processIdentifier)
        let control = bench.control(unit.label)
        let pid = try #require(control.received.first?.pid)

        // The sandbox is in force: the daemon's root is read-only, its bounding set the unit's.
        let mounts = try String(contentsOfFile: "/proc/\(daemonPID)/mountinfo", encoding: .utf8)
        let root = mounts.split(separator: "\n").map { $0.split(separator: " ") }.first { $0.count > 5 && $0[4] == "/" }
        #expect(root.map { $0[5].split(separator: ",").contains("ro") } == true, "the daemon's / is not read-only")
        #expect(UInt64(try Self.status(daemonPID, "CapBnd"), radix: 16) == expected)
        #expect(try Self.status(daemonPID, "NoNewPrivs") == "1")
        // The extension: the unit's user in all four uids, no capabilities, no_new_privs inherited.
        let uids = try Self.status(pid, "Uid").split(whereSeparator: { $0 == "\t" || $0 == " " }).map { UInt32($0) }
        #expect(uids == [uid, uid, uid, uid], "\(uids)")
        #expect(try Self.status(pid, "CapEff") == "0000000000000000")
        #expect(try Self.status(pid, "NoNewPrivs") == "1")

        // A hung request: after AcknowledgementTimeout the daemon signals the extension, which
        // runs as another uid: only CAP_KILL lets it.
        try control.setMode("hang")
        let mark = bench.mark
        let r = try await bench.cli(["reindex", unit.label, "--identifiers", "stuck-1", "--no-wait"])
        #expect(r.status == 0, "\(r.stderr)")
        let exited = try await bench.waitForLog("extension exited", "label=\(unit.label) ", after: mark, timeout: 60)
        #expect(exited[0].contains("SIGTERM") || exited[0].contains("SIGKILL"), "\(exited[0])")
        #expect(!processExists(pid), "the hung extension (pid \(pid), uid \(uid)) is still alive")
        await bench.daemon.stop(signal: SIGTERM)
    }
}
