#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// searchlightd's signals: SIGTERM and SIGINT stop the daemon gracefully, SIGHUP re-reads the
/// units. They arrive through `SignalEvents` (a handler that writes to a pipe, on whichever
/// thread the kernel picks, including threads a library started before `main`).
///
/// The signals are also blocked in the main thread before the daemon starts any thread (its
/// threads inherit the mask), and unblocked in `SignalEvents`' reader thread: not for
/// correctness (the handler works on any thread) but so that no blocking call of the daemon's
/// own sees EINTR; a thread a library made with them unblocked takes them through the handler.
public enum SignalControl {
    public static let handled: [Int32] = [SIGTERM, SIGINT, SIGHUP]

    /// Call first thing in `main`.
    public static func installFirstThing() {
        signal(SIGPIPE, SIG_IGN)
        do {
            try SignalEvents.install(handled)
        } catch {
            FileHandle.standardError.write(Data("searchlightd: cannot handle signals: \(error)\n".utf8))
            exit(1)
        }
        var set = sigset_t()
        sigemptyset(&set)
        for s in handled { sigaddset(&set, s) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Delivers the signals to `supervisor` from now on (those that came before, too). A second
    /// SIGTERM or SIGINT during a stop changes nothing: the stop escalates to a forced one after
    /// `--stop-timeout`, however many arrive.
    public static func deliver(to supervisor: Supervisor) {
        SignalEvents.onSignal { signal in
            switch signal {
            case SIGHUP: supervisor.reloadUnits(reason: "SIGHUP")
            default: supervisor.stop(reason: signal == SIGINT ? "SIGINT" : "SIGTERM")
            }
        }
    }
}
