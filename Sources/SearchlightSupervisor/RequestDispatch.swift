import Foundation
import Synchronization
import SearchlightWire

/// What the watchdog of one call found, shared with the code that classifies the call's failure.
final class TimeoutNote: Sendable {
    let message = Mutex<String?>(nil)
}

/// How one attempt at a request ended.
enum AttemptFailure: Error {
    /// The extension answered with an error: a negative acknowledgement.
    case negative(SearchlightError)
    /// The extension died or closed its connection while the request was outstanding.
    /// `askedToExit`: the daemon had asked it to exit (a restart, an attached copy replacing it),
    /// so the request was interrupted, not failed.
    case lost(String, askedToExit: Bool = false)
    /// No acknowledgement, progress or donation for `AcknowledgementTimeout`, or the request ran
    /// past `MaximumRequestDuration`.
    case timedOut(String)
    /// The extension could not be started (or may not be yet).
    case unavailable(String, retryAt: Date?)

    var message: String {
        switch self {
        case .negative(let e): "negative acknowledgement: \(e.message)"
        case .lost(let m, _), .timedOut(let m): m
        case .unavailable(let m, _): m
        }
    }

    /// A crash or hang, as opposed to an answer: the identifier set is halved to find the culprit.
    var isCrashOrHang: Bool {
        switch self {
        case .lost, .timedOut: true
        default: false
        }
    }
}

extension RequestScheduler {
    /// Sends one journaled request (in chunks, for identifiers) and records its outcome.
    func perform(_ snapshot: ReindexRequest, on host: ExtensionHost) async {
        let id = snapshot.id
        let request: ReindexRequest
        do {
            // The row as it is now: identifiers may have been merged in since the snapshot, or
            // the request absorbed by a reindex-all.
            guard let claimed = try journal.claim(id) else { return }
            request = claimed
        } catch {
            log.error("cannot update the request journal", ["id": id, "error": "\(error)"])
            return
        }
        let started = Date()
        host.beginRequest(id, background: request.background)
        var usedLink: ExtensionHost.Link?
        defer {
            // A batch the handler left open must not swallow the next request's donations.
            if let n = usedLink?.session.discardBatches(), n > 0 {
                log.warning("extension left a batch open; discarded it", ["id": id, "label": host.label, "batches": n])
            }
            host.endRequest(id)
        }
        var remaining = request.identifiers
        var chunkSize = request.chunk ?? host.unit.indexExtension.maximumIdentifiersPerRequest
        if request.background, throttle.state != .normal {
            // Throttled: smaller steps, so the extension's work comes in shorter bursts.
            chunkSize = min(chunkSize, max(1, host.unit.indexExtension.maximumIdentifiersPerRequest / 4))
        }
        var sentChunk: [String] = []
        do {
            let link: ExtensionHost.Link
            do {
                link = try await host.link()
            } catch let e as ExtensionHost.NotAvailable {
                throw AttemptFailure.unavailable("\(host.label) cannot start yet: \(e.reason)", retryAt: e.retryAt)
            } catch {
                throw AttemptFailure.unavailable("\(error)", retryAt: nil)
            }
            usedLink = link
            events.emit("request.sent", ["requestId": .number(Double(id)), "label": .string(host.label), "pid": .number(Double(link.pid)),
                "kind": .string(request.kind.rawValue)])
            log.info("reindex request sent", ["id": id, "label": host.label, "kind": request.kind.rawValue, "reason": request.reason])
            var params: [String: JSONValue] = ["requestId": .string(String(id)), "reason": .string(request.reason), "index": .string(request.index)]
            switch request.kind {
            case .all:
                _ = try await send(Method.extensionReindexAll, .object(params), link: link, host: host, started: started)
            case .identifiers:
                while !remaining.isEmpty {
                    sentChunk = Array(remaining.prefix(chunkSize))
                    params["identifiers"] = .array(sentChunk.map(JSONValue.string))
                    _ = try await send(Method.extensionReindexIdentifiers, .object(params), link: link, host: host, started: started)
                    remaining.removeFirst(sentChunk.count)
                    sentChunk = []
                    try journal.setRemaining(id, identifiers: remaining)
                    if request.chunk != nil { try journal.noteNarrowingProgress(id) }
                }
            }
            try journal.acknowledged(id)
            // Observers first (an index being filled or refilled becomes complete), so that whoever
            // hears of the acknowledgement next sees what it changed.
            reportOutcome(request, .acknowledged)
            let elapsed = Date().timeIntervalSince(started)
            log.info("reindex request acknowledged", ["id": id, "label": host.label, "elapsed_s": String(format: "%.3f", elapsed)])
            events.emit("request.acknowledged", ["requestId": .number(Double(id)), "label": .string(host.label),
                "elapsed": .number(elapsed)])
            finish(id, .success(["requestId": .number(Double(id)), "state": "acknowledged", "label": .string(host.label),
                "bundle": .string(request.bundle), "elapsed": .number((elapsed * 1000).rounded() / 1000)]), final: true)
        } catch let failure as AttemptFailure {
            recordFailure(request, failure, sentChunk: sentChunk, remaining: remaining, host: host)
        } catch {
            recordFailure(request, .unavailable("request journal: \(error)", retryAt: nil), sentChunk: [], remaining: remaining, host: host)
        }
    }

