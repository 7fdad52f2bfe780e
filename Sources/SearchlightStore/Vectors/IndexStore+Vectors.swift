import Foundation
import SearchlightSemantic
import SearchlightWire

extension Schema {
    /// The first format with `item_vectors`.
    public static let firstVectorFormat = 5
}

/// Semantic search's side of the store (Docs/SemanticSearch.md, "In the daemon"): each item's
/// vector written with its text, the in-memory index loaded on the first semantic query, the
/// items of an older file filled in the background, and the vector top-k of a query checked
/// against `items` like the lexical side.
extension IndexStore {
    /// Whether this store writes and searches vectors: an encoder, and a file of format 5 or later.
    public var hasVectors: Bool { options.vectorEncoder != nil && formatVersion >= Schema.firstVectorFormat }

    // MARK: Writer (inside the group's transaction)

    func putVector(_ rowid: Int64, _ vector: QuantizedVector, _ statements: WriterStatements) throws {
        guard let s = statements.putVector else { return }
        s.reset()
        try s.bind(.integer(rowid), at: 1)
        // The BLOB written on the stack and bound without a copy, for the step just below: no
        // array and no SQLite copy per donated item.
        try withUnsafeTemporaryAllocation(byteCount: vector.blobCount, alignment: 8) { buffer in
            vector.writeBlob(into: buffer)
            try s.bindUncopiedBlob(UnsafeRawBufferPointer(buffer), at: 2)
            try s.run()
        }
        vectors.writerPut(rowid, vector)
    }

    func deleteVector(_ rowid: Int64) throws {
        guard formatVersion >= Schema.firstVectorFormat else { return }
        try writer.run("DELETE FROM item_vectors WHERE rowid = ?", [.integer(rowid)])
        if writer.changes > 0 { vectors.writerDelete(rowid) }
    }

    // MARK: Loading and filling

    /// Loads the in-memory index (on the writer thread, between groups, so that it is the
    /// committed state and every later commit is applied to it), then starts the background fill
    /// of items that have no vector yet (a file opened from an older format, items donated while
    /// the daemon had no encoder). Returns at once when it is loaded.
    public func loadVectors() throws(SearchlightError) {
        guard let encoder = options.vectorEncoder, hasVectors else { return }
        if !vectors.isLoaded {
            _ = try writeOutsideTransaction { store in
                guard !store.vectors.isLoaded else { return ApplyResult() }
                // The index's files go beside the store's (never a tmpfs /tmp: they would be memory again).
                let directory = (store.path as NSString).deletingLastPathComponent
                // The index saved at the last clean close, when it holds what the table holds now;
                // else every row of the table. The partition is built after, in the background
                // (`StoreVectors.schedulePartition`), or restored below.
                var index: VectorIndex
                switch store.loadSavedVectorIndex(dimension: encoder.dimension, directory: directory) {
                case .success(let saved):
                    index = saved
                    store.vectors.noteLoad(.savedFile)
                case .failure(let why):
                    let unreadable: [Int64]
                    (index, unreadable) = try VectorTable().load(dimension: encoder.dimension, directory: directory, partitioned: false,
                        from: store.writer)
                    // A row that does not decode is deleted, so the fill embeds its item again.
                    if !unreadable.isEmpty {
                        _ = try store.writer.transaction {
                            for rowid in unreadable { try store.writer.run("DELETE FROM item_vectors WHERE rowid = ?", [.integer(rowid)]) }
                            try store.bumpVectorEpoch()
                        }
                    }
                    store.vectors.noteLoad(.table(why.reason))
                }
                index.partitionLimit = store.options.vectorPartitionLimit
                // The load read every row through the writer's page cache (8 MB at 1M items):
                // given back, since queries read through the readers' (issue 32).
                try? store.writer.execute("PRAGMA shrink_memory")
                // The saved partition, restored here where the index has one owner (a copy
                // would be unshared first: every vector file copied).
                let path = store.options.vectorPartitionFile ? store.path + Self.partitionFileSuffix : nil
                let restored = path.map { index.restorePartition(from: $0) }
                store.vectors.install(index, partitionPath: path, restored: restored)
                return ApplyResult()
            }
        }
        if vectors.claimFill() {
            let thread = Thread { [self] in
                BackgroundPriority.lowerCurrentThread(name: "vector-fill")
                fillMissingVectors(encoder)
                vectors.fillEnded()
            }
            thread.name = "vector-fill"
            thread.start()
        }
    }

