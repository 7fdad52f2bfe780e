#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Testing
import TestThreads
import SearchlightUnits
import SearchlightWire
@testable import SearchlightSupervisor

/// A process handle that only records: the state machine never touches a real process.
final class StubProcess: ExtensionProcess {
    let pid: Int32
    private let exited = Mutex(false)
    init(pid: Int32) { self.pid = pid }
    var hasExited: Bool { exited.withLock { $0 } }
    func markExited() { exited.withLock { $0 = true } }
    func signal(_ signal: Int32) -> Bool { !hasExited }
    func waitForExit() async -> Termination { .exited(0) }
    func killLeftovers() {}
}

/// A session that is only a connection (never started) and a peer.
final class StubSession: ExtensionSessionHandle {
    let connection: RPCConnection
    let peer: PeerCredentials
    private let other: UnixSocket
    init(pid: Int32) throws {
        let (mine, theirs) = try UnixSocket.pair()
        connection = RPCConnection(socket: mine)
        other = theirs
        peer = PeerCredentials(pid: pid, uid: getuid(), gid: getgid())
    }
    func discardBatches() -> Int { 0 }
    func handle(_ message: RPCMessage) {}
}

/// Drives `ExtensionHost.Machine` by hand: events in, state and effects out, time set by the test.
struct MachineDriver {
    var machine: ExtensionHost.Machine
    var now = Date(timeIntervalSince1970: 1_800_000_000)
    let delivered = Locked<[Result<ExtensionHost.Link, any Error>]>([])
    private var nextPID: Int32 = 100

    init(throttleInterval: Double = 0, timeOut: Double = 60, backoff: TimeInterval = 10) {
        var unit = ExtensionUnit(label: "org.example.fake", bundleIdentifier: "org.example.bundle", executable: "/bin/true")
        unit.throttleInterval = throttleInterval
        unit.timeOut = timeOut
        machine = ExtensionHost.Machine(unit: unit, backoffBase: backoff)
    }

    /// Applies `event`; delivers what it hands to waiters, as the host would, and returns every effect.
    mutating func send(_ event: ExtensionHost.Event) -> [ExtensionHost.Effect] {
        let effects = machine.transition(event, at: now)
        for case .deliver(let waiters, let result) in effects {
            for waiter in waiters { waiter.deliver(result) }
        }
        return effects
    }

    /// Someone wants the link; what they are handed arrives in `delivered`.
    mutating func want(_ ticket: ExtensionHost.Ticket? = nil) -> [ExtensionHost.Effect] {
        let delivered = self.delivered
        return send(.linkWanted(ExtensionHost.Waiter(ticket: ticket) { result in delivered.withLock { $0.append(result) } }))
    }

    mutating func newLaunch(program: ProgramIdentity? = nil) throws -> LaunchedExtension {
        nextPID += 1
        return LaunchedExtension(process: StubProcess(pid: nextPID), session: try StubSession(pid: nextPID), at: now,
            stderrTail: StderrTail(), program: program)
    }

    /// A request starts a launch, which completes its handshake: the extension runs.
    @discardableResult
    mutating func run(_ ticket: ExtensionHost.Ticket? = nil, program: ProgramIdentity? = nil) throws -> LaunchedExtension {
        let spawn = want(ticket)
        #expect(spawn.names == ["spawn"], "\(spawn.names)")
        let launch = try newLaunch(program: program)
        _ = send(.spawned(launch))
        _ = send(.handshakeCompleted(launch.connection))
        return launch
    }

    var backoff: (delay: TimeInterval, streak: Int)? {
        if case .backingOff(let until, let streak) = machine.state { return (until.timeIntervalSince(now), streak) }
        return nil
    }

    var stateName: String {
        switch machine.state {
        case .idle: "idle"
        case .backingOff: "backingOff"
        case .spawning: "spawning"
        case .launching: "launching"
        case .running: "running"
        case .attached: "attached"
        case .stopping(_, let stop, _, _): "stopping(\(stop))"
        }
    }
}

