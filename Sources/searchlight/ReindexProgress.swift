import Foundation
import Synchronization

/// Shows the progress of a reindex that the CLI waits for, fed by the `$/progress` notifications
/// the daemon relays (on the connection's reader thread). On a terminal: a bar while the extension
/// reports a total, a counter while it does not. Otherwise: a plain line at most once a second,
/// and only when something changed.
final class ReindexProgress: Sendable {
    private struct State {
        var bar: ProgressReporter?
        var lastDraw: ContinuousClock.Instant
        var lastCompleted: Int?
        var drewCounter = false
        var finished = false
    }

    let label: String
    let interactive: Bool
    private let started = ContinuousClock.now
    private let state: Mutex<State>

    init(label: String, interactive: Bool = Console.stderrIsTerminal) {
        self.label = label
        self.interactive = interactive
        // Plain lines start after the first interval: quick work prints only its summary.
        state = Mutex(State(lastDraw: started))
    }

    func update(completed: Int, total: Int?) {
        state.withLock { s in
            guard !s.finished else { return }
            if interactive, let total, total > 0 {
                if s.bar?.total != total {
                    clearCounter(&s)
                    s.bar = ProgressReporter(total: total, label: label, interactive: true)
                }
                s.bar?.update(min(completed, total))
                return
            }
            let now = ContinuousClock.now
            let interval: Duration = interactive ? .milliseconds(100) : .seconds(1)
            guard now - s.lastDraw >= interval, completed != s.lastCompleted else { return }
            s.lastDraw = now
            s.lastCompleted = completed
            let counted = total.map { "\(completed)/\($0)" } ?? "\(completed)"
            let rate = Format.rate(completed, seconds(since: started))
            if interactive {
                s.bar?.finish()
                s.bar = nil
                Console.errorRaw("\r\(label) \(counted) items  \(rate) items/s\u{1B}[K")
                s.drewCounter = true
            } else {
                Console.errorLine("\(label): \(counted) items (\(rate) items/s)")
            }
        }
    }

    /// A line of its own (what the daemon did with the request), above any bar or counter.
    func note(_ text: String) {
        state.withLock { s in
            guard !s.finished else { return }
            clearCounter(&s)
            s.bar?.finish()
            s.bar = nil
            Console.errorLine(text)
        }
    }

    /// Ends the bar's line; later notifications draw nothing. Safe to call more than once.
    func finish() {
        state.withLock { s in
            s.finished = true
            s.bar?.finish()
            s.bar = nil
            clearCounter(&s)
        }
    }

    private func clearCounter(_ s: inout State) {
        if s.drewCounter { Console.errorRaw("\r\u{1B}[K") }
        s.drewCounter = false
    }

    private func seconds(since start: ContinuousClock.Instant) -> Double {
        (ContinuousClock.now - start).seconds
    }
}