    /// The saved partition of the vector index (`PartitionFile`), beside the store's file.
    public static let partitionFileSuffix = "-partition"
    /// The saved partition and the `.tmp` a save writes before renaming it.
    public static let partitionFileSuffixes = [partitionFileSuffix, partitionFileSuffix + PartitionFile.temporarySuffix]
    /// The vector index saved at a clean close (`VectorIndexFile`), beside the store's file.
    public static let vectorIndexFileSuffix = "-vectors"
    /// Every file the vector index keeps beside the store's (the saved partition, the saved
    /// index, and the `.tmp` of each while it is written): removed with the store's file, by a
    /// swap, a recovery and a delete-all, and counted in its bytes.
    public static let vectorSideFileSuffixes = partitionFileSuffixes
        + [vectorIndexFileSuffix, vectorIndexFileSuffix + VectorIndexFile.temporarySuffix]
    /// SQLite's files beside a store's own (a rollback journal only from older versions).
    public static let sqliteFileSuffixes = ["-wal", "-shm", "-journal"]

    /// Inside the writer's transaction, before it commits: moves the vector epoch when the
    /// transaction wrote `item_vectors` (`Schema.vectorStamp`). Every write of that table journals
    /// itself (`StoreVectors.writerPut`, `writerDelete`, `writerCleared`: `putVector`,
    /// `deleteVector`, the delete-all, the fill, refinement, a missing vector added), so the
    /// journal says whether this transaction wrote any; a call rolled back since counts too
    /// (the epoch then moves for nothing, which costs only a saved index not used).
    func bumpVectorEpochIfTouched() throws {
        guard vectors.writerTouched else { return }
        try bumpVectorEpoch()
    }

    func bumpVectorEpoch() throws {
        guard formatVersion >= Schema.firstVectorFormat else { return }
        // A random value, not a count: two histories of one store that part (an older copy of
        // the file put back, a power loss rolling back commits after the save) never meet at
        // the same epoch, as counts replaying the same number of transactions would.
        try writer.run("UPDATE meta SET value = random() WHERE key = 'vectorEpoch'")
    }

    /// The store's vector stamp now (`Schema.vectorStamp`), on the writer's connection; nil for
    /// a store without vectors or when it cannot be read.
    func currentVectorStamp() -> VectorStamp? {
        guard formatVersion >= Schema.firstVectorFormat,
              let row = try? writer.rows("""
                  SELECT (SELECT value FROM meta WHERE key = 'vectorIdentity'), (SELECT value FROM meta WHERE key = 'vectorEpoch'),
                      (SELECT coalesce(max(rowid), 0) FROM item_vectors)
                  """).first,
              case .blob(let identity) = row.values[0], let epoch = row.int(1), let top = row.int(2) else { return nil }
        return VectorStamp(identity: identity, epoch: epoch, storeFormat: formatVersion, topRowid: top)
    }

    /// On the writer thread: the vector index saved beside the store, if it holds the vectors
    /// committed now (`VectorIndexFile.load`; the file is removed whatever it held).
    func loadSavedVectorIndex(dimension: Int, directory: String) -> Result<VectorIndex, VectorIndexFileError> {
        guard let path = vectors.indexPath else { return .failure(VectorIndexFileError("saving the vector index is off")) }
        guard let stamp = currentVectorStamp() else {
            unlink(path)
            return .failure(VectorIndexFileError("the store's vector stamp cannot be read"))
        }
        let result = VectorIndexFile.load(path, dimension: dimension, directory: directory, stamp: stamp, maxLive: itemCount)
        if case .failure(let why) = result, why.reason != "no saved vector index" {
            options.vectorIndexEvents?(.notUsed(path: path, reason: why.reason))
        }
        return result
    }

    /// Saves the loaded vector index beside the store (`VectorIndexFile.save`), at the stamp of
    /// the vectors committed now. Only once the writer has stopped (`shutDown`), so no commit
    /// comes between the stamp and the index; nothing when the index is not loaded.
    func saveVectorIndex(deadline: Date = .distantFuture) {
        guard hasVectors, let stamp = currentVectorStamp() else { return }
        let started = Date()
        guard let bytes = vectors.saveIndex(stamp: stamp, deadline: deadline) else { return }
        options.vectorIndexEvents?(.saved(path: path + Self.vectorIndexFileSuffix, bytes: bytes,
            milliseconds: Int(Date().timeIntervalSince(started) * 1000)))
    }

