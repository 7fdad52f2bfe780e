import Foundation

/// The writer's side of the ranked index: which item writes it must record in `rank_dirty`, in the
/// same transaction as the write, so that a query never scores a document from a segment that
/// read an older version of it. Owned by the writer thread.
///
/// A new item gets a rowid above every existing one, so it lies above `covered` and costs nothing
/// here: queries read such items from `items` (the delta) until a segment covers them. Only
/// writes at or below `covered`, or inside a segment being built (`building`), are recorded.
struct RankWriter {
    /// The first store format with the ranked index.
    static let firstFormat = 4

    /// False for a file of an older format waiting for its migration: it has no ranked index.
    private(set) var enabled = false
    /// Rowids 1...covered are in active segments (`meta.rank_covered`).
    private(set) var covered: Int64 = 0
    /// Rowid ranges a build is reading: writes there are recorded too, since the build's snapshot
    /// may predate them.
    var building: [ClosedRange<Int64>] = []
    /// Increases with every recorded write; a build keeps the rows up to the largest one it saw.
    private var sequence: Int64 = 0
    private var record: Statement?

    /// Reads the state of the file (at open, and after a rollback: the transaction's memory of
    /// `covered` may have changed with work that was undone).
    mutating func load(_ db: Database) throws {
        enabled = true
        covered = try db.scalar("SELECT value FROM meta WHERE key = 'rank_covered'").flatMap { (v: SQLValue) -> Int64? in
            if case .integer(let n) = v { n } else { nil }
        } ?? 0
        sequence = max(sequence, Int64(try db.intScalar("SELECT coalesce(max(seq), 0) FROM rank_dirty")))
    }

    /// Reloads after a rollback; a failure leaves the state as it was (the next write fails too).
    mutating func reload(_ db: Database) {
        guard enabled else { return }
        try? load(db)
    }

    /// Records that the item at `rowid` was inserted, replaced, updated or deleted.
    mutating func touched(_ rowid: Int64, _ db: Database) throws {
        guard enabled, rowid <= covered || building.contains(where: { $0.contains(rowid) }) else { return }
        if record == nil {
            record = try Statement(database: db, sql: """
                INSERT INTO rank_dirty(rowid, seq) VALUES (?, ?) ON CONFLICT(rowid) DO UPDATE SET seq = excluded.seq
                """)
        }
        sequence += 1
        let s = record!
        s.reset()
        try s.bind(.integer(rowid), at: 1)
        try s.bind(.integer(sequence), at: 2)
        try s.run()
    }

    /// Empties the ranked index (with `deleteAll`, and wherever the full-text index is rebuilt or
    /// emptied wholesale, so that the two never disagree): queries answer from the delta, or
    /// exhaustively, until the maintainer builds it again.
    mutating func clear(_ db: Database) throws {
        guard enabled else { return }
        try db.execute("""
            DELETE FROM rank_terms; DELETE FROM rank_segments; DELETE FROM rank_dirty;
            INSERT OR REPLACE INTO meta(key, value) VALUES ('rank_covered', 0);
            """)
        covered = 0
    }

    /// Sets the coverage (a segment was switched in, in the current transaction).
    mutating func setCovered(_ value: Int64, _ db: Database) throws {
        try db.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('rank_covered', ?)", [.integer(value)])
        covered = value
    }

    /// Drops the prepared statement (before the connection closes).
    mutating func close() { record = nil }
}
