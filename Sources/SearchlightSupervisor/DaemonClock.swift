import Foundation
import Synchronization

/// The daemon's time: what time it is, and waiting until a time. Every deadline of the extension
/// host and the request scheduler (backoff, `ThrottleInterval`, acknowledgement and exit timeouts,
/// idle exit, retries) is read and waited for through one, so that tests drive them with a clock
/// they advance by hand (`ManualClock` in the tests) and a crash loop of minutes runs in
/// milliseconds. Dates, not instants: the journal stores retry times, and `status` shows them.
protocol DaemonClock: Sendable {
    var now: Date { get }
    /// Returns at `deadline`, at once if it has passed; throws `CancellationError` when the task
    /// is cancelled first.
    func sleep(until deadline: Date) async throws
}

/// Wall time, waited for with `Task.sleep` (the continuous clock).
struct SystemClock: DaemonClock {
    var now: Date { Date() }

    func sleep(until deadline: Date) async throws {
        let seconds = deadline.timeIntervalSinceNow
        guard seconds > 0 else { return try Task.checkCancellation() }
        // `Duration.seconds` traps on infinity; nothing waits longer than a year.
        try await Task.sleep(for: .seconds(min(seconds, 365 * 86400)))
    }
}

/// A wake-up call for a loop that sleeps until its next deadline (the scheduler's): `signal()`
/// from any thread, never blocking, and signals that come while the loop is busy are kept (as
/// one), so an event is never missed between two waits.
final class Wakeup: Sendable {
    private struct State {
        var signalled = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    func signal() {
        let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
            guard let waiter = state.waiter else {
                state.signalled = true
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns at `deadline`, at the first signal since the last wait, or when the task is cancelled.
    func wait(until deadline: Date, clock: any DaemonClock) async {
        if state.withLock({ state in defer { state.signalled = false }; return state.signalled }) { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await clock.sleep(until: deadline) }
            group.addTask { await self.signalled() }
            await group.next()
            group.cancelAll()
        }
    }

    /// One waiter at a time: the loop that owns this wake-up.
    private func signalled() async {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state in
                    if state.signalled || Task.isCancelled {
                        state.signalled = false
                        return true
                    }
                    state.waiter = (id, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter: CheckedContinuation<Void, Never>? = state.withLock { state in
                guard let waiter = state.waiter, waiter.id == id else { return nil }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume()
        }
    }
}

/// A value that comes once (how a launch ended, a maintenance run's end), awaited by any number
/// of tasks, each for at most a while.
final class Promise<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [UInt64: CheckedContinuation<Value?, Never>] = [:]
        var nextID: UInt64 = 0
    }

    private let state = Mutex(State())

    init() {}

    /// Sets the value (the first one given wins) and resumes every waiter.
    func fulfil(_ value: Value) {
        let waiters: [CheckedContinuation<Value?, Never>] = state.withLock { state in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    var current: Value? { state.withLock { $0.value } }

    /// The value, waiting for it at most `seconds` on `clock` (nil then, or when cancelled).
    func value(within seconds: TimeInterval, clock: any DaemonClock) async -> Value? {
        if let value = current { return value }
        return await value(until: clock.now.addingTimeInterval(seconds), clock: clock)
    }

    /// The value, waiting for it until `deadline` on `clock` (nil then, or when cancelled). For a
    /// deadline fixed before the step it bounds (read after it, it moves with any time that passed).
    func value(until deadline: Date, clock: any DaemonClock) async -> Value? {
        if let value = current { return value }
        return await withTaskGroup(of: Value?.self) { group in
            group.addTask { await self.value() }
            group.addTask {
                try? await clock.sleep(until: deadline)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? current
        }
    }

    /// The value; nil if the task is cancelled before it comes.
    func value() async -> Value? {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                let ready: Value?? = state.withLock { state in
                    if let value = state.value { return .some(value) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiters[id] = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume(returning: nil)
        }
    }
}
