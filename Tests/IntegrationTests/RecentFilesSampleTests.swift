#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// The RecentFiles sample (Extensions/RecentFiles, built by `make extensions`): the user's
/// recently-used.xbel imported as user activities of the apps that opened each file, with the
/// real daemon: followed by `--watch` (inotify) as a file is added, changed and removed; imported
/// by the daemon's reindex-all through the shipped unit; hostile files refused with nothing lost.
@Suite("RecentFiles sample: recently-used.xbel as user activities", .onOwnThreads, .serialized)
struct RecentFilesSampleTests {
    static var program: String { SampleExtensionTests.root + "/Extensions/RecentFiles/.build/debug/recentfiles-extension" }
    static let editor = "org.example.Editor"

    /// A temp data home with the editor's desktop file, and the xbel's path in it.
    struct Home {
        let dir: TempDir
        var dataHome: String { dir.path + "/data" }
        var xbel: String { dataHome + "/recently-used.xbel" }
        var environment: [String: String] {
            ["XDG_DATA_HOME": dataHome, "XDG_STATE_HOME": dir.path + "/state", "XDG_DATA_DIRS": dir.path + "/share", "HOME": dir.path]
        }
        init(_ dir: TempDir) throws {
            self.dir = dir
            try FileManager.default.createDirectory(atPath: dir.path + "/data/applications", withIntermediateDirectories: true)
            try "[Desktop Entry]\nType=Application\nName=Editor\nExec=/usr/bin/example-editor %U\n"
                .write(toFile: dataHome + "/applications/\(RecentFilesSampleTests.editor).desktop", atomically: true, encoding: .utf8)
        }

        /// Replaces the xbel as GLib does: a new file renamed over the old one.
        func write(_ entries: [(file: String, modified: String, count: Int)]) throws {
            var text = #"<?xml version="1.0" encoding="UTF-8"?>\#n<xbel version="1.0" xmlns:bookmark="http://www.freedesktop.org/standards/desktop-bookmarks" xmlns:mime="http://www.freedesktop.org/standards/shared-mime-info">\#n"#
            for e in entries {
                text += """
                    <bookmark href="file://\(dir.path)/files/\(e.file)" added="2026-11-01T10:00:00Z" modified="\(e.modified)" visited="\(e.modified)">
                    <info><metadata owner="http://freedesktop.org"><mime:mime-type type="text/plain"/><bookmark:applications>
                    <bookmark:application name="example-editor" exec="&apos;example-editor %u&apos;" modified="\(e.modified)" count="\(e.count)"/>
                    </bookmark:applications></metadata></info></bookmark>

                    """
            }
            try writeRaw(Array((text + "</xbel>\n").utf8))
        }

        func writeRaw(_ bytes: [UInt8]) throws {
            try Data(bytes).write(to: URL(fileURLWithPath: xbel + ".new"))
            guard rename(xbel + ".new", xbel) == 0 else { throw HarnessError("rename failed") }
        }
    }

    /// A running `recentfiles-extension --watch`, its stderr lines kept.
    final class Watcher: @unchecked Sendable {
        let process = Process()
        private let lock = NSCondition()
        private var lines: [String] = []

        init(_ home: Home, socket: String) throws {
            process.executableURL = URL(fileURLWithPath: RecentFilesSampleTests.program)
            process.arguments = ["--watch"]
            process.environment = ProcessInfo.processInfo.environment.merging(home.environment.merging(["SEARCHLIGHT_SOCKET": socket]) { $1 }) { $1 }
            let pipe = Pipe()
            process.standardError = pipe
            process.standardOutput = FileHandle.nullDevice
            let handle = pipe.fileHandleForReading
            readLines(handle) { [self] line in
                lock.withLock { lines.append(line); lock.broadcast() }
                return true
            }
            try process.run()
        }

        deinit { if process.isRunning { process.terminate(); process.waitUntilExit() } }

        var count: Int { lock.withLock { lines.count } }

