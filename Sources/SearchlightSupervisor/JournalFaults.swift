import Foundation
import Synchronization

/// Requests whose journal write failed (a full or failing disk), each waiting on the clock before
/// the journal is tried again for it. Without this, a failed `claim` left the request pending and
/// its slot idle, which woke the loop at once to dispatch it again: a hot loop and a log flood;
/// and a failed write of an outcome left the row `running`, which nothing dispatches, for ever.
final class JournalFaults: Sendable {
    struct Fault: Sendable, Equatable {
        var retryAt: Date
        var failures: Int
        /// Set when the row was left `running` (its outcome could not be written): the scheduler
        /// makes it pending again (`RequestJournal.requeue`) at `retryAt`, with this as its error.
        var requeue: String?
    }

    static let firstDelay: TimeInterval = 1
    static let maximumDelay: TimeInterval = 60

    private let faults = Mutex<[Int64: Fault]>([:])

    /// Notes one more failure of the journal for request `id`; returns when to try again.
    @discardableResult
    func record(_ id: Int64, now: Date, requeue: String? = nil) -> Fault {
        faults.withLock { faults in
            var fault = faults[id] ?? Fault(retryAt: now, failures: 0, requeue: nil)
            fault.failures += 1
            fault.retryAt = now.addingTimeInterval(Self.delay(failures: fault.failures))
            if let requeue { fault.requeue = requeue }
            faults[id] = fault
            return fault
        }
    }

    static func delay(failures: Int) -> TimeInterval {
        min(maximumDelay, firstDelay * pow(2, Double(max(0, failures - 1))))
    }

    func clear(_ id: Int64) { _ = faults.withLock { $0.removeValue(forKey: id) } }

    /// When the journal may be tried again for `id` (nil: now, no fault).
    func retryAt(_ id: Int64) -> Date? { faults.withLock { $0[id]?.retryAt } }

    /// Rows left `running` whose requeue is due now, and the earliest one that is not yet.
    func requeues(due now: Date) -> (due: [(id: Int64, error: String)], next: Date?) {
        faults.withLock { faults in
            var due: [(Int64, String)] = []
            var next: Date?
            for (id, fault) in faults {
                guard let error = fault.requeue else { continue }
                if fault.retryAt <= now { due.append((id, error)) } else { next = min(next ?? fault.retryAt, fault.retryAt) }
            }
            return (due.sorted { $0.0 < $1.0 }, next)
        }
    }
}
