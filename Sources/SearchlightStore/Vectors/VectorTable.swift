import SearchlightSemantic

/// The durable side of a `VectorIndex`: one row per item in a table of the index's SQLite file,
/// `(rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL)`, the rowid being the item's rowid, the
/// BLOB a `QuantizedVector.blob`. Writes go through the caller's `Database` so they can share the
/// transaction that writes the item's text (the vector then commits, or rolls back, with it).
///
/// The store's `item_vectors` table (format 5, `Schema.vectorTables`); it lives in the store's
/// module because the store writes it in the transactions that write items.
public struct VectorTable: Sendable {
    /// A plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*), checked: it is spliced into statements.
    public let name: String

    public init(name: String = "item_vectors") throws(SemanticError) {
        let ok = !name.isEmpty && name.utf8.enumerated().allSatisfy { i, b in
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || (i > 0 && b >= 0x30 && b <= 0x39)
        }
        guard ok else { throw SemanticError(.invalidArgument, "\(name.debugDescription) is not a plain SQL table name") }
        self.name = name
    }

    public func create(in db: Database) throws(DatabaseError) {
        try db.execute("CREATE TABLE IF NOT EXISTS \(name) (rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL)")
    }

    public func put(_ rowid: Int64, _ vector: QuantizedVector, in db: Database) throws(DatabaseError) {
        _ = try db.run("INSERT OR REPLACE INTO \(name) (rowid, vector) VALUES (?, ?)", [.integer(rowid), .blob(vector.blob)])
    }

    public func delete(_ rowid: Int64, in db: Database) throws(DatabaseError) {
        _ = try db.run("DELETE FROM \(name) WHERE rowid = ?", [.integer(rowid)])
    }

    /// Every stored vector into a new index, whose files are made in `directory`
    /// (`VectorIndex.directory`). Rows that do not decode, or whose dimension is not `dimension`,
    /// are not loaded and are returned, so the caller re-embeds those items.
    public func load(dimension: Int, directory: String? = VectorIndex.temporaryDirectory, partitioned: Bool = true, from db: Database) throws(DatabaseError)
        -> (index: VectorIndex, unreadable: [Int64])
    {
        var index = VectorIndex(dimension: dimension, directory: directory)
        index.buildsPartition = false
        var unreadable: [Int64] = []
        let statement = try db.statement("SELECT rowid, vector FROM \(name)")
        while try statement.step() {
            guard case .integer(let rowid) = statement.value(0) else { continue }
            guard case .blob(let bytes) = statement.value(1),
                  let vector = try? QuantizedVector(blob: bytes), vector.dimension == dimension,
                  (try? index.set(rowid, vector)) != nil else {
                unreadable.append(rowid)
                continue
            }
        }
        // The partition once, from the whole index (not rebuilt as it grows row by row).
        index.buildsPartition = true
        if partitioned { index.updatePartition() }
        return (index, unreadable)
    }

    /// Applies what the SQL side holds to `index`: after a crash, recovery or a rebuild the table
    /// is the truth, and the in-memory index follows it. Returns how many entries changed.
    @discardableResult
    public func reconcile(_ index: inout VectorIndex, from db: Database) throws(DatabaseError) -> Int {
        let (fresh, _) = try load(dimension: index.dimension, directory: index.directory, partitioned: false, from: db)
        var changes = 0
        for rowid in index.rowids where !fresh.contains(rowid) {
            index.remove(rowid)
            changes += 1
        }
        for rowid in fresh.rowids {
            let v = fresh.vector(for: rowid)!
            if index.vector(for: rowid) != v {
                try? index.set(rowid, v)
                changes += 1
            }
        }
        return changes
    }
}
