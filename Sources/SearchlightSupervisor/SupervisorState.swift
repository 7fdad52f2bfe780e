import Foundation
import SearchlightStore
import SearchlightWire

/// `supervisor.sqlite`: who owns each bundle and whether its indexing is enabled. (The durable
/// request journal and extension records join it with extension support.)
///
/// Every index call asks about its bundle, so the records (one small row per bundle) are held in
/// memory; changes are written through to the file before they take effect.
final class SupervisorState: @unchecked Sendable {
    struct Bundle: Sendable {
        var bundle: String
        var ownerUID: UInt32?
        var indexingEnabled: Bool
    }

    private let db: Database
    private let lock = NSLock()
    private var records: [String: Bundle] = [:]

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
        for row in try db.rows("SELECT bundle, owner_uid, indexing_enabled FROM bundles") {
            guard let name = row.string(0) else { continue }
            records[name] = Bundle(bundle: name, ownerUID: row.int(1).map { UInt32($0) }, indexingEnabled: row.int(2) != 0)
        }
    }

    func bundle(_ name: String) -> Bundle? { lock.withLock { records[name] } }

    func allBundles() -> [Bundle] { lock.withLock { records.values.sorted { $0.bundle < $1.bundle } } }

    /// Records `uid` as the owner if the bundle has none yet; returns the owner.
    func claim(_ name: String, uid: UInt32) throws -> UInt32 {
        try lock.withLock {
            if let owner = records[name]?.ownerUID { return owner }
            try db.run("""
                INSERT INTO bundles(bundle, owner_uid, created) VALUES (?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET owner_uid = excluded.owner_uid
                """, [.text(name), .integer(Int64(uid)), .double(Date().timeIntervalSince1970)])
            records[name, default: Bundle(bundle: name, ownerUID: nil, indexingEnabled: true)].ownerUID = uid
            return uid
        }
    }

    func setIndexing(_ name: String, enabled: Bool) throws {
        try lock.withLock {
            try db.run("""
                INSERT INTO bundles(bundle, indexing_enabled, created) VALUES (?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET indexing_enabled = excluded.indexing_enabled
                """, [.text(name), .integer(enabled ? 1 : 0), .double(Date().timeIntervalSince1970)])
            records[name, default: Bundle(bundle: name, ownerUID: nil, indexingEnabled: true)].indexingEnabled = enabled
        }
    }
}
