import Foundation
import Synchronization
import SearchlightStore
import SearchlightWire

/// One reindex request for an extension, as journaled.
struct ReindexRequest: Sendable, Equatable {
    enum Kind: String, Sendable { case all, identifiers }
    enum State: String, Sendable { case pending, running, failed }

    var id: Int64
    var bundle: String
    var index: String
    var kind: Kind
    /// For `identifiers`: the ones not yet acknowledged.
    var identifiers: [String]
    /// Why it was asked: manual, initial, migration, corruption, idle, …
    var reason: String
    /// Background work is throttled under load; manual requests are not.
    var background: Bool
    var state: State
    var attempts: Int
    var notBefore: Date
    var lastError: String?
    /// Identifiers per request while a crash is being narrowed down (halving); nil = the unit's maximum.
    var chunk: Int?
    /// While narrowing (`chunk` set): whether some chunk was acknowledged since, i.e. the
    /// extension works for other identifiers, so a lone failing identifier is the culprit.
    var narrowingAcknowledged = false
    var created: Date
}

/// An identifier that crashed or hung its extension on its own, reported instead of retried.
struct PoisonedIdentifier: Sendable, Equatable {
    var bundle: String
    var index: String
    var identifier: String
    var error: String
    var at: Date
}

/// The durable request journal in `supervisor.sqlite` (DESIGN §6): a request is written before it
/// is sent and removed only on acknowledgement, so a daemon restart resumes it. Requests coalesce:
/// a reindex-all absorbs the pending identifier requests of its index, and identifier requests merge.
final class RequestJournal: Sendable {
    /// The connection, used by one thread at a time.
    private let db: Mutex<Database>
    let path: String
    /// Tests only: a failing disk. Asked with the operation's name before each write the
    /// scheduler makes while dispatching; an error it returns is thrown as the write's.
    let writeFault = Mutex<(@Sendable (String) -> (any Error)?)?>(nil)

    private func injectedFault(_ operation: String) throws {
        if let fault = writeFault.withLock({ $0 }), let error = fault(operation) { throw error }
    }