    /// Where the last load of the vector index came from (nil before a load).
    public var vectorIndexLoad: VectorIndexLoad? { vectors.indexLoad }
    /// Vector indexes saved by this store's close (0 or 1).
    public var vectorIndexSaves: Int { vectors.indexSaves }

    /// What the last load of the vector index did with its saved partition (nil before a load).
    public var vectorPartitionRestore: PartitionRestore? { vectors.partitionRestore }
    /// Partitions of the vector index saved since the store opened.
    public var vectorPartitionSaves: Int { vectors.partitionSaves }
    /// Whether the loaded vector index is partitioned now.
    public var isVectorIndexPartitioned: Bool { vectors.isPartitioned }
    /// Whether a partition build of the vector index runs.
    public var isBuildingVectorPartition: Bool { vectors.isBuildingPartition }

    /// Items per batch of the background fill: one batch is a few milliseconds of the writer.
    static let vectorFillBatch = 256

    /// Embeds every unexpired item without a vector (an expired one gets none: `storeVector`), in
    /// batches: read on a reader, embedded on this thread, stored by the writer as maintenance
    /// (`INSERT OR IGNORE`, and only while the item exists unexpired: a donation that wrote a
    /// vector meanwhile wins, a deleted or expired item gets none). It gives way to donations:
    /// while a client wrote in the last 200 ms it waits.
    func fillMissingVectors(_ encoder: StaticEncoder) {
        var after: Int64 = 0
        while !isClosing {
            if secondsSinceClientWrite < 0.2 {
                Thread.sleep(forTimeInterval: 0.05)
                continue
            }
            guard let rows = try? read({ db in
                try db.rows("""
                    SELECT rowid, \(StoredRow.semanticColumns) FROM items
                    WHERE rowid > ? AND expires > ? AND NOT EXISTS (SELECT 1 FROM item_vectors v WHERE v.rowid = items.rowid)
                    ORDER BY rowid LIMIT ?
                    """, [.integer(after), .double(options.clock().timeIntervalSince1970), .integer(Int64(Self.vectorFillBatch))])
            }), let last = rows.last?.int(0) else { return }
            after = last
            var made: [(Int64, QuantizedVector)] = []
            for row in rows {
                guard let rowid = row.int(0) else { continue }
                let text = StoredRow.semanticText((1...6).map { row.string($0) })
                if !text.isEmpty { made.append((rowid, QuantizedVector(encoder.embed(text)))) }
            }
            let batch = made
            do {
                _ = try maintenanceWrite { store in
                    // Checked again in the write: the item may have been re-donated expired since it was read.
                    let now = store.options.clock().timeIntervalSince1970
                    for (rowid, v) in batch {
                        try store.writer.run("""
                            INSERT OR IGNORE INTO item_vectors(rowid, vector) SELECT ?1, ?2
                            WHERE EXISTS (SELECT 1 FROM items WHERE rowid = ?1 AND expires > ?3)
                            """, [.integer(rowid), .blob(v.blob), .double(now)])
                        if store.writer.changes == 1 { store.vectors.writerPut(rowid, v) }
                    }
                    return ApplyResult()
                }
            } catch {
                return
            }
        }
    }

    /// Vectors stored and how many of them the transformer made (`refined`), for `status`.
    public func vectorCounts() throws(SearchlightError) -> (vectors: Int, refined: Int) {
        guard formatVersion >= Schema.firstVectorFormat else { return (0, 0) }
        if let counts = vectors.counts { return counts }
        return try read { db in
            // Every transaction that writes item_vectors moves the vector epoch: at the epoch of
            // the last scan the counts are the same, and admin.status, polled while an app
            // searches, does not read the whole table again (at 64k a scan cost ~20 ms of CPU a
            // call, on a core the app's queries needed).
            let epoch = try db.rows("SELECT value FROM meta WHERE key = 'vectorEpoch'").first?.int(0)
            if let epoch, let counts = vectorCountScans.counts(at: epoch) { return counts }
            vectorCountScans.add()
            let row = try db.rows(Self.vectorCountSQL).first
            let counts = (vectors: Int(row?.int(0) ?? 0), refined: Int(row?.int(1) ?? 0))
            if let epoch { vectorCountScans.keep(counts, at: epoch) }
            return counts
        }
    }

