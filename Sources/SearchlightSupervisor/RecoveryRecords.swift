import Foundation
import Synchronization
import SearchlightStore

/// A corruption recovery that set an index file aside and has not finished refilling it, in
/// `supervisor.sqlite` like a journaled reindex-all: written before the file moves, removed once
/// the fresh index holds what it should (the salvage copied the readable rows, or the refill's
/// reindex-all is journaled, which then carries it). A daemon killed in between finds it at the
/// next start and finishes the move and the refill, so acknowledged items are never left only
/// in the quarantine (an index once came back `ready` with 0 items after a SIGKILL mid-salvage),
/// and the quarantined file it names is pinned: never rotated away before its rows are restored.
struct RecoveryRecord: Sendable, Equatable {
    /// The file's name in `<state>/quarantine/`.
    var quarantined: String
    var bundle: String
    var index: String
    /// "salvage" or "reindexAll" (`IndexRecovery.Method`).
    var method: String
    var reason: String
    var started: Date
}

final class RecoveryRecords: Sendable {
    /// The connection, used by one thread at a time.
    private let db: Mutex<Database>

    init(path: String) throws {
        let db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS recoveries(
                quarantined TEXT PRIMARY KEY, bundle TEXT NOT NULL, idx TEXT NOT NULL, method TEXT NOT NULL,
                reason TEXT NOT NULL, started REAL NOT NULL
            );
            """)
        self.db = Mutex(db)
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { db.withLock { $0.close() } }

    /// Records (or updates) a recovery; durable when it returns.
    func save(_ r: RecoveryRecord) throws {
        try db.withLock { db in
            _ = try db.run("""
                INSERT OR REPLACE INTO recoveries(quarantined, bundle, idx, method, reason, started) VALUES (?, ?, ?, ?, ?, ?)
                """, [.text(r.quarantined), .text(r.bundle), .text(r.index), .text(r.method), .text(r.reason),
                      .double(r.started.timeIntervalSince1970)])
        }
    }

    func remove(quarantined name: String) {
        db.withLock { db in _ = try? db.run("DELETE FROM recoveries WHERE quarantined = ?", [.text(name)]) }
    }

    /// Forgets a bundle's recoveries (it was erased: nothing is to be restored into it).
    func remove(bundle: String) {
        db.withLock { db in _ = try? db.run("DELETE FROM recoveries WHERE bundle = ?", [.text(bundle)]) }
    }

    func all() -> [RecoveryRecord] {
        db.withLock { db in
            ((try? db.rows("SELECT quarantined, bundle, idx, method, reason, started FROM recoveries ORDER BY started, quarantined")) ?? []).map {
                RecoveryRecord(quarantined: $0.string(0) ?? "", bundle: $0.string(1) ?? "", index: $0.string(2) ?? "",
                    method: $0.string(3) ?? "salvage", reason: $0.string(4) ?? "", started: Date(timeIntervalSince1970: $0.double(5) ?? 0))
            }
        }
    }

    /// The quarantined files still needed.
    var pinned: Set<String> { Set(all().map(\.quarantined)) }
}
