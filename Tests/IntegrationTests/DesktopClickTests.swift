#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// What the user sees when a click in GNOME Shell's or KRunner's search cannot do its job (issue
/// 36, Docs/Desktop.md "What the user sees when…"): a real `searchlightd`, a real session bus that
/// starts `searchlight-desktop` from its service file, `gdbus call` as the Shell, and a fake
/// notification server owning `org.freedesktop.Notifications` on that bus, which records what the
/// user was told.
@Suite("Desktop search: what the user sees when a click cannot do its job", .onOwnThreads, .serialized,
       .enabled(if: SessionBusHarness.missingTools == nil))
struct DesktopClickTests {
    static let notes = [
        #"{"uniqueIdentifier":"trip","attributeSet":{"title":"Natural Bridges trip plan","contentDescription":"Camping in Utah","contentURL":"https://example.org/notes/trip"}}"#,
        #"{"uniqueIdentifier":"packing","attributeSet":{"title":"Packing list for the bridges trip","contentURL":"https://example.org/notes/packing"}}"#,
        // Nothing can open it: no contentURL, and the bundle declares no app.
        #"{"uniqueIdentifier":"sketch","attributeSet":{"title":"Bridges sketch","contentDescription":"pencil"}}"#,
    ]
    static let photos = [#"{"uniqueIdentifier":"p1","attributeSet":{"title":"Natural Bridges at dusk","contentURL":"https://example.org/p1"}}"#]

    func setUp(providerArguments: [String] = [], environment: [String: String] = [:]) async throws
        -> (DaemonProcess, SessionBusHarness, FakeNotificationServer) {
        let daemon = try await DaemonProcess()
        try await importItems("com.example.notes", Self.notes, socket: daemon.socket, dir: daemon.dir)
        try await importItems("com.example.photos", Self.photos, socket: daemon.socket, dir: daemon.dir)
        let bus = try SessionBusHarness(daemonSocket: daemon.socket, providerArguments: providerArguments, environment: environment)
        return (daemon, bus, try bus.serveNotifications())
    }

    @Test("LaunchSearch in a session with no terminal shows the results in a notification, never a D-Bus error")
    func launchSearchWithoutTerminal() async throws {
        // A PATH with gio and no terminal emulator: GLib finds none for the shipped Terminal=true app.
        let tools = TempDir("sltools")
        symlink("/usr/bin/gio", tools.path + "/gio")
        let (daemon, bus, notices) = try await setUp(environment: ["PATH": tools.path])
        try bus.installSearchlightApp()
        let r = try bus.provider("LaunchSearch", ["['natural', 'bridges']", "0"])
        #expect(r.ok, "\(r.stderr)\n\(bus.busLog)")
        let shown = try notices.wait()
        #expect(shown.count == 1 && shown[0].appName == "Searchlight", "\(shown)")
        #expect(shown[0].summary == "Results for “natural bridges”", "\(shown)")
        #expect(shown[0].body.contains("• Natural Bridges trip plan — com.example.notes")
                && shown[0].body.contains("• Natural Bridges at dusk — com.example.photos"), "\(shown)")
        #expect(shown[0].body.contains("searchlight search"), "\(shown)")
        // No results: said so, at once.
        let none = try bus.provider("LaunchSearch", ["['zebra']", "0"])
        #expect(none.ok, "\(none.stderr)")
        #expect(try notices.wait(count: 2)[1].summary == "No results for “zebra”")
        _ = daemon
    }

    @Test("results nothing can open are left out of GNOME Shell's and KRunner's answers, and come back once their app is declared")
    func unopenableLeftOut() async throws {
        let (daemon, bus, _) = try await setUp()
        let ids = try bus.initialResults(["bridges"])
        #expect(Set(ids) == ["com.example.notes/trip", "com.example.notes/packing", "com.example.photos/p1"], "\(ids)")
        let sub = try bus.provider("GetSubsearchResultSet", [SessionBusHarness.stringArray(ids), "['bridges', 'sketch']"])
        #expect(sub.ok && sub.stdout.contains("@as []"), "\(sub.stdout) \(sub.stderr)")
        let match = try bus.krunner("Match", ["'bridges sketch'"])
        #expect(match.ok && !match.stdout.contains("sketch"), "\(match.stdout)")
        // The app that opens them declared: the item is shown.
        try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let registered = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        #expect(try bus.initialResults(["bridges", "sketch"]) == ["com.example.notes/sketch"])
    }

