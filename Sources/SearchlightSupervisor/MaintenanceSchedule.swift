import Foundation
import Synchronization
import SearchlightStore
import SearchlightWire

/// When idle maintenance may run (DESIGN §6 *Idle*): once `--maintenance-interval` has passed
/// since the last run, and then only after every pressure stayed below the throttle marks for
/// `--idle-after` seconds, watched from the moment it became due. Pure: the caller passes the
/// time and the throttle, so tests drive it with an injected clock.
struct MaintenanceSchedule: Sendable {
    let interval: TimeInterval
    let idleAfter: TimeInterval
    /// The last completed run (or, before the first, the first start of the daemon).
    private(set) var lastRun: Date
    /// Since when the load has been watched for idleness (set when maintenance became due).
    private(set) var watchingSince: Date?

    init(interval: TimeInterval, idleAfter: TimeInterval, lastRun: Date) {
        self.interval = interval
        self.idleAfter = idleAfter
        self.lastRun = lastRun
    }

    var nextDue: Date { lastRun.addingTimeInterval(interval) }

    func isDue(at now: Date) -> Bool { now >= nextDue }

    /// The earliest time a run can start: due, then idle for `idleAfter` from when it is watched.
    var nextEligible: Date { (watchingSince.map { max($0, nextDue) } ?? nextDue).addingTimeInterval(idleAfter) }

    /// Looks at the throttle at `now`: true when a run should start. Starts watching when due;
    /// the machine counts as idle only for the time it was watched (a quiet period measured
    /// before, when nobody sampled, proves nothing).
    mutating func shouldStart(at now: Date, throttle: Throttle) -> Bool {
        guard isDue(at: now) else {
            watchingSince = nil
            return false
        }
        let watch = watchingSince ?? now
        watchingSince = watch
        guard throttle.state == .normal, let quiet = throttle.quietSince else { return false }
        return now.timeIntervalSince(max(quiet, watch)) >= idleAfter
    }

    /// A run completed: the next is due one interval later.
    mutating func ran(at now: Date) {
        lastRun = now
        watchingSince = nil
    }

    /// A run gave way to load: it stays due, and idleness is watched afresh.
    mutating func yielded() {
        watchingSince = nil
    }
}

/// Totals of one maintenance run (`admin.simulate idle`'s answer, `status`, the event).
struct MaintenanceSummary: Sendable {
    var trigger = "idle"
    var started = Date()
    var elapsed: TimeInterval = 0
    var indexes = 0
    var purged = 0
    /// Identifiers expiring within a day that extensions were asked to reindex.
    var refreshRequested = 0
    var rowsScrubbed = 0
    var tablesChecked = 0
    /// Indexes whose full-text index went through FTS5's integrity-check in this run.
    var fullTextChecked = 0
    var scrubMilliseconds = 0.0
    var checksumFailures = 0
    /// Identifiers of failed checksums requested again from their extension.
    var corruptionRequested = 0
    var ftsRebuilt = 0
    var damaged = 0
    var optimized = 0
    var checkpointed = 0
    /// Vectors the transformer refined (semantic search).
    var refined = 0
    /// True when the run gave way to load (or to the daemon stopping) before its end.
    var yielded = false
    /// What went wrong, one line each (an index that could not be opened, a damaged file).
    var problems: [String] = []

    var json: JSONValue { .object(fields) }

    var fields: [String: JSONValue] {
        func n(_ v: Int) -> JSONValue { .number(Double(v)) }
        return [
            "trigger": .string(trigger), "started": .string(ISO8601.format(started)),
            "elapsedMilliseconds": .number((elapsed * 1000).rounded()), "indexes": n(indexes), "purged": n(purged),
            "refreshRequested": n(refreshRequested), "rowsScrubbed": n(rowsScrubbed), "tablesChecked": n(tablesChecked), "fullTextChecked": n(fullTextChecked),
            "scrubMilliseconds": .number((scrubMilliseconds * 10).rounded() / 10), "checksumFailures": n(checksumFailures),
            "corruptionRequested": n(corruptionRequested), "ftsRebuilt": n(ftsRebuilt), "damaged": n(damaged),
            "optimized": n(optimized), "checkpointed": n(checkpointed), "refined": n(refined), "yielded": .bool(yielded),
            "problems": .array(problems.map(JSONValue.string)),
        ]
    }
}

/// Maintenance's memory in `supervisor.sqlite`: the last run and its summary (so a restart does
/// not redo it at once) and each index's scrub cursor (so the scrub goes round the whole file).
final class MaintenanceRecord: Sendable {
    /// The connection, used by one thread at a time.
    private let db: Mutex<Database>

    init(path: String) throws {
        let db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS maintenance(key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS scrub_cursors(
                bundle TEXT NOT NULL, idx TEXT NOT NULL, item_rowid INTEGER NOT NULL, tbl INTEGER NOT NULL,
                PRIMARY KEY(bundle, idx)
            );
            """)
        self.db = Mutex(db)
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { db.withLock { $0.close() } }

    private func value(_ key: String) -> String? {
        db.withLock { db in (try? db.rows("SELECT value FROM maintenance WHERE key = ?", [.text(key)]))?.first?.string(0) }
    }

    private func set(_ key: String, _ value: String) throws {
        try db.withLock { db in
            _ = try db.run("INSERT OR REPLACE INTO maintenance(key, value) VALUES (?, ?)", [.text(key), .text(value)])
        }
    }

    /// The last completed run; the first time, `now` is recorded (a new installation waits one
    /// interval before its first maintenance: nothing in it is old yet).
    func lastRun(orRecord now: Date) -> Date {
        if let s = value("lastRun"), let t = Double(s) { return Date(timeIntervalSince1970: t) }
        try? set("lastRun", String(now.timeIntervalSince1970))
        return now
    }

    func recordRun(at date: Date, summary: JSONValue) throws {
        try set("lastRun", String(date.timeIntervalSince1970))
        try set("lastSummary", summary.jsonString)
    }

    var lastSummary: JSONValue? { value("lastSummary").flatMap { try? JSONValue.parse($0) } }

    func cursor(bundle: String, index: String) -> ScrubCursor {
        db.withLock { db in
            guard let row = (try? db.rows("SELECT item_rowid, tbl FROM scrub_cursors WHERE bundle = ? AND idx = ?",
                [.text(bundle), .text(index)]))?.first else { return ScrubCursor() }
            return ScrubCursor(itemRowID: row.int(0) ?? 0, table: Int(row.int(1) ?? 0))
        }
    }

    func setCursor(_ c: ScrubCursor, bundle: String, index: String) throws {
        try db.withLock { db in
            _ = try db.run("INSERT OR REPLACE INTO scrub_cursors(bundle, idx, item_rowid, tbl) VALUES (?, ?, ?, ?)",
                [.text(bundle), .text(index), .integer(c.itemRowID), .integer(Int64(c.table))])
        }
    }
}
