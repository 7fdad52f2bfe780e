import Foundation
import Synchronization
import SearchlightWire

/// Who hears about reindex requests: `admin.reindex` callers waiting for one (moved along when
/// it is absorbed by another), the latest `$/progress` of each, and the observers of every
/// outcome (recovery, initial fill and migration wait for their reindex-all this way).
/// Synchronous and thread-safe: sessions, the request tasks and status readers all use it.
final class RequestWaiters: Sendable {
    /// Someone waiting for a request's outcome (`admin.reindex` with `wait`).
    struct Waiter: Sendable {
        /// The connection waiting: its waiters go when it closes.
        let owner: ObjectIdentifier?
        /// With the id the progress is for: the request it waits for, or the one that absorbed it.
        let progress: @Sendable (_ requestID: Int64, _ completed: Int, _ total: Int?) -> Void
        let done: @Sendable (Result<JSONValue, SearchlightError>) -> Void
    }

    typealias Observer = @Sendable (ReindexRequest, RequestScheduler.Outcome) -> Void

    private struct State {
        var waiters: [Int64: [Waiter]] = [:]
        var progress: [Int64: (completed: Int, total: Int?, reported: Date)] = [:]
        var observers: [Observer] = []
    }

    private let state = Mutex(State())
    private let events: EventMonitor

    init(events: EventMonitor) { self.events = events }

    /// Registers `waiter` for request `id`, and moves the waiters of the requests `id` absorbed.
    func add(_ waiter: Waiter?, to id: Int64, absorbed: [Int64]) {
        state.withLock { s in
            for old in absorbed {
                if let moved = s.waiters.removeValue(forKey: old) { s.waiters[id, default: []] += moved }
            }
            if let waiter { s.waiters[id, default: []].append(waiter) }
        }
    }

    /// A connection closed: nobody is left to tell about its requests' outcomes.
    func remove(owner: ObjectIdentifier) {
        state.withLock { s in
            for (id, list) in s.waiters {
                let kept = list.filter { $0.owner != owner }
                s.waiters[id] = kept.isEmpty ? nil : kept
            }
        }
    }

    func progress(of id: Int64) -> (completed: Int, total: Int?)? {
        state.withLock { $0.progress[id].map { ($0.completed, $0.total) } }
    }

    /// `$/progress` from an extension: forwarded to waiters, and to monitors at most once a second.
    func report(requestID: Int64, completed: Int, total: Int?, now: Date) {
        let (targets, announce): ([Waiter], Bool) = state.withLock { s in
            let last = s.progress[requestID]?.reported ?? .distantPast
            let announce = now.timeIntervalSince(last) >= 1
            s.progress[requestID] = (completed, total, announce ? now : last)
            return (s.waiters[requestID] ?? [], announce)
        }
        for w in targets { w.progress(requestID, completed, total) }
        if announce {
            var e: [String: JSONValue] = ["requestId": .number(Double(requestID)), "completed": .number(Double(completed))]
            if let total { e["total"] = .number(Double(total)) }
            events.emit("request.progress", e)
        }
    }

    /// Tells whoever waits for `id` how it went (`final`: it left the journal, its progress goes).
    func finish(_ id: Int64, _ result: Result<JSONValue, SearchlightError>, final: Bool) {
        let targets: [Waiter] = state.withLock { s in
            if final { s.progress[id] = nil }
            return s.waiters.removeValue(forKey: id) ?? []
        }
        for w in targets { w.done(result) }
    }

    /// Tells `observer` of every request acknowledged or failed for good. Called on the
    /// request's task: it must not block.
    func observe(_ observer: @escaping Observer) {
        state.withLock { $0.observers.append(observer) }
    }

    func reportOutcome(_ request: ReindexRequest, _ outcome: RequestScheduler.Outcome) {
        for observer in state.withLock({ $0.observers }) { observer(request, outcome) }
    }
}
