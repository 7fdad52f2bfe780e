#if canImport(Glibc)
import Glibc
#endif
import CSignalPipe
import Foundation
import Synchronization

/// SIGTERM, SIGINT, SIGHUP … delivered to ordinary code, whichever thread the kernel picks.
///
/// A handler installed with `sigaction` (in C: `CSignalPipe`) writes the signal's number to a
/// pipe and does nothing else, which is async-signal-safe; the thread `signals` reads the pipe
/// and calls `onSignal`'s handler there, where any code may run. This holds whatever threads
/// the process has: a thread a library started before `main` with the signals unblocked
/// (OpenBLAS's workers) runs the same handler. (Blocking the signals and taking them with
/// `sigwait` or `signalfd` works only when every thread blocks them, which a program cannot
/// guarantee for threads it did not start.)
///
/// A signal that arrives before a handler is set is kept and delivered when one is, so a
/// program installs first thing and sets its handler once it can act.
public enum SignalEvents {
    private struct State {
        var handler: (@Sendable (Int32) -> Void)?
        var kept: [Int32] = []
        var installed: Set<Int32> = []
        var writeFD: Int32 = -1
        var started = false
    }
    private static let state = Mutex(State())

    /// Installs the handler for `signals` (the pipe and its reading thread are made on first
    /// use). What each signal did before is kept for `restore`.
    public static func install(_ signals: [Int32]) throws(SystemError) {
        try state.withLock { s throws(SystemError) in
            if !s.started { try start(&s) }
            for signal in signals where !s.installed.contains(signal) {
                guard sl_signal_pipe_install(signal) == 0 else { throw SystemError("sigaction(\(signal))") }
                s.installed.insert(signal)
            }
        }
    }

    /// Puts back what `signals` did before `install`; a signal of them that arrived and was not
    /// delivered yet is dropped.
    public static func restore(_ signals: [Int32]) {
        state.withLock { s in
            for signal in signals where s.installed.contains(signal) {
                _ = sl_signal_pipe_restore(signal)
                s.installed.remove(signal)
            }
            s.kept.removeAll { signals.contains($0) }
        }
    }

    /// Sets (or, with nil, clears) the code signals are delivered to, on the thread `signals`,
    /// one at a time in the order they came; signals kept meanwhile are delivered at once.
    public static func onSignal(_ handler: (@Sendable (Int32) -> Void)?) {
        let kept: [Int32] = state.withLock { s in
            s.handler = handler
            guard handler != nil else { return [] }
            defer { s.kept.removeAll() }
            return s.kept
        }
        if let handler { for signal in kept { handler(signal) } }
    }

    /// Under the lock: the pipe (the write end non-blocking, both ends close-on-exec, so neither
    /// reaches an extension or an app this process starts) and the thread that reads it.
    private static func start(_ s: inout State) throws(SystemError) {
        var fds: [Int32] = [-1, -1]
        guard sl_signal_pipe_open(&fds) == 0 else { throw SystemError("pipe2") }
        sl_signal_pipe_set_fd(fds[1])
        s.writeFD = fds[1]
        s.started = true
        let readFD = fds[0]
        let thread = Thread {
            // This thread takes the signals even where the program blocked them in every thread
            // it made (searchlightd does, so that no blocking call of its own sees EINTR).
            var handled = sigset_t()
            sigemptyset(&handled)
            for signal in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&handled, signal) }
            pthread_sigmask(SIG_UNBLOCK, &handled, nil)
            var buffer = [UInt8](repeating: 0, count: 64)
            while true {
                let n = read(readFD, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return }
                for byte in buffer[0..<n] { deliver(Int32(byte)) }
            }
        }
        thread.name = "signals"
        thread.start()
    }

    private static func deliver(_ signal: Int32) {
        let handler: (@Sendable (Int32) -> Void)? = state.withLock { s in
            guard s.installed.contains(signal) else { return nil }
            if s.handler == nil { s.kept.append(signal) }
            return s.handler
        }
        handler?(signal)
    }

    /// The signals in an `AsyncStream`, for code that awaits them: installs the handler for
    /// `signals` and sets this stream as the handler until the stream ends, then restores them.
    public static func stream(_ signals: [Int32]) throws(SystemError) -> AsyncStream<Int32> {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        try install(signals)
        onSignal { continuation.yield($0) }
        continuation.onTermination = { _ in
            onSignal(nil)
            restore(signals)
        }
        return stream
    }
}
