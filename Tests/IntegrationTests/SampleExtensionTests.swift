#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// The sample extensions of `Extensions/`, each built as its own package (`make extensions`, which
/// `make test` runs first), launched by the real daemon from the real units of
/// `launchd-like-units/extensions`, as `make run` does.
@Suite("sample extensions", .onOwnThreads, .serialized)
struct SampleExtensionTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let units = root + "/launchd-like-units/extensions"
    static let samples = ["journal": "Journal", "notes": "Notes", "packages": "Packages", "tags": "Tags", "webpages": "WebPages"]

    /// The daemon with the sample units, after all five initial reindexes are acknowledged. As
    /// `make run` does, the Tags app's store is seeded with the demo photos first (here in a temp
    /// `XDG_DATA_HOME`, where the daemon's extensions find it).
    func daemonWithSamples() async throws -> DaemonProcess {
        for (name, folder) in Self.samples {
            let program = "\(Self.root)/Extensions/\(folder)/.build/debug/\(name)-extension"
            guard FileManager.default.isExecutableFile(atPath: program) else {
                throw HarnessError("\(program) is not built; run `make extensions` (make test does) before the tests")
            }
        }
        let dir = TempDir()
        let dataHome = dir.path + "/data"
        let seed = Process()
        seed.executableURL = URL(fileURLWithPath: Self.root + "/Extensions/Tags/Sample/demo.sh")
        seed.arguments = [Self.root + "/Extensions/Tags/.build/debug/tags"]
        seed.environment = ProcessInfo.processInfo.environment.merging(
            ["XDG_DATA_HOME": dataHome, "SEARCHLIGHT_SOCKET": dir.path + "/no-daemon-yet.sock"]) { $1 }
        seed.standardOutput = FileHandle.nullDevice
        try seed.run()
        seed.waitUntilExit()
        guard seed.terminationStatus == 0 else { throw HarnessError("Extensions/Tags/Sample/demo.sh failed (\(seed.terminationStatus))") }
        let daemon = try await DaemonProcess(arguments: ["--units-dir", Self.units], dir: dir, environment: ["XDG_DATA_HOME": dataHome])
        // Units are queued in label order (the RecentFiles sample, 4, has no recent files here).
        let order = ["journal": 1, "notes": 2, "packages": 3, "recentfiles": 4, "tags": 5, "webpages": 6]
        for name in Self.samples.keys + ["recentfiles"] {
            try await daemon.waitForLog("reindex request acknowledged id=\(order[name]!) label=org.searchlight.sample.\(name)", timeout: 120)
        }
        return daemon
    }

    func count(_ bundle: String, _ daemon: DaemonProcess) async throws -> Int {
        let r = try await runCLI(["status", bundle, "--json"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let bundles = try JSONValue.parse(r.stdout)["bundles"]?.arrayValue ?? []
        return bundles.first { $0["bundle"]?.stringValue == bundle }?["indexes"]?.arrayValue?.first?["items"]?.intValue ?? -1
    }

    @Test("a first start indexes every sample, and a search across apps finds the journal and the notes")
    func firstStartIndexesSamples() async throws {
        let daemon = try await daemonWithSamples()
        let journal = try JSONValue.parse(Array(try Data(contentsOf: URL(fileURLWithPath: Self.root + "/Extensions/Journal/Sample/journal.json"))))
        await #expect(try count("org.searchlight.sample.journal", daemon) == journal.arrayValue?.count)

        let r = try await runCLI(["search", "json parser", "--json"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let bundles = Set((try JSONValue.parse(r.stdout)["items"]?.arrayValue ?? []).compactMap { $0["bundle"]?.stringValue })
        #expect(bundles.isSuperset(of: ["org.searchlight.sample.journal", "org.searchlight.sample.notes"]), "\(r.stdout.prefix(2000))")
    }

    @Test("make run's tour: the Tags demo photos are indexed, and \"natural bridges\" finds the tag and its photos")
    func tagsDemo() async throws {
        let daemon = try await daemonWithSamples()
        let r = try await runCLI(["search", "natural bridges", "--json"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let items = (try JSONValue.parse(r.stdout)["items"]?.arrayValue ?? []).filter { $0["bundle"]?.stringValue == "org.searchlight.sample.tags" }
        let names = Set(items.compactMap { $0["attributeSet"]?["displayName"]?.stringValue })
        #expect(names.contains("Natural Bridges State Park"), "the tag: \(r.stdout.prefix(2000))")
        #expect(names.contains("Sipapu Bridge at sunset"), "a photo tagged with it: \(r.stdout.prefix(2000))")
        await #expect(try count("org.searchlight.sample.tags", daemon) == 4 + 4)  // 4 photos, 4 tags
    }

    @Test("make run's tour: \"keepers trimmed wicks\" (its og:description) finds the WebPages sample's lighthouse guide, which opens as its file")
    func webPagesTour() async throws {
        let daemon = try await daemonWithSamples()
        let r = try await runCLI(["search", "keepers trimmed wicks", "--json"], socket: daemon.socket)
        #expect(r.status == 0, "\(r.stderr)")
        let items = (try JSONValue.parse(r.stdout)["items"]?.arrayValue ?? []).filter { $0["bundle"]?.stringValue == "org.searchlight.sample.webpages" }
        #expect(items.first?["uniqueIdentifier"]?.stringValue == "guides/lighthouse-keeping.html", "\(r.stdout.prefix(2000))")
        let client = SearchableIndex(bundleIdentifier: "org.searchlight.sample.webpages", socketPath: daemon.socket)
        defer { Task { await client.close() } }
        let context = SearchQueryContext(fetchAttributes: ["contentURL"])
        var urls: [String: URL] = [:]
        for try await item in SearchQuery(queryString: "uniqueIdentifier == \"*\"", queryContext: context, index: client).results {
            urls[item.uniqueIdentifier] = item.attributeSet.contentURL
        }
        #expect(urls["guides/lighthouse-keeping.html"] == URL(fileURLWithPath: Self.root + "/Extensions/WebPages/Sample/pages/guides/lighthouse-keeping.html"))
        await #expect(try count("org.searchlight.sample.webpages", daemon) == 3)
    }

    @Test("the Packages sample indexes every installed package of dpkg's status file")
    func packagesMatchDpkg() async throws {
        let status = (try? String(contentsOfFile: "/var/lib/dpkg/status", encoding: .utf8)) ?? ""
        let installed = status.components(separatedBy: "\n").filter { $0.hasPrefix("Status:") && $0.hasSuffix(" installed") }.count
        let daemon = try await daemonWithSamples()
        await #expect(try count("org.searchlight.sample.packages", daemon) == installed)
    }

    @Test("mdutil -cr rebuilds a sample and waits for its acknowledgement")
    func mdutilReindex() async throws {
        let daemon = try await daemonWithSamples()
        let r = try await runCLI(["-cr", "org.searchlight.sample.notes"], socket: daemon.socket, executable: "mdutil")
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("acknowledged"), "\(r.stdout)")
    }

    @Test("an app fetches a journal entry's text from the extension (index.fetchData)")
    func fetchData() async throws {
        let daemon = try await daemonWithSamples()
        let client = try RawClient(path: daemon.socket)
        try client.initialize(bundle: "org.searchlight.sample.journal")
        let answer = try client.call(2, Method.indexFetchData, ["identifier": "2024-01-09-parser-crash", "typeIdentifier": "public.plain-text"])
        let data = answer?["result"]?["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }
        #expect(data.map { String(decoding: $0, as: UTF8.self) }?.contains("JSON parser") == true, "\(String(describing: answer))")
    }

    @Test("every sample answers --dump (from the SDK, not its own code) with what its reindex-all donates, as import lines",
        arguments: [("journal", "Journal", "Extensions/Journal/Sample/journal.json"), ("notes", "Notes", "Extensions/Notes/Sample/notes"),
                    ("packages", "Packages", "/var/lib/dpkg/status"), ("webpages", "WebPages", "Extensions/WebPages/Sample/pages")])
    func dump(name: String, folder: String, data: String) async throws {
        let program = "\(Self.root)/Extensions/\(folder)/.build/debug/\(name)-extension"
        let path = data.hasPrefix("/") ? data : Self.root + "/" + data
        let r = try await runCLI(["--dump", path], socket: nil, executable: program)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n")
        let items = lines.compactMap { try? JSONValue.parse(String($0)) }
        #expect(items.count == lines.count && !items.isEmpty, "every line is one item: \(r.stdout.prefix(500))")
        #expect(items.allSatisfy { $0["uniqueIdentifier"]?.stringValue != nil && $0["attributeSet"]?.objectValue != nil })
        #expect(r.stderr.contains("--dump: \(items.count) items"), "\(r.stderr)")
        // What --dump prints is what a reindex-all donates: the same count the daemon indexes.
        let daemon = try await daemonWithSamples()
        await #expect(try count("org.searchlight.sample.\(name)", daemon) == items.count)
    }
}
