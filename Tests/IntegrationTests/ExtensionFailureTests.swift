#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightKit
import Testing
import TestThreads

/// Index extensions that misbehave on command (DESIGN §6): each failure must leave the daemon
/// healthy, the other extensions served, every index intact, and the request acknowledged later or
/// reported as failed — never lost, never looping. The fake reads its mode at every request, so a
/// test lets one request misbehave and then switches the mode back to ok for the retry.
@Suite("Index extensions that misbehave", .onOwnThreads)
struct ExtensionFailureTests {
    /// Starts a daemon with `unit`, waits for its initial reindex, then sets `mode`.
    func benchAfterInitialReindex(_ unit: TestUnit, mode: String, arguments: [String] = []) async throws -> ExtensionBench {
        let bench = try await ExtensionBench.start([unit], arguments: arguments)
        try await bench.waitForAcknowledgement(unit.label)
        try bench.control(unit.label).setMode(mode)
        return bench
    }

    /// Once the fake has received a request in `mode` (and so misbehaves on it), the next one is ok.
    func healAfterMisbehaving(_ bench: ExtensionBench, _ label: String, mode: String) async throws {
        let control = bench.control(label)
        try await bench.until("a request in mode \(mode)") { control.received.contains { $0.mode == mode } }
        try control.setMode("ok")
    }

    /// The daemon answers, and every index passes `admin.check`.
    func expectHealthy(_ bench: ExtensionBench) async throws {
        let status = try await bench.admin(Method.adminStatus)
        #expect(status["pid"]?.intValue == Int(bench.daemon.process?.processIdentifier ?? -1))
        let check = try await bench.admin(Method.adminCheck)
        #expect(check["ok"]?.boolValue == true, "\(check)")
    }

    func itemCount(_ bench: ExtensionBench, bundle: String) async throws -> Int? {
        let status = try await bench.admin(Method.adminStatus, ["bundle": .string(bundle)])
        return status["bundles"]?.arrayValue?.first?["indexes"]?.arrayValue?.first?["items"]?.intValue
    }

    @Test("a negative acknowledgement fails the CLI, is retried with growing backoff, then reported as failed and no longer sent")
    func negativeAcknowledgement() async throws {
        let unit = TestUnit("org.example.test.nack", bundle: "org.example.nack")
        let bench = try await benchAfterInitialReindex(unit, mode: "nack", arguments: ["--max-request-attempts", "3"])
        let mark = bench.mark

        let r = try await bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        #expect(r.status == 1)
        #expect(r.stderr.contains("negative acknowledgement: told to fail by the test"), "\(r.stderr)")
        let failed = try await bench.waitForLog("reindex request failed for good", "label=\(unit.label)", after: mark)[0]
        #expect(ExtensionBench.field("attempts", in: failed) == "3")

        // Each retry waits longer than the one before (0.2 s, then 0.4 s, with jitter).
        let retries = bench.lines(["reindex request failed; will retry", "label=\(unit.label)"], after: mark)
        let delays = retries.compactMap { ExtensionBench.field("delay_s", in: $0).flatMap(Double.init) }
        #expect(delays.count == 2, "\(retries)")
        #expect(delays.count == 2 && delays[0] >= 0.1 && delays[1] > delays[0], "\(delays)")

        let request = try #require(try await bench.requests(bundle: unit.bundle).first)
        #expect(request["state"]?.stringValue == "failed")
        #expect(request["attempts"]?.intValue == 3)
        #expect(request["lastError"]?.stringValue?.contains("told to fail by the test") == true)
        #expect(try await bench.admin(Method.adminStatus)["reindexRequests"]?["failed"]?.intValue == 1)

        // Never looping: past the time a fourth attempt would have come (0.8 s), nothing more was
        // sent. The one wait here that is not for an event: an absence can only be watched a while.
        let sent = bench.control(unit.label).received.filter { $0.mode == "nack" }.count
        #expect(sent == 3)
        try await Task.sleep(for: .seconds(1.5))
        #expect(bench.control(unit.label).received.filter { $0.mode == "nack" }.count == sent)
        #expect(try await bench.requests(bundle: unit.bundle).first?["attempts"]?.intValue == 3)
    }

