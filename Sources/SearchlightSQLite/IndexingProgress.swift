import Foundation
import Synchronization

/// One element of `indexDidUpdate`: the store whose history was indexed, and the last history
/// token the index now covers (Apple's `indexDidUpdateNotification` with its user info).
public typealias IndexUpdate = (storeIdentifier: String, historyToken: Int64)

/// Where indexing stands, shared by the processor (which moves it) and the app's waiters:
/// the history token the index is known to cover, the last problem met (for a waiter that
/// gives up), and the `indexDidUpdate` subscribers.
final class IndexingProgress: Sendable {
    private struct State {
        var indexedThrough: Int64?
        var problem: String?
        var failure: (any Error)?
        var waiters: [UUID: (target: Int64, continuation: CheckedContinuation<Void, any Error>)] = [:]
        var subscribers: [UUID: AsyncThrowingStream<IndexUpdate, any Error>.Continuation] = [:]
    }

    private let state = Mutex(State())

    var indexedThrough: Int64? { state.withLock { $0.indexedThrough } }
    var problem: String? { state.withLock { $0.problem } }

    /// The index covers the history up to `token` (committed by us, or found in the index).
    /// `publish` sends it to `indexDidUpdate` (a range this process applied, or a rebuild).
    func covered(through token: Int64, storeIdentifier: String, publish: Bool) {
        let (ready, subscribers): ([CheckedContinuation<Void, any Error>], [AsyncThrowingStream<IndexUpdate, any Error>.Continuation]) =
            state.withLock { s in
                s.indexedThrough = token
                s.problem = nil
                let done = s.waiters.filter { $0.value.target <= token }
                for key in done.keys { s.waiters[key] = nil }
                return (done.values.map(\.continuation), publish ? Array(s.subscribers.values) : [])
            }
        for waiter in ready { waiter.resume() }
        for subscriber in subscribers { subscriber.yield((storeIdentifier: storeIdentifier, historyToken: token)) }
    }

    /// The index state is not known any more (mismatch, erase): waiters keep waiting.
    func forget() { state.withLock { $0.indexedThrough = nil } }

    func noteProblem(_ description: String) { state.withLock { $0.problem = description } }

    /// Indexing stopped: waiters fail with `error`; when it is a failure (not a stop), the
    /// `indexDidUpdate` streams end with it too.
    func end(_ error: any Error, isFailure: Bool) {
        let (waiters, subscribers) = state.withLock { s in
            defer {
                s.waiters.removeAll()
                if isFailure { s.subscribers.removeAll() }
            }
            if isFailure { s.failure = error }
            return (s.waiters.values.map(\.continuation), isFailure ? Array(s.subscribers.values) : [])
        }
        for waiter in waiters { waiter.resume(throwing: error) }
        for subscriber in subscribers { subscriber.finish(throwing: error) }
    }

    /// Indexing (re)started: forget an earlier failure, and what the index was known to cover
    /// (it may have been deleted or rebuilt since).
    func restart() {
        state.withLock {
            $0.failure = nil
            $0.indexedThrough = nil
        }
    }

    /// A new `indexDidUpdate` stream, from now on.
    func subscribe() -> AsyncThrowingStream<IndexUpdate, any Error> {
        let (stream, continuation) = AsyncThrowingStream<IndexUpdate, any Error>.makeStream()
        let id = UUID()
        let failure: (any Error)? = state.withLock { s in
            if s.failure == nil { s.subscribers[id] = continuation }
            return s.failure
        }
        if let failure {
            continuation.finish(throwing: failure)
        } else {
            continuation.onTermination = { [weak self] _ in self?.state.withLock { _ = $0.subscribers.removeValue(forKey: id) } }
        }
        return stream
    }

    /// Waits until the index covers `target`; throws when indexing ends first, or after
    /// `timeout` with the last problem met.
    func wait(until target: Int64, timeout: Duration?) async throws {
        let id = UUID()
        let timer = timeout.map { timeout in
            Task { [weak self] in
                try await Task.sleep(for: timeout)
                self?.fail(id, DelegateError.timedOut(target: target, problem: self?.problem))
            }
        }
        defer { timer?.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = Task.isCancelled
                let resumeNow: Bool = state.withLock { s in
                    if cancelled { return true }
                    if let through = s.indexedThrough, through >= target { return true }
                    s.waiters[id] = (target, continuation)
                    return false
                }
                if cancelled {
                    continuation.resume(throwing: CancellationError())
                } else if resumeNow {
                    continuation.resume()
                }
            }
        } onCancel: {
            fail(id, CancellationError())
        }
    }

    private func fail(_ id: UUID, _ error: any Error) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.continuation.resume(throwing: error)
    }
}

/// Errors of the delegate itself (the model's are `SpotlightModelError`, the daemon's
/// `SearchlightError`, the database's `SQLiteError`).
public enum DelegateError: Error, Sendable, CustomStringConvertible {
    /// `waitUntilIndexed` gave up; `problem` is what kept the history from being indexed.
    case timedOut(target: Int64, problem: String?)
    /// The call needs indexing to be running (`startSpotlightIndexing()`).
    case notIndexing
    /// No bundle identifier was given or found in the environment.
    case noBundleIdentifier

    public var description: String {
        switch self {
        case .timedOut(let target, let problem):
            "the history up to token \(target) was not indexed in time" + (problem.map { ": \($0)" } ?? " (no error met; the daemon may be slow)")
        case .notIndexing:
            "indexing is not running; call startSpotlightIndexing() first"
        case .noBundleIdentifier:
            "no bundle identifier: pass bundleIdentifier: (e.g. com.example.app) or set SEARCHLIGHT_BUNDLE_IDENTIFIER"
        }
    }
}
