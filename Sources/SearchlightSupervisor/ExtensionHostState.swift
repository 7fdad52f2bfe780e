import Foundation
import SearchlightUnits
import SearchlightWire

/// Retry and relaunch delays: `base` doubling per attempt up to `cap`, with ±10 % jitter so that
/// many failing requests do not retry in lockstep (DESIGN §6: 10 s doubling to 5 min).
enum Backoff {
    static func delay(attempt: Int, base: TimeInterval, cap: TimeInterval) -> TimeInterval {
        let exponent = Double(max(0, min(attempt - 1, 30)))
        let raw = min(cap, base * pow(2, exponent))
        return raw * Double.random(in: 0.9...1.1)
    }
}

/// The states, events and effects of an extension host (DESIGN §5, §6): what `Machine.transition`
/// works with (ExtensionHostMachine.swift).
extension ExtensionHost {
    /// The live connection to the extension, spawned or attached by hand.
    struct Link: Sendable {
        let session: any ExtensionSessionHandle
        /// nil when the extension was started by hand and attached through the daemon socket.
        let launch: LaunchedExtension?
        let since: Date
        var connection: RPCConnection { session.connection }
        var pid: Int32 { launch?.pid ?? session.peer.pid }
    }

    /// Work a caller of `link(for:)` brings: counted from the moment it gets the link until
    /// `endRequest`, so that an extension with work in flight is never idle. `request` is the
    /// journaled request, the only one the extension may report progress on (nil: item data).
    struct Ticket: Sendable, Equatable {
        var request: Int64?
        var background = false
    }

    /// Someone waiting for the live link.
    struct Waiter: Sendable {
        let ticket: Ticket?
        let deliver: @Sendable (Result<Link, any Error>) -> Void
    }

    /// Thrown by `link(for:)` when no launch may happen before `retryAt`.
    struct NotAvailable: Error {
        var retryAt: Date
        var reason: String
    }

    /// What a running extension is doing: calls in flight, the journaled request it serves
    /// (background work is paced while throttled), and when it was last heard from.
    struct Work: Sendable {
        var inFlight = 0
        var request: Int64?
        var background = false
        var lastActivity: Date

        mutating func begin(_ ticket: Ticket?, at now: Date) {
            guard let ticket else { return }
            inFlight += 1
            lastActivity = now
            if let id = ticket.request {
                request = id
                background = ticket.background
            }
        }
    }

    /// Why a launched copy is being stopped: only an exit the daemon asked for is no failure.
    enum Stop: Sendable, Equatable {
        /// Idle `TimeOut`, the daemon stopping, a restart, the unit removed.
        case asked
        /// No handshake, acknowledgement, progress or donation in time.
        case hung
        /// It closed its socket but lived on.
        case closedConnection
    }

    enum State {
        /// Nothing runs. `lastLaunch`: `ThrottleInterval` counts from it; `streak`: launches in a
        /// row that failed (forgiven after `healthyReset` of a launch without trouble).
        case idle(lastLaunch: Date?, streak: Int)
        /// The last launch failed: none before `until`.
        case backingOff(until: Date, streak: Int)
        /// The program is being started, decided here so that concurrent callers wait for this launch.
        case spawning(at: Date, streak: Int, waiters: [Waiter])
        /// Started; its `initialize` is not answered yet.
        case launching(LaunchedExtension, streak: Int, waiters: [Waiter])
        /// Handshake done: requests flow.
        case running(Link, Work, streak: Int)
        /// A copy started by hand (under a debugger): never stopped by the daemon.
        case attached(Link, Work)
        /// Asked or made to stop; its exit is awaited (and fails whoever still waits for its handshake).
        case stopping(LaunchedExtension, Stop, streak: Int, waiters: [Waiter])
    }