    @Test("an extension that crashes during reindex-all is relaunched after a backoff and the request is acknowledged")
    func crashDuringReindexAll() async throws {
        let unit = TestUnit("org.example.test.crash", bundle: "org.example.crash")
        let bench = try await benchAfterInitialReindex(unit, mode: "crash")
        let mark = bench.mark

        async let run = bench.cli(["reindex", unit.label, "--all", "--timeout", "60"])
        try await healAfterMisbehaving(bench, unit.label, mode: "crash")
        let r = try await run
        #expect(r.status == 1)
        #expect(r.stderr.contains("exited before acknowledging: killed by signal 11 (SIGSEGV): a memory access fault"), "\(r.stderr)")
        let exit = try await bench.waitForLog("extension exited unexpectedly", "label=\(unit.label)", after: mark)[0]
        #expect(exit.contains("SIGSEGV"), "\(exit)")
        #expect(bench.lines(["extension detached"], after: mark).isEmpty, "a launched extension's crash is no detach")
        try await bench.waitForAcknowledgement(unit.label, after: mark)

        // The relaunch waited out the backoff (0.2 s ± 10 %) after the crash.
        let relaunch = try #require(bench.lines(["extension launched", "label=\(unit.label)"], after: mark).first)
        let gap = try #require(ExtensionBench.time(of: relaunch)).timeIntervalSince(try #require(ExtensionBench.time(of: exit)))
        #expect(gap >= 0.15, "relaunched \(gap) s after the crash")
        // At least one crash; more if this test's task was slow to switch the mode back (a loaded
        // machine), each followed by a relaunch.
        let status = try #require(try await bench.extensionStatus(unit.label))
        let crashes = status["crashes"]?.intValue ?? 0
        #expect(crashes >= 1)
        #expect(status["launches"]?.intValue == crashes + 1)
        #expect(try await bench.requests(bundle: unit.bundle).isEmpty)
        #expect(try await itemCount(bench, bundle: unit.bundle) == 100, "the crash before donating left the index as it was")
        try await expectHealthy(bench)
    }

    @Test("an extension that hangs or never acknowledges is stopped after AcknowledgementTimeout and the request retried",
          arguments: ["hang", "noack"])
    func noAcknowledgement(mode: String) async throws {
        var unit = TestUnit("org.example.test.\(mode)", bundle: "org.example.\(mode)")
        unit.acknowledgementTimeout = 2
        let bench = try await benchAfterInitialReindex(unit, mode: mode)
        let label = unit.label
        let mark = bench.mark

        async let run = bench.cli(["reindex", label, "--all", "--timeout", "60"])
        try await healAfterMisbehaving(bench, label, mode: mode)
        let r = try await run
        #expect(r.status == 1)
        #expect(r.stderr.contains("sent no acknowledgement, progress or donation for 2 s"), "\(r.stderr)")
        try await bench.waitForLog("extension timed out; stopping it", "label=\(unit.label)", after: mark)
        let exit = try await bench.waitForLog("extension exited", "label=\(unit.label)", after: mark)[0]
        #expect(exit.contains("SIGTERM") || exit.contains("SIGKILL"), "\(exit)")
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        #expect(bench.control(unit.label).received.suffix(2).map(\.mode) == [mode, "ok"])
        try await expectHealthy(bench)
    }

    @Test("an extension that answers garbage is stopped on the acknowledgement timeout, and the daemon stays healthy")
    func garbage() async throws {
        var unit = TestUnit("org.example.test.garbage", bundle: "org.example.garbage")
        unit.acknowledgementTimeout = 2
        let bench = try await benchAfterInitialReindex(unit, mode: "garbage")
        let label = unit.label
        let mark = bench.mark

        async let run = bench.cli(["reindex", label, "--all", "--timeout", "60"])
        try await healAfterMisbehaving(bench, label, mode: "garbage")
        let r = try await run
        #expect(r.status == 1)
        #expect(r.stderr.contains("sent no acknowledgement, progress or donation for 2 s"), "\(r.stderr)")
        try await bench.waitForLog("extension timed out; stopping it", "label=\(label)", after: mark)
        // Bad frames are answered, not a reason to drop the connection: it lasted until the timeout.
        #expect(bench.lines(["extension connection closed", "label=\(label)"], after: mark).isEmpty)
        try await bench.waitForAcknowledgement(label, after: mark)
        try await expectHealthy(bench)
    }

