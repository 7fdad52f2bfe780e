import Foundation
import SearchlightSemantic
import SearchlightWire

/// The writer-thread half of `IndexStore`: each function runs inside the group's transaction.
extension IndexStore {
    /// A mutation with its items made ready for the writer (see `StoredRow`).
    enum PreparedMutation {
        case items([PreparedItem])
        case deleteIdentifiers([String])
        case deleteDomains([String])
        case deleteAll
    }

    enum PreparedItem {
        /// A new item, or one that replaces the stored item of the same identifier.
        case replace(uid: String, row: StoredRow)
        /// `isUpdate`: merged into the stored item by the writer, which alone can read it.
        case update(SearchableItem)
    }

    /// Builds the storage form of every donated item on the caller's thread. `now` is the
    /// donation time (the default expiration counts from it).
    func prepare(_ mutations: [Mutation]) -> [PreparedMutation] {
        let defaultExpires = options.clock().timeIntervalSince1970 + options.defaultExpiration
        let encoder = options.vectorEncoder
        return mutations.map { mutation in
            switch mutation {
            case .items(let items):
                // The new items' rows in one batch (their vectors are embedded together); updates
                // are merged by the writer, which alone can read the stored item.
                .items(Self.prepared(items, defaultExpires: defaultExpires, encoder: encoder))
            case .deleteIdentifiers(let ids): .deleteIdentifiers(ids)
            case .deleteDomains(let domains): .deleteDomains(domains)
            case .deleteAll: .deleteAll
            }
        }
    }

    private static func prepared(_ items: [SearchableItem], defaultExpires: Double, encoder: StaticEncoder?) -> [PreparedItem] {
        guard let encoder else {
            return items.map { item in
                item.isUpdate ? .update(item)
                    : .replace(uid: item.uniqueIdentifier, row: StoredRow(ItemRecord(item: item, defaultExpires: defaultExpires), vector: nil))
            }
        }
        let records = items.map { $0.isUpdate ? nil : ItemRecord(item: $0, defaultExpires: defaultExpires) }
        let vectors = StoredRow.vectors(records, encoder: encoder)
        return items.indices.map { i in
            guard let record = records[i] else { return .update(items[i]) }
            return .replace(uid: items[i].uniqueIdentifier, row: StoredRow(record, vector: vectors[i]))
        }
    }

    func applyInTransaction(
        _ mutations: [PreparedMutation], expectation: ClientStateExpectation, newClientState: [UInt8]?
    ) throws -> ApplyResult {
        if case .equals(let expected) = expectation {
            let current = try storedClientState(writer)
            guard current == expected else {
                throw SearchlightError(.mismatchedClientState,
                    "the stored client state does not match expectedClientState; fetch it with index.fetchLastClientState and resume from there")
            }
        }
        var result = ApplyResult()
        for mutation in mutations {
            switch mutation {
            case .items(let items): try donate(items, into: &result)
            case .deleteIdentifiers(let ids):
                for id in ids {
                    result.deleted += try deleteCascading(where: "uid = ?", [.text(id)])
                }
            case .deleteDomains(let domains):
                for d in domains {
                    // Recursive on dot components: `a` removes `a` and `a.b`, not `ab` ('/' follows '.').
                    result.deleted += try deleteCascading(
                        where: "domain = ?1 OR (domain >= ?1 || '.' AND domain < ?1 || '/')", [.text(d)])
                }
            case .deleteAll:
                result.deleted += try deleteAllItems()
            }
        }
        if let newClientState {
            try writer.run("INSERT OR REPLACE INTO meta(key, value) VALUES ('clientState', ?)", [.blob(newClientState)])
        }
        return result
    }

    func storedClientState(_ db: Database) throws -> [UInt8]? {
        guard let v = try db.scalar("SELECT value FROM meta WHERE key = 'clientState'") else { return nil }
        if case .blob(let b) = v { return b }
        return nil
    }

    /// The full-text columns of `items`, in FTS order (the last one is `aux`).
    static let ftsColumnList = Schema.ftsColumns.joined(separator: ", ")

    /// The writer's hot statements, prepared once: the statement cache would hash their SQL text
    /// on every use, which showed in profiles of donations.
    final class WriterStatements {
        /// Inserts a new item; does nothing when the identifier exists (then `changes` is 0).
        let insertItem: Statement
        let updateItem: Statement
        let insertFullText: Statement
        let deleteFullText: Statement
        /// The stored row of an identifier: its rowid and full-text values (to remove its FTS entries).
        let existingRow: Statement
        /// Stores an item's vector (format 5 and later; nil in an older file waiting for its migration).
        let putVector: Statement?
        /// Stores an item's vector only where it has none (`storeVector`); nil like `putVector`.
        let addMissingVector: Statement?

