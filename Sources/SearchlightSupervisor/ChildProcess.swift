#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// How a child process ended.
public enum Termination: Sendable, Equatable, CustomStringConvertible {
    /// It called exit with this status (0...255).
    case exited(Int32)
    /// A signal killed it.
    case signaled(Int32, coreDumped: Bool)

    /// Decodes a `waitpid` status of a process that has terminated.
    init(waitStatus status: Int32) {
        let signal = status & 0x7f
        self = signal == 0
            ? .exited((status >> 8) & 0xff)
            : .signaled(signal, coreDumped: status & 0x80 != 0)
    }

    /// "exit status 3", "killed by signal 9 (SIGKILL)", "killed by signal 11 (SIGSEGV), core dumped".
    public var description: String {
        switch self {
        case .exited(let status):
            return "exit status \(status)"
        case .signaled(let signal, let coreDumped):
            let name = Self.signalNames[signal].map { " (\($0))" } ?? ""
            return "killed by signal \(signal)\(name)" + (coreDumped ? ", core dumped" : "")
        }
    }

    private static let signalNames: [Int32: String] = [
        SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
        SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGUSR1: "SIGUSR1",
        SIGSEGV: "SIGSEGV", SIGUSR2: "SIGUSR2", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM",
        SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS",
    ]
}

/// A started child process: its pid, signals to its process group, and how it ended.
///
/// A thread of its own waits for this one pid (never `waitpid(-1)`, which would steal the
/// children of other parts of the process) and reaps it exactly once.
public final class ChildProcess: Sendable {
    /// The process id, which is also its process group id.
    public let pid: pid_t

    private enum State {
        case running(onExit: [@Sendable (Termination) -> Void])
        case reaped(Termination)
    }

    /// Reaping happens under this lock, and signals are sent under it only while `.running`, so a
    /// signal can never reach another process that was given the pid after this one was reaped.
    private let state = Mutex(State.running(onExit: []))

    init(startedWith pid: pid_t) {
        self.pid = pid
        let thread = Thread { [self] in reap() }
        thread.name = "reap \(pid)"
        thread.start()
    }

    /// How it ended, or nil while it runs.
    public var termination: Termination? {
        state.withLock { state in
            if case .reaped(let termination) = state { return termination }
            return nil
        }
    }

    /// Whether it has ended (and been reaped).
    public var hasExited: Bool { termination != nil }

    /// Sends `signal` to the child's process group, so that processes it started receive it too;
    /// to the child alone if it left that group. Does nothing once it has ended (returns false).
    @discardableResult
    public func signal(_ signal: Int32) -> Bool {
        state.withLock { state in
            guard case .running = state else { return false }
            return kill(-pid, signal) == 0 || kill(pid, signal) == 0
        }
    }

    /// Calls `handler` with the termination once the child has ended, on the thread that reaped
    /// it; at once, on this thread, if it already has.
    public func onExit(_ handler: @escaping @Sendable (Termination) -> Void) {
        let ended: Termination? = state.withLock { state in
            switch state {
            case .running(var handlers):
                handlers.append(handler)
                state = .running(onExit: handlers)
                return nil
            case .reaped(let termination):
                return termination
            }
        }
        if let ended { handler(ended) }
    }

    /// Waits until the child has ended. Not cancellable: to stop waiting, signal the child.
    public func waitForExit() async -> Termination {
        await withCheckedContinuation { continuation in
            onExit { continuation.resume(returning: $0) }
        }
    }

    private func reap() {
        // Wait without reaping (WNOWAIT), then reap under the lock: reaping outside it would
        // free the pid while `signal` could still send to it.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        let (termination, handlers) = state.withLock { state in
            var status: Int32 = 0
            var reaped: pid_t
            repeat { reaped = waitpid(pid, &status, 0) } while reaped < 0 && errno == EINTR
            // -1 only if something else reaped it (SIGCHLD ignored, or a waitpid(-1) elsewhere).
            let termination = reaped == pid ? Termination(waitStatus: status) : .exited(-1)
            var handlers: [@Sendable (Termination) -> Void] = []
            if case .running(let waiting) = state { handlers = waiting }
            state = .reaped(termination)
            return (termination, handlers)
        }
        for handler in handlers { handler(termination) }
    }
}
