#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// The desktop role on the daemon's socket (DESIGN §12, Docs/Protocol.md "Desktop search"): what
/// `searchlight-desktop` may and may not do, asked directly with the SDK's connection.
@Suite("The desktop role", .onOwnThreads, .serialized)
struct DesktopRoleTests {
    static let item = #"{"uniqueIdentifier":"n1","attributeSet":{"title":"Natural Bridges","contentURL":"https://example.org/n1"}}"#

    @Test("the desktop role searches every readable bundle, tags each item with its bundle and says how each opens")
    func searchAcrossBundles() async throws {
        let daemon = try await DaemonProcess()
        try await importItems("com.example.notes", [Self.item], socket: daemon.socket, dir: daemon.dir)
        try await importItems("com.example.photos", [#"{"uniqueIdentifier":"p1","attributeSet":{"title":"Bridges at dusk"}}"#],
                        socket: daemon.socket, dir: daemon.dir)
        let r = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        let answer = try await desktop.send(QueryUser(text: "bridges"))
        #expect(Set(answer.items.compactMap { $0["bundle"]?.stringValue }) == ["com.example.notes", "com.example.photos"])
        #expect(answer.bundles?["com.example.notes"]??.openWith == "org.example.Notes.desktop")
        #expect(answer.bundles?["com.example.notes"]??.source == .registration)
        #expect(answer.bundles?.keys.contains("com.example.photos") == true && answer.bundles?["com.example.photos"]! == nil)
        let resolved = try await desktop.send(DesktopResolve(identifier: "n1", bundle: "com.example.notes"))
        #expect(resolved.contentURL == "https://example.org/n1" && resolved.opening?.openWith == "org.example.Notes.desktop")
    }

    @Test("the desktop role cannot write, change settings or administer, and engagement never creates an index")
    func refusals() async throws {
        let daemon = try await DaemonProcess()
        try await importItems("com.example.notes", [Self.item], socket: daemon.socket, dir: daemon.dir)
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        func refused(_ method: String, _ params: JSONValue) async {
            do {
                _ = try await desktop.call(method, params)
                Issue.record("\(method) was answered in the desktop role")
            } catch let error as SearchlightError {
                #expect(error.code == .permissionDenied, "\(method): \(error)")
            } catch {
                Issue.record("\(method): \(error)")
            }
        }
        await refused(Method.indexItems, ["bundle": "com.example.notes", "items": [.object(["uniqueIdentifier": "x", "attributeSet": [:]])]])
        await refused(Method.indexDeleteAll, ["bundle": "com.example.notes"])
        await refused(Method.querySearch, ["bundle": "com.example.notes", "query": "*"])
        await refused(Method.adminStatus, [:])
        await refused(Method.desktopSetHidden, ["bundle": "com.example.notes", "hidden": true])
        await refused(Method.desktopRegister, ["bundle": "com.example.notes", "openWith": "evil.desktop"])
        await refused(Method.indexFetchData, ["bundle": "com.example.notes", "identifier": "n1", "type": "public.data"])
        // Engagement on an index that does not exist is refused and creates nothing.
        await refused(Method.queryEngaged, QueryEngaged(target: .identifier("n1"), index: "other", bundle: "com.example.notes").params)
        #expect(!FileManager.default.fileExists(atPath: daemon.stateDir + "/indexes/com.example.notes/other.sqlite"))
        await refused(Method.queryEngaged, QueryEngaged(target: .identifier("n1"), bundle: "com.example.nobody").params)
        #expect(!FileManager.default.fileExists(atPath: daemon.stateDir + "/indexes/com.example.nobody"))
        // The items are untouched.
        let still = try await runCLI(["query", "com.example.notes", #"uniqueIdentifier == "n1""#], socket: daemon.socket)
        #expect(still.status == 0 && still.stdout.contains("n1"))
    }

    @Test("a hidden bundle is out of the desktop's search, named or not, and its owner is told how to show it")
    func hidden() async throws {
        let daemon = try await DaemonProcess()
        try await importItems("com.example.notes", [Self.item], socket: daemon.socket, dir: daemon.dir)
        let hide = try await runCLI(["desktop", "hide", "com.example.notes"], socket: daemon.socket)
        #expect(hide.status == 0, "\(hide.stderr)")
        let status = try await runCLI(["desktop", "status"], socket: daemon.socket)
        #expect(status.stdout.contains("com.example.notes") && status.stdout.contains("hidden"), "\(status.stdout)")
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        #expect(try await desktop.send(QueryUser(text: "bridges")).items.isEmpty)
        do {
            _ = try await desktop.send(QueryUser(text: "bridges", bundle: "com.example.notes"))
            Issue.record("a hidden bundle was searched by name")
        } catch let error as SearchlightError {
            #expect(error.code == .permissionDenied && error.message.contains("searchlight desktop show com.example.notes"), "\(error)")
        }
        // The app's own search is not affected.
        let own = try await runCLI(["search", "com.example.notes", "bridges"], socket: daemon.socket)
        #expect(own.status == 0 && own.stdout.contains("n1"), "\(own.stdout) \(own.stderr)")
    }
}

@Suite("Desktop search files", .onOwnThreads)
struct DesktopFilesTests {
    static let validator = ["/usr/bin/desktop-file-validate"].first { FileManager.default.isExecutableFile(atPath: $0) }

    @Test("make install puts the provider, its D-Bus service file and the GNOME Shell, KRunner and app registrations, Exec at BINDIR")
    func installed() throws {
        let dir = TempDir()
        let prefix = try SystemdUnitTests().install(into: dir)
        let share = prefix + "/share"
        let service = try String(contentsOfFile: share + "/dbus-1/services/org.searchlight.Searchlight.SearchProvider.service", encoding: .utf8)
        #expect(service.contains("\nName=org.searchlight.Searchlight.SearchProvider\n"))
        #expect(service.contains("\nExec=\(prefix)/bin/searchlight-desktop\n"), "\(service)")
        #expect(FileManager.default.isExecutableFile(atPath: prefix + "/bin/searchlight-desktop"))
        let app = try String(contentsOfFile: share + "/applications/searchlight.desktop", encoding: .utf8)
        #expect(app.contains("\nExec=\(prefix)/bin/searchlight-desktop --show-search %u\n"), "\(app)")
        let ini = try String(contentsOfFile: share + "/gnome-shell/search-providers/searchlight.ini", encoding: .utf8)
        #expect(ini.contains("DesktopId=searchlight.desktop") && ini.contains("BusName=org.searchlight.Searchlight.SearchProvider")
                && ini.contains("ObjectPath=/org/searchlight/Searchlight/SearchProvider") && ini.contains("Version=2"))
        let runner = try String(contentsOfFile: share + "/krunner/dbusplugins/searchlight.desktop", encoding: .utf8)
        #expect(runner.contains("X-Plasma-DBusRunner-Service=org.searchlight.Searchlight.SearchProvider")
                && runner.contains("X-Plasma-DBusRunner-Path=/org/searchlight/Searchlight/KRunner"))
    }

    @Test("desktop-file-validate passes the installed desktop files with no warning",
          .enabled(if: DesktopFilesTests.validator != nil, "desktop-file-validate is missing (Debian: desktop-file-utils; make test installs it)"))
    func validate() async throws {
        let dir = TempDir()
        let share = try SystemdUnitTests().install(into: dir) + "/share"
        for file in [share + "/applications/searchlight.desktop", share + "/krunner/dbusplugins/searchlight.desktop"] {
            let r = try await runCLI([file], socket: nil, executable: Self.validator!)
            #expect(r.status == 0 && r.stdout.isEmpty && r.stderr.isEmpty, "\(file): \(r.stdout) \(r.stderr)")
        }
        // The check catches a broken file.
        let broken = dir.path + "/broken.desktop"
        try "[Desktop Entry]\nType=Application\nExec=searchlight-desktop\n".write(toFile: broken, atomically: true, encoding: .utf8)
        #expect(try await runCLI([broken], socket: nil, executable: Self.validator!).status != 0)
    }
}

/// `searchlight open`: the same opening as the desktop's search, from the CLI; a fake default
/// handler on PATH records what it is given.
@Suite("searchlight open", .onOwnThreads, .serialized, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/gio")))
struct OpenCommandTests {
    /// Runs the CLI with a desktop of its own: XDG folders in `dir`, `PATH` as given.
    func open(_ arguments: [String], socket: String, dir: TempDir, path: String = "/usr/bin:/bin") async throws -> CLIResult {
        try await runCLI(["XDG_DATA_HOME=\(dir.path)/data", "XDG_DATA_DIRS=\(dir.path)/share", "XDG_CONFIG_HOME=\(dir.path)/config",
                    "HOME=\(dir.path)", "PATH=\(path)", "DISPLAY=", "WAYLAND_DISPLAY=", "DBUS_SESSION_BUS_ADDRESS=",
                    Products.path("searchlight"), "--socket", socket] + arguments,
                   socket: nil, executable: "/usr/bin/env")
    }

    /// A script that appends its arguments, one per line, to `record`.
    func recorder(_ script: String, record: String) throws {
        try FileManager.default.createDirectory(atPath: (script as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" >> '\(record)'\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
    }

    func lines(_ file: String) -> [String] {
        ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test("open launches the registered desktop file with the item's URI and records the engagement; --dry-run runs nothing")
    func registered() async throws {
        let daemon = try await DaemonProcess()
        let dir = daemon.dir
        try await importItems("com.example.notes", [DesktopRoleTests.item], socket: daemon.socket, dir: dir)
        let record = dir.path + "/notes.record"
        try recorder(dir.path + "/bin/notes", record: record)
        try FileManager.default.createDirectory(atPath: dir.path + "/data/applications", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Notes\nExec=\(dir.path)/bin/notes %u\n"
            .write(toFile: dir.path + "/data/applications/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        let dry = try await open(["open", "com.example.notes", "n1", "--dry-run"], socket: daemon.socket, dir: dir)
        #expect(dry.status == 0 && dry.stdout.contains("would open https://example.org/n1 with the default handler"), "\(dry.stdout) \(dry.stderr)")
        let r = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let planned = try await open(["open", "com.example.notes", "n1", "--dry-run", "--json"], socket: daemon.socket, dir: dir)
        #expect(planned.stdout.contains("\"opensWith\"") && planned.stdout.contains("org.example.Notes.desktop"), "\(planned.stdout)")
        #expect(lines(record).isEmpty, "--dry-run ran the app")
        await #expect(try DesktopSearchTests().engagement(daemon, "com.example.notes", "n1", wait: false) == 0)
        let opened = try await open(["open", "com.example.notes", "n1"], socket: daemon.socket, dir: dir)
        #expect(opened.status == 0 && opened.stdout.contains("launched org.example.Notes.desktop"), "\(opened.stdout) \(opened.stderr)")
        let deadline = Date().addingTimeInterval(10)
        while lines(record).isEmpty, Date() < deadline { usleep(20_000) }
        #expect(lines(record) == ["searchlight-item:com.example.notes/n1"])
        await #expect(try DesktopSearchTests().engagement(daemon, "com.example.notes", "n1") == 1)
    }

    @Test("without a declared app, open gives the contentURL to the default handler: xdg-open when gio is not on PATH")
    func contentURLFallback() async throws {
        let daemon = try await DaemonProcess()
        let dir = daemon.dir
        try await importItems("com.example.notes", [DesktopRoleTests.item], socket: daemon.socket, dir: dir)
        let record = dir.path + "/xdg-open.record"
        try recorder(dir.path + "/fakebin/xdg-open", record: record)
        let opened = try await open(["open", "com.example.notes", "n1"], socket: daemon.socket, dir: dir, path: dir.path + "/fakebin")
        #expect(opened.status == 0, "\(opened.stdout) \(opened.stderr)")
        #expect(lines(record) == ["https://example.org/n1"])
        // Nothing to open it with: the error says what is missing.
        let none = try await open(["open", "com.example.notes", "n1"], socket: daemon.socket, dir: dir, path: dir.path + "/nowhere")
        #expect(none.status != 0 && none.stderr.contains("xdg-open"), "\(none.stderr)")
        let missing = try await open(["open", "com.example.notes", "nothing"], socket: daemon.socket, dir: dir)
        #expect(missing.status != 0 && missing.stderr.contains("has no item nothing"), "\(missing.stderr)")
    }
}
