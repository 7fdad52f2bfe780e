#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Index extensions with real processes, when they behave: the initial reindex, requests from the
/// CLI, item data for apps, idle exit, debug attach and unit reloads. Misbehaving extensions are in
/// ExtensionFailureTests. Each test has its own daemon and units; `swift build` first.
@Suite("Index extensions", .onOwnThreads)
struct ExtensionTests {
    @Test("a new bundle with an extension gets an initial reindex-all, and its items become searchable")
    func initialReindex() async throws {
        let unit = TestUnit("org.example.test.initial", bundle: "org.example.initial")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)

        #expect(bench.control(unit.label).received.map(\.kind) == ["all"])
        #expect(!bench.lines("reindex request queued", "bundle=\(unit.bundle)", "kind=all", "reason=initial").isEmpty)
        let query = SearchQuery(queryString: #"textContent == "*numbered*""#, index: bench.daemon.index(unit.bundle))
        #expect(try await query.allItems().count == 100)
        let found = try await bench.cli(["query", unit.bundle, #"title == "Test item item-42""#, "--json"])
        #expect(found.status == 0, "\(found.stderr)")
        #expect(found.stdout.contains("item-42"), "\(found.stdout)")
    }

    @Test("reindex --all waits for the acknowledgement and shows the extension's progress")
    func reindexAllWaits() async throws {
        var unit = TestUnit("org.example.test.all", bundle: "org.example.all")
        unit.environment["TEST_EXTENSION_SLOW_MS"] = "1500"
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode("slow")

        let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.hasPrefix("reindex of \(unit.label) acknowledged in "), "\(r.stdout)")
        // Not a terminal: a plain progress line once a second; the slow mode reports for 1.5 s.
        #expect(r.stderr.contains("reindex \(unit.label): "), "progress was shown: \(r.stderr)")
        #expect(bench.control(unit.label).received.last.map { ($0.kind, $0.mode) } ?? ("", nil) == ("all", "slow"))
        #expect(try await bench.requests(bundle: unit.bundle).isEmpty, "acknowledged requests leave the journal")
    }

    @Test("reindex --identifiers reaches the extension with exactly those identifiers")
    func reindexIdentifiers() async throws {
        let unit = TestUnit("org.example.test.ids", bundle: "org.example.ids")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)

        let r = try await bench.cli(["reindex", unit.bundle, "--identifiers", "a", "b c", "d", "--timeout", "60"])
        #expect(r.status == 0, "\(r.stderr)")
        let last = try #require(bench.control(unit.label).received.last)
        #expect(last.kind == "identifiers")
        #expect(last.identifiers == ["a", "b c", "d"])
        let items = try await SearchQuery(queryString: #"uniqueIdentifier == "b c""#, index: bench.daemon.index(unit.bundle)).allItems()
        #expect(items.map(\.uniqueIdentifier) == ["b c"], "the extension's donation landed")
    }

    @Test("index.fetchData from an app reaches the bundle's extension and returns its answer")
    func fetchData() async throws {
        let unit = TestUnit("org.example.test.data", bundle: "org.example.data")
        let bench = try await ExtensionBench.start([unit])
        let app = SearchlightConnection(role: .app(bundleIdentifier: unit.bundle), socketPath: bench.socket)
        let answer = try await app.call(Method.indexFetchData, ["identifier": "item-7", "typeIdentifier": "public.plain-text"])
        await app.close()
        let data = try #require(answer["data"]?.stringValue.flatMap { Data(base64Encoded: $0) })
        #expect(String(decoding: data, as: UTF8.self) == "data of item-7 as public.plain-text")
    }

    @Test("an extension idle for TimeOut is asked to exit and exits with status 0")
    func idleExit() async throws {
        var unit = TestUnit("org.example.test.idle", bundle: "org.example.idle")
        unit.timeOut = 1
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        try await bench.waitForLog("extension idle; asking it to exit", "label=\(unit.label)")
        let exit = try await bench.waitForLog("extension exited label=\(unit.label) ")[0]
        #expect(ExtensionBench.field("status", in: exit) == "exit status 0", "\(exit)")
        #expect(bench.lines("extension exited unexpectedly").isEmpty)

        let status = try #require(try await bench.extensionStatus(unit.label))
        #expect(status["state"]?.stringValue == "idle")
        #expect(status["pid"] == nil)
        #expect(status["crashes"]?.intValue == 0)
        #expect(status["lastExit"]?.stringValue == "exit status 0")
    }

    // MARK: - Debug attach

    @Test("an extension started by hand attaches under its label, and requests go to it")
    func attachByHand() async throws {
        let unit = TestUnit("org.example.test.attach", bundle: "org.example.attach")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        let control = bench.control(unit.label)
        let spawnedPID = try #require(control.received.first?.pid)

        let mark = bench.mark
        let manual = try startByHand(label: unit.label, bench: bench)
        defer { manual.terminate(); manual.waitUntilExit() }
        try await bench.waitForLog("extension attached", "label=\(unit.label)", "pid=\(manual.processIdentifier)", after: mark)
        // The copy the daemon launched is asked to leave (one connection per extension), and does.
        let exit = try await bench.waitForLog("extension exited label=\(unit.label) pid=\(spawnedPID) ", after: mark)[0]
        #expect(ExtensionBench.field("status", in: exit) == "exit status 0", "\(exit)")

        let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(control.received.last?.pid == manual.processIdentifier)
        let status = try #require(try await bench.extensionStatus(unit.label))
        #expect(status["state"]?.stringValue == "attached")
        #expect(status["pid"]?.intValue == Int(manual.processIdentifier))

        // When it goes away, the next request launches the unit's program again.
        manual.terminate()
        try await bench.waitForLog("extension detached", "label=\(unit.label)", after: mark)
        let again = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        #expect(again.status == 0, "\(again.stderr)")
        let last = try #require(control.received.last)
        #expect(last.pid != manual.processIdentifier && last.pid != spawnedPID)
    }

    @Test("an extension started by hand under an unknown label is refused and exits 1")
    func attachUnknownLabel() async throws {
        let bench = try await ExtensionBench.start([TestUnit("org.example.test.known", bundle: "org.example.known")])
        let manual = try startByHand(label: "org.example.test.nobody", bench: bench)
        let stderr = try await blocking { () -> String in
            manual.waitUntilExit()
            return (try? String(contentsOfFile: bench.dir.path + "/manual-org.example.test.nobody.err", encoding: .utf8)) ?? ""
        }
        #expect(manual.terminationStatus == 1)
        #expect(stderr.contains("no enabled unit has the label org.example.test.nobody"), "\(stderr)")
        #expect(bench.lines("extension attached").isEmpty)
    }

    /// Runs the test extension as a developer would under a debugger: no fd 3, a label and the socket.
    private func startByHand(label: String, bench: ExtensionBench) throws -> Process {
        try bench.startByHand(label: label)
    }

    // MARK: - Units

    @Test("SIGHUP reloads the unit directory: a new unit is listed and gets its initial reindex")
    func reloadOnSIGHUP() async throws {
        let first = TestUnit("org.example.test.first", bundle: "org.example.first")
        let bench = try await ExtensionBench.start([first])
        let second = TestUnit("org.example.test.second", bundle: "org.example.second")
        try bench.write(second)

        let mark = bench.mark
        kill(try #require(bench.daemon.process?.processIdentifier), SIGHUP)
        try await bench.waitForLog("units loaded units=2", after: mark)
        try await bench.waitForAcknowledgement(second.label, after: mark)

        let r = try await bench.cli(["units"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains(first.label) && r.stdout.contains(second.label), "\(r.stdout)")
    }

    @Test("a broken unit is refused with its file and key while the others load")
    func brokenUnit() async throws {
        let good = TestUnit("org.example.test.good", bundle: "org.example.good")
        let bench = try await ExtensionBench.start([good])
        let broken = bench.unitsDir + "/org.example.test.broken.plist"
        let text = good.plist(control: bench.dir.path).replacingOccurrences(of: good.label, with: "org.example.test.broken")
            .replacingOccurrences(of: "<key>BundleIdentifier</key><string>\(good.bundle)</string>", with: "")
        try Data(text.utf8).write(to: URL(fileURLWithPath: broken))

        let mark = bench.mark
        kill(try #require(bench.daemon.process?.processIdentifier), SIGHUP)
        let refused = try await bench.waitForLog("unit refused", after: mark)[0]
        #expect(refused.contains("org.example.test.broken.plist") && refused.contains("BundleIdentifier"), "\(refused)")

        let r = try await bench.cli(["units", "--json"])
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try JSONValue.parse(r.stdout)
        #expect(answer["units"]?.arrayValue?.compactMap { $0["label"]?.stringValue } == [good.label])
        let problem = try #require(answer["problems"]?.arrayValue?.first)
        #expect(problem["file"]?.stringValue == broken)
        #expect(problem["key"]?.stringValue == "BundleIdentifier")
        let plain = try await bench.cli(["units"])
        #expect(plain.stdout.contains("1 unit file refused:"), "\(plain.stdout)")
        #expect(plain.stdout.contains("org.example.test.broken.plist"), "\(plain.stdout)")
    }
}
