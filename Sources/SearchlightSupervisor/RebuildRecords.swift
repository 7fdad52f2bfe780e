import Foundation
import Synchronization
import SearchlightStore

/// Rebuilds in progress, in `supervisor.sqlite`, so that a daemon restarted (or killed) in the
/// middle resumes them: the shadow file is kept and the journaled reindex-all is sent again.
struct RebuildRecord: Sendable, Equatable {
    /// How the shadow is filled: "extension" (a reindex-all) or "local" (copied from the old file).
    var path: String
    var bundle: String
    var index: String
    var requestID: Int64?
    var reason: String
    /// The unit's IndexVersion recorded once the shadow replaced the old file.
    var targetVersion: Int?
    var started: Date
}

final class RebuildRecords: Sendable {
    /// The connection, used by one thread at a time.
    private let db: Mutex<Database>

    init(path: String) throws {
        let db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS rebuilds(
                bundle TEXT NOT NULL, idx TEXT NOT NULL, kind TEXT NOT NULL DEFAULT 'migration', path TEXT NOT NULL,
                request_id INTEGER, reason TEXT NOT NULL, target_version INTEGER, started REAL NOT NULL,
                PRIMARY KEY(bundle, idx)
            );
            """)
        self.db = Mutex(db)
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { db.withLock { $0.close() } }

    func save(_ r: RebuildRecord) throws {
        try db.withLock { db in
            _ = try db.run("""
                INSERT OR REPLACE INTO rebuilds(bundle, idx, kind, path, request_id, reason, target_version, started)
                VALUES (?, ?, 'migration', ?, ?, ?, ?, ?)
                """, [.text(r.bundle), .text(r.index), .text(r.path), r.requestID.map { .integer($0) } ?? .null, .text(r.reason),
                      r.targetVersion.map { .integer(Int64($0)) } ?? .null, .double(r.started.timeIntervalSince1970)])
        }
    }

    func remove(bundle: String, index: String) {
        db.withLock { db in _ = try? db.run("DELETE FROM rebuilds WHERE bundle = ? AND idx = ? AND kind = 'migration'", [.text(bundle), .text(index)]) }
    }

    func all() -> [RebuildRecord] {
        db.withLock { db in
            ((try? db.rows("SELECT bundle, idx, path, request_id, reason, target_version, started FROM rebuilds WHERE kind = 'migration' ORDER BY started")) ?? []).map {
                RebuildRecord(path: $0.string(2) ?? "local", bundle: $0.string(0) ?? "", index: $0.string(1) ?? "", requestID: $0.int(3),
                    reason: $0.string(4) ?? "", targetVersion: $0.int(5).map { Int($0) }, started: Date(timeIntervalSince1970: $0.double(6) ?? 0))
            }
        }
    }
}