    // Regression: RPCConnection answered an undecodable response (an error with a null id) with
    // another one, so the daemon and the SDK traded error answers until the timeout killed the
    // extension (0.7 s of daemon CPU in 2 s). A frame that is a response is never answered now.
    @Test("garbage from an extension does not start an endless exchange of error answers")
    func garbageIsNotEchoed() async throws {
        var unit = TestUnit("org.example.test.echo", bundle: "org.example.echo")
        unit.acknowledgementTimeout = 2
        let bench = try await benchAfterInitialReindex(unit, mode: "garbage")
        let label = unit.label
        let mark = bench.mark
        let before = try cpuSeconds(bench)

        async let run = bench.cli(["reindex", label, "--all", "--timeout", "60"])
        try await healAfterMisbehaving(bench, label, mode: "garbage")
        _ = try await run
        try await bench.waitForAcknowledgement(label, after: mark)
        // Measured: 0.7 s with the exchange going on for the 2 s timeout, 0.02 s without it.
        let used = try cpuSeconds(bench) - before
        #expect(used < 0.3, "the daemon used \(used) s of CPU while the extension sent garbage for 2 s")
    }

    @Test("a flood of 20 000 donations is accepted whole while another extension is served")
    func flood() async throws {
        let flooder = TestUnit("org.example.test.flood", bundle: "org.example.flood")
        let other = TestUnit("org.example.test.other", bundle: "org.example.other")
        let bench = try await ExtensionBench.start([flooder, other])
        try await bench.waitForAcknowledgement(flooder.label)
        try await bench.waitForAcknowledgement(other.label)
        try bench.control(flooder.label).setMode("flood")
        let mark = bench.mark

        async let flooding = bench.cli(["reindex", flooder.label, "--all", "--timeout", "120"])
        // The fake holds halfway through its 20 000 donations until released: the other extension
        // is served while the flood is certainly under way.
        try await bench.until("the flood to be halfway") { bench.control(flooder.label).received.contains { $0.kind == "flood-holding" } }
        let served = try await bench.cli(["reindex", other.label, "--identifiers", "x", "y", "--timeout", "60"])
        #expect(served.status == 0, "\(served.stderr)")
        #expect(bench.lines(["reindex request acknowledged", "label=\(flooder.label) "], after: mark).isEmpty)
        try Data().write(to: URL(fileURLWithPath: bench.control(flooder.label).path + "/release"))
        let r = try await flooding
        #expect(r.status == 0, "\(r.stderr)")

        #expect(try await itemCount(bench, bundle: flooder.bundle) == 20_000)
        let found = try await SearchQuery(queryString: #"uniqueIdentifier == "item-19999""#, index: bench.daemon.index(flooder.bundle)).allItems()
        #expect(found.count == 1)
        #expect(try await itemCount(bench, bundle: other.bundle) == 102)
        try await expectHealthy(bench)
    }

    @Test("an extension that exits at launch is relaunched with growing backoff, its request kept pending with the error")
    func exitAtLaunch() async throws {
        let unit = TestUnit("org.example.test.exit", bundle: "org.example.exit", mode: "exit-at-launch")
        // Attempts without a cap that matters here: with the default 8, a test starved by a loaded
        // machine looked only after the 8th failure (25 s of backoff) and found the request failed.
        let bench = try await ExtensionBench.start([unit], arguments: ["--max-request-attempts", "1000"])

        let exits = try await bench.waitForLog("extension exited unexpectedly", "label=\(unit.label)", count: 5)
        #expect(exits.allSatisfy { ExtensionBench.field("status", in: $0) == "exit status 3" }, "\(exits)")
        let times = exits.prefix(5).compactMap(ExtensionBench.time(of:))
        let gaps = zip(times.dropFirst(), times).map { $0.timeIntervalSince($1) }
        // 0.2, 0.4, 0.8, 1.6 s plus launch time: the fourth gap is far longer than the first.
        #expect(gaps.count == 4 && gaps[3] > 2 * gaps[0], "\(gaps)")

        try await bench.until("the request to be pending again") {
            try await bench.requests(bundle: unit.bundle).first?["state"]?.stringValue == "pending"
        }
        let request = try #require(try await bench.requests(bundle: unit.bundle).first)
        #expect(request["lastError"]?.stringValue?.contains(unit.label) == true, "\(request)")
        #expect((request["attempts"]?.intValue ?? 0) >= 5, "\(request)")
        let status = try #require(try await bench.extensionStatus(unit.label))
        // Every launch but the current one ended in a logged exit: no relaunch loop. (Counted
        // against the log, not a fixed 6: on a loaded machine the wait above can span a backoff.)
        let exited = bench.lines(["extension exited unexpectedly", "label=\(unit.label)"], after: 0).count
        #expect((status["launches"]?.intValue ?? 99) <= exited + 1, "\(status), \(exited) exits")
        #expect(status["lastExit"]?.stringValue == "exit status 3")
        try await expectHealthy(bench)
    }

    @Test("an identifier that crashes the extension is isolated by halving; the others are acknowledged and it is not sent again")
    func poisonIdentifier() async throws {
        let unit = TestUnit("org.example.test.poison", bundle: "org.example.poison")
        let bench = try await benchAfterInitialReindex(unit, mode: "poison:id-5")
        let mark = bench.mark
        let ids = (0..<8).map { "id-\($0)" }

        let r = try await bench.cli(["reindex", unit.label, "--identifiers"] + ids + ["--timeout", "60"])
        #expect(r.status == 1)
        try await bench.waitForLog("identifier isolated as poison", "label=\(unit.label)", "identifier=id-5", after: mark)
        try await bench.waitForAcknowledgement(unit.label, after: mark)

        let batches = bench.control(unit.label).received.filter { $0.kind == "identifiers" }.map(\.identifiers)
        #expect(batches == [ids, ["id-0", "id-1", "id-2", "id-3"], ["id-4", "id-5", "id-6", "id-7"], ["id-4", "id-5"],
                            ["id-4"], ["id-5"], ["id-6", "id-7"]], "\(batches)")
        let journal = try await bench.admin(Method.adminRequests)
        #expect(journal["requests"]?.arrayValue?.isEmpty == true)
        let poisoned = try #require(journal["poisoned"]?.arrayValue)
        #expect(poisoned.map { $0["identifier"]?.stringValue } == ["id-5"])
        #expect(poisoned.first?["bundle"]?.stringValue == unit.bundle)
        let donated = try await SearchQuery(queryString: #"uniqueIdentifier == "id-*""#, index: bench.daemon.index(unit.bundle)).allItems()
        #expect(Set(donated.map(\.uniqueIdentifier)) == Set(ids).subtracting(["id-5"]))
        try await expectHealthy(bench)
    }

