import Foundation
import SearchlightWire

/// What a failed attempt does to its request (DESIGN §6): retried after a backoff, narrowed down
/// to a poison identifier after a crash or hang, given up after `--max-request-attempts`, or not
/// counted at all when the daemon itself interrupted it.
extension RequestScheduler {
    /// Journals a failed attempt: narrowed down (identifiers after a crash or hang), retried after
    /// the backoff, or given up after the configured number of attempts.
    nonisolated func recordFailure(_ request: ReindexRequest, _ failure: AttemptFailure, sentChunk: [String], remaining: [String], host: ExtensionHost) {
        let id = request.id
        let now = clock.now
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
                    waiters.finish(id, .failure(SearchlightError(.extensionFailed,
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
                waiters.finish(id, .failure(SearchlightError(.extensionFailed,
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
                waiters.reportOutcome(request, .failed("\(message); gave up after \(attempts) attempts"))
                waiters.finish(id, .failure(SearchlightError(.extensionFailed,
                    "\(message); gave up after \(attempts) attempts (see `searchlight requests`; ask again with `searchlight reindex`)")), final: true)
                return
            }
            // One clock per failure: after a crash or hang the request goes again when the
            // extension may be launched again (its crash backoff, which `units` shows); after a
            // negative acknowledgement the extension is fine and the request's own backoff runs.
            let launchAt = failure.isCrashOrHang ? host.nextLaunch : nil
            let retryAt = launchAt
                ?? now.addingTimeInterval(Backoff.delay(attempt: attempts, base: context.config.backoffBase, cap: ExtensionHost.Machine.maximumBackoff))
            let which = launchAt != nil ? "the extension's launch backoff" : "the request's retry backoff"
            // The chunk size of a narrowing in progress is kept: a failure of another kind on the
            // way must not send the whole set again.
            try journal.attemptFailed(id, error: message, retryAt: retryAt, chunk: request.chunk)
            log.warning("reindex request failed; will retry", ["id": id, "label": host.label, "attempt": attempts,
                "retry_at": ISO8601.format(retryAt), "delay_s": String(format: "%.3f", retryAt.timeIntervalSince(now)),
                "after": launchAt != nil ? "launch-backoff" : "retry-backoff", "error": message])
            events.emit("request.retry", ["requestId": .number(Double(id)), "label": .string(host.label), "attempts": .number(Double(attempts)),
                "retryAt": .string(ISO8601.format(retryAt)), "message": .string(message)])
            waiters.finish(id, .failure(SearchlightError(.extensionFailed,
                "\(message); the request stays journaled and is retried in \(DurationText.of(seconds: retryAt.timeIntervalSince(now))) "
                    + "(\(which), after \(attempts) failed attempt\(attempts == 1 ? "" : "s")): `searchlight requests`")), final: false)
        } catch {
            // The row may be left `running`, which nothing dispatches: the loop makes it pending
            // again once the journal can be written (`requeueAfterJournalFaults`).
            let fault = journalFaults.record(id, now: now, requeue: message)
            log.error("cannot update the request journal", ["id": id, "error": "\(error)", "failures": fault.failures,
                "retry_in_s": fault.retryAt.timeIntervalSince(now)])
        }
    }
}
