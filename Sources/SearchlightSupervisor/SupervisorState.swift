import Foundation
import SearchlightStore
import SearchlightWire

/// `supervisor.sqlite`: who owns each bundle and whether its indexing is enabled. (The durable
/// request journal and extension records join it with extension support.)
final class SupervisorState: @unchecked Sendable {
    private let db: Database
    private let lock = NSLock()

    init(path: String) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
        db = try Database(path: path)
        _ = try db.scalar("PRAGMA journal_mode=WAL")
        try db.execute("""
            PRAGMA synchronous=FULL;
            CREATE TABLE IF NOT EXISTS bundles(
                bundle TEXT PRIMARY KEY,
                owner_uid INTEGER,
                indexing_enabled INTEGER NOT NULL DEFAULT 1,
                created REAL NOT NULL
            );
            """)
    }

    struct Bundle: Sendable {
        var bundle: String
        var ownerUID: UInt32?
        var indexingEnabled: Bool
    }

    func bundle(_ name: String) -> Bundle? {
        lock.withLock {
            guard let row = try? db.rows("SELECT owner_uid, indexing_enabled FROM bundles WHERE bundle = ?", [.text(name)]).first
            else { return nil }
            return Bundle(bundle: name, ownerUID: row.int(0).map { UInt32($0) }, indexingEnabled: row.int(1) != 0)
        }
    }

    func allBundles() -> [Bundle] {
        lock.withLock {
            ((try? db.rows("SELECT bundle, owner_uid, indexing_enabled FROM bundles ORDER BY bundle")) ?? []).map {
                Bundle(bundle: $0.string(0) ?? "", ownerUID: $0.int(1).map { UInt32($0) }, indexingEnabled: $0.int(2) != 0)
            }
        }
    }

    /// Records `uid` as the owner if the bundle has none yet; returns the owner.
    func claim(_ name: String, uid: UInt32) throws -> UInt32 {
        try lock.withLock {
            try db.run("""
                INSERT INTO bundles(bundle, owner_uid, created) VALUES (?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET owner_uid = coalesce(owner_uid, excluded.owner_uid)
                """, [.text(name), .integer(Int64(uid)), .double(Date().timeIntervalSince1970)])
            return UInt32(try db.intScalar("SELECT owner_uid FROM bundles WHERE bundle = ?", [.text(name)]))
        }
    }

    func setIndexing(_ name: String, enabled: Bool) throws {
        _ = try lock.withLock {
            try db.run("""
                INSERT INTO bundles(bundle, indexing_enabled, created) VALUES (?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET indexing_enabled = excluded.indexing_enabled
                """, [.text(name), .integer(enabled ? 1 : 0), .double(Date().timeIntervalSince1970)])
        }
    }
}
