#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit
import SearchlightStore

/// Docs/FirstApp.md's template (Extensions/FirstApp, built by `make extensions`) run as the page
/// runs it: its unit file as shipped (only its relative program path made absolute, as the page
/// says to do when copying it), the app's `recipes` CLI and its extension as real processes
/// against the real daemon, and the desktop's search through a real session bus.
@Suite("Your first app (template)", .onOwnThreads, .serialized)
struct FirstAppTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let template = root + "/Extensions/FirstApp"
    static var recipes: String { template + "/.build/debug/recipes" }
    static var recipesExtension: String { template + "/.build/debug/recipes-extension" }

    static func requireBuilt() throws {
        for program in [recipes, recipesExtension] where !FileManager.default.isExecutableFile(atPath: program) {
            throw HarnessError("\(program) is not built; run `make extensions` (make test does) before the tests")
        }
    }

    /// The string after `<key>KEY</key>` in a plist.
    static func plistString(_ plist: String, _ key: String) -> String? {
        guard let k = plist.range(of: "<key>\(key)</key>"),
              let open = plist.range(of: "<string>", range: k.upperBound..<plist.endIndex),
              let close = plist.range(of: "</string>", range: open.upperBound..<plist.endIndex) else { return nil }
        return String(plist[open.upperBound..<close.lowerBound])
    }

    /// `Recipes.bundleIdentifier` as the template's source declares it.
    static func sourceBundleIdentifier() throws -> String? {
        let source = try String(contentsOfFile: template + "/Sources/RecipesStore/Recipes.swift", encoding: .utf8)
        guard let match = try /static let bundleIdentifier = "([^"]+)"/.firstMatch(in: source) else { return nil }
        return String(match.output.1)
    }

    /// Runs the app with the test's store and daemon.
    static func app(_ arguments: [String], store: String, socket: String, dataHome: String) async throws -> CLIResult {
        try await blocking {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: recipes)
            p.arguments = ["--store", store] + arguments
            p.environment = ProcessInfo.processInfo.environment.merging(["SEARCHLIGHT_SOCKET": socket, "XDG_DATA_HOME": dataHome]) { $1 }
            let out = Pipe(), err = Pipe()
            p.standardOutput = out
            p.standardError = err
            p.standardInput = FileHandle.nullDevice
            try p.run()
            let stdout = out.fileHandleForReading.readDataToEndOfFile()
            let stderr = err.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return CLIResult(status: p.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self), stderr: String(decoding: stderr, as: UTF8.self))
        }
    }

    /// Every item of the app's default index, by identifier.
    static func items(socket: String, bundle: String) async throws -> [String: SearchableItem] {
        let index = SearchableIndex(bundleIdentifier: bundle, socketPath: socket)
        defer { Task { await index.close() } }
        var out: [String: SearchableItem] = [:]
        let context = SearchQueryContext(fetchAttributes: ["displayName", "keywords", "textContent"])
        for try await item in SearchQuery(queryString: "uniqueIdentifier == \"*\"", queryContext: context, index: index).results {
            out[item.uniqueIdentifier] = item
        }
        return out
    }

    @Test("the template's bundle identifier is one string: the app's constant, the unit's BundleIdentifier and Label, the desktop file the unit opens with")
    func bundleIdentifierAgrees() throws {
        let bundle = try #require(try Self.sourceBundleIdentifier())
        let unit = try String(contentsOfFile: Self.template + "/\(bundle).plist", encoding: .utf8)
        #expect(Self.plistString(unit, "BundleIdentifier") == bundle)
        #expect(Self.plistString(unit, "Label") == bundle)
        let openWith = try #require(Self.plistString(unit, "OpenWith"))
        #expect(openWith == bundle + ".desktop")
        #expect(FileManager.default.fileExists(atPath: Self.template + "/" + openWith))
        let desktop = try String(contentsOfFile: Self.template + "/" + openWith, encoding: .utf8)
        #expect(desktop.contains("\nExec=recipes %u\n"))
    }

    @Test("an extension whose delegate writes another bundle than its unit's says so, naming both")
    func bundleMismatchWarned() async throws {
        try Self.requireBuilt()
        let bundle = try #require(try Self.sourceBundleIdentifier())
        let dir = TempDir("slfirstm")
        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        // The template's extension (its delegate: Recipes.bundleIdentifier) under a unit of another bundle.
        let unit = try String(contentsOfFile: Self.template + "/\(bundle).plist", encoding: .utf8)
            .replacingOccurrences(of: "<string>.build/debug/recipes-extension</string>", with: "<string>\(Self.recipesExtension)</string>")
            .replacingOccurrences(of: "<string>\(bundle)</string>", with: "<string>com.example.mismatch</string>")
        try unit.write(toFile: dir.path + "/units/com.example.mismatch.plist", atomically: true, encoding: .utf8)
        let daemon = try await DaemonProcess(arguments: ["--units-dir", dir.path + "/units", "--backoff", "0.2"], dir: dir,
                                             environment: ["XDG_DATA_HOME": dir.path + "/data"])
        let line = try await daemon.waitForLog("the delegate's bundle is not the extension unit's", timeout: 60)
        #expect(line.contains("delegateBundle=\(bundle)") && line.contains("unitBundle=com.example.mismatch"), "\(line)")
    }

    @Test("from an empty database to a recipe found by the app, by its extension's rebuild and by the desktop's search, opened at the recipe")
    func walkThrough() async throws {
        try Self.requireBuilt()
        let bundle = try #require(try Self.sourceBundleIdentifier())
        let dir = TempDir("slfirst")
        let dataHome = dir.path + "/data"
        let store = dataHome + "/recipes/recipes.sqlite"
        try FileManager.default.createDirectory(atPath: dir.path + "/units", withIntermediateDirectories: true)
        // The unit as shipped; its program path relative to the template's folder made absolute.
        let unit = try String(contentsOfFile: Self.template + "/\(bundle).plist", encoding: .utf8)
        let installed = unit.replacingOccurrences(of: "<string>.build/debug/recipes-extension</string>", with: "<string>\(Self.recipesExtension)</string>")
        #expect(installed != unit, "the unit's ProgramArguments changed: update this test and Docs/FirstApp.md")
        try installed.write(toFile: dir.path + "/units/\(bundle).plist", atomically: true, encoding: .utf8)
        // The extension finds the store where the app keeps it: XDG_DATA_HOME, the same for both.
        let daemon = try await DaemonProcess(arguments: ["--units-dir", dir.path + "/units", "--backoff", "0.2"], dir: dir,
                                             environment: ["XDG_DATA_HOME": dataHome])
        // A new bundle with an extension gets one reindex-all; no database yet: nothing to donate.
        _ = try await daemon.waitForLog("reindex request acknowledged", timeout: 60)

        // `recipes add` waits until its change is indexed before it exits: the item is there at once.
        let added = try await Self.app(["add", "Buttermilk pancakes", "flour, buttermilk, eggs", "Whisk, rest ten minutes, fry in butter."],
                                       store: store, socket: daemon.socket, dataHome: dataHome)
        #expect(added.status == 0, "\(added.stderr)")
        #expect(added.stdout.hasPrefix("added recipe-1, indexed through history token "), "\(added.stdout)")
        var items = try await Self.items(socket: daemon.socket, bundle: bundle)
        #expect(items["recipe-1"]?.attributeSet.displayName == "Buttermilk pancakes")
        #expect(items["recipe-1"]?.attributeSet.keywords == ["flour", "buttermilk", "eggs"])
        #expect(!added.stderr.contains("warning"), "\(added.stderr)")

        let second = try await Self.app(["add", "Tomato soup", "tomatoes, onion, basil", "Roast the tomatoes, blend with the onion."],
                                        store: store, socket: daemon.socket, dataHome: dataHome)
        #expect(second.status == 0 && second.stdout.hasPrefix("added recipe-2"), "\(second.stdout)\(second.stderr)")

        // The app's search (UserQuery.responses): the ranked hit marked, the other recipe absent.
        let search = try await Self.app(["search", "pancake"], store: store, socket: daemon.socket, dataHome: dataHome)
        #expect(search.status == 0, "\(search.stderr)")
        #expect(search.stdout.contains("★ recipe-1\tButtermilk pancakes"), "\(search.stdout)")
        #expect(!search.stdout.contains("recipe-2"), "\(search.stdout)")

        // A row written by another process while no app runs; the extension's rebuild (started by
        // the daemon, from the unit) indexes it into the same bundle as the app's delegate.
        let db = try Database(path: store)
        try db.run("INSERT INTO recipes(title, ingredients, steps) VALUES ('Flatbread', 'flour, water, salt', 'Knead, rest, bake hot.')")
        let reindex = try await runCLI(["reindex", bundle, "--all"], socket: daemon.socket)
        #expect(reindex.status == 0, "\(reindex.stderr)")
        items = try await Self.items(socket: daemon.socket, bundle: bundle)
        #expect(Set(items.keys) == ["recipe-1", "recipe-2", "recipe-3"])
        #expect(items["recipe-3"]?.attributeSet.keywords == ["flour", "water", "salt"])
        #expect(!daemon.log.contains { $0.contains("the delegate's bundle is not the extension unit's") })

        // Opening a result: the app reads the item from its arguments.
        let opened = try await Self.app(["searchlight-item:\(bundle)/recipe-3"], store: store, socket: daemon.socket, dataHome: dataHome)
        #expect(opened.status == 0 && opened.stdout.hasPrefix("opened recipe-3: Flatbread"), "\(opened.stdout)\(opened.stderr)")

        // The desktop's search from the build tree (Docs/FirstApp.md step 5): a private session
        // bus activating the built provider, and the template's desktop file, its Exec made a
        // wrapper that runs the built app with the test's store and records what it printed.
        if let missing = SessionBusHarness.missingTools { Issue.record("desktop part not run: \(missing)"); return }
        let bus = try SessionBusHarness(daemonSocket: daemon.socket)
        let record = bus.dir.path + "/opened.txt"
        let wrapper = bus.dir.path + "/recipes.sh"
        try "#!/bin/sh\n'\(Self.recipes)' --store '\(store)' \"$@\" > '\(record).tmp' 2>&1; mv '\(record).tmp' '\(record)'\n"
            .write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        let desktop = try String(contentsOfFile: Self.template + "/\(bundle).desktop", encoding: .utf8)
        try desktop.replacingOccurrences(of: "\nExec=recipes %u\n", with: "\nExec=\(wrapper) %u\n")
            .write(toFile: bus.dataHome + "/applications/\(bundle).desktop", atomically: true, encoding: .utf8)
        let found = try bus.provider("GetInitialResultSet", ["['pancake']"])
        #expect(found.ok, "\(found.stderr)")
        #expect(found.stdout.contains("'\(bundle)/recipe-1'"), "\(found.stdout)")
        #expect(!found.stdout.contains("recipe-2"), "\(found.stdout)")
        let activated = try bus.provider("ActivateResult", ["'\(bundle)/recipe-1'", "['pancake']", "0"])
        #expect(activated.ok, "\(activated.stderr)")
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: record), Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let output = (try? String(contentsOfFile: record, encoding: .utf8)) ?? ""
        #expect(output.hasPrefix("opened recipe-1: Buttermilk pancakes"), "\(output)\n\(bus.busLog)")
    }
}
