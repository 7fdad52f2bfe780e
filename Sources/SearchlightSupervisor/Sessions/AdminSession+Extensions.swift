import Foundation
import Synchronization
import SearchlightWire

/// The admin methods that wait on an extension: a reindex request waited for, and a restart.
extension AdminSession {
    /// `admin.restartExtension {label}` → `{label, previousPid?, pid}` once the new copy has
    /// completed its handshake.
    func restartExtension(_ r: AdminRestartExtension) async throws -> JSONValue {
        guard let host = context.scheduler?.host(label: r.label) else {
            throw SearchlightError(.unknownExtension, "no enabled extension unit has the label \(r.label); see `searchlight units`")
        }
        let (previous, pid) = try await host.restart()
        context.log.notice("extension restarted", ["label": host.label, "previous_pid": previous.map { "\($0)" } ?? "-", "pid": pid,
            "by_uid": peer.uid])
        var answer: [String: JSONValue] = ["label": .string(host.label), "pid": .number(Double(pid))]
        if let previous { answer["previousPid"] = .number(Double(previous)) }
        return .object(answer)
    }

    /// `admin.reindex`: journals the request (durably, before anything is sent) and answers at
    /// once, or with `wait`, with its outcome (relaying the extension's progress meanwhile).
    func reindex(_ r: AdminReindex) async throws -> JSONValue {
        guard let scheduler = context.scheduler else { throw SearchlightError(.indexUnavailable, "the daemon is starting; retry") }
        let target = r.target
        guard let unit = context.catalog.unit(label: target).flatMap({ $0.disabled ? nil : $0 }) ?? context.catalog.unit(forBundle: target) else {
            throw SearchlightError(.unknownExtension, "no enabled extension unit has the label or bundle \(target.prefix(255)); see `searchlight units`")
        }
        if context.state.bundle(unit.bundleIdentifier)?.indexingEnabled == false {
            throw SearchlightError(.indexingUnsupported,
                "indexing is off for \(unit.bundleIdentifier), so \(unit.label) could not donate; turn it on with `searchlight indexing on \(unit.bundleIdentifier)`")
        }
        guard unit.indexExtension.indexNames.contains(r.index) else {
            throw SearchlightError.invalidParams("\(unit.label) serves the indexes \(unit.indexExtension.indexNames.map { "\"\($0)\"" }.joined(separator: ", ")), not \"\(r.index)\"")
        }
        let kind: ReindexRequest.Kind
        let ids: [String]
        switch r.selection {
        case .all: (kind, ids) = (.all, [])
        case .identifiers(let list): (kind, ids) = (.identifiers, list)
        }
        guard r.wait else {
            let queued = try scheduler.enqueue(bundle: unit.bundleIdentifier, index: r.index, kind: kind,
                identifiers: ids, reason: r.reason, background: r.background)
            var answer: [String: JSONValue] = ["requestId": .number(Double(queued.id)), "state": "pending",
                "label": .string(unit.label), "bundle": .string(unit.bundleIdentifier)]
            if queued.coalesced { answer["coalescedInto"] = .number(Double(queued.id)) }
            if let note = queued.note { answer["message"] = .string(note) }
            return .object(answer)
        }
        let connection = client.connection
        let timeout = r.timeout.map { Duration.milliseconds(Int64(($0 * 1000).rounded(.up))) }
        let once = Mutex(false)
        let claim: @Sendable () -> Bool = { once.withLock { done in defer { done = true }; return !done } }
        return try await withCheckedThrowingContinuation { continuation in
            // The waiter is registered in the same step as the request, before the scheduler is
            // woken: a quick acknowledgement cannot slip past it. Its progress carries the id it
            // is for (the extension may report before `enqueue` returns here).
            let waiter = RequestScheduler.Waiter(
                owner: ObjectIdentifier(connection),
                progress: { id, completed, total in
                    try? connection.notify(Method.progress, RequestProgress(requestId: String(id), completed: completed, total: total).numericRequestID)
                },
                done: { result in if claim() { continuation.resume(with: result.mapError { $0 as any Error }) } })
            let queued: RequestJournal.Enqueued
            do {
                queued = try scheduler.enqueue(bundle: unit.bundleIdentifier, index: r.index, kind: kind,
                    identifiers: ids, reason: r.reason, background: r.background, waiter: waiter)
            } catch {
                if claim() { continuation.resume(throwing: error) }
                return
            }
            // What it joined and what changed, before any progress (a `message` in `$/progress`,
            // as LSP's work-done progress carries one).
            if let note = queued.note {
                try? connection.notify(Method.progress, RequestProgress(requestId: String(queued.id), message: note).numericRequestID)
            }
            if let timeout {
                Task(executorPreference: ControlThread.executor) {
                    try? await Task.sleep(for: timeout)
                    if claim() {
                        continuation.resume(throwing: SearchlightError(.requestTimedOut,
                            "no acknowledgement within \(timeout.formatted()) ; request \(queued.id) stays journaled (`searchlight requests`)"))
                    }
                }
            }
        }
    }
}

extension RequestProgress {
    /// The params as the daemon sends them to an admin client: the request id as a number, like
    /// the `requestId` of `admin.reindex`'s answer (an extension's progress carries it as the
    /// string it was given).
    var numericRequestID: JSONValue {
        guard case .object(var o) = params, let n = Int64(requestId) else { return params }
        o["requestId"] = .number(Double(n))
        return .object(o)
    }
}
