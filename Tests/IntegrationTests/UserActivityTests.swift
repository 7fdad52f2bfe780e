#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// User activities (DESIGN §13, Docs/Protocol.md "User activities"): `UserActivity` through the
/// real daemon, its history searched, deduplicated with donated items, deleted, opened, and
/// defended against hostile peers.
@Suite("User activities", .onOwnThreads, .serialized)
struct UserActivityTests {
    static let bundle = "com.example.notes"

    static func app(_ daemon: DaemonProcess) -> SearchlightConnection {
        SearchlightConnection(role: .app(bundleIdentifier: bundle), socketPath: daemon.socket)
    }

    static func activity(_ daemon: DaemonProcess, _ id: String, title: String) -> UserActivity {
        let a = UserActivity(activityType: "com.example.notes.view",
                             configuration: .init(bundleIdentifier: bundle, socketPath: daemon.socket))
        a.persistentIdentifier = id
        a.title = title
        a.isEligibleForSearch = true
        return a
    }

    /// The app's own user query: identifiers in ranked order, with the index each came from.
    static func search(_ daemon: DaemonProcess, _ text: String) async throws -> [(id: String, index: String?, item: JSONValue)] {
        let app = Self.app(daemon)
        defer { Task { await app.close() } }
        let answer = try await app.send(QueryUser(text: text, context: .init(semanticSearch: false)))
        return answer.items.map { ($0["uniqueIdentifier"]?.stringValue ?? "", $0["index"]?.stringValue, $0) }
    }

