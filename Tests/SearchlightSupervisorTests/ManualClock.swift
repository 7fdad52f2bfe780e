import Foundation
import Synchronization
@testable import SearchlightSupervisor

/// A clock that moves only when a test says so: every deadline of the host and the scheduler
/// (backoff, timeouts, retries) is met by `advance`, so minutes of crash loop take milliseconds.
final class ManualClock: DaemonClock {
    private struct Sleeper {
        let deadline: Date
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Date
        var sleepers: [UInt64: Sleeper] = [:]
        var cancelled: Set<UInt64> = []
        var nextID: UInt64 = 0
    }

    private let state: Mutex<State>
    /// Deadlines this close to now are due: a deadline computed as an advanced time plus a delay
    /// may differ from the test's target in the last bit.
    static let tolerance: TimeInterval = 1e-6

    init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        state = Mutex(State(now: start))
    }

    /// A jump of the clock right after the first reading of it in a task (`$jump.withValue`): a
    /// test that must move time between two steps of the daemon's code, whatever thread timing.
    final class Jump: Sendable {
        private let seconds: Mutex<TimeInterval?>
        init(by seconds: TimeInterval) { self.seconds = Mutex(seconds) }
        func take() -> TimeInterval? { seconds.withLock { s in defer { s = nil }; return s } }
    }

    @TaskLocal static var jump: Jump?

    var now: Date {
        let now = state.withLock { $0.now }
        if let seconds = Self.jump?.take() { advance(by: seconds) }
        return now
    }

    func sleep(until deadline: Date) async throws {
        let id = state.withLock { s in
            defer { s.nextID += 1 }
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLock { s in
                    if s.cancelled.remove(id) != nil || Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= s.now.addingTimeInterval(Self.tolerance) { return .success(()) }
                    s.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                if let resume { continuation.resume(with: resume) }
            }
        } onCancel: {
            let sleeper: Sleeper? = state.withLock { s in
                guard let sleeper = s.sleepers.removeValue(forKey: id) else {
                    s.cancelled.insert(id)
                    return nil
                }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward; whoever sleeps until then wakes.
    func advance(by seconds: TimeInterval) {
        let due: [Sleeper] = state.withLock { s in
            s.now = s.now.addingTimeInterval(seconds)
            let now = s.now.addingTimeInterval(Self.tolerance)
            let due = s.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { s.sleepers[id] = nil }
            return Array(due.values)
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// The earliest deadline anyone sleeps until.
    var nextDeadline: Date? { state.withLock { $0.sleepers.values.map(\.deadline).min() } }

    /// Deadlines slept until, earliest first.
    var deadlines: [Date] { state.withLock { $0.sleepers.values.map(\.deadline).sorted() } }
}
