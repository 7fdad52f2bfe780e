#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Testing
import TestThreads
import SearchlightKit

/// What a plugin author meets in the first hour when something goes wrong (issue 14): each test is
/// one behaviour of the failure path, against the real daemon and real extension processes.
@Suite("The plugin author's path", .onOwnThreads)
struct AuthorPathTests {
    @Test("a first fill shows filling with its progress, and queries say incomplete, until the initial reindex-all is acknowledged")
    func firstFillIsFilling() async throws {
        var unit = TestUnit("org.test.fill", bundle: "org.test.fill", mode: "hold")
        unit.environment["TEST_EXTENSION_ITEMS"] = "2000"
        let bench = try await ExtensionBench.start([unit])
        try await bench.until("the extension to hold halfway") { bench.control(unit.label).received.contains { $0.kind == "flood-holding" } }

        func indexEntry() async throws -> JSONValue? {
            let status = try await bench.admin(Method.adminStatus, ["bundle": .string(unit.bundle)])
            return status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        }
        let filling = try #require(try await indexEntry())
        #expect(filling["state"]?.stringValue == "filling", "\(filling)")
        #expect(filling["reason"]?.stringValue?.contains("initial fill by \(unit.label)") == true, "\(filling)")
        #expect(filling["progress"]?["total"]?.intValue == 2000, "\(filling)")
        #expect(filling["items"]?.intValue == 1000)

        let index = bench.daemon.index(unit.bundle)
        let partial = try await UserQuery(userQueryString: "test item", index: index).run()
        #expect(partial.isIncomplete, "a query during the first fill must say its results may be missing items")
        let cli = try await bench.cli(["status", unit.bundle])
        #expect(cli.stdout.contains("filling 1000/2000"), "\(cli.stdout)")

        let mark = bench.mark
        _ = FileManager.default.createFile(atPath: bench.control(unit.label).path + "/release", contents: nil)
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        let ready = try #require(try await indexEntry())
        #expect(ready["state"]?.stringValue == "ready", "\(ready)")
        #expect(ready["items"]?.intValue == 2000)
        let complete = try await UserQuery(userQueryString: "test item", index: index).run()
        #expect(!complete.isIncomplete)
        await index.close()
    }

    @Test("an index whose initial fill is still journaled is filling again after a restart")
    func fillingSurvivesRestart() async throws {
        var unit = TestUnit("org.test.refill", bundle: "org.test.refill", mode: "nack")
        unit.environment["TEST_EXTENSION_ITEMS"] = "10"
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForLog("reindex request failed; will retry", "label=\(unit.label)")
        try await blocking { try bench.daemon.restart() }
        let status = try await bench.admin(Method.adminStatus, ["bundle": .string(unit.bundle)])
        let entry = status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first
        #expect(entry?["state"]?.stringValue == "filling", "\(status)")
    }