        init(_ db: Database, vectors: Bool) throws {
            putVector = vectors ? try Statement(database: db, sql: "INSERT OR REPLACE INTO item_vectors(rowid, vector) VALUES (?, ?)") : nil
            addMissingVector = vectors ? try Statement(database: db, sql: "INSERT OR IGNORE INTO item_vectors(rowid, vector) VALUES (?, ?)") : nil
            let columns = ftsColumnList
            insertItem = try Statement(database: db, sql: """
                INSERT INTO items(uid, domain, expires, related, title, displayName, alternateNames, contentDescription,
                textContent, keywords, authorNames, aux, attrs, ranking_hint, last_used, checksum)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(uid) DO NOTHING
                """)
            updateItem = try Statement(database: db, sql: """
                UPDATE items SET domain=?, expires=?, related=?, title=?, displayName=?, alternateNames=?,
                contentDescription=?, textContent=?, keywords=?, authorNames=?, aux=?, attrs=?, ranking_hint=?,
                last_used=?, checksum=? WHERE rowid=?
                """)
            insertFullText = try Statement(database: db, sql: "INSERT INTO fts(rowid, \(columns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
            deleteFullText = try Statement(database: db, sql: "INSERT INTO fts(fts, rowid, \(columns)) VALUES ('delete', ?, ?, ?, ?, ?, ?, ?, ?, ?)")
            existingRow = try Statement(database: db, sql: "SELECT items.rowid, \(columns) FROM items WHERE uid = ?")
        }
    }

    static let existingRecord = "SELECT items.rowid, \(ftsColumnList), \(ItemRecord.selectColumns) FROM items WHERE uid = ?"

    private func donate(_ items: [PreparedItem], into result: inout ApplyResult) throws {
        let statements = try writerStatements()
        // An item stored already expired gets no vector (issue 35): see `storeVector`.
        let now = options.clock().timeIntervalSince1970
        for item in items {
            switch item {
            case .replace(let uid, let row):
                // Insert first: a new identifier (the common case) then costs one statement. Only
                // when it exists is the stored row read, for the old full-text values to remove.
                if itemCount < options.limits.maxItemsPerIndex {
                    let insert = statements.insertItem
                    insert.reset()
                    try insert.bind(.text(uid), at: 1)
                    try insert.bind(row.columns, from: 2)
                    try insert.run()
                    if writer.changes == 1 {
                        let rowid = writer.lastInsertRowID
                        try ftsInsert(rowid: rowid, row, statements)
                        try rankWriter.touched(rowid, writer)
                        if let v = row.vector, row.expires > now { try putVector(rowid, v, statements) }
                        itemCount += 1
                        result.indexed += 1
                        continue
                    }
                }
                let lookup = statements.existingRow
                lookup.reset()
                try lookup.bind(.text(uid), at: 1)
                guard try lookup.step() else {
                    lookup.reset()
                    throw SearchlightError(.quotaExceeded,
                        "the index holds \(itemCount) items, its limit; delete items or expired content before donating more")
                }
                let existing = lookup.row()
                lookup.reset()
                try replace(rowid: existing.int(0) ?? 0, oldText: existing.values[1...Schema.ftsColumns.count], with: row, statements, now: now)
            case .update(let update):
                guard let existing = try writer.rows(Self.existingRecord, [.text(update.uniqueIdentifier)]).first,
                    let rowid = existing.int(0)
                else {
                    result.updatesDropped += 1  // an update of an item that does not exist is dropped
                    continue
                }
                var merged = ItemRecord(row: existing, offset: 1 + Schema.ftsColumns.count)
                if update.domainIdentifier != nil { merged.domain = update.domainIdentifier }
                if let e = update.expirationDate { merged.expires = e.timeIntervalSince1970 }
                merged.apply(wireAttributes: update.attributeSet.values)
                try replace(rowid: rowid, oldText: existing.values[1...Schema.ftsColumns.count], with: StoredRow(merged, encoder: options.vectorEncoder),
                    statements, now: now)
            }
            result.indexed += 1
        }
    }

    private func replace(rowid: Int64, oldText: ArraySlice<SQLValue>, with row: StoredRow, _ statements: WriterStatements, now: Double) throws {
        let sameMeaning = Self.semanticText(oldText) == Self.semanticText(row.fullText)
        try ftsDelete(rowid: rowid, oldText: oldText)
        let update = statements.updateItem
        update.reset()
        try update.bind(row.columns, from: 1)
        try update.bind(.integer(rowid), at: Int32(row.columns.count + 1))
        try update.run()
        try ftsInsert(rowid: rowid, row, statements)
        try rankWriter.touched(rowid, writer)
        try storeVector(rowid, row, sameMeaning: sameMeaning, statements, now: now)
    }

