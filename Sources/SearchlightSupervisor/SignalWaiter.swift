#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// Delivers SIGTERM, SIGINT and SIGHUP to a handler on a dedicated thread.
///
/// The signals are blocked in the calling thread before any other thread exists (threads inherit
/// the mask) and taken with `sigwait`, so no async-signal-safety rules constrain the handler.
/// (libdispatch signal sources do not fire on Linux once the signal is ignored, hence this.)
public enum SignalWaiter {
    public static let handled: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Call first thing in `main`, before any thread is started.
    public static func blockHandledSignals() {
        var set = signalSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    public static func start(_ handler: @escaping @Sendable (Int32) -> Void) {
        let thread = Thread {
            var set = signalSet()
            while true {
                var sig: Int32 = 0
                if sigwait(&set, &sig) == 0 { handler(sig) }
            }
        }
        thread.name = "signals"
        thread.start()
    }

    private static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for s in handled { sigaddset(&set, s) }
        return set
    }
}