    @Test("activating a result that nothing can open tells the user why in a notification (GNOME Shell and KRunner)")
    func unopenableActivationNotified() async throws {
        let (daemon, bus, notices) = try await setUp()
        let r = try bus.provider("ActivateResult", ["'com.example.notes/sketch'", "['sketch']", "0"])
        #expect(!r.ok && r.stderr.contains("has no contentURL"), "\(r.stderr)")
        let shown = try notices.wait()
        #expect(shown[0].summary == "Searchlight could not open “Bridges sketch”", "\(shown)")
        #expect(shown[0].body.contains("declares no desktop file") && shown[0].body.contains("searchlight register com.example.notes"), "\(shown)")
        let run = try bus.krunner("Run", ["'com.example.notes/sketch'", "''"])
        #expect(!run.ok)
        #expect(try notices.wait(count: 2)[1].summary == "Searchlight could not open “Bridges sketch”")
        _ = daemon
    }

    @Test("a result deleted after the search: GetResultMetas leaves it out, and activating it only shows a notification")
    func deletedResult() async throws {
        let (daemon, bus, notices) = try await setUp()
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let registered = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        let ids = try bus.initialResults(["bridges"])
        #expect(ids.contains("com.example.notes/packing"), "\(ids)")
        let deleted = try await runCLI(["delete", "com.example.notes", "--identifiers", "packing"], socket: daemon.socket)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        let metas = try bus.provider("GetResultMetas", [SessionBusHarness.stringArray(ids)])
        #expect(metas.ok && metas.stdout.contains("'com.example.notes/trip'") && !metas.stdout.contains("packing"), "\(metas.stdout)")
        let r = try bus.provider("ActivateResult", ["'com.example.notes/packing'", "['bridges']", "0"])
        #expect(r.ok, "a D-Bus error reached the Shell: \(r.stderr)")
        #expect(try notices.wait()[0].summary == "This result is no longer there")
        let run = try bus.krunner("Run", ["'com.example.notes/packing'", "''"])
        #expect(run.ok, "\(run.stderr)")
        #expect(try notices.wait(count: 2).count == 2)
        // Nothing was opened: the app still opens the others.
        #expect(try bus.provider("ActivateResult", ["'com.example.notes/trip'", "['bridges']", "0"]).ok)
        #expect(try bus.recorded(record) == ["searchlight-item:com.example.notes/trip"])
    }

    @Test("the description names the donating app by its own desktop file, never the app its items open with")
    func donatingAppNamed() async throws {
        let (daemon, bus, _) = try await setUp()
        // The notes app's own desktop file (BUNDLE.desktop), and a text editor that opens its items.
        try bus.installRecorder("com.example.notes.desktop", name: "Example Notes")
        try bus.installRecorder("org.example.TextEditor.desktop", name: "Text Editor")
        let registered = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.TextEditor.desktop"],
                                          socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        try bus.installRecorder("org.example.Viewer.desktop", name: "Image Viewer")
        let viewer = try await runCLI(["register", "com.example.photos", "--open-with", "org.example.Viewer.desktop"], socket: daemon.socket)
        #expect(viewer.status == 0, "\(viewer.stderr)")
        _ = try bus.initialResults(["bridges"])
        let metas = try bus.provider("GetResultMetas", ["['com.example.notes/trip', 'com.example.photos/p1']"])
        #expect(metas.stdout.contains("'description': <'Camping in Utah — Example Notes'>"), "\(metas.stdout)")
        // No desktop file of its own: the bundle id, not the viewer that opens its items.
        #expect(metas.stdout.contains("'description': <'com.example.photos'>"), "\(metas.stdout)")
        #expect(!metas.stdout.contains("Text Editor") && !metas.stdout.contains("Image Viewer"), "\(metas.stdout)")
        let match = try bus.krunner("Match", ["'natural bridges'"])
        #expect(match.stdout.contains("'category': <'Example Notes'>") && !match.stdout.contains("Text Editor"), "\(match.stdout)")
    }