    /// Vectors, and refined ones (flags bit 0 in the BLOB's second byte: `QuantizedVector.blob`).
    static let vectorCountSQL = "SELECT count(*), count(CASE WHEN hex(substr(vector, 2, 1)) = '01' THEN 1 END) FROM item_vectors"

    /// Whether the background fill of missing vectors is running.
    public var isFillingVectors: Bool { vectors.isFilling }

    // MARK: Refinement

    /// Replaces static vectors by the transformer's (`embed`: texts to unit vectors), in batches
    /// of `batch` items, until none is left or `yieldNow` says to stop (checked between batches).
    /// A vector is replaced only while it is still the one read (a donation meanwhile wrote a
    /// newer static vector, which a later run refines). Returns the vectors refined. Idle
    /// maintenance runs it (`Maintenance`), so it gives way to load like the rest.
    ///
    /// `order`: where users look first (`RefinementOrder`): each batch takes the best items of
    /// `refinementHints` (engaged, used, returned by user queries) and fills up from a cursor
    /// walking the rowids down from the newest; a pass that ends goes once more over the rowids
    /// donated since it began. Each batch costs lookups by rowid and one range of the primary
    /// key, whatever the index's size: nothing is sorted per batch.
    ///
    /// Each batch commits on its own, so what was refined stays when the store is closed under
    /// the run (the open-index bound, a replace, the daemon's stop): the count so far is
    /// returned then, not an error, and `isClosing` tells the caller to go on with the store
    /// reopened; the batch in flight is the only work lost.
    public func refineVectors(batch: Int = 16, order: RefinementOrder = .whereUsersLook, embed: ([String]) -> [[Float]],
        yieldNow: () -> Bool, committed: (Int) -> Void = { _ in }) throws(SearchlightError) -> Int {
        guard hasVectors else { return 0 }
        var cursor = RefinementCursor(descending: order == .whereUsersLook)
        var refined = 0
        if order == .whereUsersLook, refinementHints.claimSeed() { try seedRefinementHints() }
        while !isClosing && !yieldNow() {
          do {
            let wanted = order == .whereUsersLook ? refinementHints.take(batch) : []
            let rows = try read { db in
                var rows = wanted.isEmpty ? [] : try db.rows("""
                    \(Self.refinementSelect) WHERE v.rowid IN (SELECT value FROM json_each(?)) AND \(Self.staticVector)
                    """, [.text("[" + wanted.map(String.init).joined(separator: ",") + "]")])
                while rows.count < batch, !cursor.isDone {
                    let taken = Set(rows.compactMap { $0.int(0) })
                    let more = try db.rows("""
                        \(Self.refinementSelect) WHERE v.rowid > ? AND v.rowid < ? AND \(Self.staticVector)
                        ORDER BY v.rowid \(cursor.descending ? "DESC" : "ASC") LIMIT ?
                        """, [.integer(cursor.lower), .integer(cursor.upper), .integer(Int64(batch - rows.count))])
                    cursor.advance(over: more.compactMap { $0.int(0) })
                    rows += more.filter { !taken.contains($0.int(0) ?? 0) }
                }
                return rows
            }
            // Empty only once the cursor is done: the hints noted since wait for the next run.
            if rows.isEmpty { break }
            var texts: [String] = [], keys: [(Int64, [UInt8])] = []
            for row in rows {
                guard let rowid = row.int(0), case .blob(let old) = row.values[1] else { continue }
                let text = StoredRow.semanticText((2...7).map { row.string($0) })
                guard !text.isEmpty else { continue }
                texts.append(text)
                keys.append((rowid, old))
            }
            let vectors = embed(texts).map { QuantizedVector($0, refined: true) }
            let updates = Array(zip(keys, vectors))
            let n = try maintenanceWrite { store in
                var r = ApplyResult()
                for ((rowid, old), v) in updates {
                    try store.writer.run("UPDATE item_vectors SET vector = ? WHERE rowid = ? AND vector = ?",
                        [.blob(v.blob), .integer(rowid), .blob(old)])
                    if store.writer.changes == 1 {
                        store.vectors.writerPut(rowid, v)
                        r.indexed += 1
                    }
                }
                return r
            }.indexed
            refined += n
            committed(refined)
          } catch {
            if isClosing { break }
            throw error
          }
        }
        return refined
    }