    @Test("a daemon killed with SIGKILL in the middle of a reindex-all resumes the request after restart")
    func resumeAfterSIGKILL() async throws {
        var unit = TestUnit("org.example.test.resume", bundle: "org.example.resume", mode: "slow")
        unit.environment["TEST_EXTENSION_SLOW_MS"] = "60000"
        let bench = try await ExtensionBench.start([unit])
        let sent = try await bench.waitForLog("reindex request sent", "label=\(unit.label)")[0]
        let id = try #require(ExtensionBench.field("id", in: sent))
        try await bench.until("progress from the extension") {
            try await bench.requests(bundle: unit.bundle).first?["progress"] != nil
        }

        await bench.daemon.stop(signal: SIGKILL)
        try bench.control(unit.label).setMode("ok")
        let mark = bench.mark
        try await blocking { try bench.daemon.start() }
        try await bench.waitForLog("reindex request sent id=\(id) label=\(unit.label)", after: mark)
        #expect(try await bench.waitForAcknowledgement(unit.label, after: mark) == id)

        let received = bench.control(unit.label).received
        #expect(received.map(\.kind) == ["all", "all"])
        #expect(received.map(\.mode) == ["slow", "ok"])
        #expect(Set(received.map(\.pid)).count == 2)
        #expect(try await itemCount(bench, bundle: unit.bundle) == 100)
    }

    /// How many times each fault kind of `repeatedFaults` runs, and the fault kinds themselves.
    static let rounds: [(mode: String, count: Int)] = [
        ("crash", 10), ("midframe", 10), ("nack", 10), ("garbage", 8), ("hang", 8), ("noack", 8),
    ]

