#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// Issue 29, D1: opening a result ran code of another user's choosing as the user opening it
/// (root included). A system-mode daemon, an unprivileged attacker uid (`setpriv`), and root
/// opening the attacker's item the ways a user would.
@Suite("Opening results: desktop-file ids and other users' items", .onOwnThreads, .serialized,
    .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
struct OpenSecurityTests {
    static let mallory: UInt32 = 64_103

    /// One raw request on an app connection as `uid` (no client-side check in the way, as an
    /// attacker would send it): the JSON-RPC answer line.
    func rawCall(as uid: UInt32, bundle: String, method: String, params: String, socket: String) async throws -> String {
        let script = """
            import json, socket, sys
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rw")
            f.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "role": "app", "bundleIdentifier": sys.argv[2], "capabilities": {}}}) + "\\n"); f.flush(); f.readline()
            f.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": sys.argv[3], "params": json.loads(sys.argv[4])}) + "\\n"); f.flush()
            print(f.readline().strip())
            """
        let r = try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", "/usr/bin/python3", "-c", script, socket, bundle, method, params],
                                 socket: nil, executable: "/usr/bin/setpriv")
        guard r.status == 0 else { throw HarnessError("python as uid \(uid) failed: \(r.stderr)") }
        return r.stdout
    }

    @Test("desktop.register refuses an id that climbs out of the applications folder, and root's open runs nothing planted")
    func climbingRegistration() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        try await importItems("com.mallory.notes", [#"{"uniqueIdentifier":"m1","attributeSet":{"title":"harmless note"}}"#],
                              socket: daemon.socket, asUID: Self.mallory, dir: dir)
        // The layout the exploit needs: a subfolder in an applications folder, a planted file.
        let fm = FileManager.default
        try fm.createDirectory(atPath: dir.path + "/share/applications/screensavers", withIntermediateDirectories: true)
        try fm.createDirectory(atPath: dir.path + "/planted", withIntermediateDirectories: true)
        let record = dir.path + "/ran-as-root"
        try "[Desktop Entry]\nType=Application\nName=Evil\nExec=/bin/sh -c 'id -u > \(record)'\n"
            .write(toFile: dir.path + "/planted/evil.desktop", atomically: true, encoding: .utf8)
        let id = "screensavers-..-..-..-planted-evil.desktop"
        let answer = try await rawCall(as: Self.mallory, bundle: "com.mallory.notes", method: "desktop.register",
                                       params: #"{"openWith": "\#(id)"}"#, socket: daemon.socket)
        #expect(answer.contains("\"error\"") && answer.contains("desktop-file id"), "\(answer)")
        // A well-formed registration is accepted; root opening the item runs nothing without --yes.
        let ok = try await rawCall(as: Self.mallory, bundle: "com.mallory.notes", method: "desktop.register",
                                   params: #"{"openWith": "org.example.Notes.desktop"}"#, socket: daemon.socket)
        #expect(ok.contains("\"result\""), "\(ok)")
        try fm.createDirectory(atPath: dir.path + "/data/applications", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Notes\nExec=/bin/sh -c 'echo %u > \(record)'\n"
            .write(toFile: dir.path + "/data/applications/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        let opened = try await OpenCommandTests().open(["open", "com.mallory.notes", "m1"], socket: daemon.socket, dir: dir)
        #expect(opened.status != 0 && opened.stderr.contains("belongs to uid \(Self.mallory)")
                && opened.stderr.contains("would launch org.example.Notes.desktop"), "\(opened.stdout) \(opened.stderr)")
        #expect(!fm.fileExists(atPath: record))
    }

    @Test("root opens another user's item only with --yes, after seeing what it runs; root's desktop does not show it")
    func otherUsersItem() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        try await importItems("com.mallory.notes", [#"{"uniqueIdentifier":"m1","attributeSet":{"title":"natural bridges","contentURL":"https://example.org/m1"}}"#],
                              socket: daemon.socket, asUID: Self.mallory, dir: dir)
        try await importItems("com.root.notes", [#"{"uniqueIdentifier":"r1","attributeSet":{"title":"natural bridges of root"}}"#],
                              socket: daemon.socket, dir: dir)
        let roles = OpenCommandTests()
        let record = dir.path + "/xdg-open.record"
        try roles.recorder(dir.path + "/fakebin/xdg-open", record: record)
        let refused = try await roles.open(["open", "com.mallory.notes", "m1"], socket: daemon.socket, dir: dir, path: dir.path + "/fakebin")
        #expect(refused.status != 0, "\(refused.stdout)")
        #expect(refused.stderr.contains("belongs to uid \(Self.mallory)") && refused.stderr.contains("https://example.org/m1")
                && refused.stderr.contains("--yes"), "\(refused.stderr)")
        #expect(roles.lines(record).isEmpty, "opened without --yes")
        let dry = try await roles.open(["open", "com.mallory.notes", "m1", "--dry-run"], socket: daemon.socket, dir: dir, path: dir.path + "/fakebin")
        #expect(dry.status == 0 && dry.stdout.contains("would open https://example.org/m1"), "\(dry.stdout) \(dry.stderr)")
        let yes = try await roles.open(["open", "com.mallory.notes", "m1", "--yes"], socket: daemon.socket, dir: dir, path: dir.path + "/fakebin")
        #expect(yes.status == 0, "\(yes.stderr)")
        #expect(roles.lines(record) == ["https://example.org/m1"])
        // The user's own desktop shows their item; root's desktop shows root's, not the user's.
        let rootDesktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        let seen = try await rootDesktop.send(QueryUser(text: "natural bridges"))
        await rootDesktop.close()
        #expect(Set(seen.items.compactMap { $0["bundle"]?.stringValue }) == ["com.root.notes"])
    }
}