    /// An interactive call (item data for a client): launches the extension if needed, never
    /// throttled, and answered under the unit's acknowledgement timeout.
    func call(_ host: ExtensionHost, _ method: String, _ params: JSONValue) async throws -> JSONValue {
        let link: ExtensionHost.Link
        do {
            link = try await host.link()
        } catch let e as ExtensionHost.NotAvailable {
            throw SearchlightError(.extensionFailed, "\(host.label) cannot start now (\(e.reason)); retry after \(ISO8601.format(e.retryAt))")
        }
        host.beginRequest(nil)
        defer { host.endRequest(nil) }
        do {
            return try await send(method, params, link: link, host: host, started: Date())
        } catch let failure as AttemptFailure {
            if case .negative(let error) = failure { throw error }
            throw SearchlightError(.extensionFailed, failure.message)
        }
    }

    /// Sends one request and waits for the answer under the unit's inactivity and duration limits.
    private func send(_ method: String, _ params: JSONValue, link: ExtensionHost.Link, host: ExtensionHost, started: Date) async throws -> JSONValue {
        let settings = host.unit.indexExtension
        host.noteActivity()
        // Set by the watchdog before it stops the extension: the call then fails as "connection
        // lost", but the cause is the timeout.
        let timedOut = TimeoutNote()
        do {
            return try await withThrowingTaskGroup(of: JSONValue?.self) { group in
                group.addTask { try await link.connection.call(method, params) }
                group.addTask {
                    // Sleeps until the inactivity deadline, re-reads it (activity pushes it back).
                    var lastWarning = Date.distantPast
                    while true {
                        let quietSince = max(host.lastActivityDate, lastWarning)
                        let inactive = quietSince.addingTimeInterval(settings.acknowledgementTimeout)
                        let overall = link.child == nil ? Date.distantFuture : started.addingTimeInterval(settings.maximumRequestDuration)
                        let deadline = min(inactive, overall)
                        if Date() >= deadline, link.child == nil {
                            // Attached by hand: most likely stopped at a breakpoint. Killing the
                            // author's process would end the debugging session, so the daemon says
                            // so in its log once per timeout period and goes on waiting; the
                            // request fails only if the extension detaches.
                            lastWarning = Date()
                            self.log.warning("attached extension passed its acknowledgement timeout; still waiting (an attached extension is never stopped)", [
                                "label": host.label, "pid": link.pid, "method": method,
                                "silent_s": Int(lastWarning.timeIntervalSince(host.lastActivityDate))])
                            continue
                        }
                        if Date() >= deadline {
                            let message = deadline == overall
                                ? "\(host.label) did not finish within MaximumRequestDuration (\(Int(settings.maximumRequestDuration)) s)"
                                : "\(host.label) sent no acknowledgement, progress or donation for \(Int(settings.acknowledgementTimeout)) s"
                            timedOut.message.withLock { $0 = message }
                            // Stop it here, not after the group: a call blocked writing to an
                            // extension that stopped reading only returns once it is gone.
                            host.terminate(hung: true)
                            throw AttemptFailure.timedOut(message)
                        }
                        try await Task.sleep(for: .seconds(max(0.05, deadline.timeIntervalSinceNow)))
                    }
                }
                defer { group.cancelAll() }
                guard let first = try await group.next(), let answer = first else {
                    throw AttemptFailure.timedOut("\(host.label) timed out")
                }
                host.noteActivity()
                return answer
            }
        } catch {
            let failure: AttemptFailure
            if let message = timedOut.message.withLock({ $0 }) {
                failure = .timedOut(message)
                log.warning("extension timed out; stopping it", ["label": host.label, "pid": link.pid, "reason": message])
            } else if let f = error as? AttemptFailure {
                failure = f
            } else if let e = error as? SearchlightError, !link.connection.isClosed {
                failure = .negative(e)
            } else if error is SearchlightError {
                failure = await lost(link: link, host: host)
            } else {
                failure = .lost("\(host.label): \(error)")
            }
            // A crash or hang ends in an exit whose handling decides the launch backoff, which is
            // the request's retry time too (one clock): wait for it (bounded by ExitTimeOut).
            if case .timedOut = failure, link.child != nil {
                _ = await host.exitReport(of: link.pid, timeout: host.unit.exitTimeOut + 2)
            }
            throw failure
        }
    }