    /// A daemon per 2 rounds: a launched extension that dies (or is stopped on a timeout) starts a
    /// crash streak whose relaunch delay doubles until 10 healthy minutes forgive it (Architecture.md),
    /// so n faults in a row cost `backoff * 2^n`; the restarts and a 10 ms base keep rounds to seconds.
    /// Each round adds more than one to the streak: the relaunches at 10, 20, 40… ms come before the
    /// test switches the mode back, so a round costs as many crashes as fit in that switch's delay
    /// (about 5 here). With a daemon per 5 rounds a clean-clone run reached a streak of 13 in its
    /// third round (an 80 s relaunch delay, over the 60 s wait); per 2 rounds it stays under ~10.
    @Test("every fault kind, over and over, leaves the daemon healthy, every request acknowledged, and another extension served between rounds")
    func repeatedFaults() async throws {
        let faulty = {
            var unit = TestUnit("org.example.test.faulty", bundle: "org.example.faulty")
            unit.acknowledgementTimeout = 1
            return unit
        }()
        let steady = TestUnit("org.example.test.steady", bundle: "org.example.steady")
        // No attempt cap that matters: at a 10 ms base the default 8 attempts are spent in 2.5 s,
        // and under load 20-30 the switch back to "ok" came later (the request failed for good).
        let bench = try await ExtensionBench.start([faulty, steady], arguments: ["--backoff", "0.01", "--max-request-attempts", "1000"])
        try await bench.waitForAcknowledgement(faulty.label)
        try await bench.waitForAcknowledgement(steady.label)
        let control = bench.control(faulty.label)
        var injected: [String: Int] = [:]

        for (mode, count) in Self.rounds {
            for round in 0..<count {
                // A fresh daemon every 2 rounds: on a loaded machine the mode switches back late
                // and one round can crash the extension several times, lengthening the streak.
                if round % 2 == 0, mode != Self.rounds[0].mode || round > 0 { try await blocking { try bench.daemon.restart() } }
                let seen = control.received.filter { $0.mode == mode }.count
                try control.setMode(mode)
                let mark = bench.mark
                let id = "\(mode)-\(round)"
                async let run = bench.cli(["reindex", faulty.label, "--identifiers", id, "--timeout", "60"])
                try await bench.until("a request in mode \(mode), round \(round)") {
                    control.received.filter { $0.mode == mode }.count > seen
                }
                try control.setMode("ok")
                let r = try await run
                #expect(r.status == 1, "\(mode) round \(round): \(r.stdout) \(r.stderr)")
                try await bench.waitForAcknowledgement(faulty.label, after: mark, timeout: 60)
                // Between rounds, the other extension is served.
                let served = try await bench.cli(["reindex", steady.label, "--identifiers", "between-\(id)", "--timeout", "60"])
                #expect(served.status == 0, "\(served.stderr)")
            }
            injected[mode] = control.received.filter { $0.mode == mode }.count
            try await expectHealthy(bench)
        }
        print("repeatedFaults: faults injected per kind: " + Self.rounds.map { "\($0.mode)=\(injected[$0.mode] ?? 0)" }.joined(separator: " "))
        for (mode, count) in Self.rounds { #expect((injected[mode] ?? 0) >= count, "\(mode)") }
        // Every round's identifier arrived, in both indexes; nothing is left in the journal.
        let faultyIDs = try await SearchQuery(queryString: #"uniqueIdentifier == "*-*""#, index: bench.daemon.index(faulty.bundle)).allItems()
        let expected = Set(Self.rounds.flatMap { kind in (0..<kind.count).map { "\(kind.mode)-\($0)" } })
        #expect(expected.isSubset(of: Set(faultyIDs.map(\.uniqueIdentifier))))
        let steadyIDs = try await SearchQuery(queryString: #"uniqueIdentifier == "between-*""#, index: bench.daemon.index(steady.bundle)).allItems()
        #expect(steadyIDs.count == expected.count)
        #expect(try await bench.requests(bundle: faulty.bundle).isEmpty)
        #expect(try await bench.requests(bundle: steady.bundle).isEmpty)
    }

    @Test("an extension that closes its socket in the middle of a frame is relaunched and the request acknowledged")
    func closeMidFrame() async throws {
        let unit = TestUnit("org.example.test.midframe", bundle: "org.example.midframe")
        let bench = try await benchAfterInitialReindex(unit, mode: "midframe")
        let mark = bench.mark
        async let run = bench.cli(["reindex", unit.label, "--identifiers", "after-half", "--timeout", "60"])
        try await healAfterMisbehaving(bench, unit.label, mode: "midframe")
        let r = try await run
        #expect(r.status == 1)
        let exit = try await bench.waitForLog("extension exited unexpectedly", "label=\(unit.label)", after: mark)[0]
        #expect(ExtensionBench.field("status", in: exit) == "exit status 5", "\(exit)")
        try await bench.waitForAcknowledgement(unit.label, after: mark)
        let found = try await SearchQuery(queryString: #"uniqueIdentifier == "ha*" || uniqueIdentifier == "after-half""#,
                                          index: bench.daemon.index(unit.bundle)).allItems()
        #expect(found.map(\.uniqueIdentifier) == ["after-half"], "the half frame donated nothing")
        try await expectHealthy(bench)
    }

    @Test("a fork bomb held by NumberOfProcesses leaves the daemon healthy and the other extension served; all its processes die with it",
          .enabled(if: getuid() == 0, "needs root: RLIMIT_NPROC does not hold root, so the bomb runs as a test user"))
    func forkBomb() async throws {
        // A user of this build's own: the limit counts every process of the user on the machine,
        // and other worktrees' test runs set off their bombs at the same time.
        let user = buildUserName("sl-bomb")
        let uid = try #require(testUser(user), "could not create the user \(user) with useradd")
        #expect(processes(ofUser: uid).isEmpty, "the limit counts every process of the user: nothing else may run as \(user)")
        let bomber = {
            var unit = TestUnit("org.example.test.bomb", bundle: "org.example.bomb")
            unit.userName = user
            unit.processLimit = 48
            // Long enough that the bomb is not killed while its peak is sampled, even on a loaded
            // machine: a relaunch under the unit's user is a setuid, which RLIMIT_NPROC does not
            // refuse, so the old group dying beside the new process could read as 49 of 48.
            unit.acknowledgementTimeout = 10
            return unit
        }()
        let steady = TestUnit("org.example.test.calm", bundle: "org.example.calm")
        // System mode: a user-mode daemon keeps its socket's folder (the bench's) to itself.
        let bench = try await ExtensionBench.start([bomber, steady], arguments: ["--system"], shared: true)
        try await bench.waitForAcknowledgement(bomber.label)
        try await bench.waitForAcknowledgement(steady.label)
        let control = bench.control(bomber.label)
        try control.setMode("forkbomb")
        let mark = bench.mark

        async let run = bench.cli(["reindex", bomber.label, "--identifiers", "after-bomb", "--timeout", "60"])
        // The bomb grows to its limit (threads count too) and no further.
        try await bench.until("the bomb to fork 30 processes") {
            return processes(ofUser: uid).count >= 30 }
        // The peak over 1.5 s of the one launch (sampling stops if its timeout already came).
        var peak = 0
        let sampleUntil = Date().addingTimeInterval(1.5)
        while Date() < sampleUntil, bench.lines("extension timed out; stopping it", "label=\(bomber.label)", after: mark).isEmpty {
            peak = max(peak, processes(ofUser: uid).count)
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(peak >= 30 && peak <= 48, "\(peak) processes of \(user)")
        let served = try await bench.cli(["reindex", steady.label, "--identifiers", "during-bomb", "--timeout", "60"])
        #expect(served.status == 0, "\(served.stderr)")
        try await expectHealthy(bench)
        try control.setMode("ok")
        let r = try await run
        #expect(r.status == 1)
        try await bench.waitForLog("extension timed out; stopping it", "label=\(bomber.label)", after: mark)
        try await bench.waitForAcknowledgement(bomber.label, after: mark)
        // The relaunched extension is the user's only process: the bomb died with its group.
        let relaunched = try #require(control.received.last { $0.mode == "ok" }?.pid)
        try await bench.until("the bomb's processes to be gone") { processes(ofUser: uid).allSatisfy { $0 == relaunched } }
        print("forkBomb: \(peak) processes of \(user) at the peak (limit 48 tasks), all killed with the extension")
        try await expectHealthy(bench)
        // The test leaves no process of the user behind.
        kill(relaunched, SIGKILL)
    }

    /// The daemon's user + system CPU time so far (/proc/PID/stat, in clock ticks).
    func cpuSeconds(_ bench: ExtensionBench) throws -> Double {
        let pid = try #require(bench.daemon.process?.processIdentifier)
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: try #require(stat.lastIndex(of: ")")))...].split(separator: " ")
        let ticks = (Double(fields[11]) ?? 0) + (Double(fields[12]) ?? 0)
        return ticks / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}
