import SearchlightWire
import Foundation

/// Filling a shadow index from the file it replaces (DESIGN §6 Triggers, migration).
///
/// The old file is attached to the shadow's writer connection as `source`, so every copy runs
/// on the shadow's writer thread, in order with the donations written to both files: a copy
/// reads the old file after every donation already written to the shadow committed to the old
/// file too, so nothing is lost or brought back.
extension IndexStore {
    /// Attaches the file this store will replace. Call it before the store is shared (the writer
    /// thread is idle then); the attachment lasts until `close()`.
    public func attachSource(_ sourcePath: String) throws(SearchlightError) {
        do {
            try writer.run("ATTACH DATABASE ? AS source", [.text(sourcePath)])
        } catch {
            throw SearchlightError(.indexUnavailable, "cannot read \(sourcePath) to migrate it: \(error.message)")
        }
    }

    /// Copies every item, the client state and the engagement counts of the attached source,
    /// keeping what a donation already wrote here (it is newer), then builds the full-text index
    /// of this store's format from the items. Returns the items copied. For a bundle with no
    /// extension, this is the whole migration.
    public func importSource() throws(SearchlightError) -> Int {
        let copied = try writeSync { store in
            let w = store.writer
            let n = try w.run("""
                INSERT OR IGNORE INTO main.items(uid, domain, expires, related, title, displayName, alternateNames,
                    contentDescription, textContent, keywords, authorNames, aux, attrs, ranking_hint, last_used, engagement, checksum)
                SELECT uid, domain, expires, related, title, displayName, alternateNames,
                    contentDescription, textContent, keywords, authorNames, aux, attrs, ranking_hint, last_used, engagement, checksum
                FROM source.items ORDER BY rowid
                """)
            try w.execute("""
                INSERT OR IGNORE INTO main.meta(key, value) SELECT key, value FROM source.meta
                    WHERE key NOT IN ('created', 'vectorIdentity', 'vectorEpoch');
                INSERT OR IGNORE INTO main.engagement SELECT * FROM source.engagement;
                INSERT INTO main.fts(fts) VALUES ('rebuild');
                """)
            try store.rankWriter.clear(w)
            store.itemCount = try w.intScalar("SELECT count(*) FROM main.items")
            var r = ApplyResult()
            r.indexed = n
            return r
        }
        return copied.indexed
    }

    /// Brings the engagement of the attached source (what users selected, suggestions they took)
    /// into this store, which an extension refilled: the items it donated again keep their rank.
    public func carryOverEngagement() throws(SearchlightError) {
        _ = try writeSync { store in
            try store.writer.execute("""
                INSERT OR IGNORE INTO main.engagement SELECT * FROM source.engagement;
                UPDATE main.items SET engagement = main.items.engagement + s.used
                    FROM (SELECT uid AS usedUID, engagement AS used FROM source.items WHERE engagement > 0) AS s
                    WHERE main.items.uid = s.usedUID;
                """)
            // Engagement is part of the score: the segments read it before.
            try store.rankWriter.clear(store.writer)
            return ApplyResult()
        }
    }
}

extension IndexStore {
    /// The store format recorded in a closed file's header (`user_version`, bytes 60-63), without
    /// opening it: nil when it cannot be read, or when the header says 0 while a WAL holds frames
    /// (a new file whose first pages are still in the WAL: open it to know).
    public static func recordedFormatVersion(at path: String) -> Int? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let header = try? handle.read(upToCount: 64), header.count == 64,
              header.starts(with: Array("SQLite format 3\u{0}".utf8)) else { return nil }
        let version = header[60..<64].reduce(0) { $0 << 8 | Int($1) }
        if version == 0 {
            let wal = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
            if wal > 0 { return nil }
        }
        return version
    }
}