        /// The first line after `after` containing `text` (on a thread of its own, with a deadline).
        func wait(for text: String, after: Int, timeout: TimeInterval = 30) async throws -> String {
            try await blocking { [self] in
                let deadline = Date().addingTimeInterval(timeout)
                lock.lock()
                defer { lock.unlock() }
                while true {
                    if let line = lines.dropFirst(after).first(where: { $0.contains(text) }) { return line }
                    guard lock.wait(until: deadline) else { throw HarnessError("no line with \"\(text)\" after \(timeout) s: \(lines)") }
                }
            }
        }
    }

    /// The editor's activities found by its own user query for `text`: identifier -> item.
    static func activities(_ daemon: DaemonProcess, _ text: String) async throws -> [String: JSONValue] {
        let app = SearchlightConnection(role: .app(bundleIdentifier: editor), socketPath: daemon.socket)
        defer { Task { await app.close() } }
        let answer = try await app.send(QueryUser(text: text, context: .init(semanticSearch: false)))
        var out: [String: JSONValue] = [:]
        for item in answer.items where item["index"]?.stringValue == "_activities" {
            out[item["uniqueIdentifier"]?.stringValue ?? ""] = item
        }
        return out
    }

    @Test("--watch follows the file: a recent file added appears as the editor's activity, changed updates it, removed deletes it")
    func watchAddChangeRemove() async throws {
        let daemon = try await DaemonProcess()
        let home = try Home(daemon.dir)
        let watcher = try Watcher(home, socket: daemon.socket)
        _ = try await watcher.wait(for: "watching", after: 0)
        let id = "recent:file://\(home.dir.path)/files/lighthouse.txt"

        var mark = watcher.count
        try home.write([("lighthouse.txt", "2026-11-20T10:00:00Z", 1)])
        _ = try await watcher.wait(for: "recent files imported saved=1 deleted=0", after: mark)
        var found = try await Self.activities(daemon, "lighthouse")
        #expect(Array(found.keys) == [id], "\(found)")
        #expect(found[id]?["attributeSet"]?["title"] == "lighthouse.txt")
        #expect(found[id]?["attributeSet"]?["lastUsedDate"]?.stringValue?.hasPrefix("2026-11-20T10:00:00") == true, "\(found)")
        #expect(found[id]?["attributeSet"]?["contentURL"]?.stringValue == "file://\(home.dir.path)/files/lighthouse.txt")

        mark = watcher.count
        try home.write([("lighthouse.txt", "2026-11-25T08:30:00Z", 4), ("keepers.txt", "2026-11-24T08:00:00Z", 1)])
        _ = try await watcher.wait(for: "recent files imported saved=2 deleted=0", after: mark)
        found = try await Self.activities(daemon, "lighthouse")
        #expect(found[id]?["attributeSet"]?["lastUsedDate"]?.stringValue?.hasPrefix("2026-11-25T08:30:00") == true, "\(found)")
        #expect(found[id]?["attributeSet"]?["custom"]?["recentCount"] == 4)

        mark = watcher.count
        try home.write([("keepers.txt", "2026-11-24T08:00:00Z", 1)])
        _ = try await watcher.wait(for: "recent files imported saved=0 deleted=1", after: mark)
        #expect(try await Self.activities(daemon, "lighthouse").isEmpty)
        #expect(try await Self.activities(daemon, "keepers").count == 1)
    }

