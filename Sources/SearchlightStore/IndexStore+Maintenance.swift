import Foundation
import SearchlightWire

/// Where the scrub of one index goes on at its next run (the supervisor keeps it between runs,
/// so a restart does not start over from the first row).
public struct ScrubCursor: Sendable, Equatable {
    /// The last item rowid whose checksum was verified (0: start from the first row).
    public var itemRowID: Int64
    /// Which slot of the rotation comes next: 0 is FTS5's integrity-check, then each table in
    /// name order for `quick_check`.
    public var table: Int

    public init(itemRowID: Int64 = 0, table: Int = 0) {
        self.itemRowID = itemRowID
        self.table = table
    }
}

/// What one bounded scrub of an index found.
public struct ScrubReport: Sendable {
    /// Items whose checksum was recomputed.
    public var rowsScrubbed = 0
    /// Tables `quick_check` went through in this slice.
    public var tablesChecked: [String] = []
    /// `quick_check`'s findings: the file itself is damaged (the store is marked damaged).
    public var fileProblems: [String] = []
    /// Items whose stored content no longer matches the checksum written with it.
    public var checksumFailures: [String] = []
    /// Whether FTS5's integrity-check ran in this slice (once per round of the rotation).
    public var fullTextChecked = false
    /// FTS5's integrity-check finding, when the full-text index disagrees with the items.
    public var fullTextProblem: String?
    /// Where the next slice starts.
    public var cursor = ScrubCursor()
}

/// Idle maintenance of one index (DESIGN §6 *Idle*): the scrub, the refresh query, FTS
/// optimization and the WAL checkpoint. Each step is bounded or runs through the writer queue,
/// so queries never wait and donations wait at most one step.
extension IndexStore {
    /// Verifies a bounded slice of the file: `slots` slots of a rotation from the cursor (slot 0
    /// is FTS5's integrity-check, the others `quick_check` of one table each, with its indexes),
    /// and the checksums of `rows` items after the cursor's rowid. The integrity-check reads the
    /// whole full-text index and its content under the write lock (about 2-3 s per 100k items),
    /// hence once per round rather than every slice. File-level damage marks the store damaged
    /// (`markDamaged`) and ends the slice there; the caller deletes and re-requests items whose
    /// checksum fails and rebuilds a full-text index that alone is damaged (`rebuildFullText`).
    public func scrub(from cursor: ScrubCursor, rows: Int, tables slots: Int) throws(SearchlightError) -> ScrubReport {
        var report = ScrubReport(cursor: cursor)
        let names = try read { db in
            try db.rows("SELECT name FROM sqlite_schema WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")
                .compactMap { $0.string(0) }
        }
        let rotation = names.count + 1
        let count = min(max(1, slots), rotation)
        var checkFullText = false
        for step in 0..<count {
            let slot = (cursor.table + step) % rotation
            guard slot > 0 else {
                checkFullText = true
                continue
            }
            let name = names[slot - 1]
            let quoted = "'" + name.replacingOccurrences(of: "'", with: "''") + "'"
            let findings = try read { db in try db.rows("PRAGMA quick_check(\(quoted))").compactMap { $0.string(0) } }
            report.tablesChecked.append(name)
            if findings != ["ok"] { report.fileProblems += findings.prefix(20).map { "quick_check(\(name)): \($0)" } }
        }
        report.cursor.table = (cursor.table + count) % rotation
        if !report.fileProblems.isEmpty {
            markDamaged(DatabaseError(code: SQLITE_CORRUPT_CODE, extendedCode: SQLITE_CORRUPT_CODE,
                message: report.fileProblems.joined(separator: "; "), sql: nil))
            return report
        }
        let sql = "SELECT items.rowid, items.checksum, \(ItemRecord.selectColumns) FROM items WHERE items.rowid > ? ORDER BY items.rowid LIMIT ?"
        let slice = try read { db in try db.rows(sql, [.integer(cursor.itemRowID), .integer(Int64(max(1, rows)))]) }
        for row in slice {
            guard let rowid = row.int(0) else { continue }
            let record = ItemRecord(row: row, offset: 2)
            if record.checksum(attrsJSON: row.string(12) ?? "") != row.int(1) { report.checksumFailures.append(record.uid) }
            report.cursor.itemRowID = rowid
        }
        report.rowsScrubbed = slice.count
        // The end of the table: the next slice starts over from the first row.
        if slice.count < max(1, rows) { report.cursor.itemRowID = 0 }
        if checkFullText {
            report.fullTextChecked = true
            report.fullTextProblem = try fullTextProblem()
        }
        return report
    }

    /// Rebuilds the full-text index from the items (the source of truth), then checks it again:
    /// nil when it passes, else what FTS5 still finds.
    public func rebuildFullText() throws(SearchlightError) -> String? {
        _ = try writeSync { store in
            try store.writer.execute("INSERT INTO fts(fts) VALUES ('rebuild')")
            try store.rankWriter.clear(store.writer)
            return ApplyResult()
        }
        return try fullTextProblem()
    }

    /// Identifiers of live items that expire in `(from, to]`, soonest first, at most `limit`.
    public func identifiersExpiring(from: Date, to: Date, limit: Int) throws(SearchlightError) -> [String] {
        try read { db in
            try db.rows("SELECT uid FROM items WHERE expires > ? AND expires <= ? ORDER BY expires LIMIT ?",
                [.double(from.timeIntervalSince1970), .double(to.timeIntervalSince1970), .integer(Int64(limit))])
                .compactMap { $0.string(0) }
        }
    }

    /// Merges the full-text index's segments into one (FTS5 `optimize`): fewer segments, faster queries.
    public func optimizeFullText() throws(SearchlightError) {
        _ = try writeSync { store in
            try store.writer.execute("INSERT INTO fts(fts) VALUES ('optimize')")
            return ApplyResult()
        }
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)` on the writer, between groups: copies the log into the
    /// file and empties it. Returns false when a reader kept it from completing (it is then retried
    /// at the next maintenance; nothing is lost).
    @discardableResult
    public func checkpoint() throws(SearchlightError) -> Bool {
        let finding = CheckpointFinding()
        _ = try writeOutsideTransaction { store in
            let row = try store.writer.rows("PRAGMA wal_checkpoint(TRUNCATE)").first
            finding.busy = row?.int(0) == 1
            return ApplyResult()
        }
        return !finding.busy
    }
}

/// SQLITE_CORRUPT, for damage the scrub finds itself (no SQLite call failed).
private let SQLITE_CORRUPT_CODE: Int32 = 11

private final class CheckpointFinding: @unchecked Sendable {
    var busy = false
}

extension IndexStore {
    /// FTS5's integrity-check against the items: nil when it passes, else its finding.
    public func fullTextCheck() throws(SearchlightError) -> String? { try fullTextProblem() }
}
