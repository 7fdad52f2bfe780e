#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing

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

@Suite("systemd units")
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
