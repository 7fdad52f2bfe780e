#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Testing
import TestThreads
import SearchlightWire
@testable import SearchlightSupervisor

/// The request scheduler and extension hosts in this process: a manual clock, fake extensions on
/// socketpairs, the real journal, sessions and indexes. What the integration tests show with real
/// processes over seconds, here over minutes of clock in milliseconds.
/// The time limit is a hang guard, not a speed check: under a loaded machine (parallel suites,
/// other builds) a test here waited for the cooperative pool past 60 s (seen in helpers' runs).
@Suite("Request scheduler and extension hosts", .timeLimit(.minutes(3)), .onOwnThreads)
struct RequestSchedulerTests {
    static let label = "org.test.fake"
    static let bundle = "org.test.bundle"

    func failureMessage(_ outcome: SchedulerBench.Outcome) -> String? {
        if case .failure(let e)? = outcome.value { return e.message }
        return nil
    }

    @Test("a crash during a request: no relaunch before the backoff ends on the clock; then the request goes again and is acknowledged")
    func crashRetriesAtLaunchBackoff() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .crash }
        try bench.start()
        let outcome = SchedulerBench.Outcome()
        let queued = try bench.enqueue(Self.bundle, waiter: outcome.waiter)
        try await bench.waitForLog("reindex request failed; will retry", "label=\(Self.label)", "after=launch-backoff")
        let message = try #require(failureMessage(outcome))
        #expect(message.contains("exited before acknowledging: killed by signal 11 (SIGSEGV): a memory access fault"), "\(message)")
        #expect(message.contains("(the extension's launch backoff, after 1 failed attempt)"), "\(message)")

        let host = try bench.host(Self.label)
        let nextLaunch = try #require(host.nextLaunch)
        let delay = nextLaunch.timeIntervalSince(bench.clock.now)
        #expect(delay >= 9 && delay <= 11, "\(delay)")
        let retry = try #require(bench.context.journal.request(queued.id)?.notBefore)
        #expect(abs(retry.timeIntervalSince(nextLaunch)) < 0.001, "one clock: the retry is the next launch")
        #expect(host.stateName == "backoff")

        bench.launcher.answer { _ in .acknowledge }
        try await bench.step(by: delay - 1)
        #expect(bench.launcher.launches.count == 1, "still backing off")
        bench.advance(to: nextLaunch)
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        #expect(bench.launcher.launches.count == 2)
        #expect(bench.context.journal.all().isEmpty)
        #expect(host.statusJSON["crashes"]?.intValue == 1)
        await bench.stop()
    }

    @Test("a hang: SIGTERM at the acknowledgement timeout, SIGKILL ExitTimeOut later; the request goes again at the next launch")
    func hangIsStoppedOnSchedule() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .hang }
        bench.launcher.setIgnoresTerm(true)
        try bench.start()
        let queued = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the extension") { bench.launcher.received.count == 1 }
        let sent = bench.clock.now
        let fake = try #require(bench.launcher.launches.first)

        bench.advance(to: sent.addingTimeInterval(60))
        try await bench.waitForLog("extension timed out; stopping it", "label=\(Self.label)")
        try await bench.until("SIGTERM") { !fake.signalsReceived.isEmpty }
        bench.advance(to: sent.addingTimeInterval(80))
        try await bench.until("the exit") { fake.hasExited }
        #expect(fake.signalsReceived.map(\.signal) == [SIGTERM, SIGKILL])
        #expect(fake.signalsReceived.map { ($0.at.timeIntervalSince(sent) * 10).rounded() / 10 } == [60, 80])
        let retry = try await bench.waitForLog("reindex request failed; will retry", "label=\(Self.label)")[0]
        #expect(retry.contains("sent no acknowledgement, progress or donation for 60 s"), "\(retry)")
        let status = try bench.host(Self.label).statusJSON
        #expect(status["lastExit"]?.stringValue?.contains("stopped by searchlightd because it hung") == true, "\(status)")

        bench.launcher.answer { _ in .acknowledge }
        bench.launcher.setIgnoresTerm(false)
        bench.advance(to: try #require(try bench.host(Self.label).nextLaunch))
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        await bench.stop()
    }

    @Test("an attached extension past its acknowledgement timeout is never stopped: the daemon logs once per period and waits")
    func attachedIsNeverKilled() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.start()
        let debugger = try AttachedFake(label: Self.label, context: bench.context)
        try await debugger.attach()
        try await bench.waitForLog("extension attached", "label=\(Self.label)")
        let queued = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the attached copy") { debugger.received.count == 1 }
        let sent = bench.clock.now

        bench.advance(to: sent.addingTimeInterval(60))
        try await bench.waitForLog("attached extension passed its acknowledgement timeout; still waiting", "label=\(Self.label)")
        bench.advance(to: sent.addingTimeInterval(120))
        try await bench.waitForLog("attached extension passed its acknowledgement timeout; still waiting", count: 2)
        #expect(bench.launcher.launches.isEmpty, "nothing launched in its place")
        #expect(try bench.host(Self.label).stateName == "attached")
        #expect(bench.logs("extension timed out").isEmpty)

        debugger.acknowledgeAll()
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        debugger.close()
        try await bench.waitForLog("extension detached", "label=\(Self.label)")
        await bench.stop()
    }

    @Test("units restart: the running copy is asked to exit, its request resent to the new one without an attempt; no crash, no backoff")
    func restartIsNoCrash() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        let count = Locked(0)
        bench.launcher.answer { _ in count.withLock { $0 += 1; return $0 == 1 ? .hang : .acknowledge } }
        try bench.start()
        let queued = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the extension") { bench.launcher.received.count == 1 }
        let first = try #require(bench.launcher.launches.first)

        let (previous, pid) = try await bench.host(Self.label).restart()
        #expect(previous == first.pid)
        #expect(pid != first.pid)
        #expect(bench.launcher.notifications(Method.extensionShutdown) == [first.pid])
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        #expect(bench.logs("reindex request interrupted; it stays journaled", "id=\(queued.id)").count == 1)
        #expect(bench.logs("reindex request failed").isEmpty, "an interruption is no failed attempt")
        let status = try bench.host(Self.label).statusJSON
        #expect(status["crashes"]?.intValue == 0)
        #expect(status["nextLaunch"] == nil)
        #expect(bench.launcher.received.map(\.pid) == [first.pid, pid])
        await bench.stop()
    }

    @Test("a crashing identifier is isolated by halving and reported; the others are acknowledged and it is not sent again")
    func poisonIsIsolatedByHalving() async throws {
        var unit = SchedulerBench.Unit(Self.label, bundle: Self.bundle)
        unit.throttleInterval = 0
        let bench = try SchedulerBench([unit], backoff: 0)
        bench.launcher.answer { $0.identifiers.contains("id-5") ? .crash : .acknowledge }
        try bench.start()
        let ids = (0..<8).map { "id-\($0)" }
        let queued = try bench.enqueue(Self.bundle, all: false, identifiers: ids)
        try await bench.waitForLog("identifier isolated as poison", "identifier=id-5")
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        let batches = bench.launcher.received(Method.extensionReindexIdentifiers).map(\.identifiers)
        #expect(batches == [ids, ["id-0", "id-1", "id-2", "id-3"], ["id-4", "id-5", "id-6", "id-7"], ["id-4", "id-5"],
                            ["id-4"], ["id-5"], ["id-6", "id-7"]], "\(batches)")
        #expect(bench.context.journal.poisoned().map(\.identifier) == ["id-5"])
        #expect(bench.context.journal.all().isEmpty)
        await bench.stop()
    }

    @Test("a manual reindex-all joins the pending initial one held back while paused, promotes it, and is answered by its acknowledgement")
    func manualPromotesWhatItJoins() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.proc.psi(cpu: 70, io: 0, memory: 0)
        try bench.start(initialFill: true)
        try await bench.waitForLog("load throttle changed", "to=paused")
        try await bench.step(by: 2)
        #expect(bench.launcher.received.isEmpty, "the initial fill is background work: held while paused")

        let outcome = SchedulerBench.Outcome()
        let manual = try bench.enqueue(Self.bundle, waiter: outcome.waiter)
        #expect(manual.coalesced && manual.promoted)
        #expect(manual.note?.contains("joined request \(manual.id) (initial), which was held back as background work while the machine is busy (throttle paused); running it now, unthrottled") == true,
            "\(manual.note ?? "-")")
        try await bench.waitForLog("reindex request acknowledged", "id=\(manual.id)")
        try await bench.until("the waiter's answer") { outcome.value != nil }
        if case .success(let answer)? = outcome.value { #expect(answer["state"] == "acknowledged") } else { Issue.record("\(String(describing: outcome.value))") }
        #expect(bench.launcher.received(Method.extensionReindexAll).map(\.reason) == ["initial"])
        await bench.stop()
    }

    @Test("an initial fill whose reindex-all ended before it was recorded as filling takes up the outcome (acknowledged: filled; failed: says so)")
    func initialFillEndedBeforeRecorded() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.start(loop: false)
        let fill = bench.context.initialFill, registry = bench.context.registry, journal = bench.context.journal
        // The scheduler's thread sent it and heard the acknowledgement before `queued` ran.
        let acked = try bench.enqueue(Self.bundle, reason: "initial", background: true)
        try journal.acknowledged(acked.id)
        fill.requestFinished(ReindexRequest(id: acked.id, bundle: Self.bundle, index: "", kind: .all, identifiers: [], reason: "initial",
            background: true, state: .running, attempts: 1, notBefore: Date(), created: Date()), .acknowledged)
        fill.queued(bundle: Self.bundle, index: "", requestID: acked.id, label: Self.label)
        #expect(registry.condition(bundle: Self.bundle, index: "") == nil, "acknowledged before it was recorded: the index is filled")
        // Failed for good before `queued` ran: the index stays filling, with the reason.
        let failed = try bench.enqueue(Self.bundle, reason: "initial", background: true)
        try journal.attemptFailed(failed.id, error: "it crashed", retryAt: nil)
        fill.queued(bundle: Self.bundle, index: "", requestID: failed.id, label: Self.label)
        let condition = try #require(registry.condition(bundle: Self.bundle, index: ""))
        #expect(condition.phase == .filling && condition.reason.contains("the initial fill failed (it crashed)"), "\(condition.reason)")
        await bench.stop()
    }

    @Test("identifier requests merge, a reindex-all absorbs them, and their waiters move to it")
    func coalescing() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.start(loop: false)
        let first = SchedulerBench.Outcome(), all = SchedulerBench.Outcome()
        let a = try bench.enqueue(Self.bundle, all: false, identifiers: ["a", "b"], reason: "idle", background: true, waiter: first.waiter)
        let b = try bench.enqueue(Self.bundle, all: false, identifiers: ["b", "c"], reason: "idle", background: true)
        #expect(b.coalesced && b.id == a.id)
        #expect(bench.context.journal.request(a.id)?.identifiers == ["a", "b", "c"])
        let everything = try bench.enqueue(Self.bundle, reason: "corruption", background: true, waiter: all.waiter)
        #expect(!everything.coalesced && everything.absorbed == [a.id])
        #expect(bench.context.journal.all().map(\.id) == [everything.id])

        bench.startLoop()
        try await bench.waitForLog("reindex request acknowledged", "id=\(everything.id)")
        try await bench.until("both waiters' answers") { first.value != nil && all.value != nil }
        #expect(bench.launcher.received.map(\.method) == [Method.extensionReindexAll])
        await bench.stop()
    }

    @Test("while paused, background requests are held and a manual request of another bundle is served")
    func pausedHoldsBackgroundOnly() async throws {
        let bench = try SchedulerBench([.init("org.test.a", bundle: "org.test.a"), .init("org.test.b", bundle: "org.test.b")])
        try bench.proc.psi(cpu: 70, io: 0, memory: 0)
        try bench.start()
        try bench.enqueue("org.test.a", reason: "idle", background: true)
        try await bench.waitForLog("load throttle changed", "to=paused")
        let manual = try bench.enqueue("org.test.b")
        try await bench.waitForLog("reindex request acknowledged", "id=\(manual.id)")
        for _ in 0..<3 { try await bench.step(by: 2) }
        #expect(bench.launcher.launches.count == 1, "only the manual request's extension was launched")
        #expect(bench.context.journal.pending(bundle: "org.test.a").count == 1)
        await bench.stop()
    }

    @Test("while throttled, one background request runs at a time, in quarter chunks, and its extension's donations are paced")
    func throttledOneAtATime() async throws {
        var a = SchedulerBench.Unit("org.test.a", bundle: "org.test.a"), b = SchedulerBench.Unit("org.test.b", bundle: "org.test.b")
        a.maximumIdentifiersPerRequest = 8
        b.maximumIdentifiersPerRequest = 8
        let bench = try SchedulerBench([a, b])
        try bench.proc.psi(cpu: 30, io: 0, memory: 0)
        bench.launcher.answer { $0.identifiers.first == "a-0" ? .hang : .acknowledge }
        try bench.start()
        let first = try bench.enqueue("org.test.a", all: false, identifiers: (0..<8).map { "a-\($0)" }, reason: "idle", background: true)
        try await bench.waitForLog("load throttle changed", "to=throttled")
        try await bench.until("the first chunk at a") { bench.launcher.received.count == 1 }
        #expect(bench.launcher.received[0].identifiers == ["a-0", "a-1"], "throttled: chunks of 8 / 4")
        try bench.enqueue("org.test.b", reason: "idle", background: true)
        for _ in 0..<3 { try await bench.step(by: 2) }
        #expect(bench.launcher.received.count == 1, "b waits while a's background request runs")
        #expect(await bench.scheduler.slotsNow["org.test.a"] == .dispatching(first.id, background: true))

        // a's donations are paced while it serves background work.
        let host = try bench.host("org.test.a")
        #expect(host.donationDelay() == ExtensionHost.donationPacing[.throttled])
        for call in 0..<3 { try await bench.launcher.launches[0].donate(1, prefix: "call-\(call)") }
        #expect(host.statusJSON["pacedCalls"]?.intValue == 4, "the three index calls and the question above")

        // a hangs: stopped at its timeout, and then b goes.
        bench.advance(to: bench.clock.now.addingTimeInterval(60))
        try await bench.waitForLog("reindex request acknowledged", "label=org.test.b")
        await bench.stop()
    }

    @Test("an extension idle for TimeOut on the clock is asked to exit, which is no crash")
    func idleExit() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.start()
        let queued = try bench.enqueue(Self.bundle)
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        let fake = try #require(bench.launcher.launches.first)
        try await bench.step(by: 59)
        #expect(!fake.hasExited)
        try await bench.step(by: 1)
        try await bench.waitForLog("extension idle; asking it to exit", "label=\(Self.label)")
        try await bench.waitForLog("extension exited", "label=\(Self.label)", "status=\"exit status 0\"")
        #expect(try bench.host(Self.label).statusJSON["crashes"]?.intValue == 0)
        await bench.stop()
    }

    @Test("the graceful stop asks extensions to exit, kills one that does not at the deadline, and leaves its request journaled without an attempt")
    func gracefulStop() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .hang }
        bench.launcher.setIgnoresTerm(true)
        try bench.start()
        let queued = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the extension") { bench.launcher.received.count == 1 }
        let fake = try #require(bench.launcher.launches.first)
        let asked = bench.clock.now

        async let stopped: Void = bench.stop(deadline: 5)
        try await bench.until("extension.shutdown") { bench.launcher.notifications(Method.extensionShutdown).count == 1 }
        bench.advance(to: asked.addingTimeInterval(5))
        await stopped
        #expect(fake.signalsReceived.map(\.signal) == [SIGKILL])
        #expect(fake.signalsReceived.first.map { ($0.at.timeIntervalSince(asked) * 10).rounded() / 10 } == 5)
        let request = try #require(bench.context.journal.request(queued.id))
        #expect(request.state == .pending && request.attempts == 0, "\(request)")
    }

    // ExtensionHost.shutdown once read the clock for its kill deadline after sending
    // extension.shutdown: time that passed between the two (a manual clock a test advanced as soon
    // as it saw the ask) moved the deadline out of reach, and the stop hung. Here the clock jumps
    // 5 s right after the stop's first reading of it, which forces that interleaving: with the
    // deadline read after the ask, the SIGKILL waits for asked + 10 s, a time this clock never
    // reaches (checked: this test fails on that order).
    @Test("the graceful stop's kill deadline is fixed before the extension is asked: time passing after the ask does not move it")
    func gracefulStopDeadlineBeforeAsk() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .hang }
        bench.launcher.setIgnoresTerm(true)
        try bench.start()
        _ = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the extension") { bench.launcher.received.count == 1 }
        let fake = try #require(bench.launcher.launches.first)
        let host = try bench.host(Self.label)
        let asked = bench.clock.now

        let jump = ManualClock.Jump(by: 5)
        async let stopped: Void = ManualClock.$jump.withValue(jump) { await host.shutdown(deadline: 5) }
        // Real time here only bounds the failure: on the right order the SIGKILL is due at once.
        let killed = (try? await bench.until("the SIGKILL at the deadline", timeout: 60) { !fake.signalsReceived.isEmpty }) != nil
        #expect(killed, "no SIGKILL with the clock at the deadline (asked + 5 s)")
        if !killed { bench.clock.advance(by: 30) }  // the wrong order: let the host's own timer end it
        await stopped
        #expect(fake.signalsReceived.map(\.signal) == [SIGKILL])
        #expect(fake.signalsReceived.first.map { ($0.at.timeIntervalSince(asked) * 10).rounded() / 10 } == 5)

        // The bench's own stop, with the clock moving until it is done (a relaunched copy hangs too).
        let done = Mutex(false)
        let stopping = Task { await bench.stop(deadline: 5); done.withLock { $0 = true } }
        try await bench.until("the bench's stop") {
            if !done.withLock({ $0 }) { bench.clock.advance(by: 10) }
            return done.withLock { $0 }
        }
        await stopping.value
    }

    @Test("the graceful stop closes an attached copy's connection, never signals it, and its request in flight stays journaled without an attempt")
    func gracefulStopWithAttachedCopy() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        try bench.start()
        let debugger = try AttachedFake(label: Self.label, context: bench.context)
        try await debugger.attach()
        try await bench.waitForLog("extension attached", "label=\(Self.label)")
        let queued = try bench.enqueue(Self.bundle)
        try await bench.until("the request at the attached copy") { debugger.received.count == 1 }

        await bench.stop(deadline: 5)
        #expect(bench.launcher.launches.isEmpty)
        let request = try #require(bench.context.journal.request(queued.id))
        #expect(request.state == .pending && request.attempts == 0, "\(request)")
        #expect(bench.logs("reindex request interrupted; it stays journaled", "id=\(queued.id)").count == 1)
    }

    struct DiskFull: Error, CustomStringConvertible { var description: String { "disk I/O error (injected)" } }

    /// Makes the journal's `operations` fail until `heal` is called; counts the attempts.
    final class FailingDisk: Sendable {
        let attempts = Locked<[String: Int]>([:])
        let failing = Locked<Set<String>>([])
        init(_ journal: RequestJournal, failing operations: Set<String>) {
            failing.withLock { $0 = operations }
            journal.writeFault.withLock { [attempts, failing] fault in
                fault = { operation in
                    attempts.withLock { $0[operation, default: 0] += 1 }
                    return failing.value.contains(operation) ? DiskFull() : nil
                }
            }
        }
        func heal() { failing.withLock { $0 = [] } }
        func count(_ operation: String) -> Int { attempts.value[operation] ?? 0 }
    }

    @Test("a journal claim that fails waits on the clock before the next try (1 s, then 2 s, …): no hot loop, one log line per try")
    func failedClaimBacksOff() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .acknowledge }
        let disk = FailingDisk(bench.context.journal, failing: ["claim"])
        try bench.start()
        let queued = try bench.enqueue(Self.bundle)
        let failedAt = bench.clock.now
        // The loop settles waiting for the retry time; before the fix it dispatched again at once,
        // for ever, and never waited (the safety net then fails this test).
        try await bench.until("the loop to wait for the retry", timeout: 20) {
            await bench.scheduler.slotsNow[Self.bundle] == .waiting(until: failedAt.addingTimeInterval(1))
        }
        #expect(disk.count("claim") == 1)
        #expect(bench.logs("cannot update the request journal", "id=\(queued.id)", "failures=1").count == 1)
        try await bench.step(by: 0.5)
        #expect(disk.count("claim") == 1, "not before its retry time")
        try await bench.step(by: 0.6)
        try await bench.waitForLog("cannot update the request journal", "id=\(queued.id)", "failures=2")
        #expect(disk.count("claim") == 2)
        disk.heal()
        try await bench.step(by: 2.1)
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        #expect(disk.count("claim") == 3)
        #expect(bench.context.journal.all().isEmpty)
        await bench.stop()
    }

    @Test("an outcome the journal could not record leaves no request running for ever: it is requeued once the journal can be written")
    func failedOutcomeWriteIsRequeued() async throws {
        let bench = try SchedulerBench([.init(Self.label, bundle: Self.bundle)])
        bench.launcher.answer { _ in .nack("not now") }
        try bench.start()
        let disk = FailingDisk(bench.context.journal, failing: ["attemptFailed", "setRemaining"])
        let queued = try bench.enqueue(Self.bundle)
        try await bench.waitForLog("cannot update the request journal", "id=\(queued.id)", "failures=1")
        #expect(bench.context.journal.request(queued.id)?.state == .running, "the failed write left it running")
        bench.launcher.answer { _ in .acknowledge }
        disk.heal()
        try await bench.step(by: 1.1)
        try await bench.waitForLog("request journal writable again; request requeued", "id=\(queued.id)")
        try await bench.waitForLog("reindex request acknowledged", "id=\(queued.id)")
        #expect(bench.context.journal.all().isEmpty)
        await bench.stop()
    }
}
