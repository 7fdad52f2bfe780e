#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SearchlightWire

/// sd_notify(3) in plain Swift (no libsystemd): datagrams to `$NOTIFY_SOCKET`, a path or an
/// abstract `@name`. Without `NOTIFY_SOCKET` every call is a no-op, so the daemon runs the same
/// by hand, under systemd, and in tests (which bind a datagram socket of their own).
public final class SystemdNotifier: Sendable {
    /// `NOTIFY_SOCKET` as given, or nil when not started by systemd with `Type=notify`.
    public let socketPath: String?
    /// Half of `WATCHDOG_USEC` when the watchdog is enabled for this process, else nil.
    public let watchdogInterval: TimeInterval?
    private let fd: Int32

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (the watchdog is ours only when
    /// `WATCHDOG_PID` is unset or our pid).
    public init(environment: [String: String], pid: pid_t = getpid()) {
        let path = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        socketPath = path
        var interval: TimeInterval?
        if let usec = environment["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0 {
            let forUs = environment["WATCHDOG_PID"].map { pid_t($0) == pid } ?? true
            if forUs { interval = TimeInterval(usec) / 2_000_000 }
        }
        watchdogInterval = path == nil ? nil : interval
        fd = path == nil ? -1 : socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    /// From this process's environment, then removes those variables (as sd_notify's
    /// `unset_environment`), so nothing started later inherits them.
    public static func fromEnvironment() -> SystemdNotifier {
        let notifier = SystemdNotifier(environment: ProcessInfo.processInfo.environment)
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { unsetenv(name) }
        return notifier
    }

    deinit { if fd >= 0 { Glibc.close(fd) } }

    public var isEnabled: Bool { fd >= 0 }

    /// Sends one notification (`KEY=value` lines); false when not under systemd or the send failed.
    @discardableResult
    public func send(_ state: String) -> Bool {
        guard fd >= 0, let path = socketPath else { return false }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        var bytes = Array(path.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else { return false }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        // An abstract address's length counts exactly its bytes; a path's includes the NUL.
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                message.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), address, length) }
            }
        }
        return sent == message.count
    }
}

/// What "the main loop is healthy" means for the watchdog: every probed loop turned over since
/// it was last poked. Each check pokes every loop (e.g. wakes the scheduler thread); the next
/// check, half a `WatchdogSec` later, finds its turn counter moved, or names it as wedged. A loop
/// stuck in one step stops the pings, and systemd kills and restarts the daemon.
final class WatchdogHealth: Sendable {
    struct Probe: Sendable {
        var name: String
        /// Increases every time the loop goes round.
        var turns: @Sendable () -> UInt64
        /// Makes the loop go round soon (wakes it).
        var poke: @Sendable () -> Void
    }

    private let probes: [Probe]
    /// Each loop's turn count at the previous check (nil before the first).
    private let seen: Mutex<[UInt64?]>

    init(probes: [Probe]) {
        self.probes = probes
        seen = Mutex(Array(repeating: nil, count: probes.count))
    }

    /// Connects to the daemon's own socket and closes at once, so that the accept loop goes
    /// round. Non-blocking: with the backlog full the loop is busy accepting others anyway.
    static func knock(_ path: String) {
        guard var addr = try? UnixSocket.makeAddress(path) else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { return }
        _ = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        Glibc.close(fd)
    }

    /// nil when every loop turned since the previous check (or this is the first), else the
    /// name of a wedged loop. Pokes every loop for the next check.
    func check() -> String? {
        var wedged: String?
        for i in probes.indices {
            let turns = probes[i].turns()
            let previous = seen.withLock { seen in defer { seen[i] = turns }; return seen[i] }
            if let previous, turns == previous { wedged = wedged ?? probes[i].name }
            probes[i].poke()
        }
        return wedged
    }
}

/// The `STATUS=` line `systemctl status` shows. One closure per part: a new part (e.g. the
/// throttle's state) is one more entry in `parts`.
enum StatusLine {
    static let parts: [@Sendable (ServiceContext) -> String?] = [
        { context in
            let bundles = context.registry.bundles()
            let indexes = bundles.reduce(0) { $0 + context.registry.indexes(of: $1).count }
            return "\(indexes) indexes in \(bundles.count) bundles"
        },
        { context in
            // Only while some index is being (re)built: "1 recovering, 2 migrating, 1 filling".
            let counts = context.registry.conditionCounts
            let parts = [IndexCondition.Phase.recovering, .migrating, .filling].compactMap { phase in
                counts[phase].map { "\($0) \(phase.rawValue)" }
            }
            return parts.isEmpty ? nil : parts.joined(separator: ", ")
        },
        { context in
            let hosts = context.scheduler?.allHosts ?? []
            let running = hosts.filter { $0.stateName == "running" }.count
            return "\(running)/\(hosts.count) extensions running"
        },
        { context in
            let all = context.journal.all()
            let pending = all.filter { $0.state != .failed }.count
            let failed = all.filter { $0.state == .failed }.count
            return "\(pending) reindex requests pending, \(failed) failed"
        },
        { context in
            guard let throttle = context.scheduler?.throttle.snapshot else { return nil }
            return throttle.state == .normal ? "load normal" : "background \(throttle.state.rawValue): \(throttle.reason)"
        },
        { context in
            // Only while the power defers background work: "background deferred: on battery at 23 % (below 50 %)".
            context.scheduler?.backgroundDeferral.map { "background deferred: \($0)" }
        },
    ]

