import Foundation
import Synchronization
import SearchlightStore
import SearchlightWire

/// `supervisor.sqlite`: who owns each bundle and whether its indexing is enabled. (The durable
/// request journal and extension records join it with extension support.)
///
/// Every index call asks about its bundle, so the records (one small row per bundle) are held in
/// memory; changes are written through to the file before they take effect.
final class SupervisorState: Sendable {
    struct Bundle: Sendable {
        var bundle: String
        var ownerUID: UInt32?
        var indexingEnabled: Bool
    }

    /// A claim refused because the uid owns as many bundles as it may (`--max-bundles-per-user`).
    struct OwnedTooMany: Error {
        var owned: Int
    }

    /// The connection and the records it holds, changed together.
    private struct Guarded {
        let db: Database
        var records: [String: Bundle] = [:]
        /// The bundles each uid's per-user limit counts: those it owns whose files existed at start,
        /// or that it claimed since and were not erased since.
        var owned: [UInt32: Set<String>] = [:]
    }

    private let guarded: Mutex<Guarded>

    /// `exists` says whether a bundle has files (read once, at start).
    init(path: String, exists: (String) -> Bool = { _ in true }) throws {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if fd >= 0 { Glibc.close(fd) }
        let db = try Database(path: path)
        var records: [String: Bundle] = [:]
        var owned: [UInt32: Set<String>] = [:]
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
            let owner = row.int(1).map { UInt32($0) }
            records[name] = Bundle(bundle: name, ownerUID: owner, indexingEnabled: row.int(2) != 0)
            if let owner, exists(name) { owned[owner, default: []].insert(name) }
        }
        guarded = Mutex(Guarded(db: db, records: records, owned: owned))
    }

    /// Closes the connection at the daemon's stop (the last one to `supervisor.sqlite` checkpoints
    /// the WAL into the file, synced, and removes it); a later call fails or reads nothing.
    func close() { guarded.withLock { $0.db.close() } }

    func bundle(_ name: String) -> Bundle? { guarded.withLock { $0.records[name] } }

    func allBundles() -> [Bundle] { guarded.withLock { $0.records.values.sorted { $0.bundle < $1.bundle } } }

    /// Records `uid` as the owner if the bundle has none yet; returns the owner. With `limit`, a
    /// uid whose limit already counts that many bundles is refused with `OwnedTooMany`: counted
    /// and claimed in one step, so that concurrent claims cannot pass the limit together.
    func claim(_ name: String, uid: UInt32, limit: Int? = nil) throws -> UInt32 {
        try guarded.withLock { g in
            if let owner = g.records[name]?.ownerUID { return owner }
            if let limit {
                let count = g.owned[uid]?.count ?? 0
                if count >= limit { throw OwnedTooMany(owned: count) }
            }
            try Self.writeOwner(name, uid, &g)
            return uid
        }
    }

    /// Records `uid` as the owner, replacing any other: the user of the unit that serves the
    /// bundle (its writes), or the owner an administrator gives it (`admin.setOwner`).
    func setOwner(_ name: String, uid: UInt32) throws {
        try guarded.withLock { g in
            if g.records[name]?.ownerUID == uid { return }
            try Self.writeOwner(name, uid, &g)
        }
    }

    /// Under the lock: the row first, then the memory.
    private static func writeOwner(_ name: String, _ uid: UInt32, _ g: inout Guarded) throws {
        try g.db.run("""
            INSERT INTO bundles(bundle, owner_uid, created) VALUES (?, ?, ?)
            ON CONFLICT(bundle) DO UPDATE SET owner_uid = excluded.owner_uid
            """, [.text(name), .integer(Int64(uid)), .double(Date().timeIntervalSince1970)])
        if let previous = g.records[name]?.ownerUID { g.owned[previous]?.remove(name) }
        g.records[name, default: Bundle(bundle: name, ownerUID: nil, indexingEnabled: true)].ownerUID = uid
        g.owned[uid, default: []].insert(name)
    }

    /// The bundle's files were erased: it no longer counts against its owner's limit (the owner
    /// stays recorded, so the name is not free for others).
    func erased(_ name: String) {
        guarded.withLock { g in
            if let owner = g.records[name]?.ownerUID { g.owned[owner]?.remove(name) }
        }
    }

    func setIndexing(_ name: String, enabled: Bool) throws {
        try guarded.withLock { g in
            try g.db.run("""
                INSERT INTO bundles(bundle, indexing_enabled, created) VALUES (?, ?, ?)
                ON CONFLICT(bundle) DO UPDATE SET indexing_enabled = excluded.indexing_enabled
                """, [.text(name), .integer(enabled ? 1 : 0), .double(Date().timeIntervalSince1970)])
            g.records[name, default: Bundle(bundle: name, ownerUID: nil, indexingEnabled: true)].indexingEnabled = enabled
        }
    }
}