    /// A static vector's row (flags byte 0: `QuantizedVector.blob`).
    static let staticVector = "hex(substr(v.vector, 2, 1)) = '00'"
    /// A vector's rowid, BLOB and its item's semantic text columns.
    static let refinementSelect = """
        SELECT v.rowid, v.vector, \(StoredRow.semanticColumns.split(separator: ", ").map { "i." + $0 }.joined(separator: ", ")) FROM item_vectors v
        JOIN items i ON i.rowid = v.rowid
        """

    /// Seeds `refinementHints` from the file, once per opened store: the items the user engaged
    /// with and those donated with a `lastUsedDate`, the most recent first. One scan of `items`
    /// on the refinement's thread, the first time it runs.
    func seedRefinementHints() throws(SearchlightError) {
        let rows = try read { db in
            try db.rows("SELECT rowid, engagement, last_used FROM items WHERE engagement > 0 OR last_used IS NOT NULL")
        }
        for row in rows {
            guard let rowid = row.int(0) else { continue }
            let engaged = (row.double(1) ?? 0) > 0
            refinementHints.note([rowid], tier: engaged ? .engaged : .used, at: row.double(2) ?? 0)
        }
    }

    /// Rowids a user query answered: refinement takes them early (`RefinementOrder`). The first
    /// `RefinementHints.hitsPerQuery`; nothing once every vector is refined.
    func noteQueryHits(_ rowids: some Collection<Int64>) {
        guard hasVectors, !rowids.isEmpty else { return }
        if let counts = vectors.counts, counts.refined >= counts.vectors { return }
        refinementHints.note(rowids.prefix(RefinementHints.hitsPerQuery), tier: .returned, at: options.clock().timeIntervalSince1970)
    }

    /// Of the items `identifiers` names, how many have a vector and how many of those are refined
    /// (the bench's share of hits refined).
    public func refinedCount(identifiers: [String]) throws(SearchlightError) -> (vectors: Int, refined: Int) {
        guard hasVectors, !identifiers.isEmpty else { return (0, 0) }
        let ids = JSONValue.array(identifiers.map { .string($0) }).jsonString
        return try read { db in
            let row = try db.rows("""
                SELECT count(*), count(CASE WHEN hex(substr(v.vector, 2, 1)) = '01' THEN 1 END) FROM items i
                JOIN item_vectors v ON v.rowid = i.rowid WHERE i.uid IN (SELECT value FROM json_each(?))
                """, [.text(ids)]).first
            return (Int(row?.int(0) ?? 0), Int(row?.int(1) ?? 0))
        }
    }

    /// Whether `close` or `shutDown` began: work on this store stops, and goes on with the store
    /// the registry opens next.
    public var isClosed: Bool { isClosing }

    // MARK: Searching

    /// The boosts of a user query's score (rankingHint, recency of use, engagement) as one factor
    /// of 1 or more, with one binding: now. The lexical side multiplies bm25 by the same factor.
    static let boostFactorSQL = """
        (1.0 + coalesce(items.ranking_hint, 0) / 100.0)
        * (1.0 + CASE WHEN items.last_used IS NULL THEN 0 ELSE 0.5 / (1.0 + max(0, ? - items.last_used) / 604800.0) END)
        * (1.0 + items.engagement / (items.engagement + 5.0))
        """

    /// The vector hits a search for `limit` items checks in SQL first.
    public static func vectorChecks(limit: Int) -> Int { max(limit * 2, 64) }