    /// Why the connection to the extension went away before its answer, in an author's words:
    /// the signal or exit status and what it means, its last stderr lines, where to look.
    private func lost(link: ExtensionHost.Link, host: ExtensionHost) async -> AttemptFailure {
        guard link.child != nil else {
            return .lost("\(host.label), attached by hand (pid \(link.pid)), detached before acknowledging")
        }
        if let exit = await host.exitReport(of: link.pid, timeout: host.unit.exitTimeOut + 2) {
            return .lost(exit.explanation(label: host.label), askedToExit: exit.expected)
        }
        return .lost("\(host.label) (pid \(link.pid)) closed its connection before acknowledging and did not exit within ExitTimeOut; "
            + "see `searchlight units` and the daemon's log")
    }

    /// Journals a failed attempt: narrowed down (identifiers after a crash or hang), retried after
    /// the backoff, or given up after the configured number of attempts.
    private func recordFailure(_ request: ReindexRequest, _ failure: AttemptFailure, sentChunk: [String], remaining: [String], host: ExtensionHost) {
        let id = request.id
        let now = Date()
        let message = failure.message
        do {
            // The daemon stopping, or having asked the extension to exit (`units restart`), interrupts:
            // no fault of the request's, so no attempt is counted.
            var stoppedByUs = isStopping
            if case .negative(let e) = failure, e.code == .cancelled { stoppedByUs = true }
            if case .lost(_, askedToExit: true) = failure { stoppedByUs = true }
            if stoppedByUs {
                // The daemon is stopping (or asked the extension to): no fault of the request's.
                if request.kind == .identifiers { try journal.setRemaining(id, identifiers: remaining) }
                try journal.attemptFailed(id, error: message, retryAt: now, chunk: request.chunk, countAttempt: false)
                log.info("reindex request interrupted; it stays journaled", ["id": id, "label": host.label])
                return
            }
            // Narrowing to a culprit needs evidence that the extension works for the others: a
            // request that fails whole is retried and, in the end, reported failed instead.
            let narrowingAcked = journal.request(id)?.narrowingAcknowledged ?? false
            if request.kind == .identifiers, failure.isCrashOrHang, !sentChunk.isEmpty, sentChunk.count > 1 || narrowingAcked {
                if sentChunk.count == 1 {
                    // Isolated: this identifier alone crashes or hangs the extension.
                    let rest = Array(remaining.dropFirst())
                    try journal.poison(id, bundle: request.bundle, index: request.index, identifier: sentChunk[0], remaining: rest, error: message)
                    log.error("identifier isolated as poison", ["id": id, "label": host.label, "identifier": sentChunk[0], "error": message])
                    events.emit("request.poisoned", ["requestId": .number(Double(id)), "label": .string(host.label),
                        "identifier": .string(sentChunk[0]), "message": .string(message)])
                    if rest.isEmpty { try journal.acknowledged(id) }
                    finish(id, .failure(SearchlightError(.extensionFailed,
                        "\(host.label) fails on identifier \(sentChunk[0]) (\(message)); it is reported in `searchlight requests` and no longer sent")), final: rest.isEmpty)
                    return
                }
                // Halve the chunk that was outstanding and try again: not counted as an attempt,
                // since each halving brings the culprit closer.
                let half = max(1, sentChunk.count / 2)
                try journal.attemptFailed(id, error: message, retryAt: now, chunk: half, countAttempt: false)
                try journal.setRemaining(id, identifiers: remaining)
                log.warning("reindex request failed; narrowing it down", ["id": id, "label": host.label, "chunk": half, "error": message])
                events.emit("request.retry", ["requestId": .number(Double(id)), "label": .string(host.label), "chunk": .number(Double(half)),
                    "message": .string(message)])
                finish(id, .failure(SearchlightError(.extensionFailed,
                    "\(message); the request stays journaled and is retried with \(half) identifier(s) at a time")), final: false)
                return
            }
            if request.kind == .identifiers {
                var rest = remaining
                if failure.isCrashOrHang, sentChunk.count == 1, rest.first == sentChunk[0], rest.count > 1 {
                    // A lone identifier failed with no evidence yet that others work: try it last,
                    // so that the others can show whether it is the culprit.
                    rest.append(rest.removeFirst())
                }
                try journal.setRemaining(id, identifiers: rest)
            }
            if case .unavailable(_, let at?) = failure {
                // The extension was stopping or backing off: the dispatcher saw it available just
                // before. Nothing was sent, so this is no attempt, and whoever waits keeps waiting.
                try journal.attemptFailed(id, error: message, retryAt: at, chunk: request.chunk, countAttempt: false)
                log.info("reindex request deferred", ["id": id, "label": host.label, "retry_at": ISO8601.format(at), "reason": message])
                return
            }
            let attempts = request.attempts + 1
            if attempts >= context.config.maxRequestAttempts {
                try journal.attemptFailed(id, error: message, retryAt: nil)
                log.error("reindex request failed for good", ["id": id, "label": host.label, "attempts": attempts, "error": message])
                events.emit("request.failed", ["requestId": .number(Double(id)), "label": .string(host.label),
                    "attempts": .number(Double(attempts)), "message": .string(message)])
                reportOutcome(request, .failed("\(message); gave up after \(attempts) attempts"))
                finish(id, .failure(SearchlightError(.extensionFailed,
                    "\(message); gave up after \(attempts) attempts (see `searchlight requests`; ask again with `searchlight reindex`)")), final: true)
                return
            }
            // One clock per failure: after a crash or hang the request goes again when the
            // extension may be launched again (its crash backoff, which `units` shows); after a
            // negative acknowledgement the extension is fine and the request's own backoff runs.
            let launchAt = failure.isCrashOrHang ? host.nextLaunch : nil
            let retryAt = launchAt
                ?? now.addingTimeInterval(Backoff.delay(attempt: attempts, base: context.config.backoffBase, cap: ExtensionHost.maximumBackoff))
            let clock = launchAt != nil ? "the extension's launch backoff" : "the request's retry backoff"
            // The chunk size of a narrowing in progress is kept: a failure of another kind on the
            // way must not send the whole set again.
            try journal.attemptFailed(id, error: message, retryAt: retryAt, chunk: request.chunk)
            log.warning("reindex request failed; will retry", ["id": id, "label": host.label, "attempt": attempts,
                "retry_at": ISO8601.format(retryAt), "delay_s": String(format: "%.3f", retryAt.timeIntervalSince(now)),
                "after": launchAt != nil ? "launch-backoff" : "retry-backoff", "error": message])
            events.emit("request.retry", ["requestId": .number(Double(id)), "label": .string(host.label), "attempts": .number(Double(attempts)),
                "retryAt": .string(ISO8601.format(retryAt)), "message": .string(message)])
            finish(id, .failure(SearchlightError(.extensionFailed,
                "\(message); the request stays journaled and is retried in \(DurationText.of(seconds: retryAt.timeIntervalSince(now))) "
                    + "(\(clock), after \(attempts) failed attempt\(attempts == 1 ? "" : "s")): `searchlight requests`")), final: false)
        } catch {
            log.error("cannot update the request journal", ["id": id, "error": "\(error)"])
        }
    }
}