    @Test("a query of special characters only answers at once, without waiting for a busy daemon")
    func specialCharactersOnly() async throws {
        // A deadline longer than gdbus's 25 s timeout: a query sent to the stopped daemon would time out.
        let (daemon, bus, _) = try await setUp(providerArguments: ["--query-timeout", "40", "--debug"])
        #expect(try bus.initialResults(["bridges"]).count == 3)
        let pid = try #require(daemon.process?.processIdentifier)
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        // Timed by the provider's own clock (its --debug lines), not the test's, which adds
        // starting gdbus on a loaded machine: well under the 40 s deadline, so not waited for.
        var mark = bus.busLogLines
        let r = try bus.provider("GetInitialResultSet", [#"['"', '*', '(', ')', '-', ':']"#])
        #expect(r.ok && r.stdout.contains("@as []"), "\(r.stdout) \(r.stderr)")
        let ms = bus.answeredMilliseconds("search answered", after: mark)
        #expect(ms.map { $0 < 15_000 } == true, "\(ms.map { "\($0) ms" } ?? "no time logged") (\(r.seconds) s with gdbus)")
        mark = bus.busLogLines
        let match = try bus.krunner("Match", [#"'" * ( -'"#])
        #expect(match.ok && match.stdout.contains("@a(sssida{sv}) []"), "\(match.stdout) \(match.stderr)")
        let matchMS = bus.answeredMilliseconds("match answered", after: mark)
        #expect(matchMS.map { $0 < 15_000 } == true, "\(matchMS.map { "\($0) ms" } ?? "no time logged") (\(match.seconds) s with gdbus)")
        kill(pid, SIGCONT)
        #expect(try bus.initialResults(["bridges"]).count == 3)
    }

    @Test("the provider's methods have the signatures GNOME Shell's remoteSearch.js and KRunner's krunner1 call")
    func signatures() async throws {
        let dir = TempDir()
        let bus = try SessionBusHarness(daemonSocket: dir.path + "/nobody.sock")
        // GNOME Shell js/ui/remoteSearch.js, SearchProvider2Iface (the same in data/dbus-interfaces/
        // org.gnome.ShellSearchProvider2.xml): method -> (in, out).
        let shell: [String: ([String], [String])] = [
            "GetInitialResultSet": (["as"], ["as"]),
            "GetSubsearchResultSet": (["as", "as"], ["as"]),
            "GetResultMetas": (["as"], ["aa{sv}"]),
            "ActivateResult": (["s", "as", "u"], []),
            "LaunchSearch": (["as", "u"], []),
        ]
        // KDE krunner src/data/org.kde.krunner1.xml (Config only for X-Plasma-API=DBus2, not declared).
        let krunner: [String: ([String], [String])] = [
            "Match": (["s"], ["a(sssida{sv})"]),
            "Actions": ([], ["a(sss)"]),
            "Run": (["s", "s"], []),
            "Teardown": ([], []),
        ]
        #expect(try methods(bus, SessionBusHarness.providerPath, "org.gnome.Shell.SearchProvider2") == shell.mapValues { "\($0)" })
        #expect(try methods(bus, SessionBusHarness.krunnerPath, "org.kde.krunner1") == krunner.mapValues { "\($0)" })
    }

    /// The methods of `interface` at `path` as the provider introspects itself (`gdbus
    /// introspect --xml`), each as "(in types, out types)".
    func methods(_ bus: SessionBusHarness, _ path: String, _ interface: String) throws -> [String: String] {
        _ = try bus.provider("GetInitialResultSet", ["['x']"])  // activates the provider
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/gdbus")
        p.arguments = ["introspect", "--session", "--xml", "--dest", SessionBusHarness.providerName, "--object-path", path]
        p.environment = bus.environment
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let xml = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        func attribute(_ name: String, _ tag: Substring) -> String? {
            guard let start = tag.range(of: name + "=\"") else { return nil }
            return String(tag[start.upperBound...].prefix { $0 != "\"" })
        }
        guard let start = xml.range(of: "<interface name=\"\(interface)\">"),
              let end = xml[start.upperBound...].range(of: "</interface>") else { return [:] }
        var found: [String: String] = [:]
        for method in xml[start.upperBound..<end.lowerBound].components(separatedBy: "<method ").dropFirst() {
            let body = method.components(separatedBy: "</method>")[0]
            let name = attribute("name", Substring(body)) ?? ""
            let args = body.components(separatedBy: "<arg ").dropFirst().map { Substring($0) }
            let ins = args.filter { attribute("direction", $0) != "out" }.compactMap { attribute("type", $0) }
            let outs = args.filter { attribute("direction", $0) == "out" }.compactMap { attribute("type", $0) }
            found[name] = "\((ins, outs))"
        }
        return found
    }
}