    /// The `limit` items nearest to `query` that are visible and pass `filter`, best first. The
    /// index is searched for more than `limit` and the hits are checked in SQL (so a deleted or
    /// expired item, or one outside the filter, is never returned); when too many fail, the
    /// search is repeated for four times as many, and past 4 096 it searches only among the
    /// items SQL allows. Hits below `minimumSimilarity` are left out (and end the widening).
    ///
    /// The hits are ordered by similarity times the boost factor (`boostFactorSQL`), as the
    /// lexical side orders by bm25 times it: a boosted item ranks higher on either side. The
    /// floor applies to the similarity itself; the boost orders the hits SQL checked (at least
    /// twice `limit`), so an item far below them is not lifted in. `boostedScore` is told each
    /// hit's similarity times its boost (the order's key; a query across indexes merges by it).
    /// With `relativeFloor`, the floor is lowered for a query whose best hit is below it
    /// (`RelativeFloor.floor`): the best is the nearest item of the index, visible or not, so the
    /// floor does not depend on the filter. `unionVectors`: in a query across indexes, the vectors
    /// of all of them, so that this one rescores its share of what one index of them all would
    /// (`StoreVectors.mode(k:unionCount:)`). `cut`: hits below it are not checked (a query across
    /// indexes: `FederatedUserQuery.vectorCut`, below the `vectorChecks(limit:)`-th best similarity the
    /// indexes asked before this one found, so outside the union's first search); `searched`: told
    /// the similarities the search found (before the floor).
    func vectorCandidates(_ db: Database, query: [Float], limit: Int, filter: SQLFilter?, now: Double, minimumSimilarity: Float = -1,
        relativeFloor: RelativeFloor? = nil, budget: QueryBudget?, unionVectors: Int? = nil, cut: Float? = nil,
        searched: (([Float]) -> Void)? = nil, boostedScore: ((Int64, Float) -> Void)? = nil) throws -> [VectorMatch]
    {
        var minimumSimilarity = minimumSimilarity
        guard limit > 0 else { return [] }
        let filter = filter ?? .all
        let driver = filter.ftsMatch.map { _ in " AND items.rowid IN (SELECT rowid FROM fts WHERE fts MATCH ?)" } ?? ""
        let conditions = "\(Self.visible) AND (\(filter.sql))\(driver)"
        let conditionBindings: [SQLValue] = [.double(now), .double(now)] + filter.bindings + (filter.ftsMatch.map { [.text($0)] } ?? [])
        func boosted(_ matches: [VectorMatch]) throws -> [VectorMatch] {
            let ids = "[" + matches.map { String($0.rowid) }.joined(separator: ",") + "]"
            var boost: [Int64: Float] = [:]
            for row in try db.rows("SELECT items.rowid, \(Self.boostFactorSQL) FROM items WHERE items.rowid IN (SELECT value FROM json_each(?)) AND \(conditions)",
                [.double(now), .text(ids)] + conditionBindings) {
                if let rowid = row.int(0) { boost[rowid] = Float(row.double(1) ?? 1) }
            }
            let kept = matches.filter { boost[$0.rowid] != nil }
            if let boostedScore { for m in kept { boostedScore(m.rowid, m.similarity * boost[m.rowid]!) } }
            return kept.indices.sorted { a, b in
                let x = kept[a].similarity * boost[kept[a].rowid]!, y = kept[b].similarity * boost[kept[b].rowid]!
                return x != y ? x > y : a < b
            }.map { kept[$0] }
        }
        var k = Self.vectorChecks(limit: limit)
        while true {
            try budget?.check()
            let mode = unionVectors.map { vectors.mode(k: k, unionCount: $0) } ?? .automatic
            guard let (found, total) = QueryBudget.phase(budget, "vector.search", { vectors.search(query, k: k, mode: mode) }) else { return [] }
            searched?(found.map(\.similarity))
            if let relativeFloor, let best = found.first?.similarity {
                minimumSimilarity = relativeFloor.floor(best: best, absolute: minimumSimilarity)
            }
            var matches = found.filter { $0.similarity >= minimumSimilarity }
            var floorReached = matches.count < found.count
            if let cut, matches.last.map({ $0.similarity < cut }) ?? false {
                matches = matches.filter { $0.similarity >= cut }
                floorReached = true
            }
            let kept = try boosted(matches)
            if kept.count >= limit || floorReached || found.count < k || k >= total { return Array(kept.prefix(limit)) }
            if k >= 4096 {
                try budget?.check()
                let all = Set(try db.rows("SELECT items.rowid FROM items WHERE \(conditions)", conditionBindings).compactMap { $0.int(0) })
                let nearest = (vectors.search(query, k: limit * 2, mode: .exact, allowed: { all.contains($0) })?.matches ?? [])
                    .filter { $0.similarity >= minimumSimilarity }
                return Array(try boosted(nearest).prefix(limit))
            }
            k *= 4
        }
    }
}