extension ExtensionHost.Effect {
    /// A short name for assertions: "spawn", "stop", "signal(9)", "log(extension launched)", …
    var name: String {
        switch self {
        case .deliver(let waiters, let result):
            switch result {
            case .success: "deliver(\(waiters.count) link)"
            case .failure: "deliver(\(waiters.count) failure)"
            }
        case .spawn: "spawn"
        case .serve: "serve"
        case .askToExit: "askToExit"
        case .stop: "stop"
        case .signal(_, let signal): "signal(\(signal))"
        case .close: "close"
        case .exited: "exited"
        case .tellIfThrottled: "tellIfThrottled"
        case .log(let line): "log(\(line.message))"
        case .emit(let name, _): "emit(\(name))"
        case .wake: "wake"
        case .answer(let text): "answer(\(text))"
        }
    }
}

extension Array where Element == ExtensionHost.Effect {
    var names: [String] { map(\.name) }
    var answer: String? {
        for case .answer(let text) in self { return text }
        return nil
    }
}

@Suite("Extension host state machine", .onOwnThreads)
struct ExtensionHostMachineTests {
    @Test("a crash backs the next launch off 10 s, doubling to 5 min, each within ±10 %; a request before then is told when")
    func crashBackoffDoubles() throws {
        var d = MachineDriver()
        for (n, expected) in [10.0, 20, 40, 80, 160, 300, 300].enumerated() {
            let launch = try d.run()
            d.now += 1
            let effects = d.send(.exited(launch, .signaled(SIGSEGV, coreDumped: false)))
            #expect(effects.names.contains("log(extension exited unexpectedly)"))
            let backoff = try #require(d.backoff)
            #expect(backoff.streak == n + 1)
            #expect(backoff.delay >= expected * 0.9 && backoff.delay <= expected * 1.1, "crash \(n + 1): \(backoff.delay) s, expected \(expected) ± 10 %")
            let refused = d.want()
            #expect(refused.names == ["deliver(1 failure)"])
            let error = try #require(d.delivered.withLock { $0.last.flatMap { r -> ExtensionHost.NotAvailable? in
                if case .failure(let e) = r { e as? ExtensionHost.NotAvailable } else { nil } } })
            #expect(error.retryAt == d.now.addingTimeInterval(backoff.delay))
            #expect(error.reason.contains("backing off after \(n + 1) failed launch"))
            d.now = error.retryAt
        }
        #expect(d.machine.record.crashes == 7)
        #expect(d.machine.record.lastExit?.crashStreak == 7)
    }

    @Test("a launch that runs 10 minutes without trouble forgives the crash streak")
    func healthyLaunchForgivesStreak() throws {
        var d = MachineDriver()
        for _ in 0..<3 {
            let launch = try d.run()
            _ = d.send(.exited(launch, .signaled(SIGSEGV, coreDumped: false)))
            d.now += try #require(d.backoff).delay
        }
        #expect(d.machine.state.streak == 3)
        let healthy = try d.run()
        d.now += 600
        _ = d.send(.exited(healthy, .signaled(SIGSEGV, coreDumped: false)))
        let backoff = try #require(d.backoff)
        #expect(backoff.streak == 1, "the crash after 10 healthy minutes is the first of a new streak")
        #expect(backoff.delay >= 9 && backoff.delay <= 11)

        // An exit asked for after 10 healthy minutes clears the streak altogether.
        d.now += backoff.delay
        let calm = try d.run()
        d.now += 601
        _ = d.send(.terminate(hung: false))
        _ = d.send(.exited(calm, .exited(0)))
        #expect(d.stateName == "idle")
        #expect(d.machine.state.streak == 0)
    }

    @Test("a launch that cannot start counts as a failed launch; whoever waited is told why")
    func spawnFailure() throws {
        var d = MachineDriver()
        _ = d.want(ExtensionHost.Ticket(request: 7))
        let effects = d.send(.spawnFailed("Program /bin/nope does not exist", program: nil))
        #expect(effects.names.contains("log(extension could not start)"))
        #expect(effects.names.contains("deliver(1 failure)"))
        let message = try #require(d.delivered.withLock { $0.first.flatMap { r -> String? in
            if case .failure(let e) = r { (e as? SearchlightError)?.message } else { nil } } })
        #expect(message == "org.example.fake could not start: Program /bin/nope does not exist")
        #expect(try #require(d.backoff).streak == 1)
        #expect(d.machine.record.launchFailure == "could not start: Program /bin/nope does not exist")
        #expect(d.machine.record.launches == 0)
    }

    @Test("callers during a launch wait for that launch; the handshake hands each the link and counts its work until it ends")
    func waitersShareOneLaunch() throws {
        var d = MachineDriver(timeOut: 60)
        let first = ExtensionHost.Ticket(request: 1, background: true), second = ExtensionHost.Ticket(request: nil)
        #expect(d.want(first).names == ["spawn"])
        #expect(d.want(second).isEmpty, "no second launch")
        let launch = try d.newLaunch()
        #expect(d.send(.spawned(launch)).names.contains("serve"))
        let ready = d.send(.handshakeCompleted(launch.connection))
        #expect(ready.names == ["log(extension ready)", "deliver(2 link)", "tellIfThrottled", "wake"])
        let work = try #require(d.machine.state.work)
        #expect(work.inFlight == 2)
        #expect(work.request == 1 && work.background)

        let link = try #require(d.machine.state.link)
        d.now += 5
        #expect(d.send(.requestEnded(link.connection, first)).isEmpty, "one call still in flight")
        #expect(d.machine.state.work?.request == nil)
        #expect(d.send(.requestEnded(link.connection, second)).names == ["wake"], "now idle: its TimeOut starts")
        #expect(d.machine.state.work?.lastActivity == d.now)
    }

    @Test("ThrottleInterval spaces launches; a manual request waives it, and waives a crash backoff while keeping the streak")
    func waiveLaunchDelay() throws {
        var d = MachineDriver(throttleInterval: 10)
        let launch = try d.run()
        _ = d.send(.terminate(hung: false))
        _ = d.send(.exited(launch, .exited(0)))
        d.now += 1
        #expect(d.want().names == ["deliver(1 failure)"], "9 s of ThrottleInterval left")
        #expect(d.send(.waiveLaunchDelay).answer?.contains("ThrottleInterval") == true)
        let again = try d.run()

        _ = d.send(.exited(again, .signaled(SIGSEGV, coreDumped: false)))
        #expect(try #require(d.backoff).streak == 1)
        let note = try #require(d.send(.waiveLaunchDelay).answer)
        #expect(note.hasPrefix("the extension's launch backoff after 1 failed launch (next launch was in "), "\(note)")
        #expect(note.hasSuffix(") is waived"), "\(note)")
        let third = try d.run()
        _ = d.send(.exited(third, .signaled(SIGSEGV, coreDumped: false)))
        let backoff = try #require(d.backoff)
        #expect(backoff.streak == 2, "the streak stayed")
        #expect(backoff.delay >= 18 && backoff.delay <= 22)
    }

    @Test("a hung extension gets SIGTERM, then SIGKILL if it outlives ExitTimeOut; its end is a failure that says it hung")
    func hungIsStoppedAndCounted() throws {
        var d = MachineDriver()
        let launch = try d.run()
        #expect(d.send(.terminate(hung: true)).names == ["stop"])
        #expect(d.stateName == "stopping(hung)")
        d.now += 20
        #expect(d.send(.exitTimedOut(launch)).names == ["log(extension did not exit in time; killing it)", "signal(9)"])
        (launch.process as? StubProcess)?.markExited()
        #expect(d.send(.exitTimedOut(launch)).isEmpty, "no SIGKILL once it has exited")
        let effects = d.send(.exited(launch, .signaled(SIGKILL, coreDumped: false)))
        #expect(effects.names.contains("log(extension exited unexpectedly)"))
        #expect(try #require(d.backoff).streak == 1)
        let exit = try #require(d.machine.record.lastExit)
        #expect(exit.stoppedAsHung && !exit.expected)
        #expect(exit.summary.contains("stopped by searchlightd because it hung"))
    }

    @Test("an idle exit is asked for (extension.shutdown): no crash, no backoff")
    func idleExitIsNoCrash() throws {
        var d = MachineDriver()
        let launch = try d.run()
        #expect(d.send(.terminate(hung: false)).names == ["askToExit"])
        let effects = d.send(.exited(launch, .exited(0)))
        #expect(effects.names.contains("log(extension exited)"))
        #expect(d.stateName == "idle")
        #expect(d.machine.record.crashes == 0)
        #expect(d.machine.record.lastExit?.expected == true)
    }

    @Test("an extension that closes its socket but lives on is stopped, and its end counts as a failure")
    func closedConnectionIsAFailure() throws {
        var d = MachineDriver()
        let launch = try d.run()
        let effects = d.send(.connectionClosed(launch.connection, reason: "peer closed the connection"))
        #expect(effects.names == ["log(extension connection closed; stopping the extension)", "stop"])
        _ = d.send(.exited(launch, .signaled(SIGTERM, coreDumped: false)))
        #expect(try #require(d.backoff).streak == 1)
        #expect(d.send(.connectionClosed(launch.connection, reason: "closed locally")).isEmpty, "after the exit the close is expected")
    }

    @Test("an attached copy replaces a launched one, which is asked to exit; that exit is no crash, and the attached one is never signalled")
    func attachedReplacesLaunched() throws {
        var d = MachineDriver()
        let launched = try d.run()
        let debugger = try StubSession(pid: 900)
        let effects = d.send(.attached(debugger))
        #expect(effects.names.starts(with: ["askToExit", "log(extension attached)"]))
        #expect(d.stateName == "attached")
        _ = d.send(.exited(launched, .exited(0)))
        #expect(d.stateName == "attached")
        #expect(d.machine.record.crashes == 0)

        #expect(d.send(.kill).names == ["close"], "the forced stop closes its connection, never signals it")
        #expect(d.send(.terminate(hung: true)).names == ["close"])
        #expect(d.stateName == "idle")
        #expect(d.send(.detached(debugger.connection, reason: "closed locally")).isEmpty, "already detached")
    }

    @Test("a launch that never says initialize is stopped as hung at its handshake timeout; its waiters hear it exited")
    func handshakeTimeout() throws {
        var d = MachineDriver()
        _ = d.want(ExtensionHost.Ticket(request: 3))
        let launch = try d.newLaunch()
        _ = d.send(.spawned(launch))
        d.now += 60
        #expect(d.send(.handshakeTimedOut(launch)).names == ["log(extension did not complete its handshake)", "stop"])
        #expect(d.stateName == "stopping(hung)")
        let effects = d.send(.exited(launch, .signaled(SIGTERM, coreDumped: false)))
        #expect(effects.names.contains("deliver(1 failure)"))
        let message = try #require(d.delivered.withLock { $0.first.flatMap { r -> String? in
            if case .failure(let e) = r { (e as? SearchlightError)?.message } else { nil } } })
        #expect(message == "org.example.fake exited (killed by signal 15 (SIGTERM)) before its handshake")
    }

    @Test("a program rebuilt since the last launch is noticed at the next launch, and the old program's crash streak is forgiven")
    func rebuiltProgramForgivesStreak() throws {
        let old = try #require(ProgramIdentity(path: "/bin/true")), new = try #require(ProgramIdentity(path: "/bin/false"))
        try #require(old != new)
        var d = MachineDriver()
        for _ in 0..<2 {
            let launch = try d.run(program: old)
            _ = d.send(.exited(launch, .signaled(SIGSEGV, coreDumped: false)))
            d.now += try #require(d.backoff).delay
        }
        _ = d.want()
        let effects = d.send(.spawned(try d.newLaunch(program: new)))
        #expect(effects.names.first == "log(extension program changed since its last launch)")
        #expect(d.machine.state.streak == 0)
    }

    @Test("progress and pacing follow the request the extension serves; a manual request stops the pacing of a background one")
    func currentRequestAndPacing() throws {
        var d = MachineDriver()
        let launch = try d.run(ExtensionHost.Ticket(request: 42, background: true))
        #expect(d.machine.state.work?.request == 42)
        #expect(d.send(.stopPacing(41)).answer == nil)
        #expect(d.send(.stopPacing(42)).answer != nil)
        #expect(d.machine.state.work?.background == false)
        d.now += 3
        _ = d.send(.activity)
        #expect(d.machine.state.work?.lastActivity == d.now)
        _ = d.send(.paced)
        #expect(d.machine.record.pacedCalls == 1)
        _ = launch
    }

    @Test("a watchdog that fires for a launch an attached copy replaced stops that launch only: the author's connection stays open")
    func hungSupersededLaunchSparesAttached() throws {
        var d = MachineDriver()
        let launched = try d.run(ExtensionHost.Ticket(request: 7))
        let debugger = try StubSession(pid: 900)
        _ = d.send(.attached(debugger))
        #expect(d.stateName == "attached")
        // The call on the old link is still outstanding; its watchdog fires now.
        d.now += 120
        let effects = d.send(.stopLaunch(launched, hung: true))
        #expect(effects.names == ["log(superseded extension launch hung; stopping it)", "stop"], "\(effects.names)")
        #expect(!effects.contains { if case .close = $0 { true } else { false } }, "the attached copy's connection is never closed")
        #expect(d.stateName == "attached")
        // Once it has exited, a late watchdog does nothing at all.
        (launched.process as? StubProcess)?.markExited()
        _ = d.send(.exited(launched, .signaled(SIGTERM, coreDumped: false)))
        #expect(d.send(.stopLaunch(launched, hung: true)).isEmpty)
        #expect(d.stateName == "attached")
        #expect(d.machine.record.crashes == 0)
    }

    @Test("a watchdog or restart about an old launch leaves a newer launch alone; about the current one it stops it")
    func stopLaunchTargetsItsLaunch() throws {
        var d = MachineDriver()
        let first = try d.run()
        _ = d.send(.terminate(hung: false))
        (first.process as? StubProcess)?.markExited()
        _ = d.send(.exited(first, .exited(0)))
        let second = try d.run()
        #expect(d.send(.stopLaunch(first, hung: false)).isEmpty, "a restart decided about the first launch")
        #expect(d.send(.stopLaunch(first, hung: true)).isEmpty, "a late watchdog of the first launch")
        #expect(d.stateName == "running")
        #expect(d.send(.stopLaunch(second, hung: true)).names == ["stop"])
        #expect(d.stateName == "stopping(hung)")
    }

    @Test("an idle deadline that passed is checked again when handled: a request begun meanwhile keeps the extension")
    func idleExitRechecks() throws {
        var d = MachineDriver(timeOut: 60)
        let launch = try d.run()
        d.now += 61
        // The scheduler saw it idle; before its event is handled, a request takes the link.
        let ticket = ExtensionHost.Ticket(request: 9)
        #expect(d.want(ticket).names == ["deliver(1 link)"])
        #expect(d.send(.idleExpired).isEmpty)
        #expect(d.stateName == "running")
        d.now += 5
        _ = d.send(.requestEnded(launch.connection, ticket))
        d.now += 30
        #expect(d.send(.idleExpired).isEmpty, "idle for 30 s of its 60")
        d.now += 31
        #expect(d.send(.idleExpired).names == ["log(extension idle; asking it to exit)", "askToExit"])
        #expect(d.stateName == "stopping(asked)")
    }
}
