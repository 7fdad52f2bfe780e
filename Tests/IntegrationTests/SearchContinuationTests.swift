#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// Continuing a search in the app (issue 34 item 2, Docs/Desktop.md "Continuing a search in the
/// app"): GNOME Shell's LaunchSearch opens the app of the best result with a `searchlight-query:`
/// URI when its unit declares `ContinuesSearch`, else Searchlight's own search (here, with no
/// terminal in the session, the results in a notification). A real daemon with a unit, a real
/// session bus starting `searchlight-desktop`, `gdbus` as the Shell, a recorder desktop file
/// whose Exec writes its arguments to a file.
@Suite("Desktop search: continuing a search in the app", .onOwnThreads, .serialized, .enabled(if: SessionBusHarness.missingTools == nil))
struct SearchContinuationTests {
    static let notes = [
        #"{"uniqueIdentifier":"trip","attributeSet":{"title":"Natural Bridges trip plan","contentURL":"https://example.org/notes/trip"}}"#,
    ]

    /// A daemon whose unit for com.example.notes declares `OpenWith` (and `ContinuesSearch` when
    /// asked), its items imported, and a bus whose PATH has gio but no terminal emulator.
    func setUp(continuesSearch: Bool) async throws -> (ExtensionBench, SessionBusHarness, FakeNotificationServer, TempDir) {
        var unit = TestUnit("org.example.notes-ext", bundle: "com.example.notes")
        unit.openWith = "org.example.Notes.desktop"
        unit.continuesSearch = continuesSearch
        let bench = try await ExtensionBench.start([unit])
        _ = try await bench.waitForAcknowledgement(unit.label)
        try await importItems("com.example.notes", Self.notes, socket: bench.socket, dir: bench.dir)
        let tools = TempDir("sltools")
        symlink("/usr/bin/gio", tools.path + "/gio")
        let bus = try SessionBusHarness(daemonSocket: bench.socket, environment: ["PATH": tools.path])
        return (bench, bus, try bus.serveNotifications(), tools)
    }

    @Test("LaunchSearch opens the app of the results with the query when its unit declares ContinuesSearch")
    func continued() async throws {
        let (bench, bus, notices, tools) = try await setUp(continuesSearch: true)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        #expect(try bus.initialResults(["natural", "bridges"]) == ["com.example.notes/trip"])
        let r = try bus.provider("LaunchSearch", ["['natural', 'bridges']", "0"])
        #expect(r.ok, "\(r.stderr)\n\(bus.busLog)")
        let args = try bus.recorded(record)
        #expect(args == ["searchlight-query:natural%20bridges"], "\(args)")
        #expect(SearchQueryContinuation(uri: args[0])?.text == "natural bridges")
        #expect(notices.notifications.isEmpty)
        _ = (bench, tools)
    }

    @Test("without ContinuesSearch, LaunchSearch falls back to Searchlight's own search; the app is not launched")
    func fallback() async throws {
        let (bench, bus, notices, tools) = try await setUp(continuesSearch: false)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let r = try bus.provider("LaunchSearch", ["['natural', 'bridges']", "0"])
        #expect(r.ok, "\(r.stderr)")
        let shown = try notices.wait()
        #expect(shown[0].summary == "Results for “natural bridges”", "\(shown)")
        #expect(!FileManager.default.fileExists(atPath: record))
        _ = (bench, tools)
    }

    @Test("a declared app whose desktop file another user could have planted is refused; the fallback runs")
    func hostileDeclarationRefused() async throws {
        let (bench, bus, notices, tools) = try await setUp(continuesSearch: true)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        #expect(try bus.initialResults(["natural", "bridges"]) == ["com.example.notes/trip"])
        // Made writable by every user after the results were shown: anyone could have swapped its
        // Exec. (Its items are then left out too: nothing trusted opens them, hence "No results".)
        chmod(bus.dataHome + "/applications/org.example.Notes.desktop", 0o666)
        let r = try bus.provider("LaunchSearch", ["['natural', 'bridges']", "0"])
        #expect(r.ok, "\(r.stderr)")
        let shown = try notices.wait()
        #expect(shown[0].summary == "No results for “natural bridges”", "\(shown)")
        #expect(!FileManager.default.fileExists(atPath: record))
        #expect(bus.busLog.contains("search not continued in the app"), "\(bus.busLog)")
        _ = (bench, tools)
    }

    @Test("an app without an extension declares it with searchlight register --continues-search; registered without it, the fallback runs")
    func registered() async throws {
        let daemon = try await DaemonProcess()
        try await importItems("com.example.notes", Self.notes, socket: daemon.socket, dir: daemon.dir)
        let bad = try await runCLI(["register", "com.example.notes", "--continues-search"], socket: daemon.socket)
        #expect(bad.status != 0 && bad.stderr.contains("--continues-search needs --open-with"), "\(bad.stderr)")
        let r = try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop", "--continues-search"],
                                 socket: daemon.socket)
        #expect(r.status == 0 && r.stdout.contains("which also continues searches"), "\(r.stdout)\(r.stderr)")
        let tools = TempDir("sltools")
        symlink("/usr/bin/gio", tools.path + "/gio")
        let bus = try SessionBusHarness(daemonSocket: daemon.socket, environment: ["PATH": tools.path])
        let notices = try bus.serveNotifications()
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        // Not searched before: LaunchSearch searches, then continues in the app of the best result.
        #expect(try bus.provider("LaunchSearch", ["['natural', 'bridges']", "0"]).ok)
        #expect(try bus.recorded(record) == ["searchlight-query:natural%20bridges"])
        // Registered again without it: the fallback.
        #expect(try await runCLI(["register", "com.example.notes", "--open-with", "org.example.Notes.desktop"], socket: daemon.socket).status == 0)
        #expect(try bus.provider("LaunchSearch", ["['bridges']", "0"]).ok)
        #expect(try notices.wait()[0].summary == "Results for “bridges”")
        #expect(try bus.recorded(record).count == 1)
    }

    @Test("KRunner: a match of an app that continues searches has the search-in-app action, and Run with it opens the app with the query")
    func krunnerAction() async throws {
        let (bench, bus, _, tools) = try await setUp(continuesSearch: true)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let actions = try bus.krunner("Actions")
        #expect(actions.stdout.contains("('search-in-app', 'Search in the app', 'system-search')"), "\(actions.stdout)")
        let match = try bus.krunner("Match", ["'natural bridges'"])
        #expect(match.ok && match.stdout.contains("'actions': <['open-content', 'search-in-app']>"), "\(match.stdout)")
        let run = try bus.krunner("Run", ["'com.example.notes/trip'", "'search-in-app'"])
        #expect(run.ok, "\(run.stderr)")
        #expect(try bus.recorded(record) == ["searchlight-query:natural%20bridges"])
        _ = (bench, tools)
    }

    @Test("KRunner: without a declaration, no search-in-app action on the match, and Run with it is an error that says why")
    func krunnerActionRefused() async throws {
        let (bench, bus, _, tools) = try await setUp(continuesSearch: false)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let match = try bus.krunner("Match", ["'natural bridges'"])
        #expect(match.ok && !match.stdout.contains("search-in-app"), "\(match.stdout)")
        let run = try bus.krunner("Run", ["'com.example.notes/trip'", "'search-in-app'"])
        #expect(!run.ok && run.stderr.contains("does not continue searches"), "\(run.stderr)")
        #expect(!FileManager.default.fileExists(atPath: record))
        _ = (bench, tools)
    }
}