    @Test("under a system daemon every recent file is saved to the sample's own bundle, claiming no other app's bundle")
    func systemModeOwnBundleOnly() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        let home = try Home(dir)
        try home.write([("lighthouse.txt", "2026-11-20T10:00:00Z", 1)])
        let sync = try await blocking {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: RecentFilesSampleTests.program)
            p.arguments = ["--sync"]
            p.environment = ProcessInfo.processInfo.environment.merging(home.environment.merging(["SEARCHLIGHT_SOCKET": daemon.socket]) { $1 }) { $1 }
            let err = Pipe()
            p.standardError = err
            p.standardOutput = FileHandle.nullDevice
            try p.run()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            p.waitUntilExit()
            return (p.terminationStatus, text)
        }
        #expect(sync.0 == 0 && sync.1.contains("saved=1"), "\(sync.1)")
        #expect(try await Self.activities(daemon, "lighthouse").isEmpty, "saved as the editor")
        let status = try await runCLI(["status", Self.editor], socket: daemon.socket)
        #expect(!status.stdout.contains(Self.editor + " "), "the editor's bundle exists: \(status.stdout)")
        let own = SearchlightConnection(role: .app(bundleIdentifier: "org.searchlight.sample.recentfiles"), socketPath: daemon.socket)
        defer { Task { await own.close() } }
        let answer = try await own.send(QueryUser(text: "lighthouse", context: .init(semanticSearch: false)))
        #expect(answer.items.map { $0["uniqueIdentifier"]?.stringValue } == ["recent:file://\(dir.path)/files/lighthouse.txt"], "\(answer.items)")
        #expect(answer.items.first?["attributeSet"]?["keywords"] == ["example-editor"], "still named by its app")
    }

    @Test("a hostile xbel (malformed, not UTF-8, over the size limit, a symbolic link) is refused with a clear error, and nothing imported is lost")
    func hostileFiles() async throws {
        let daemon = try await DaemonProcess()
        let home = try Home(daemon.dir)
        let watcher = try Watcher(home, socket: daemon.socket)
        _ = try await watcher.wait(for: "watching", after: 0)
        var mark = watcher.count
        try home.write([("keepers.txt", "2026-11-24T08:00:00Z", 1)])
        _ = try await watcher.wait(for: "recent files imported saved=1", after: mark)

        let cases: [([UInt8], String)] = [
            (Array("<xbel><bookmark href='file:///x'>".utf8), "not well-formed"),
            (Array("<xbel>".utf8) + [0xC3, 0x28, 0xFF] + Array("</xbel>".utf8), "not UTF-8"),
            (Array("<xbel>".utf8) + [UInt8](repeating: 0x20, count: 9 << 20) + Array("</xbel>".utf8), "over the 8388608-byte limit"),
        ]
        for (bytes, reason) in cases {
            mark = watcher.count
            try home.writeRaw(bytes)
            let line = try await watcher.wait(for: "recent files not imported", after: mark)
            #expect(line.contains(reason) && line.contains("nothing imported"), "\(line)")
            #expect(try await Self.activities(daemon, "keepers").count == 1, "lost after: \(reason)")
        }
        // A symbolic link (to a file another program planted) is not followed.
        let planted = home.dir.path + "/planted.xbel"
        try Data().write(to: URL(fileURLWithPath: planted))
        mark = watcher.count
        try FileManager.default.removeItem(atPath: home.xbel)
        _ = try await watcher.wait(for: "recent files", after: mark)  // the removal itself: an empty history
        mark = watcher.count
        symlink(planted, home.xbel)
        let line = try await watcher.wait(for: "recent files not imported", after: mark)
        #expect(line.contains("symbolic link"), "\(line)")
    }

    @Test("the shipped unit: the daemon's first reindex-all imports the file, reaching the daemon through the socket it hands its extensions")
    func launchedByTheDaemon() async throws {
        let dir = TempDir()
        let home = try Home(dir)
        try home.write([("lighthouse.txt", "2026-11-20T10:00:00Z", 2)])
        let units = dir.path + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: true)
        let label = "org.searchlight.sample.recentfiles"
        let shipped = try String(contentsOfFile: SampleExtensionTests.units + "/\(label).plist", encoding: .utf8)
        try shipped.replacingOccurrences(of: "../../Extensions/RecentFiles/.build/debug/recentfiles-extension", with: Self.program)
            .write(toFile: units + "/\(label).plist", atomically: true, encoding: .utf8)
        let daemon = try await DaemonProcess(arguments: ["--units-dir", units], dir: dir, environment: home.environment)
        try await daemon.waitForLog("reindex request acknowledged id=1 label=\(label)", timeout: 120)
        let found = try await Self.activities(daemon, "lighthouse")
        #expect(found.count == 1 && found.values.first?["attributeSet"]?["custom"]?["activityType"] == "org.freedesktop.recent-file", "\(found)")
    }
}