    /// The vector side of replacing an item (issue 35). Which constants a transformer query uses
    /// depends on the share of refined vectors in the whole index (`SemanticRequest.tuning`), so
    /// a write that turns one refined vector into a static one can move every other item of a
    /// small index below the static floor until idle maintenance refines it again. Writes that
    /// change nothing a query can see must not do that:
    ///
    /// - a replacement whose semantic text is unchanged (an app refreshing the expiration, or
    ///   another attribute) keeps the stored vector, which the transformer may have made: the
    ///   vector is a function of that text alone. A missing one is added, if the item is visible;
    /// - an item stored already expired gets no new vector: it is never returned, so a static
    ///   vector would only skew the share. Its old vector goes if its text changed, and is kept
    ///   if not, so an update that makes it visible again finds it still refined.
    private func storeVector(_ rowid: Int64, _ row: StoredRow, sameMeaning: Bool, _ statements: WriterStatements, now: Double) throws {
        guard let v = row.vector else { return try deleteVector(rowid) }
        let visible = row.expires > now
        guard sameMeaning, let add = statements.addMissingVector else {
            return visible ? try putVector(rowid, v, statements) : try deleteVector(rowid)
        }
        guard visible else { return }
        add.reset()
        try add.bind(.integer(rowid), at: 1)
        try add.bind(.blob(v.blob), at: 2)
        try add.run()
        if writer.changes == 1 { vectors.writerPut(rowid, v) }
    }

    /// `StoredRow.semanticText` of full-text values (FTS order).
    private static func semanticText(_ values: some Collection<SQLValue>) -> String {
        StoredRow.semanticText(values.map { if case .text(let t) = $0 { t } else { nil } })
    }

    private func ftsInsert(rowid: Int64, _ row: StoredRow, _ statements: WriterStatements) throws {
        let s = statements.insertFullText
        s.reset()
        try s.bind(.integer(rowid), at: 1)
        try s.bind(row.fullText, from: 2)
        try s.run()
    }

    /// Removes a row's entries from the external-content FTS index; it needs the values indexed.
    private func ftsDelete(rowid: Int64, oldText: some Collection<SQLValue>) throws {
        let s = try writerStatements().deleteFullText
        s.reset()
        try s.bind(.integer(rowid), at: 1)
        try s.bind(oldText, from: 2)
        try s.run()
    }

    /// Deletes rows (`condition` over `items`), their full-text entries, then every item related to
    /// a deleted one (it lives and dies with it).
    private func deleteCascading(where condition: String, _ bindings: [SQLValue]) throws -> Int {
        let returning = "RETURNING rowid, uid, \(Self.ftsColumnList)"
        var doomed: [String] = []
        func remove(_ rows: [Row]) throws {
            for row in rows {
                guard let rowid = row.int(0), let uid = row.string(1) else { continue }
                try ftsDelete(rowid: rowid, oldText: row.values[2...])
                try rankWriter.touched(rowid, writer)
                try deleteVector(rowid)
                doomed.append(uid)
            }
        }
        try remove(writer.rows("DELETE FROM items WHERE \(condition) \(returning)", bindings))
        var total = 0
        while let uid = doomed.popLast() {
            total += 1
            try remove(writer.rows("DELETE FROM items WHERE related = ? \(returning)", [.text(uid)]))
        }
        itemCount -= total
        return total
    }

    /// Empties the index and its client state, clearing the full-text index in one step.
    private func deleteAllItems() throws -> Int {
        let n = itemCount
        try writer.execute("""
            DELETE FROM items;
            INSERT INTO fts(fts) VALUES ('delete-all');
            DELETE FROM meta WHERE key = 'clientState';
            DELETE FROM engagement;
            """)
        if formatVersion >= Schema.firstVectorFormat {
            try writer.execute("DELETE FROM item_vectors")
            vectors.writerCleared()
        }
        try rankWriter.clear(writer)
        itemCount = 0
        return n
    }

    /// Deletes expired items (and their related items). Invisible already; this reclaims space.
    public func purgeExpired() throws(SearchlightError) -> Int {
        let now = options.clock().timeIntervalSince1970
        return try writeSync { store in
            var r = ApplyResult()
            r.deleted = try store.deleteCascading(where: "expires <= ?", [.double(now)])
            return r
        }.deleted
    }

    /// Records that the user engaged with an item or a suggestion (`query.engaged`); user queries
    /// rank engaged items and suggestions higher.
    /// Adds to an item's engagement, on the writer inside its transaction.
    func engage(_ identifier: String, weight: Double, at now: Double) throws {
        // The engagement is part of the score: a segment that read the item needs it again.
        for row in try writer.rows("UPDATE items SET engagement = engagement + ? WHERE uid = ? RETURNING rowid",
            [.double(weight), .text(identifier)]) {
            if let rowid = row.int(0) {
                try rankWriter.touched(rowid, writer)
                // Opened from results: refined before what the user has not met (`RefinementOrder`).
                refinementHints.note([rowid], tier: .engaged, at: now)
            }
        }
    }

    public func recordEngagement(identifier: String?, suggestion: String?, weight: Double) throws(SearchlightError) {
        let now = options.clock().timeIntervalSince1970
        _ = try writeSync { store in
            if let identifier { try store.engage(identifier, weight: weight, at: now) }
            if let suggestion {
                try store.writer.run("""
                    INSERT INTO engagement(kind, key, count, last) VALUES ('suggestion', ?1, ?2, ?3)
                    ON CONFLICT(kind, key) DO UPDATE SET count = count + ?2, last = ?3
                    """, [.text(TextAnalysis.fold(suggestion)), .double(weight), .double(now)])
            }
            return ApplyResult()
        }
    }
}