    enum Event {
        case linkWanted(Waiter)
        case spawned(LaunchedExtension)
        case spawnFailed(String, program: ProgramIdentity?)
        case handshakeCompleted(RPCConnection)
        case handshakeTimedOut(LaunchedExtension)
        case attached(any ExtensionSessionHandle)
        case detached(RPCConnection, reason: String)
        /// The connection of a launched copy closed (before its exit, or because of it).
        case connectionClosed(RPCConnection, reason: String)
        case exited(LaunchedExtension, Termination)
        case exitTimedOut(LaunchedExtension)
        /// Stops whatever runs now (an attached copy: its connection is closed).
        case terminate(hung: Bool)
        /// Stops this launch, and nothing else: a watchdog or a restart decided about one launch,
        /// and by the time its event is handled an attached copy or a newer launch may have taken
        /// its place, which must not be touched. A superseded launch that hung gets SIGTERM only.
        case stopLaunch(LaunchedExtension, hung: Bool)
        /// The idle deadline seemed to pass: asks the extension to exit if it is still running,
        /// still idle and still past `TimeOut` when the event is handled.
        case idleExpired
        /// The daemon's forced stop: SIGKILL, now.
        case kill
        case activity
        case requestEnded(RPCConnection, Ticket)
        case stopPacing(Int64)
        case waiveLaunchDelay
        case paced
        case unitChanged(ExtensionUnit)
    }

    /// A log line decided in a transition, written after it.
    struct LogLine: Sendable {
        var level: Logger.Level
        var message: String
        var fields: [(String, String)]
    }

    /// What the host carries out, outside its lock, after a transition.
    enum Effect {
        case deliver([Waiter], Result<Link, any Error>)
        /// Start the unit's program (then `.spawned` or `.spawnFailed`).
        case spawn(ExtensionUnit, at: Date)
        /// Read its connection, watch for its exit, and (`handshakeTimeout`) give it that long to say `initialize`.
        case serve(LaunchedExtension, handshakeTimeout: TimeInterval?)
        /// `extension.shutdown`; SIGKILL after `ExitTimeOut`.
        case askToExit(LaunchedExtension)
        /// SIGTERM; SIGKILL after `ExitTimeOut`.
        case stop(LaunchedExtension)
        case signal(LaunchedExtension, Int32)
        case close(RPCConnection)
        /// Its exit was handled: the report to whoever waits, its connection closed, its leftovers killed.
        case exited(LaunchedExtension, ExtensionExit)
        /// `didThrottle` to a new launch if the machine is busy (the running ones were told already).
        case tellIfThrottled(RPCConnection)
        case log(LogLine)
        case emit(String, [String: JSONValue])
        /// The scheduler should look again (the host became available, or idle).
        case wake
        /// For the caller of the transition: what was waived, whether pacing stopped.
        case answer(String)
    }

    /// Figures for `status`, changed by transitions too.
    struct Record {
        var launches = 0
        var crashes = 0
        var pacedCalls = 0
        var lastExit: ExtensionExit?
        /// Why the last launch could not even start (nil once one started).
        var launchFailure: String?
        /// The program file as last launched.
        var program: ProgramIdentity?
    }
}

extension ExtensionHost.Work {
    /// A caller is done with its link; true when nothing is in flight any more.
    mutating func end(_ ticket: ExtensionHost.Ticket, at now: Date) -> Bool {
        inFlight = max(0, inFlight - 1)
        lastActivity = now
        if let id = ticket.request, request == id { request = nil }
        return inFlight == 0
    }
}

extension ExtensionHost.State {
    /// Launches in a row that failed.
    var streak: Int {
        switch self {
        case .idle(_, let streak), .backingOff(_, let streak), .spawning(_, let streak, _), .launching(_, let streak, _),
             .running(_, _, let streak), .stopping(_, _, let streak, _):
            streak
        case .attached:
            0
        }
    }

    /// The launched copy the state is about, if any.
    var launch: LaunchedExtension? {
        switch self {
        case .running(let link, _, _): link.launch
        case .launching(let launch, _, _), .stopping(let launch, _, _, _): launch
        case .idle, .backingOff, .spawning, .attached: nil
        }
    }

    /// The live link, once the handshake is done.
    var link: ExtensionHost.Link? {
        switch self {
        case .running(let link, _, _), .attached(let link, _): link
        case .idle, .backingOff, .spawning, .launching, .stopping: nil
        }
    }

    var work: ExtensionHost.Work? {
        switch self {
        case .running(_, let work, _), .attached(_, let work): work
        case .idle, .backingOff, .spawning, .launching, .stopping: nil
        }
    }
}