    init(path: String) throws {
        self.path = path
        let db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS requests(
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                bundle TEXT NOT NULL, idx TEXT NOT NULL, kind TEXT NOT NULL,
                identifiers TEXT NOT NULL DEFAULT '[]',
                reason TEXT NOT NULL, background INTEGER NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending',
                attempts INTEGER NOT NULL DEFAULT 0, not_before REAL NOT NULL DEFAULT 0,
                last_error TEXT, chunk INTEGER, created REAL NOT NULL,
                narrowing_acked INTEGER NOT NULL DEFAULT 0
            );
            CREATE TABLE IF NOT EXISTS poisoned(
                bundle TEXT NOT NULL, idx TEXT NOT NULL, identifier TEXT NOT NULL,
                error TEXT NOT NULL, at REAL NOT NULL,
                PRIMARY KEY(bundle, idx, identifier)
            );
            CREATE TABLE IF NOT EXISTS extension_indexes(
                bundle TEXT NOT NULL, idx TEXT NOT NULL, index_version INTEGER NOT NULL, since REAL NOT NULL,
                PRIMARY KEY(bundle, idx)
            );
            """)
        // A request that was running when the daemon stopped (or was killed) is sent again.
        try db.run("UPDATE requests SET state = 'pending', not_before = 0 WHERE state = 'running'")
        self.db = Mutex(db)
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { db.withLock { $0.close() } }

    private static let columns = "id, bundle, idx, kind, identifiers, reason, background, state, attempts, not_before, last_error, chunk, created, narrowing_acked"

    private static func request(_ row: Row) -> ReindexRequest {
        let ids: [String]
        if let text = row.string(4), let parsed = try? JSONValue.parse(Array(text.utf8)) {
            ids = parsed.arrayValue?.compactMap(\.stringValue) ?? []
        } else {
            ids = []
        }
        return ReindexRequest(
            id: row.int(0) ?? 0, bundle: row.string(1) ?? "", index: row.string(2) ?? "",
            kind: ReindexRequest.Kind(rawValue: row.string(3) ?? "") ?? .all, identifiers: ids,
            reason: row.string(5) ?? "", background: row.int(6) != 0,
            state: ReindexRequest.State(rawValue: row.string(7) ?? "") ?? .pending,
            attempts: Int(row.int(8) ?? 0), notBefore: Date(timeIntervalSince1970: row.double(9) ?? 0),
            lastError: row.string(10), chunk: row.int(11).map { Int($0) }, narrowingAcknowledged: row.int(13) == 1,
            created: Date(timeIntervalSince1970: row.double(12) ?? 0))
    }

    private static func encode(_ ids: [String]) -> SQLValue {
        .text(JSONValue.array(ids.map(JSONValue.string)).jsonString)
    }

    /// The outcome of `enqueue`: the request that now carries the work, and the requests it absorbed.
    struct Enqueued: Sendable {
        var id: Int64
        var coalesced: Bool
        var absorbed: [Int64]
        /// When coalesced: the pending request joined, as it was before (its retry time, whether
        /// it was background work).
        var joined: ReindexRequest? = nil
        /// A foreground request joined background work or a request waiting for a retry: the
        /// joined request is now foreground and due at once.
        var promoted = false
        /// For whoever asked: what a manual request joined and what it changed ("joined request
        /// 12, which was waiting for a retry in 2m 43s; running it now"). Set by the scheduler.
        var note: String? = nil
    }

    /// Journals a request durably, coalescing it with what is already pending for the same index.
    func enqueue(bundle: String, index: String, kind: ReindexRequest.Kind, identifiers: [String],
                 reason: String, background: Bool, now: Date = Date()) throws -> Enqueued {
        do {
            return try journal(bundle: bundle, index: index, kind: kind, identifiers: identifiers, reason: reason,
                background: background, now: now)
        } catch let e as DatabaseError {
            // The caller is told the request was not queued, and why, never a raw SQLite error.
            if e.isDiskFull {
                throw SearchlightError(.indexUnavailable,
                    "disk full while journaling the reindex request in \(path); nothing was queued: free space and retry")
            }
            throw SearchlightError(.indexUnavailable, "cannot journal the reindex request in \(path) (\(e)); nothing was queued: retry")
        }
    }

    private func journal(bundle: String, index: String, kind: ReindexRequest.Kind, identifiers: [String],
                         reason: String, background: Bool, now: Date) throws -> Enqueued {
        try db.withLock { db in
            try db.transaction {
                let pending = try db.rows("SELECT \(Self.columns) FROM requests WHERE bundle = ? AND idx = ? AND state = 'pending' ORDER BY id",
                    [.text(bundle), .text(index)]).map(Self.request)
                // A foreground (manual) request promotes what it joins: no longer throttled, and due
                // now rather than after the retry delay of an earlier failure. The joined request
                // keeps its reason (initial, corruption, …), which recovery and filling rely on.
                func promote(_ joined: ReindexRequest) throws -> Bool {
                    guard !background, joined.background || joined.notBefore > now else { return false }
                    try db.run("UPDATE requests SET background = 0, not_before = 0 WHERE id = ?", [.integer(joined.id)])
                    return true
                }
                if let all = pending.first(where: { $0.kind == .all }) {
                    return Enqueued(id: all.id, coalesced: true, absorbed: [], joined: all, promoted: try promote(all))
                }
                if kind == .identifiers, let same = pending.first(where: { $0.kind == .identifiers && $0.background == background }) {
                    var seen = Set(same.identifiers)
                    let merged = same.identifiers + identifiers.filter { seen.insert($0).inserted }
                    try db.run("UPDATE requests SET identifiers = ? WHERE id = ?", [Self.encode(merged), .integer(same.id)])
                    return Enqueued(id: same.id, coalesced: true, absorbed: [], joined: same, promoted: try promote(same))
                }
                try db.run("""
                    INSERT INTO requests(bundle, idx, kind, identifiers, reason, background, created)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """, [.text(bundle), .text(index), .text(kind.rawValue), Self.encode(kind == .all ? [] : identifiers),
                          .text(reason), .integer(background ? 1 : 0), .double(now.timeIntervalSince1970)])
                let id = db.lastInsertRowID
                var absorbed: [Int64] = []
                if kind == .all {
                    // The new reindex-all covers the pending identifier requests and any failed one.
                    absorbed = pending.map(\.id)
                    try db.run("DELETE FROM requests WHERE bundle = ? AND idx = ? AND id != ? AND state IN ('pending', 'failed')",
                        [.text(bundle), .text(index), .integer(id)])
                }
                return Enqueued(id: id, coalesced: false, absorbed: absorbed)
            }
        }
    }

    func all() -> [ReindexRequest] {
        db.withLock { db in ((try? db.rows("SELECT \(Self.columns) FROM requests ORDER BY id")) ?? []).map(Self.request) }
    }

    func request(_ id: Int64) -> ReindexRequest? {
        db.withLock { db in (try? db.rows("SELECT \(Self.columns) FROM requests WHERE id = ?", [.integer(id)]))?.first.map(Self.request) }
    }

    /// The pending requests of a bundle, foreground first, then oldest first.
    func pending(bundle: String) -> [ReindexRequest] {
        db.withLock { db in
            ((try? db.rows("SELECT \(Self.columns) FROM requests WHERE bundle = ? AND state = 'pending' ORDER BY background, id",
                [.text(bundle)])) ?? []).map(Self.request)
        }
    }

    /// Marks a pending request running and returns it as it is now (identifiers merged into it
    /// since the dispatcher looked included); nil if it is no longer pending (absorbed, failed).
    func claim(_ id: Int64) throws -> ReindexRequest? {
        try injectedFault("claim")
        return try db.withLock { db in
            try db.transaction {
                guard try db.run("UPDATE requests SET state = 'running' WHERE id = ? AND state = 'pending'", [.integer(id)]) == 1 else { return nil }
                return try db.rows("SELECT \(Self.columns) FROM requests WHERE id = ?", [.integer(id)]).first.map(Self.request)
            }
        }
    }

    /// A request left `running` by a failed journal write (its outcome could not be recorded) is
    /// pending again, due now; the failure it met is its last error. False if it is not running.
    func requeue(_ id: Int64, error: String) throws -> Bool {
        try injectedFault("requeue")
        return try db.withLock { db in
            try db.run("UPDATE requests SET state = 'pending', not_before = 0, last_error = ? WHERE id = ? AND state = 'running'",
                       [.text(error), .integer(id)]) == 1
        }
    }

    /// A chunk was acknowledged while the request is being narrowed down.
    func noteNarrowingProgress(_ id: Int64) throws {
        try injectedFault("noteNarrowingProgress")
        try db.withLock { db in _ = try db.run("UPDATE requests SET narrowing_acked = 1 WHERE id = ? AND chunk IS NOT NULL", [.integer(id)]) }
    }

    /// Acknowledged: the request is done and leaves the journal.
    func acknowledged(_ id: Int64) throws {
        try injectedFault("acknowledged")
        try db.withLock { db in _ = try db.run("DELETE FROM requests WHERE id = ?", [.integer(id)]) }
    }

    /// Some identifiers were acknowledged: keep only the rest.
    func setRemaining(_ id: Int64, identifiers: [String]) throws {
        try injectedFault("setRemaining")
        try db.withLock { db in _ = try db.run("UPDATE requests SET identifiers = ? WHERE id = ?", [Self.encode(identifiers), .integer(id)]) }
    }

    /// A failed attempt: retried after `retryAt`, or given up (state failed) when `retryAt` is nil.
    func attemptFailed(_ id: Int64, error: String, retryAt: Date?, chunk: Int? = nil, countAttempt: Bool = true) throws {
        try injectedFault("attemptFailed")
        try db.withLock { db in
            _ = try db.run("""
                UPDATE requests SET state = ?, attempts = attempts + ?, not_before = ?, last_error = ?, chunk = ? WHERE id = ?
                """, [.text(retryAt == nil ? "failed" : "pending"), .integer(countAttempt ? 1 : 0),
                      .double(retryAt?.timeIntervalSince1970 ?? 0), .text(error), chunk.map { .integer(Int64($0)) } ?? .null, .integer(id)])
        }
    }

    /// Stops sending `identifier` (it crashed or hung the extension on its own) and reports it.
    func poison(_ id: Int64, bundle: String, index: String, identifier: String, remaining: [String], error: String, now: Date = Date()) throws {
        try injectedFault("poison")
        try db.withLock { db in
            try db.transaction {
                try db.run("INSERT OR REPLACE INTO poisoned(bundle, idx, identifier, error, at) VALUES (?, ?, ?, ?, ?)",
                    [.text(bundle), .text(index), .text(identifier), .text(error), .double(now.timeIntervalSince1970)])
                try db.run("UPDATE requests SET identifiers = ?, state = 'pending', not_before = 0, chunk = NULL, narrowing_acked = 0 WHERE id = ?",
                    [Self.encode(remaining), .integer(id)])
            }
        }
    }

    func poisoned() -> [PoisonedIdentifier] {
        db.withLock { db in
            ((try? db.rows("SELECT bundle, idx, identifier, error, at FROM poisoned ORDER BY at")) ?? []).map {
                PoisonedIdentifier(bundle: $0.string(0) ?? "", index: $0.string(1) ?? "", identifier: $0.string(2) ?? "",
                    error: $0.string(3) ?? "", at: Date(timeIntervalSince1970: $0.double(4) ?? 0))
            }
        }
    }

    /// The earliest time a pending request becomes due, if any.
    func nextDue() -> Date? {
        db.withLock { db in
            (try? db.rows("SELECT min(not_before) FROM requests WHERE state = 'pending'"))?.first?.double(0)
                .map { Date(timeIntervalSince1970: $0) }
        }
    }

    // MARK: - Indexes an extension has been asked to fill

    /// The index version recorded when the extension first filled this index, nil if never.
    func recordedVersion(bundle: String, index: String) -> Int? {
        db.withLock { db in
            (try? db.rows("SELECT index_version FROM extension_indexes WHERE bundle = ? AND idx = ?", [.text(bundle), .text(index)]))?
                .first?.int(0).map { Int($0) }
        }
    }

    func recordVersion(bundle: String, index: String, version: Int, now: Date = Date()) throws {
        try db.withLock { db in
            _ = try db.run("INSERT OR REPLACE INTO extension_indexes(bundle, idx, index_version, since) VALUES (?, ?, ?, ?)",
                [.text(bundle), .text(index), .integer(Int64(version)), .double(now.timeIntervalSince1970)])
        }
    }
}
