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

/// A request's own work, in its task (off the scheduler's actor): the journal, the link to the
/// extension, the call under its watchdog, the outcome.
extension RequestScheduler {
    /// Sends one journaled request (in chunks, for identifiers) and records its outcome.
    nonisolated func perform(_ snapshot: ReindexRequest, on host: ExtensionHost) async {
        let id = snapshot.id
        let request: ReindexRequest
        do {
            // The row as it is now: identifiers may have been merged in since the snapshot, or
            // the request absorbed by a reindex-all.
            guard let claimed = try journal.claim(id) else { return }
            request = claimed
            journalFaults.clear(id)
        } catch {
            // Still pending: the loop sees it again, due when this delay has passed on the clock.
            let fault = journalFaults.record(id, now: clock.now)
            log.error("cannot update the request journal", ["id": id, "error": "\(error)", "failures": fault.failures,
                "retry_in_s": fault.retryAt.timeIntervalSince(clock.now)])
            return
        }
        let started = clock.now
        let ticket = ExtensionHost.Ticket(request: id, background: request.background)
        var usedLink: ExtensionHost.Link?
        defer {
            if let link = usedLink {
                // A batch the handler left open must not swallow the next request's donations.
                let n = link.session.discardBatches()
                if n > 0 { log.warning("extension left a batch open; discarded it", ["id": id, "label": host.label, "batches": n]) }
                host.endRequest(on: link, ticket)
            }
        }
        let unit = host.unit
        var remaining = request.identifiers
        var chunkSize = request.chunk ?? unit.indexExtension.maximumIdentifiersPerRequest
        if request.background, throttle.state != .normal {
            // Throttled: smaller steps, so the extension's work comes in shorter bursts.
            chunkSize = min(chunkSize, max(1, unit.indexExtension.maximumIdentifiersPerRequest / 4))
        }
        var sentChunk: [String] = []
        do {
            let link: ExtensionHost.Link
            do {
                link = try await host.link(for: ticket)
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
            waiters.reportOutcome(request, .acknowledged)
            let elapsed = clock.now.timeIntervalSince(started)
            log.info("reindex request acknowledged", ["id": id, "label": host.label, "elapsed_s": String(format: "%.3f", elapsed)])
            events.emit("request.acknowledged", ["requestId": .number(Double(id)), "label": .string(host.label),
                "elapsed": .number(elapsed)])
            waiters.finish(id, .success(["requestId": .number(Double(id)), "state": "acknowledged", "label": .string(host.label),
                "bundle": .string(request.bundle), "elapsed": .number((elapsed * 1000).rounded() / 1000)]), final: true)
        } catch let failure as AttemptFailure {
            recordFailure(request, failure, sentChunk: sentChunk, remaining: remaining, host: host)
        } catch {
            recordFailure(request, .unavailable("request journal: \(error)", retryAt: nil), sentChunk: [], remaining: remaining, host: host)
        }
    }

    /// An interactive call (item data for a client): launches the extension if needed, never
    /// throttled, and answered under the unit's acknowledgement timeout.
    nonisolated func call(_ host: ExtensionHost, _ method: String, _ params: JSONValue) async throws -> JSONValue {
        let ticket = ExtensionHost.Ticket(request: nil)
        let link: ExtensionHost.Link
        do {
            link = try await host.link(for: ticket)
        } catch let e as ExtensionHost.NotAvailable {
            throw SearchlightError(.extensionFailed, "\(host.label) cannot start now (\(e.reason)); retry after \(ISO8601.format(e.retryAt))")
        }
        defer { host.endRequest(on: link, ticket) }
        do {
            return try await send(method, params, link: link, host: host, started: clock.now)
        } catch let failure as AttemptFailure {
            if case .negative(let error) = failure { throw error }
            throw SearchlightError(.extensionFailed, failure.message)
        }
    }

    /// Sends one request and waits for the answer under the unit's inactivity and duration limits.
    private nonisolated func send(_ method: String, _ params: JSONValue, link: ExtensionHost.Link, host: ExtensionHost,
                                  started: Date) async throws -> JSONValue {
        host.noteActivity()
        // Set by the watchdog before it stops the extension: the call then fails as "connection
        // lost", but the cause is the timeout.
        let timedOut = TimeoutNote()
        do {
            return try await withThrowingTaskGroup(of: JSONValue?.self) { group in
                group.addTask { try await link.connection.call(method, params) }
                group.addTask {
                    try await self.watch(method, link: link, host: host, started: started, timedOut: timedOut)
                    return nil
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
            if case .timedOut = failure, let launch = link.launch {
                _ = await launch.exit.value(within: host.unit.exitTimeOut + 2, clock: clock)
            }
            throw failure
        }
    }

    /// The watchdog of one call: sleeps until the inactivity deadline (pushed back by every
    /// donation and `$/progress`) or `MaximumRequestDuration`, re-reading it each time; throws
    /// `timedOut` after stopping the extension as hung.
    private nonisolated func watch(_ method: String, link: ExtensionHost.Link, host: ExtensionHost, started: Date,
                                   timedOut: TimeoutNote) async throws {
        let settings = host.unit.indexExtension
        var lastWarning = Date.distantPast
        var heard = started
        while true {
            heard = host.lastActivity(on: link) ?? heard
            let quietSince = max(heard, lastWarning)
            let inactive = quietSince.addingTimeInterval(settings.acknowledgementTimeout)
            let overall = link.launch == nil ? Date.distantFuture : started.addingTimeInterval(settings.maximumRequestDuration)
            let deadline = min(inactive, overall)
            let now = clock.now
            if now >= deadline, link.launch == nil {
                // Attached by hand: most likely stopped at a breakpoint. Killing the author's
                // process would end the debugging session, so the daemon says so in its log once
                // per timeout period and goes on waiting; the request fails only if the
                // extension detaches.
                lastWarning = now
                log.warning("attached extension passed its acknowledgement timeout; still waiting (an attached extension is never stopped)", [
                    "label": host.label, "pid": link.pid, "method": method, "silent_s": Int(now.timeIntervalSince(heard))])
                continue
            }
            if now >= deadline {
                let message = deadline == overall
                    ? "\(host.label) did not finish within MaximumRequestDuration (\(Int(settings.maximumRequestDuration)) s)"
                    : "\(host.label) sent no acknowledgement, progress or donation for \(Int(settings.acknowledgementTimeout)) s"
                timedOut.message.withLock { $0 = message }
                // Stop it here, not after the group: the call returns once the connection is gone.
                // This launch only: an attached copy or a newer launch may have replaced it.
                if let launch = link.launch { host.stopLaunch(launch, hung: true) }
                throw AttemptFailure.timedOut(message)
            }
            try await clock.sleep(until: deadline)
        }
    }

    /// Why the connection to the extension went away before its answer, in an author's words:
    /// the signal or exit status and what it means, its last stderr lines, where to look.
    private nonisolated func lost(link: ExtensionHost.Link, host: ExtensionHost) async -> AttemptFailure {
        guard let launch = link.launch else {
            return .lost("\(host.label), attached by hand (pid \(link.pid)), detached before acknowledging")
        }
        if let exit = await launch.exit.value(within: host.unit.exitTimeOut + 2, clock: clock) {
            return .lost(exit.explanation(label: host.label), askedToExit: exit.expected)
        }
        return .lost("\(host.label) (pid \(link.pid)) closed its connection before acknowledging and did not exit within ExitTimeOut; "
            + "see `searchlight units` and the daemon's log")
    }
}
