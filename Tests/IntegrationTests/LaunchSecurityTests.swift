#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// Attacks on how the daemon starts extensions (issue 13, items 1, 2, 3 and 10), each by a real
/// unprivileged uid (`setpriv`) against a real system-mode daemon running as root.
@Suite("Extension launch security", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct LaunchSecurityTests {
    /// An unprivileged uid with no passwd entry (as in IsolationTests).
    static let mallory: UInt32 = 64_103

    /// Runs `script` with /bin/sh as `uid` (and `gid`, no other groups).
    func shell(as uid: UInt32, gid: UInt32? = nil, _ script: String) async throws -> CLIResult {
        try await runCLI(["--reuid=\(uid)", "--regid=\(gid ?? uid)", "--clear-groups", "--", "/bin/sh", "-c", script],
                   socket: nil, executable: "/usr/bin/setpriv")
    }

    /// A root-owned 0755 folder holding a copy of the test extension at `bin/ext`.
    func programFolder() throws -> (TempDir, String) {
        let dir = TempDir("slp")
        chmod(dir.path, 0o755)
        try FileManager.default.createDirectory(atPath: dir.path + "/bin", withIntermediateDirectories: true)
        chmod(dir.path + "/bin", 0o755)
        try FileManager.default.copyItem(atPath: TestUnit.program, toPath: dir.path + "/bin/ext")
        chmod(dir.path + "/bin/ext", 0o755)
        return (dir, dir.path + "/bin/ext")
    }

    /// Waits until the daemon has either refused to start `label` after `mark` (returns that log
    /// line) or started it (returns nil): so that what a started program did can be checked too.
    func launchOutcome(_ bench: ExtensionBench, _ label: String, after mark: Int, timeout: TimeInterval = 30) async throws -> String? {
        var refused: String?
        try await bench.until("\(label) refused or launched", timeout: timeout) {
            refused = bench.lines("extension could not start", "label=\(label)", after: mark).first
            return refused != nil || !bench.lines("extension launched", "label=\(label) ", after: mark).isEmpty
        }
        return refused
    }

    // MARK: - 1. The program path

    enum Handover: String, CaseIterable, Sendable {
        /// The folder is given to the unprivileged user (chown).
        case owner
        /// The folder is made writable by a group the unprivileged user is in (root:group 0775).
        case group
    }

    @Test("a program folder made unsafe after the unit loaded is refused at launch, and the program swapped into it never runs as root",
          arguments: Handover.allCases)
    func programSwappedAfterLoad(handover: Handover) async throws {
        let (folder, program) = try programFolder()
        var unit = TestUnit("org.example.test.swap", bundle: "org.example.swap")
        unit.program = program
        unit.timeOut = 0.3
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"])
        // The unit loaded and ran: its first launch (the initial reindex-all) was accepted.
        try await bench.waitForAcknowledgement(unit.label)
        try await bench.waitForLog("extension exited", "label=\(unit.label)")

        // The administrator's mistake, then the attack: the folder now lets Mallory replace the
        // program, and he does, with a script that leaves a marker when it runs.
        let bin = folder.path + "/bin"
        let marker = folder.path + "/ran-as-root"
        switch handover {
        case .owner: chown(bin, Self.mallory, 0)
        case .group:
            chown(bin, 0, Self.mallory)
            chmod(bin, 0o775)
        }
        let swap = try await shell(as: Self.mallory, "printf '#!/bin/sh\\ntouch \(marker)\\nexec sleep 30\\n' > \(bin)/new && chmod 755 \(bin)/new && mv -f \(bin)/new \(program)")
        #expect(swap.status == 0, "\(swap.stderr)")

        let mark = bench.mark
        let r = try await bench.cli(["reindex", unit.label, "--all", "--no-wait"])
        #expect(r.status == 0, "\(r.stderr)")
        let outcome = try await launchOutcome(bench, unit.label, after: mark)
        if outcome == nil { try await Task.sleep(for: .milliseconds(500)) }  // let a swapped program run, to show it did
        #expect(!FileManager.default.fileExists(atPath: marker), "the swapped program ran as root")
        let refused = try #require(outcome, "the swapped program was launched")
        let why = handover == .owner ? "is owned by uid \(Self.mallory)" : "is writable by group or others (mode 0775"
        #expect(refused.contains("the folder \(bin) of Program \(program)") && refused.contains(why), "\(refused)")
        #expect(refused.contains(handover == .owner ? "run chown root \(bin)" : "run chmod go-w \(bin)"), "\(refused)")
        #expect(refused.contains(unit.label + ".plist"), "the message names the unit file: \(refused)")
        #expect(bench.lines("extension launched", "label=\(unit.label)", after: mark).isEmpty)
    }

    @Test("system mode refuses units whose program is in a group-writable folder, below a user's folder, or behind a symbolic link through one")
    func unsafeProgramPathsRefusedAtLoad() async throws {
        let (folder, _) = try programFolder()
        let base = folder.path
        // root:<Mallory's group> 0775
        try FileManager.default.createDirectory(atPath: base + "/shared", withIntermediateDirectories: true)
        chown(base + "/shared", 0, Self.mallory)
        chmod(base + "/shared", 0o775)
        try FileManager.default.copyItem(atPath: TestUnit.program, toPath: base + "/shared/ext")
        // Mallory's folder, with a root-owned folder and program below it
        try FileManager.default.createDirectory(atPath: base + "/mallory/sub", withIntermediateDirectories: true)
        chown(base + "/mallory", Self.mallory, Self.mallory)
        try FileManager.default.copyItem(atPath: TestUnit.program, toPath: base + "/mallory/sub/ext")
        // A root-owned symbolic link that leads through Mallory's folder
        try FileManager.default.createSymbolicLink(atPath: base + "/bin/link", withDestinationPath: base + "/mallory/sub")
        var units: [TestUnit] = []
        for (name, program) in [("group", base + "/shared/ext"), ("below", base + "/mallory/sub/ext"), ("link", base + "/bin/link/ext"),
                                ("safe", base + "/bin/ext")] {
            var unit = TestUnit("org.example.test.path-\(name)", bundle: "org.example.path-\(name)")
            unit.program = program
            units.append(unit)
        }
        let bench = try await ExtensionBench.start(units, arguments: ["--system"])
        try await bench.waitForAcknowledgement("org.example.test.path-safe")
        let listed = try await bench.cli(["units"])
        let text = listed.stdout + listed.stderr
        #expect(text.contains("the folder \(base)/shared of Program \(base)/shared/ext is writable by group or others (mode 0775"), "\(text)")
        #expect(text.contains("run chmod go-w \(base)/shared"))
        #expect(text.contains("the folder \(base)/mallory of Program \(base)/mallory/sub/ext is owned by uid \(Self.mallory)"), "\(text)")
        #expect(text.contains("the folder \(base)/mallory of Program \(base)/bin/link/ext is owned by uid \(Self.mallory)")
            && text.contains("reached through the symbolic link \(base)/bin/link → \(base)/mallory/sub"), "\(text)")
        for name in ["group", "below", "link"] {
            #expect(text.contains("org.example.test.path-\(name).plist: Program: the folder"), "\(name): \(text)")
            #expect(bench.lines("extension launched", "label=org.example.test.path-\(name) ").isEmpty)
        }
    }

    // MARK: - 2. Output files

    /// A unit user (created with useradd: `UserName` needs a passwd entry) and a folder of the
    /// bench it owns, where it may plant links and FIFOs.
    func outputUser() throws -> (name: String, uid: UInt32) {
        let name = buildUserName("sl-out")
        let uid = try #require(testUser(name), "could not create \(name) with useradd")
        return (name, uid)
    }

    func outputUnit(_ label: String, user: String) -> TestUnit {
        var unit = TestUnit("org.example.test.\(label)", bundle: "org.example.\(label)")
        unit.userName = user
        unit.environment["TEST_EXTENSION_PRINT"] = "output of \(label)"
        return unit
    }

    /// Starts a system-mode bench whose `logs` folder belongs to `uid`.
    func outputBench(_ units: [TestUnit], uid: UInt32) async throws -> ExtensionBench {
        try await ExtensionBench.start(units, arguments: ["--system"], shared: true, prepare: { dir in
            try FileManager.default.createDirectory(atPath: dir.path + "/logs", withIntermediateDirectories: true)
            chown(dir.path + "/logs", uid, uid)
            chmod(dir.path + "/logs", 0o755)
        })
    }

    @Test("StandardOutPath: a symbolic link planted by the unit's user to a root-only file is not followed, and that file is unchanged")
    func outputSymlinkNotFollowed() async throws {
        let user = try outputUser()
        let dir = TempDir("slo")
        chmod(dir.path, 0o755)
        let secret = dir.path + "/root-only"
        try "root's secret\n".write(toFile: secret, atomically: false, encoding: .utf8)
        chmod(secret, 0o600)
        // The bench's folder is only known once it exists: the unit is added after the user,
        // who owns `logs`, has planted the link there.
        let bench = try await ExtensionBench.start([], arguments: ["--system"], shared: true)
        try FileManager.default.createDirectory(atPath: bench.dir.path + "/logs", withIntermediateDirectories: true)
        chown(bench.dir.path + "/logs", user.uid, user.uid)
        let planted = try await shell(as: user.uid, "ln -s \(secret) \(bench.dir.path)/logs/out.log")
        #expect(planted.status == 0, "\(planted.stderr)")
        var unit = outputUnit("out-link", user: user.name)
        unit.standardOutPath = bench.dir.path + "/logs/out.log"
        let mark = bench.mark
        try bench.write(unit)
        chmod(bench.control(unit.label).path, 0o777)
        _ = try await bench.admin(Method.adminUnits)
        let outcome = try await launchOutcome(bench, unit.label, after: mark)
        if outcome == nil { _ = try? await bench.waitForAcknowledgement(unit.label, after: mark, timeout: 10) }
        #expect(try String(contentsOfFile: secret, encoding: .utf8) == "root's secret\n")
        let refused = try #require(outcome, "launched with its output appended to the link's target")
        #expect(refused.contains("open StandardOutPath \(bench.dir.path)/logs/out.log") && refused.contains("is a symbolic link, which is never followed"),
                "\(refused)")
    }

    @Test("StandardErrorPath in a folder only root may write is not created")
    func outputInRootFolderNotCreated() async throws {
        let user = try outputUser()
        let dir = TempDir("slo")
        chmod(dir.path, 0o755)
        try FileManager.default.createDirectory(atPath: dir.path + "/root-only", withIntermediateDirectories: true)
        chmod(dir.path + "/root-only", 0o755)
        var unit = outputUnit("err-root", user: user.name)
        unit.standardErrorPath = dir.path + "/root-only/nologin"
        let bench = try await outputBench([unit], uid: user.uid)
        let outcome = try await launchOutcome(bench, unit.label, after: 0)
        #expect(!FileManager.default.fileExists(atPath: dir.path + "/root-only/nologin"))
        let refused = try #require(outcome, "launched with a file created by root")
        #expect(refused.contains("open StandardErrorPath \(dir.path)/root-only/nologin") && refused.contains("Permission denied")
                && refused.contains("may not create or write it"), "\(refused)")
    }

    @Test("StandardOutPath naming a FIFO with no reader fails the launch at once instead of hanging it")
    func outputFIFODoesNotHang() async throws {
        let user = try outputUser()
        let bench = try await ExtensionBench.start([], arguments: ["--system"], shared: true)
        try FileManager.default.createDirectory(atPath: bench.dir.path + "/logs", withIntermediateDirectories: true)
        chown(bench.dir.path + "/logs", user.uid, user.uid)
        let made = try await shell(as: user.uid, "mkfifo \(bench.dir.path)/logs/fifo")
        #expect(made.status == 0, "\(made.stderr)")
        var unit = outputUnit("out-fifo", user: user.name)
        unit.standardOutPath = bench.dir.path + "/logs/fifo"
        let mark = bench.mark
        try bench.write(unit)
        chmod(bench.control(unit.label).path, 0o777)
        _ = try await bench.admin(Method.adminUnits)
        let refused = try await bench.waitForLog("extension could not start", "label=\(unit.label)", after: mark, timeout: 20)[0]
        #expect(refused.contains("is a FIFO with no reader"), "\(refused)")
        // The daemon is not stuck: it answers, and a launch of the same unit fails the same way.
        let status = try await bench.cli(["status", "--json"])
        #expect(status.status == 0, "\(status.stderr)")
    }

    @Test("StandardOutPath and StandardErrorPath receive the output, in files the unit's user owns; in user mode too",
          arguments: [true, false])
    func outputFilesReceiveOutput(system: Bool) async throws {
        var unit = TestUnit("org.example.test.out-ok", bundle: "org.example.out-ok")
        unit.environment["TEST_EXTENSION_PRINT"] = "output of out-ok"
        var owner: UInt32 = 0
        if system {
            let user = try outputUser()
            unit.userName = user.name
            owner = user.uid
        }
        let dir = TempDir("slo")
        chmod(dir.path, 0o755)
        chown(dir.path, owner, owner)
        unit.standardOutPath = dir.path + "/out.log"
        unit.standardErrorPath = dir.path + "/err.log"
        let bench = try await ExtensionBench.start([unit], arguments: system ? ["--system"] : [], shared: system)
        try await bench.waitForAcknowledgement(unit.label)
        for file in ["out.log", "err.log"] {
            let text = try String(contentsOfFile: dir.path + "/" + file, encoding: .utf8)
            #expect(text.contains("output of out-ok"), "\(file): \(text)")
            var st = stat()
            #expect(stat(dir.path + "/" + file, &st) == 0 && st.st_uid == owner)
        }
    }

    // MARK: - 3. The controlling terminal

    /// A launcher that gives the daemon a controlling terminal (a new pseudo-terminal), the way an
    /// operator running it by hand in a root shell would; its stderr stays the harness's pipe.
    static let ttyLauncher = """
        import fcntl, os, signal, sys, termios
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the test runner's blocked signals are inherited
        master, slave = os.openpty()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            os.dup2(slave, 0)
            os.close(master)
            os.close(slave)
            os.execv(sys.argv[1], sys.argv[1:])
        os.close(slave)
        signal.signal(signal.SIGTERM, lambda s, f: os.kill(pid, s))
        signal.signal(signal.SIGINT, lambda s, f: os.kill(pid, s))
        while True:
            try:
                if not os.read(master, 4096):
                    break
            except OSError:
                break
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
        """

    @Test("an extension has no controlling terminal, even when the daemon has one, and leads its own session and process group",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func noControllingTerminal() async throws {
        let user = try outputUser()
        var unit = TestUnit("org.example.test.tty", bundle: "org.example.tty", mode: "tty")
        unit.userName = user.name
        let bench = try await ExtensionBench.start([unit], arguments: ["--system"], shared: true,
                                                   launcher: { _ in ["/usr/bin/python3", "-c", Self.ttyLauncher] })
        try await bench.waitForAcknowledgement(unit.label)
        // The daemon really has a terminal (else this test would prove nothing).
        let ready = try await bench.waitForLog("searchlightd ready")[0]
        let daemon = try #require(ExtensionBench.field("pid", in: ready).flatMap { Int32($0) })
        let daemonStat = try String(contentsOfFile: "/proc/\(daemon)/stat", encoding: .utf8)
        #expect(statFields(daemonStat)[4] != "0", "tty_nr of the daemon: \(daemonStat)")
        let tty = try #require(bench.control(unit.label).received.first { $0.kind == "tty" })
        #expect(tty.uid == user.uid)
        #expect(tty.detail?["opened"]?.boolValue == false, "the extension opened /dev/tty: \(String(describing: tty.detail))")
        #expect(tty.detail?["errno"]?.intValue == Int(ENXIO))
        #expect(tty.detail?["sid"]?.intValue == Int(tty.pid) && tty.detail?["pgid"]?.intValue == Int(tty.pid))
    }

    // MARK: - 10. Processes that leave the extension's session

    /// Whether this machine lets a root daemon make cgroups: a writable cgroup2 mount holding our cgroup.
    static let cgroupsAvailable: Bool = {
        guard getuid() == 0,
              let line = (try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8))?.split(separator: "\n").first(where: { $0.hasPrefix("0::") }),
              let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
              let mount = mounts.split(separator: "\n").first(where: { $0.contains(" - cgroup2 ") }) else { return false }
        let point = String(mount.split(separator: " ")[4])
        let own = point + String(line.dropFirst(3))
        return access(own, W_OK) == 0
    }()

    /// Launches the `escape` extension six times (each leaves a grandchild in a session of its
    /// own holding stdout, stderr and fd 3) and measures the daemon's descriptors and threads
    /// after each exit. Returns the grandchildren's pids and the bench.
    func launchEscapes(cgroups: String) async throws -> (bench: ExtensionBench, grandchildren: [Int32]) {
        var unit = TestUnit("org.example.test.escape", bundle: "org.example.escape", mode: "escape")
        unit.timeOut = 0.3
        // auto is the default: no flag, so that the same test shows the leak on a daemon without the fix.
        let bench = try await ExtensionBench.start([unit], arguments: cgroups == "auto" ? [] : ["--extension-cgroups", cgroups])
        let ready = try await bench.waitForLog("searchlightd ready")[0]
        let daemon = try #require(ExtensionBench.field("pid", in: ready).flatMap { Int32($0) })
        func count(_ folder: String) -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon)/\(folder)"))?.count ?? -1 }
        var baseline: (fds: Int, threads: Int)?
        for launch in 1...6 {
            let mark = bench.mark
            if launch > 1 {
                let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
                #expect(r.status == 0, "\(r.stderr)")
            } else {
                try await bench.waitForAcknowledgement(unit.label)
            }
            try await bench.waitForLog("extension exited", "label=\(unit.label)", after: launch > 1 ? mark : 0)
            if let baseline {
                // Nothing of the launches accumulates: each leaked two pipes and two reader threads
                // (and the grandchildren, two more each) before the fix. Threads get a little
                // slack for Dispatch's pool, which grows and shrinks on its own.
                try await bench.until("descriptors and threads back near \(baseline) after launch \(launch) (now \(count("fd")), \(count("task")))",
                                      timeout: 10) {
                    count("fd") <= baseline.fds + 1 && count("task") <= baseline.threads + 4
                }
            } else {
                // The ranked index's background build, asked for by the donations, opens a reader
                // connection of the store (two descriptors, kept): part of the floor, so wait for it,
                // and for its settling (fresh segments' merges run on threads of their own).
                try await bench.until("the ranked index built", timeout: 60) {
                    let index = try await bench.admin(Method.adminStatus, ["bundle": .string(unit.bundle)])["bundles"]?
                        .arrayValue?.first?["indexes"]?.arrayValue?.first
                    return index?["rankedIndex"]?["pending"]?.intValue == 0 && index?["rankedIndex"]?["settled"]?.boolValue != false
                }
                // A moment for the first launch's readers to end, so the baseline is the floor.
                // The check does not depend on it: a baseline taken early is only higher, and the
                // leak (two pipe descriptors and two reader threads per launch) still exceeds the slack.
                try await Task.sleep(for: .milliseconds(300))
                baseline = (count("fd"), count("task"))
            }
        }
        print("escape (--extension-cgroups \(cgroups)): after 6 launches \(count("fd")) descriptors and \(count("task")) threads; "
              + "after the first \(baseline.map { "\($0.fds) and \($0.threads)" } ?? "-")")
        let grandchildren = bench.control(unit.label).received.filter { $0.kind == "escape" }
            .compactMap { $0.detail?["grandchild"]?.intValue.map(Int32.init) }
        #expect(grandchildren.count == 6)
        return (bench, grandchildren)
    }

    /// Running, not a zombie.
    func alive(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        let state = statFields(stat).first ?? ""
        return state != "Z" && state != "X"
    }

    @Test("a grandchild that calls setsid() dies with its extension's cgroup, and the daemon's descriptors and threads stay flat over launches",
          .enabled(if: cgroupsAvailable))
    func escapedGrandchildKilledWithCgroup() async throws {
        let (bench, grandchildren) = try await launchEscapes(cgroups: "auto")
        #expect(!bench.lines("extension cgroups on").isEmpty, "\(bench.daemon.log.prefix(5))")
        try await bench.until("every grandchild dead", timeout: 10) { !grandchildren.contains(where: alive) }
        #expect(!bench.lines("killed what the extension left running", "label=org.example.test.escape").isEmpty)
    }

    @Test("without cgroups, a grandchild that calls setsid() holding the output pipes and fd 3 does not grow the daemon's descriptors or threads")
    func escapedGrandchildWithoutCgroup() async throws {
        let (bench, grandchildren) = try await launchEscapes(cgroups: "off")
        defer { for pid in grandchildren { kill(pid, SIGKILL) } }
        #expect(!bench.lines("extension cgroups off", "--extension-cgroups off").isEmpty)
    }
}

/// The fields of /proc/<pid>/stat after the command name (which may contain spaces): state first.
func statFields(_ line: String) -> [Substring] {
    guard let close = line.lastIndex(of: ")") else { return [] }
    return line[line.index(after: close)...].split(separator: " ")
}
