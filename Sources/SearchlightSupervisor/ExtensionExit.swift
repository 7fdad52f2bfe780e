#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization

/// How one launch of an extension ended, in the words an author needs: the signal or exit status
/// and what it usually means, whether the daemon asked for it, its last lines on stderr, and when
/// it may be launched again. What a failed request, `searchlight units` and `status` say.
struct ExtensionExit: Sendable, Equatable {
    var pid: Int32
    var termination: Termination
    /// The daemon asked it to exit (idle, shutdown, a restart, replaced by an attached copy).
    var expected: Bool
    /// The daemon stopped it because it hung (no acknowledgement or progress in time).
    var stoppedAsHung: Bool
    /// Its last lines on stderr (when they go to the daemon's log), oldest first.
    var lastStderr: [String]
    /// Where its stderr went instead, if the unit names a file.
    var stderrPath: String?
    /// The crash backoff after this exit: no launch before then.
    var nextLaunch: Date?
    var crashStreak: Int
    var at: Date

    /// A crash: it ended without being asked to, or (asked) with a failure status.
    var crashed: Bool { !expected }

    /// "killed by signal 11 (SIGSEGV): a memory access fault", "exit status 3".
    var summary: String {
        var text = termination.description
        if let meaning = meaning { text += ": " + meaning }
        return text
    }

    /// What a signal or status usually means for an extension, when it says something.
    var meaning: String? {
        if stoppedAsHung { return "stopped by searchlightd because it hung (no acknowledgement, progress or donation in time)" }
        switch termination {
        case .signaled(let signal, _):
            switch signal {
            case SIGSEGV: return "a memory access fault"
            case SIGBUS: return "a bus error (a memory-mapped file truncated under it?)"
            case SIGILL, SIGTRAP:
                return "a Swift runtime trap: fatalError, a force-unwrapped nil, an index out of range or an arithmetic overflow"
            case SIGABRT: return "abort(): a failed assertion or a C library check"
            case SIGFPE: return "an arithmetic fault (an integer division by zero)"
            case SIGKILL where !expected:
                return "killed from outside searchlightd: the kernel's OOM killer, a hard resource limit (CPU), or someone's kill -9"
            case SIGXCPU: return "its CPU time limit (the unit's SoftResourceLimits CPU)"
            case SIGXFSZ: return "its file size limit (the unit's SoftResourceLimits FileSize)"
            case SIGTERM where !expected: return "terminated from outside searchlightd"
            case SIGPIPE: return "it wrote to a closed pipe or socket"
            default: return nil
            }
        case .exited(127): return "the program could not be run (a missing interpreter or library?)"
        case .exited: return nil
        }
    }

    /// The whole story, for a request's failure and the log: what happened, its last stderr lines,
    /// and where to look next.
    func explanation(label: String) -> String {
        var text = "\(label) (pid \(pid)) exited before acknowledging: \(summary)"
        if !lastStderr.isEmpty {
            text += "; its last lines on stderr: " + lastStderr.map { "«\($0)»" }.joined(separator: " ")
        } else if let stderrPath {
            text += "; its stderr is in \(stderrPath)"
        }
        text += "; see `searchlight units` and the daemon's log"
        return text
    }
}

/// The last lines of an extension's stderr, kept for its exit report (a few, each cut short).
///
/// A Swift program that traps prints its own crash report (the runtime's backtracer: a
/// `*** Program crashed: … ***` line, the crashed thread's frames, then registers and loaded
/// images). Its last lines are registers, which say nothing to an author, so once a crash report
/// starts only its headline and the first frames of the crashed thread are kept, after the lines
/// that came before it (where `Fatal error: …` is).
final class StderrTail: Sendable {
    static let lines = 8
    static let frames = 4
    static let lineLength = 300
    private enum Phase { case output, crashReport, frames(left: Int), done }
    private struct State {
        var kept: [String] = []
        var crashReport: [String] = []
        var phase = Phase.output
    }
    private let state = Mutex(State())

    func append(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return }
        let cut = String(trimmed.prefix(Self.lineLength))
        state.withLock { s in
            switch s.phase {
            case .output:
                if trimmed.hasPrefix("*** Signal ") && trimmed.contains("Backtracing") { s.phase = .crashReport; return }
                if trimmed.hasPrefix("*** Program crashed:") {
                    s.phase = .crashReport
                    s.crashReport.append(cut)
                    return
                }
                s.kept.append(cut)
                if s.kept.count > Self.lines { s.kept.removeFirst(s.kept.count - Self.lines) }
            case .crashReport:
                if trimmed.hasPrefix("*** Program crashed:") {
                    s.crashReport.append(cut)
                } else if trimmed.hasPrefix("Thread "), trimmed.hasSuffix("crashed:") {
                    s.phase = .frames(left: Self.frames)
                }
            case .frames(let left):
                s.crashReport.append(cut)
                s.phase = left > 1 ? .frames(left: left - 1) : .done
            case .done:
                break
            }
        }
    }

    var snapshot: [String] { state.withLock { $0.kept + $0.crashReport } }
}

/// Which file a path names now, and as of when: a program rebuilt in place (same inode, new
/// modification time) or replaced (new inode) differs.
struct ProgramIdentity: Sendable, Equatable {
    var device: UInt64
    var inode: UInt64
    var modified: Date
    var size: Int64

    init?(path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        modified = Date(timeIntervalSince1970: Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9)
        size = Int64(st.st_size)
    }
}