    /// Rows of a bundle's stored activity history (expired ones too: what a purge removes).
    static func storedRows(_ daemon: DaemonProcess, _ sql: String) async throws -> String {
        let r = try await runCLI(["-readonly", daemon.stateDir + "/indexes/\(bundle)/_activities.sqlite", sql], socket: nil,
                                 executable: "/usr/bin/sqlite3")
        return r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("an activity's life: current, resigned, expired (invisible at once), purged by maintenance")
    func lifecycle() async throws {
        let daemon = try await DaemonProcess()
        let a = Self.activity(daemon, "trip-view", title: "Natural Bridges trip")
        a.keywords = ["utah"]
        a.userInfo = ["note": "42"]
        a.expirationDate = Date().addingTimeInterval(3)
        try await a.becomeCurrent()
        #expect(a.isCurrent)
        var found = try await Self.search(daemon, "utah bridges")
        #expect(found.map(\.id) == ["trip-view"] && found.first?.index == "_activities", "\(found.map(\.item))")
        #expect(found.first?.item["attributeSet"]?["custom"]?["activityCurrent"] == true)
        #expect(found.first?.item["attributeSet"]?["lastUsedDate"] != nil)
        #expect(try await Self.storedRows(daemon, "SELECT engagement FROM items WHERE uid = 'trip-view'") == "1.0")

        try await a.resignCurrent()
        #expect(!a.isCurrent)
        found = try await Self.search(daemon, "bridges")
        #expect(found.map(\.id) == ["trip-view"] && found.first?.item["attributeSet"]?["custom"]?["activityCurrent"] == false)

        // Expired: gone from every answer as soon as its date passes (waited for, with a deadline).
        let deadline = Date().addingTimeInterval(20)
        while try await !Self.search(daemon, "bridges").isEmpty {
            #expect(Date() < deadline, "the expired activity is still shown")
            if Date() >= deadline { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(try await Self.storedRows(daemon, "SELECT count(*) FROM items") == "1", "kept until purged")
        let idle = try await runCLI(["simulate", "idle", Self.bundle], socket: daemon.socket)
        #expect(idle.status == 0, "\(idle.stderr)")
        let line = try await daemon.waitForLog("expired items purged")
        #expect(line.contains("_activities"), "\(line)")
        #expect(try await Self.storedRows(daemon, "SELECT count(*) FROM items") == "0")
        // An invalidated activity cannot become current again.
        await a.invalidate()
        await #expect(throws: SearchlightError.self) { try await a.becomeCurrent() }
    }

    @Test("activities rank by recency and engagement: becomeCurrent again puts one first")
    func rankedByEngagement() async throws {
        let daemon = try await DaemonProcess()
        let first = Self.activity(daemon, "a", title: "Bridges notes")
        let second = Self.activity(daemon, "b", title: "Bridges notes")
        try await first.becomeCurrent()
        try await second.becomeCurrent()
        let before = try await Self.search(daemon, "bridges").map(\.id)
        #expect(Set(before) == ["a", "b"], "\(before)")
        let loser = before.last!
        let again = loser == "a" ? first : second
        for _ in 0..<3 { try await again.becomeCurrent() }
        let after = try await Self.search(daemon, "bridges").map(\.id)
        #expect(after.first == loser, "before \(before), after \(after)")
        // Becoming current resigned the other one.
        let other = try await Self.search(daemon, "bridges").first { $0.id != loser }
        #expect(other?.item["attributeSet"]?["custom"]?["activityCurrent"] == false)
    }

    @Test("an activity tied to a donated item is shown once, as that item, which it makes the most recent")
    func dedupeWithRelatedItem() async throws {
        let daemon = try await DaemonProcess()
        try await importItems(Self.bundle, [
            #"{"uniqueIdentifier":"trip-1","attributeSet":{"title":"Natural Bridges"}}"#,
            #"{"uniqueIdentifier":"trip-2","attributeSet":{"title":"Natural Bridges"}}"#,
        ], socket: daemon.socket, dir: daemon.dir)
        let before = try await Self.search(daemon, "natural bridges").map(\.id)
        #expect(Set(before) == ["trip-1", "trip-2"], "\(before)")
        let second = before.last!
        let a = Self.activity(daemon, "view-\(second)", title: "Natural Bridges")
        var attributes = AttributeSet()
        attributes.relatedUniqueIdentifier = second
        a.contentAttributeSet = attributes
        try await a.becomeCurrent()
        let after = try await Self.search(daemon, "natural bridges")
        #expect(after.map(\.id) == [second, before.first!], "shown once, first: \(after.map(\.id))")
        #expect(after.allSatisfy { $0.index == nil }, "no activity result: \(after.map(\.item))")
        #expect(after.first?.item["attributeSet"]?["lastUsedDate"] != nil)
        #expect(try await DesktopSearchTests().engagement(daemon, Self.bundle, second) == 1)
        // The answer says how it was kept.
        let app = Self.app(daemon)
        defer { Task { await app.close() } }
        let saved = try await app.send(try a.saveRequest(current: false))
        #expect(saved.shownAs == "item")
        // Without the item, the same activity is kept as an activity.
        let lone = Self.activity(daemon, "view-nothing", title: "Natural Bridges")
        var dangling = AttributeSet()
        dangling.relatedUniqueIdentifier = "no-such-item"
        lone.contentAttributeSet = dangling
        #expect(try await app.send(try lone.saveRequest(current: true)).shownAs == "activity")
    }

    @Test("deleteSavedUserActivities(withPersistentIdentifiers:) and deleteAllSavedUserActivities()")
    func deletes() async throws {
        let daemon = try await DaemonProcess()
        let configuration = UserActivity.Configuration(bundleIdentifier: Self.bundle, socketPath: daemon.socket)
        for id in ["one", "two", "three"] { try await Self.activity(daemon, id, title: "Bridges \(id)").becomeCurrent() }
        try await importItems(Self.bundle, [#"{"uniqueIdentifier":"item","attributeSet":{"title":"Bridges item"}}"#],
                              socket: daemon.socket, dir: daemon.dir)
        #expect(Set(try await Self.search(daemon, "bridges").map(\.id)) == ["one", "two", "three", "item"])
        try await UserActivity.deleteSavedUserActivities(withPersistentIdentifiers: ["two", "nosuch"], configuration: configuration)
        #expect(Set(try await Self.search(daemon, "bridges").map(\.id)) == ["one", "three", "item"])
        try await UserActivity.deleteAllSavedUserActivities(configuration: configuration)
        #expect(try await Self.search(daemon, "bridges").map(\.id) == ["item"], "the donated item stays")
    }

    @Test("the history keeps the newest --max-activities-per-bundle")
    func bounded() async throws {
        let daemon = try await DaemonProcess(arguments: ["--max-activities-per-bundle", "3"])
        for i in 1...5 { try await Self.activity(daemon, "a\(i)", title: "Bridges \(i)").becomeCurrent() }
        #expect(Set(try await Self.search(daemon, "bridges").map(\.id)) == ["a3", "a4", "a5"])
        #expect(try await Self.storedRows(daemon, "SELECT count(*) FROM items") == "3")
    }

    @Test("opening an activity launches the app's OpenWith with its searchlight-activity: URI, which the app reads back",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/gio")))
    func opening() async throws {
        let daemon = try await DaemonProcess()
        let dir = daemon.dir
        let a = Self.activity(daemon, "trip/view 1", title: "Natural Bridges trip")
        a.userInfo = ["note": "42", "scroll": 0.5]
        a.webpageURL = URL(string: "https://example.org/trips/1")
        try await a.becomeCurrent()
        let roles = OpenCommandTests()
        // No app declared: the webpageURL opens with the default handler.
        let xdg = dir.path + "/xdg-open.record"
        try roles.recorder(dir.path + "/fakebin/xdg-open", record: xdg)
        let web = try await roles.open(["open", Self.bundle, "trip/view 1"], socket: daemon.socket, dir: dir, path: dir.path + "/fakebin")
        #expect(web.status == 0, "\(web.stdout) \(web.stderr)")
        #expect(roles.lines(xdg) == ["https://example.org/trips/1"])
        // The app declared: launched with the activity's URI.
        let record = dir.path + "/notes.record"
        try roles.recorder(dir.path + "/bin/notes", record: record)
        try FileManager.default.createDirectory(atPath: dir.path + "/data/applications", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Notes\nExec=\(dir.path)/bin/notes %u\n"
            .write(toFile: dir.path + "/data/applications/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        let registered = try await runCLI(["register", Self.bundle, "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        let opened = try await roles.open(["open", Self.bundle, "trip/view 1"], socket: daemon.socket, dir: dir)
        #expect(opened.status == 0, "\(opened.stdout) \(opened.stderr)")
        let deadline = Date().addingTimeInterval(10)
        while roles.lines(record).isEmpty, Date() < deadline { usleep(20_000) }
        let uri = "searchlight-activity:com.example.notes/trip%2Fview%201"
        #expect(roles.lines(record) == [uri])
        // The app reads it back, and its saved fields.
        let launched = try #require(UserActivity.fromLaunchArguments(["notes", uri]))
        #expect(launched.bundleIdentifier == Self.bundle && launched.persistentIdentifier == "trip/view 1")
        let restored = try #require(try await launched.restore(socketPath: daemon.socket))
        #expect(restored.activityType == "com.example.notes.view" && restored.title == "Natural Bridges trip")
        #expect(restored.userInfo == ["note": "42", "scroll": 0.5])
        #expect(restored.webpageURL?.absoluteString == "https://example.org/trips/1")
        #expect(UserActivity(uri: "searchlight-item:com.example.notes/x") == nil && UserActivity(uri: "searchlight-activity:bad bundle/x") == nil)
        // The desktop role finds it as an activity of the bundle, and resolves it.
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        let answer = try await desktop.send(QueryUser(text: "bridges"))
        #expect(answer.items.first?["index"]?.stringValue == "_activities" && answer.items.first?["bundle"]?.stringValue == Self.bundle)
        let resolved = try await desktop.send(ActivityResolve(persistentIdentifier: "trip/view 1", bundle: Self.bundle))
        #expect(resolved.item != nil && resolved.opening?.openWith == "org.example.Notes.desktop")
    }

    @Test("hostile fields are refused with the field named, and nothing is stored")
    func hostileFields() async throws {
        let daemon = try await DaemonProcess()
        let app = Self.app(daemon)
        defer { Task { await app.close() } }
        let base: [String: JSONValue] = ["persistentIdentifier": "x", "activityType": "com.example.view"]
        let cases: [(String, JSONValue, String)] = [
            ("title", .string(String(repeating: "t", count: 5000)), "\"title\""),
            ("keywords", .array((0..<65).map { .string("k\($0)") }), "\"keywords\""),
            ("userInfo", ["blob": .string(String(repeating: "u", count: 20_000))], "\"userInfo\""),
            ("userInfo", "not an object", "\"userInfo\""),
            ("webpageURL", "javascript:alert(1)", "\"webpageURL\""),
            ("webpageURL", "file:///etc/passwd", "\"webpageURL\""),
            ("activityType", "com example/../x", "\"activityType\""),
            ("persistentIdentifier", .string(String(repeating: "p", count: 2000)), "\"persistentIdentifier\""),
            ("persistentIdentifier", "line\nbreak", "\"persistentIdentifier\""),
            ("expirationDate", "2999-01-01T00:00:00Z", "expirationDate"),
            ("expirationDate", "tomorrow", "\"expirationDate\""),
            ("attributeSet", ["rankingHint": 1000], "attributeSet"),
        ]
        var deep: JSONValue = "x"
        for _ in 0..<40 { deep = ["d": deep] }
        for (field, value, named) in cases + [("userInfo", deep, "\"userInfo\"")] {
            var params = base
            params[field] = value
            do {
                _ = try await app.call(Method.activitySave, .object(params))
                Issue.record("\(field) = \(String(describing: value).prefix(60)) was accepted")
            } catch let error as SearchlightError {
                #expect(error.code == .invalidParams && error.message.contains(named), "\(field): \(error.message)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: daemon.stateDir + "/indexes/\(Self.bundle)/_activities.sqlite"))
        // A client may not name the activity history as an index.
        await #expect(throws: SearchlightError.self) {
            _ = try await app.call(Method.indexItems, ["index": "_activities", "items": [["uniqueIdentifier": "x"]]])
        }
        // The desktop role may not write activities.
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        await #expect(throws: SearchlightError.self) { _ = try await desktop.call(Method.activitySave, .object(base)) }
    }

    @Test("another uid can neither write, delete nor read a bundle's activities",
          .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")
                   && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func otherUID() async throws {
        let dir = TempDir()
        chmod(dir.path, 0o755)
        let daemon = try await DaemonProcess(arguments: ["--system"], dir: dir)
        let alice: UInt32 = 64_101, bob: UInt32 = 64_102
        // Alice claims her bundle and saves an activity, as herself.
        func rpc(as uid: UInt32, bundle: String, _ calls: [JSONValue]) async throws -> [JSONValue] {
            let script = """
                import json, socket, sys
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rwb")
                msgs = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "role": "app", "bundleIdentifier": sys.argv[2], "capabilities": {}}}]
                msgs += [{"jsonrpc": "2.0", "id": i + 1, "method": m["method"], "params": m["params"]} for i, m in enumerate(json.loads(sys.argv[3]))]
                for m in msgs:
                    f.write((json.dumps(m) + "\\n").encode()); f.flush(); print(f.readline().decode().strip())
                """
            let calls = String(decoding: JSONValue.array(calls).serialized(), as: UTF8.self)
            let r = try await runCLI(["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--", "/usr/bin/python3", "-c", script,
                                      daemon.socket, bundle, calls], socket: nil, executable: "/usr/bin/setpriv")
            #expect(r.status == 0, "\(r.stderr)")
            return r.stdout.split(separator: "\n").dropFirst().compactMap { try? JSONValue.parse(String($0)) }
        }
        let save: JSONValue = ["method": "activity.save", "params": ["persistentIdentifier": "secret-view", "activityType": "com.alice.view",
                                                                      "title": "alice private trip", "current": true]]
        let own = try await rpc(as: alice, bundle: "com.alice.notes", [save])
        #expect(own.first?["result"]?["shownAs"] == "activity", "\(own)")
        // Bob, on an app connection naming Alice's bundle: every activity call refused.
        let bobs = try await rpc(as: bob, bundle: "com.alice.notes", [
            save,
            ["method": "activity.delete", "params": ["persistentIdentifiers": ["secret-view"]]],
            ["method": "activity.deleteAll", "params": [:]],
            ["method": "activity.resolve", "params": ["persistentIdentifier": "secret-view"]],
            ["method": "query.user", "params": ["text": "private"]],
        ])
        #expect(bobs.count == 5)
        for answer in bobs {
            #expect(answer["error"]?["code"]?.intValue == -3001, "\(answer)")
            #expect(!String(describing: answer).contains("alice private"), "\(answer)")
        }
        let still = try await rpc(as: alice, bundle: "com.alice.notes", [["method": "query.user", "params": ["text": "private"]]])
        #expect(still.first?["result"]?["items"]?.arrayValue?.first?["uniqueIdentifier"] == "secret-view", "\(still)")
        // Root, who may write any bundle as an app, cannot forge Alice's history (the CLI speaks as
        // the app); it may list it.
        let forged = try await runCLI(["activity", "save", "com.alice.notes", "--type", "com.alice.view", "--title", "forged visit"],
                                      socket: daemon.socket)
        #expect(forged.status == 1 && forged.stderr.contains("owner"), "\(forged.status) \(forged.stderr)")
        let listed = try await runCLI(["activity", "list", "com.alice.notes"], socket: daemon.socket)
        #expect(listed.status == 0 && listed.stdout.hasPrefix("secret-view  alice private trip"), "\(listed.stdout) \(listed.stderr)")
    }

    @Test("GNOME Shell shows an activity as a result of its app and activating it launches the app with its URI",
          .enabled(if: SessionBusHarness.missingTools == nil))
    func desktopShell() async throws {
        let daemon = try await DaemonProcess()
        try await importItems(Self.bundle, [#"{"uniqueIdentifier":"n1","attributeSet":{"title":"Bridges item"}}"#],
                              socket: daemon.socket, dir: daemon.dir)
        try await Self.activity(daemon, "trip-view", title: "Bridges trip, last viewed").becomeCurrent()
        let bus = try SessionBusHarness(daemonSocket: daemon.socket)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let registered = try await runCLI(["register", Self.bundle, "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        let uri = "searchlight-activity:com.example.notes/trip-view"
        let ids = try bus.initialResults(["bridges"])
        #expect(Set(ids) == ["com.example.notes/n1", uri], "\(ids)")
        let metas = try bus.provider("GetResultMetas", [SessionBusHarness.stringArray([uri])])
        #expect(metas.ok && metas.stdout.contains("Bridges trip, last viewed"), "\(metas.stdout) \(metas.stderr)")
        let r = try bus.provider("ActivateResult", ["'\(uri)'", "['bridges']", "0"])
        #expect(r.ok, "\(r.stderr)")
        #expect(try bus.recorded(record) == [uri])
        // Deleted since: no longer resolved, so not shown.
        try await UserActivity.deleteAllSavedUserActivities(configuration: .init(bundleIdentifier: Self.bundle, socketPath: daemon.socket))
        let gone = try bus.provider("GetResultMetas", [SessionBusHarness.stringArray([uri])])
        #expect(gone.ok && !gone.stdout.contains("Bridges trip"), "\(gone.stdout)")
    }

    @Test("opening an activity from GNOME Shell records its engagement: it ranks above an equally recent unopened one",
          .enabled(if: SessionBusHarness.missingTools == nil))
    func openedFromShellRanksHigher() async throws {
        let daemon = try await DaemonProcess()
        let app = Self.app(daemon)
        defer { Task { await app.close() } }
        // Saved, not current (no engagement), with the same time of use.
        let used = Date().addingTimeInterval(-3600)
        for id in ["view-a", "view-b"] {
            let a = Self.activity(daemon, id, title: "Bridges walk")
            var set = AttributeSet()
            set.lastUsedDate = used
            a.contentAttributeSet = set
            #expect(try await app.send(try a.saveRequest(current: false)).shownAs == "activity")
        }
        let before = try await Self.search(daemon, "bridges walk").map(\.id)
        #expect(Set(before) == ["view-a", "view-b"], "\(before)")
        let opened = try #require(before.last)
        let bus = try SessionBusHarness(daemonSocket: daemon.socket)
        let record = try bus.installRecorder("org.example.Notes.desktop", name: "Notes")
        let registered = try await runCLI(["register", Self.bundle, "--open-with", "org.example.Notes.desktop"], socket: daemon.socket)
        #expect(registered.status == 0, "\(registered.stderr)")
        let uri = "searchlight-activity:com.example.notes/\(opened)"
        #expect(try bus.initialResults(["bridges"]).contains(uri))
        let r = try bus.provider("ActivateResult", ["'\(uri)'", "['bridges']", "0"])
        #expect(r.ok, "\(r.stderr)")
        #expect(try bus.recorded(record) == [uri])
        // The engagement is recorded after the launch: waited for, with a deadline.
        let deadline = Date().addingTimeInterval(15)
        while try await Self.storedRows(daemon, "SELECT engagement FROM items WHERE uid = '\(opened)'") != "1.0", Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(try await Self.storedRows(daemon, "SELECT engagement FROM items WHERE uid = '\(opened)'") == "1.0")
        let after = try await Self.search(daemon, "bridges walk").map(\.id)
        #expect(after.first == opened, "before \(before), after \(after)")
        // `searchlight open --activity` records it too.
        let other = before.first!
        let roles = OpenCommandTests()
        let dir = daemon.dir
        try roles.recorder(dir.path + "/bin/notes", record: dir.path + "/notes.record")
        try FileManager.default.createDirectory(atPath: dir.path + "/data/applications", withIntermediateDirectories: true)
        try "[Desktop Entry]\nType=Application\nName=Notes\nExec=\(dir.path)/bin/notes %u\n"
            .write(toFile: dir.path + "/data/applications/org.example.Notes.desktop", atomically: true, encoding: .utf8)
        let cli = try await roles.open(["open", Self.bundle, other, "--activity"], socket: daemon.socket, dir: dir)
        #expect(cli.status == 0, "\(cli.stdout) \(cli.stderr)")
        #expect(try await Self.storedRows(daemon, "SELECT engagement FROM items WHERE uid = '\(other)'") == "1.0")
        // The desktop still cannot name the history as an index, nor engage with a bundle's
        // activity history that does not exist.
        let desktop = SearchlightConnection(role: .desktop, socketPath: daemon.socket)
        defer { Task { await desktop.close() } }
        await #expect(throws: SearchlightError.self) {
            _ = try await desktop.call(Method.queryEngaged, ["bundle": .string(Self.bundle), "identifier": "view-a", "index": "_activities"])
        }
        await #expect(throws: SearchlightError.self) {
            _ = try await desktop.send(QueryEngaged(target: .identifier("x"), bundle: "com.example.none", activity: true))
        }
    }

    @Test("an activity saved before its related item exists is shown as that item once it is donated (both orders)")
    func dedupeWhenItemArrivesLater() async throws {
        let daemon = try await DaemonProcess()
        let app = Self.app(daemon)
        defer { Task { await app.close() } }
        // The activity first: kept, as the item does not exist yet.
        let a = Self.activity(daemon, "view-late", title: "Natural Bridges late")
        var set = AttributeSet()
        set.relatedUniqueIdentifier = "trip-late"
        a.contentAttributeSet = set
        try await a.becomeCurrent()
        #expect(try await Self.search(daemon, "natural bridges").map(\.id) == ["view-late"])
        // The item arrives, an old one (last used a year ago), beside an unrelated equal one.
        try await importItems(Self.bundle, [
            #"{"uniqueIdentifier":"trip-late","attributeSet":{"title":"Natural Bridges late","lastUsedDate":"2025-01-01T00:00:00Z"}}"#,
            #"{"uniqueIdentifier":"trip-other","attributeSet":{"title":"Natural Bridges late","lastUsedDate":"2025-01-01T00:00:00Z"}}"#,
        ], socket: daemon.socket, dir: daemon.dir)
        let after = try await Self.search(daemon, "natural bridges")
        #expect(after.map(\.id) == ["trip-late", "trip-other"], "shown once, as the item, first: \(after.map(\.id))")
        #expect(after.allSatisfy { $0.index == nil }, "no activity result: \(after.map(\.item))")
        let lastUsed = after.first?.item["attributeSet"]?["lastUsedDate"]?.stringValue.flatMap(ISO8601.parse)
        #expect((lastUsed ?? .distantPast) > Date().addingTimeInterval(-600), "the activity's recency: \(String(describing: lastUsed))")
        #expect(try await DesktopSearchTests().engagement(daemon, Self.bundle, "trip-late") == 1)
        #expect(try await Self.storedRows(daemon, "SELECT count(*) FROM items") == "0", "the activity left the history")
        // The other order (item first) still holds: a new save is shown as the item at once.
        let again = Self.activity(daemon, "view-late-2", title: "Natural Bridges late")
        again.contentAttributeSet = set
        #expect(try await app.send(try again.saveRequest(current: true)).shownAs == "item")
        #expect(try await Self.search(daemon, "natural bridges").map(\.id) == ["trip-late", "trip-other"])
        #expect(try await DesktopSearchTests().engagement(daemon, Self.bundle, "trip-late") == 2)
    }

    @Test("an app that dies with a current activity has it resigned (kept in the history)",
          .enabled(if: FileManager.default.isExecutableFile(atPath: Products.path("searchlight-test-client"))))
    func disconnectResigns() async throws {
        let daemon = try await DaemonProcess()
        let process = Process()
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: Products.path("searchlight-test-client"))
        process.arguments = ["current", daemon.socket, "held-view", Self.bundle]
        process.standardInput = Pipe()
        process.standardOutput = output
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        var line = Data()
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            if byte.isEmpty || byte == Data([0x0A]) { break }
            line.append(byte)
        }
        #expect(String(decoding: line, as: UTF8.self) == "current=ok")
        var found = try await Self.search(daemon, "bridges view")
        #expect(found.map(\.id) == ["held-view"] && found.first?.item["attributeSet"]?["custom"]?["activityCurrent"] == true)
        // Killed (a crash): no resign from the app.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        let deadline = Date().addingTimeInterval(15)
        while try await Self.search(daemon, "bridges view").first?.item["attributeSet"]?["custom"]?["activityCurrent"] != false, Date() < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        found = try await Self.search(daemon, "bridges view")
        #expect(found.map(\.id) == ["held-view"], "kept in the history")
        #expect(found.first?.item["attributeSet"]?["custom"]?["activityCurrent"] == false, "\(found.map(\.item))")
    }

    @Test("searchlight activity save, list and delete, as the app")
    func cli() async throws {
        let daemon = try await DaemonProcess()
        let saved = try await runCLI(["activity", "save", Self.bundle, "--type", "com.example.notes.view", "--title", "Bridges tour",
                                      "--id", "tour-1", "--keywords", "utah", "arches", "--url", "https://example.org/tour"],
                                     socket: daemon.socket)
        #expect(saved.status == 0 && saved.stdout == "saved activity tour-1 of com.example.notes\n", "\(saved.stdout) \(saved.stderr)")
        let found = try await Self.search(daemon, "arches")
        #expect(found.map(\.id) == ["tour-1"] && found.first?.index == "_activities", "\(found.map(\.item))")
        #expect(found.first?.item["attributeSet"]?["custom"]?["activityWebpageURL"] == "https://example.org/tour")
        // --current: engagement, and resigned when the command exits (its connection closes).
        let current = try await runCLI(["activity", "save", Self.bundle, "--type", "com.example.notes.view", "--title", "Bridges walk",
                                        "--id", "walk-1", "--current"], socket: daemon.socket)
        #expect(current.status == 0, "\(current.stderr)")
        #expect(try await Self.storedRows(daemon, "SELECT engagement FROM items WHERE uid = 'walk-1'") == "1.0")
        let listed = try await runCLI(["activity", "list", Self.bundle], socket: daemon.socket)
        #expect(listed.status == 0, "\(listed.stderr)")
        let lines = listed.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines[0].hasPrefix("walk-1  Bridges walk  last used ") && lines[1].hasPrefix("tour-1  Bridges tour"),
                "\(listed.stdout)")
        #expect(!listed.stdout.contains("(current)"), "resigned at exit: \(listed.stdout)")
        let json = try await runCLI(["activity", "list", Self.bundle, "--limit", "1", "--json"], socket: daemon.socket)
        #expect(try JSONValue.parse(json.stdout)["activities"]?.arrayValue?.count == 1, "\(json.stdout)")
        let deleted = try await runCLI(["activity", "delete", Self.bundle, "--identifiers", "tour-1", "nosuch"], socket: daemon.socket)
        #expect(deleted.status == 0 && deleted.stdout == "deleted 1 activity of com.example.notes\n", "\(deleted.stdout) \(deleted.stderr)")
        #expect(try await Self.search(daemon, "bridges").map(\.id) == ["walk-1"])
        let all = try await runCLI(["activity", "delete", Self.bundle, "--all"], socket: daemon.socket)
        #expect(all.status == 0 && all.stdout.hasPrefix("deleted 1 "), "\(all.stdout)")
        // Usage errors: exit 2, with what to give.
        for (args, says) in [(["activity", "save", Self.bundle, "--title", "x"], "--type"),
                             (["activity", "save", Self.bundle, "--type", "t.v", "--title", "x", "--url", "file:///etc/passwd"], "--url"),
                             (["activity", "delete", Self.bundle], "--identifiers"),
                             (["activity", "rename", Self.bundle], "'save'")] {
            let r = try await runCLI(args, socket: daemon.socket)
            #expect(r.status == 2 && r.stderr.contains(says), "\(args): \(r.status) \(r.stderr)")
        }
    }

    /// The cost of `becomeCurrent()` through the socket (issue 33's figure): run with
    /// SEARCHLIGHT_MEASURE_ACTIVITY=N (calls); prints p50/p99. A release daemon: build it
    /// (`swift build -c release --product searchlightd`) and point SEARCHLIGHT_PRODUCTS at a folder
    /// holding a link to it.
    @Test("becomeCurrent() cost, p50/p99 (measurement; SEARCHLIGHT_MEASURE_ACTIVITY=N)",
          .enabled(if: ProcessInfo.processInfo.environment["SEARCHLIGHT_MEASURE_ACTIVITY"] != nil))
    func becomeCurrentCost() async throws {
        let n = Int(ProcessInfo.processInfo.environment["SEARCHLIGHT_MEASURE_ACTIVITY"] ?? "") ?? 1000
        let daemon = try await DaemonProcess(arguments: ProcessInfo.processInfo.environment["SEARCHLIGHTD_ARGS"].map { $0.split(separator: " ").map(String.init) } ?? [])
        var samples: [Double] = []
        let activities = (0..<10).map { Self.activity(daemon, "view-\($0)", title: "Natural Bridges note \($0)") }
        for a in activities { try await a.becomeCurrent() }  // the connection and the history's file exist
        // The daemon's CPU time (utime + stime, /proc/PID/stat fields 14 and 15) across the loop.
        let pid = daemon.process?.processIdentifier ?? 0
        func daemonCPU() -> Double {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return 0 }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)  // clock ticks
        }
        let cpuBefore = daemonCPU()
        let loadBefore = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
        for i in 0..<n {
            let a = activities[i % activities.count]
            let start = ContinuousClock.now
            try await a.becomeCurrent()
            let d = ContinuousClock.now - start
            samples.append(Double(d.components.seconds) * 1000 + Double(d.components.attoseconds) / 1e15)
        }
        let cpuPerCall = (daemonCPU() - cpuBefore) / Double(sysconf(Int32(_SC_CLK_TCK))) * 1000 / Double(n)
        let loadAfter = (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3).joined(separator: " ") ?? "?"
        samples.sort()
        func p(_ q: Double) -> String { String(format: "%.2f", samples[min(samples.count - 1, Int(Double(samples.count) * q))]) }
        print("becomeCurrent through the socket: n=\(n) p50=\(p(0.5)) ms p99=\(p(0.99)) ms max=\(p(1)) ms daemon_cpu_per_call="
              + String(format: "%.3f", cpuPerCall) + " ms load=\(loadBefore) -> \(loadAfter)")
    }
}