    static func make(_ context: ServiceContext) -> String {
        parts.compactMap { $0(context) }.joined(separator: ", ")
    }
}

/// Keeps systemd informed while the daemon runs: `STATUS=` after changes (at most every
/// `minimumStatusInterval`, never on a timer of its own) and `WATCHDOG=1` every half
/// `WATCHDOG_USEC` while `health` finds the loops turning. One thread, asleep when idle.
final class SystemdAgent: @unchecked Sendable {
    // @unchecked: `dirty`, `stopped` and `running` are guarded by `condition`, which the agent's thread waits on until its next deadline.
    let notifier: SystemdNotifier
    let log: Logger
    /// The current status line (`StatusLine.make` in the daemon; anything in tests).
    let status: @Sendable () -> String
    let health: WatchdogHealth
    let minimumStatusInterval: TimeInterval
    private let condition = NSCondition()
    private var dirty = false
    private var stopped = false
    /// The status/watchdog thread was started (only under systemd).
    private var running = false
    private let finished = DispatchSemaphore(value: 0)

    init(notifier: SystemdNotifier, log: Logger, status: @escaping @Sendable () -> String, health: WatchdogHealth,
         minimumStatusInterval: TimeInterval = 2) {
        self.notifier = notifier
        self.log = log
        self.status = status
        self.health = health
        self.minimumStatusInterval = minimumStatusInterval
    }

    /// `READY=1` with the first status line and our pid, then the status/watchdog thread.
    func ready() -> String {
        let status = self.status()
        notifier.send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())")
        // Not under systemd: no thread, and statusChanged() only sets a flag nobody reads.
        guard notifier.isEnabled else { return status }
        condition.withLock { running = true }
        let thread = Thread { [self] in loop(lastStatus: status) }
        thread.name = "systemd"
        thread.start()
        return status
    }

    /// Something the status line shows may have changed.
    func statusChanged() {
        condition.lock()
        dirty = true
        condition.signal()
        condition.unlock()
    }

    /// `STOPPING=1`, and the thread ends (no more pings during the graceful stop: systemd's
    /// stop timeout governs it).
    func stopping() {
        notifier.send("STOPPING=1\nSTATUS=stopping")
        condition.lock()
        let wasRunning = running && !stopped
        stopped = true
        condition.signal()
        condition.unlock()
        if wasRunning { finished.wait() }
    }

    private func loop(lastStatus: String) {
        var lastStatus = lastStatus
        var statusSentAt = Date()
        var nextPing: Date? = notifier.watchdogInterval.map { Date().addingTimeInterval($0) }
        var withheld = false
        condition.lock()
        while !stopped {
            let now = Date()
            if let ping = nextPing, ping <= now, let interval = notifier.watchdogInterval {
                nextPing = now.addingTimeInterval(interval)
                condition.unlock()
                if let wedged = health.check() {
                    if !withheld { log.error("watchdog ping withheld: loop not turning", ["loop": wedged]) }
                    withheld = true
                } else {
                    if withheld { log.notice("watchdog pings resumed") }
                    withheld = false
                    notifier.send("WATCHDOG=1")
                }
                condition.lock()
                continue
            }
            var wakeAt = nextPing
            if dirty {
                let due = statusSentAt.addingTimeInterval(minimumStatusInterval)
                if due <= now {
                    dirty = false
                    condition.unlock()
                    let status = self.status()
                    if status != lastStatus, notifier.send("STATUS=\(status)") { lastStatus = status }
                    statusSentAt = Date()
                    condition.lock()
                    continue
                }
                wakeAt = min(wakeAt ?? due, due)
            }
            // NSCondition.wait(until: .distantFuture) traps on Linux: untimed when nothing is due.
            if let wakeAt { _ = condition.wait(until: wakeAt) } else { condition.wait() }
        }
        condition.unlock()
        finished.signal()
    }
}