    @Test("a manual reindex that joins the initial request held back under load runs it now, unthrottled, and says so")
    func manualJoinsThrottledRequest() async throws {
        let proc = TempDir("slproc")
        try ThrottleIntegrationTests.writePSI(proc.path, cpu: 70)
        let unit = TestUnit("org.test.joinload", bundle: "org.test.joinload")
        let bench = try await ExtensionBench.start([unit], arguments: ["--proc-root", proc.path, "--load-interval", "0.2"])
        try await bench.waitForLog("load throttle changed", "to=paused")
        #expect(bench.control(unit.label).received.isEmpty, "the initial fill is background work: held while paused")

        let manual = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "30"])
        #expect(manual.status == 0, "\(manual.stdout) \(manual.stderr)")
        #expect(manual.stderr.contains("joined request 1 (initial), which was held back as background work while the machine is busy (throttle paused); running it now, unthrottled"),
            "\(manual.stderr)")
        #expect(manual.stdout.contains("acknowledged"), "\(manual.stdout)")
        #expect(bench.control(unit.label).received.contains { $0.kind == "all" })
    }

    @Test("a manual reindex that joins a request waiting for its retry runs it now instead of sitting out the delay, and says so")
    func manualJoinsBackingOffRequest() async throws {
        let unit = TestUnit("org.test.joinretry", bundle: "org.test.joinretry", mode: "nack")
        // A long first retry delay: without the promotion the manual request would wait minutes.
        let bench = try await ExtensionBench.start([unit], arguments: ["--backoff", "300"])
        try await bench.waitForLog("reindex request failed; will retry", "label=\(unit.label)")
        try bench.control(unit.label).setMode("ok")

        let manual = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "30"])
        #expect(manual.status == 0, "\(manual.stdout) \(manual.stderr)")
        let note = manual.stderr
        #expect(note.contains("joined request 1 (initial), which was waiting for a retry in "), "\(note)")
        #expect(note.contains("after 1 failed attempt (last: negative acknowledgement: told to fail by the test)"), "\(note)")
        #expect(note.contains("running it now"), "\(note)")
        #expect(manual.stdout.contains("acknowledged"), "\(manual.stdout)")
    }

    @Test("a manual reindex while the extension backs off after crashes launches it now; the crash streak stays")
    func manualWaivesLaunchBackoff() async throws {
        let unit = TestUnit("org.test.joincrash", bundle: "org.test.joincrash", mode: "crash")
        let bench = try await ExtensionBench.start([unit], arguments: ["--backoff", "300"])
        try await bench.waitForLog("extension exited unexpectedly", "label=\(unit.label)")
        try await bench.until("the launch backoff") { try await bench.extensionStatus(unit.label)?["state"]?.stringValue == "backoff" }
        try bench.control(unit.label).setMode("ok")

        let manual = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "30"])
        #expect(manual.status == 0, "\(manual.stdout) \(manual.stderr)")
        #expect(manual.stderr.contains("the extension's launch backoff after 1 failed launch (next launch was in "), "\(manual.stderr)")
        #expect(manual.stderr.contains(") is waived"), "\(manual.stderr)")
        #expect(try await bench.extensionStatus(unit.label)?["crashes"]?.intValue == 1)
    }

    @Test("an attached extension stopped at a breakpoint past its AcknowledgementTimeout is not killed; the daemon logs and waits, then detached when it goes")
    func attachedExtensionIsNotKilled() async throws {
        var unit = TestUnit("org.test.debug", bundle: "org.test.debug")
        unit.acknowledgementTimeout = 1
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        let mark = bench.mark
        let manual = try bench.startByHand(label: unit.label)
        defer { manual.terminate(); manual.waitUntilExit() }
        try await bench.waitForLog("extension attached", "label=\(unit.label)", after: mark)

        // A breakpoint stops the process: it reads nothing and answers nothing.
        kill(manual.processIdentifier, SIGSTOP)
        let queued = try await bench.cli(["reindex", unit.label, "--all", "--no-wait"])
        #expect(queued.status == 0, "\(queued.stderr)")
        try await bench.waitForLog("attached extension passed its acknowledgement timeout; still waiting", "label=\(unit.label)",
            count: 2, after: mark)
        #expect(processExists(manual.processIdentifier))
        #expect(bench.lines("extension timed out", after: mark).isEmpty)
        #expect(try await bench.extensionStatus(unit.label)?["state"]?.stringValue == "attached")

        // Resumed from the breakpoint: it answers, and the request is acknowledged by it.
        kill(manual.processIdentifier, SIGCONT)
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        #expect(bench.control(unit.label).received.last?.pid == manual.processIdentifier)
        manual.terminate()
        try await bench.waitForLog("extension detached", "label=\(unit.label)", after: mark)
    }

    @Test("a reindex that ends because the extension died by SIGSEGV names the signal, its meaning and the last stderr lines; so do units and status",
        arguments: [("crash", "killed by signal 11 (SIGSEGV): a memory access fault", "test extension: crashing on purpose"),
                    ("fatal", "killed by signal 4 (SIGILL): a Swift runtime trap", "told to trap by the test")])
    func crashIsExplained(mode: String, signal: String, stderrLine: String) async throws {
        let unit = TestUnit("org.test.explain-\(mode)", bundle: "org.test.explain-\(mode)")
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode(mode)

        let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "30"])
        #expect(r.status == 1, "\(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("exited before acknowledging: \(signal)"), "\(r.stderr)")
        #expect(r.stderr.contains(stderrLine), "the last stderr lines: \(r.stderr)")
        #expect(r.stderr.contains("see `searchlight units` and the daemon's log"), "\(r.stderr)")

        let units = try await bench.cli(["units"])
        #expect(units.stdout.contains(signal), "\(units.stdout)")
        #expect(units.stdout.contains("its last lines on stderr:") && units.stdout.contains(stderrLine), "\(units.stdout)")
        let status = try await bench.cli(["status"])
        #expect(status.stdout.contains(signal) && status.stdout.contains(stderrLine), "\(status.stdout)")
    }

    @Test("after a crash, requests and units show one clock: the request goes again when the extension may launch again")
    func oneRetryClockAfterACrash() async throws {
        let unit = TestUnit("org.test.clock", bundle: "org.test.clock", mode: "crash")
        let bench = try await ExtensionBench.start([unit], arguments: ["--backoff", "120"])
        try await bench.waitForLog("reindex request failed; will retry", "label=\(unit.label)")
        let requests = try await bench.requests(bundle: unit.bundle)
        let request = try #require(requests.first)
        let host = try #require(try await bench.extensionStatus(unit.label))
        #expect(request["retryAfter"]?.stringValue == "launchBackoff", "\(request)")
        #expect(request["notBefore"] != nil && request["notBefore"] == host["nextLaunch"], "\(request) \(host)")
        let table = try await bench.cli(["requests"])
        #expect(table.stdout.contains("(launch backoff)"), "\(table.stdout)")

        // After a negative acknowledgement the extension is fine: the request's own backoff runs.
        let nack = TestUnit("org.test.clock-nack", bundle: "org.test.clock-nack", mode: "nack")
        let second = try await ExtensionBench.start([nack], arguments: ["--backoff", "120"])
        try await second.waitForLog("reindex request failed; will retry", "label=\(nack.label)")
        let nacked = try #require(try await second.requests(bundle: nack.bundle).first)
        #expect(nacked["retryAfter"]?.stringValue == "retryBackoff", "\(nacked)")
        #expect(try await second.extensionStatus(nack.label)?["nextLaunch"] == nil)
        let other = try await second.cli(["requests"])
        #expect(other.stdout.contains("(retry backoff)"), "\(other.stdout)")
    }

    @Test("units restart stops the running copy gracefully and launches it again: no crash counted, no backoff, an interrupted request is resent")
    func restartIsNoCrash() async throws {
        var unit = TestUnit("org.test.restart", bundle: "org.test.restart")
        unit.environment["TEST_EXTENSION_ITEMS"] = "2000"
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        let before = try #require(try await bench.extensionStatus(unit.label)?["pid"]?.intValue)

        // A request in flight when the restart comes: interrupted, then served by the new copy.
        let control = bench.control(unit.label)
        try control.setMode("hold")
        let queued = try await bench.cli(["reindex", unit.label, "--all", "--no-wait"])
        #expect(queued.status == 0, "\(queued.stderr)")
        try await bench.until("the request to be held") { control.received.filter { $0.kind == "flood-holding" }.count == 1 }
        _ = FileManager.default.createFile(atPath: control.path + "/release", contents: nil)
        try control.setMode("ok")

        let mark = bench.mark
        let r = try await bench.cli(["units", "restart", unit.label])
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("\(unit.label) restarted: pid \(before) stopped, pid "), "\(r.stdout)")
        let after = try #require(try await bench.extensionStatus(unit.label))
        #expect(after["crashes"]?.intValue == 0, "\(after)")
        #expect(after["nextLaunch"] == nil, "\(after)")
        #expect(after["pid"]?.intValue != before)
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        #expect(try await bench.requests(bundle: unit.bundle).isEmpty)
        #expect(bench.lines("reindex request failed", after: mark).isEmpty, "an interruption is no failed attempt")
    }

    @Test("a program rebuilt since its launch is shown in units, and noticed at the next launch")
    func rebuiltProgramIsNoticed() async throws {
        let dir = TempDir("slbin")
        let program = dir.path + "/test-extension"
        try FileManager.default.copyItem(atPath: TestUnit.program, toPath: program)
        var unit = TestUnit("org.test.rebuilt", bundle: "org.test.rebuilt")
        unit.program = program
        let bench = try await ExtensionBench.start([unit])
        try await bench.waitForAcknowledgement(unit.label)
        #expect(try await bench.extensionStatus(unit.label)?["programChanged"] == nil)

        // "Rebuilt": the same file, modified now.
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(5)], ofItemAtPath: program)
        #expect(try await bench.extensionStatus(unit.label)?["programChanged"]?.boolValue == true)
        let units = try await bench.cli(["units"])
        #expect(units.stdout.contains("program rebuilt since launch: `searchlight units restart \(unit.label)`"), "\(units.stdout)")
        let mark = bench.mark
        let r = try await bench.cli(["units", "restart", unit.label])
        #expect(r.status == 0, "\(r.stderr)")
        try await bench.waitForLog("extension program changed since its last launch", "label=\(unit.label)", after: mark)
        #expect(try await bench.extensionStatus(unit.label)?["programChanged"] == nil)
    }
}
