#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SearchlightWire

/// What `IndexStore.salvage(from:)` could copy out of a damaged index file.
public struct SalvageReport: Sendable {
    /// Items copied into this index.
    public var copied = 0
    /// Rowid ranges (of `rowidWindow` rows) that could not be read whole, then rows that could
    /// not be read one by one either: those items are lost.
    public var unreadableRows = 0
    /// What went wrong, in words for the log (empty when everything was read).
    public var problems: [String] = []
}

extension IndexStore {
    /// Why the file at `path` cannot be an intact index, or nil when it looks whole (or does not
    /// exist). The quick form reads the 100-byte header and stats the file (a few microseconds,
    /// done at every open); `deep` also opens it read-only and runs `PRAGMA quick_check(1)`,
    /// which reads the whole file (run only when opening failed, to tell damage from other
    /// failures).
    public static func fileDamage(at path: String, deep: Bool) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        let size = Int64(st.st_size)
        if size < 100 {
            return "the file is truncated to \(size) bytes (a SQLite file starts with a 100-byte header)"
        }
        guard let header = readHeader(path) else { return nil }
        if !header.starts(with: Array("SQLite format 3\u{0}".utf8)) {
            return "the file does not start with the SQLite header (not a database)"
        }
        var pageSize = Int64(header[16]) << 8 | Int64(header[17])
        if pageSize == 1 { pageSize = 65536 }
        let pages = Int64(header[28]) << 24 | Int64(header[29]) << 16 | Int64(header[30]) << 8 | Int64(header[31])
        // The header's page count is valid when its change counter matches (bytes 24-27 = 92-95).
        // With a WAL holding frames the file may lawfully be shorter (a checkpoint cut short by a
        // crash, finished by the next open): only a file without one must hold every page.
        if header[24..<28] == header[92..<96], pages > 0, pageSize >= 512, !walHasFrames(path), size < pages * pageSize {
            return "the file is truncated: its header counts \(pages) pages of \(pageSize) bytes, it holds \(size) bytes"
        }
        guard deep else { return nil }
        do {
            let db = try Database(path: path, readOnly: true, busyTimeoutMilliseconds: 2000)
            defer { db.close() }
            let found = try db.rows("PRAGMA quick_check(1)").compactMap { $0.string(0) }
            return found == ["ok"] ? nil : "quick_check: " + found.joined(separator: "; ")
        } catch {
            return error.isCorruption ? error.message : nil
        }
    }

    private static func readHeader(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 100)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, 100) }
        return n == 100 ? buffer : nil
    }

    private static func walHasFrames(_ path: String) -> Bool {
        var st = stat()
        return stat(path + "-wal", &st) == 0 && st.st_size > 32
    }

    /// Rows read per step by `salvage`; a step that fails is retried row by row.
    static let rowidWindow: Int64 = 256

    /// Best effort: copies every item row that can still be read from the damaged index file at
    /// `damagedPath` into this index (meant for a fresh one), then rebuilds the full-text index
    /// from them. Unreadable rows are skipped (counted in the report). The client state and the
    /// engagement counts are not copied: an app that keeps a client state then sees none and
    /// donates everything again. Copying again from the same file (a salvage resumed after a
    /// restart) adds only the rows not copied yet: a row whose identifier is there is skipped.
    /// `progress` is told the rows copied so far after each committed window.
    public func salvage(from damagedPath: String, progress: ((Int) -> Void)? = nil) throws(SearchlightError) -> SalvageReport {
        var report = SalvageReport()
        let source: Database
        do {
            source = try Database(path: damagedPath, readOnly: true, busyTimeoutMilliseconds: 2000)
        } catch {
            report.problems.append("cannot open \(damagedPath): \(error.message)")
            return report
        }
        defer { source.close() }
        // Every column but the rowid: the fresh index may already hold donations made since the
        // swap under the same rowids; a copied row gets a new one (and loses to a newer donation
        // of its identifier, through the UNIQUE uid).
        let columns = try read { db in try db.rows("PRAGMA table_info(items)").compactMap { $0.string(1) } }.filter { $0 != "rowid" }
        let list = columns.map { "\"\($0)\"" }.joined(separator: ", ")
        // The last rowid, from the table or else from an index of it (the table's rightmost leaf
        // may be the damaged page).
        var maxRowid: Int64?
        var extentError = ""
        for sql in ["SELECT max(rowid) FROM items", "SELECT max(rowid) FROM items INDEXED BY items_expires WHERE expires > -1e300"] where maxRowid == nil {
            do {
                maxRowid = try source.scalar(sql).flatMap { if case .integer(let n) = $0 { n } else { nil } } ?? 0
            } catch {
                extentError = error.message
            }
        }
        guard let maxRowid else {
            report.problems.append("cannot read the extent of the items table: \(extentError)")
            return report
        }
        var low: Int64 = 0
        while low <= maxRowid {
            let high = low + Self.rowidWindow
            var rows: [Row] = []
            do {
                rows = try source.rows("SELECT \(list) FROM items WHERE rowid >= ? AND rowid < ?", [.integer(low), .integer(high)])
            } catch {
                // Row by row: a damaged page loses its own rows, not its neighbours'.
                for rowid in low..<high {
                    do {
                        rows += try source.rows("SELECT \(list) FROM items WHERE rowid = ?", [.integer(rowid)])
                    } catch {
                        report.unreadableRows += 1
                    }
                }
                if report.problems.count < 5 { report.problems.append("rows \(low)..<\(high): \(error.message)") }
            }
            if !rows.isEmpty {
                report.copied += try insertSalvaged(rows, columns: list, count: columns.count)
                progress?(report.copied)
            }
            low = high
        }
        _ = try writeSync { store in
            try store.writer.execute("INSERT INTO fts(fts) VALUES ('rebuild')")
            try store.rankWriter.clear(store.writer)
            return ApplyResult()
        }
        return report
    }

    private func insertSalvaged(_ rows: [Row], columns: String, count: Int) throws(SearchlightError) -> Int {
        let inserted = Counter()
        _ = try writeSync { store in
            let placeholders = Array(repeating: "?", count: count).joined(separator: ", ")
            // OR IGNORE: a row whose NOT NULL or UNIQUE constraint fails (damaged content) is skipped.
            let statement = try store.writer.statement("INSERT OR IGNORE INTO items(\(columns)) VALUES (\(placeholders))")
            for row in rows where row.values.count == count {
                try statement.bind(row.values)
                try statement.run()
                inserted.value += store.writer.changes
            }
            store.itemCount += inserted.value
            return ApplyResult()
        }
        return inserted.value
    }
}

private final class Counter: @unchecked Sendable {
    var value = 0
}
