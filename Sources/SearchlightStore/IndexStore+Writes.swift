import Foundation
import SearchlightWire

/// The writer-thread half of `IndexStore`: each function runs inside the group's transaction.
extension IndexStore {
    func applyInTransaction(
        _ mutations: [Mutation], expectation: ClientStateExpectation, newClientState: [UInt8]?
    ) throws -> ApplyResult {
        if case .equals(let expected) = expectation {
            let current = try storedClientState(writer)
            guard current == expected else {
                throw SearchlightError(.mismatchedClientState,
                    "the stored client state does not match expectedClientState; fetch it with index.fetchLastClientState and resume from there")
            }
        }
        var result = ApplyResult()
        let now = options.clock().timeIntervalSince1970
        for mutation in mutations {
            switch mutation {
            case .items(let items): try donate(items, now: now, into: &result)
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

    private func donate(_ items: [SearchableItem], now: Double, into result: inout ApplyResult) throws {
        let defaultExpires = now + options.defaultExpiration
        for item in items {
            // The old full-text values are needed to remove the old FTS entries; an update also
            // merges into the rest of the stored row.
            let existing = try writer.rows(
                "SELECT items.rowid, \(Self.ftsColumnList)\(item.isUpdate ? ", " + ItemRecord.selectColumns : "") FROM items WHERE uid = ?",
                [.text(item.uniqueIdentifier)]
            ).first
            let record: ItemRecord
            if item.isUpdate {
                guard let existing else {
                    result.updatesDropped += 1  // an update of an item that does not exist is dropped
                    continue
                }
                var merged = ItemRecord(row: existing, offset: 1 + Schema.ftsColumns.count)
                if item.domainIdentifier != nil { merged.domain = item.domainIdentifier }
                if let e = item.expirationDate { merged.expires = e.timeIntervalSince1970 }
                merged.apply(wireAttributes: item.attributeSet.values)
                record = merged
            } else {
                record = ItemRecord(item: item, defaultExpires: defaultExpires)
            }
            if let existing, let rowid = existing.int(0) {
                try ftsDelete(rowid: rowid, oldText: Array(existing.values[1...Schema.ftsColumns.count]))
                try writer.run("""
                    UPDATE items SET domain=?, expires=?, related=?, title=?, displayName=?, alternateNames=?,
                    contentDescription=?, textContent=?, keywords=?, authorNames=?, aux=?, attrs=?, ranking_hint=?,
                    last_used=?, checksum=? WHERE rowid=?
                    """, values(of: record) + [.integer(rowid)])
                try ftsInsert(rowid: rowid, record)
            } else {
                guard itemCount < options.limits.maxItemsPerIndex else {
                    throw SearchlightError(.quotaExceeded,
                        "the index holds \(itemCount) items, its limit; delete items or expired content before donating more")
                }
                try writer.run("""
                    INSERT INTO items(uid, domain, expires, related, title, displayName, alternateNames, contentDescription,
                    textContent, keywords, authorNames, aux, attrs, ranking_hint, last_used, checksum)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """, [.text(record.uid)] + values(of: record))
                try ftsInsert(rowid: writer.lastInsertRowID, record)
                itemCount += 1
            }
            result.indexed += 1
        }
    }

    private func ftsInsert(rowid: Int64, _ r: ItemRecord) throws {
        let text = r.text.map { $0.map(SQLValue.text) ?? .null } + [r.aux.map(SQLValue.text) ?? .null]
        try writer.run("INSERT INTO fts(rowid, \(Self.ftsColumnList)) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [.integer(rowid)] + text)
    }

    /// Removes a row's entries from the external-content FTS index; it needs the values indexed.
    private func ftsDelete(rowid: Int64, oldText: [SQLValue]) throws {
        try writer.run("INSERT INTO fts(fts, rowid, \(Self.ftsColumnList)) VALUES ('delete', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [.integer(rowid)] + oldText)
    }

    private func values(of r: ItemRecord) -> [SQLValue] {
        func text(_ s: String?) -> SQLValue { s.map(SQLValue.text) ?? .null }
        func real(_ d: Double?) -> SQLValue { d.map(SQLValue.double) ?? .null }
        return [text(r.domain), .double(r.expires), text(r.related)] + r.text.map(text)
            + [text(r.aux), .text(r.attrsJSON), real(r.rankingHint), real(r.lastUsed), .integer(r.checksum)]
    }

    /// Deletes rows (`condition` over `items`), their full-text entries, then every item related to
    /// a deleted one (it lives and dies with it).
    private func deleteCascading(where condition: String, _ bindings: [SQLValue]) throws -> Int {
        let returning = "RETURNING rowid, uid, \(Self.ftsColumnList)"
        var doomed: [String] = []
        func remove(_ rows: [Row]) throws {
            for row in rows {
                guard let rowid = row.int(0), let uid = row.string(1) else { continue }
                try ftsDelete(rowid: rowid, oldText: Array(row.values[2...]))
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
    public func recordEngagement(identifier: String?, suggestion: String?, weight: Double) throws(SearchlightError) {
        let now = options.clock().timeIntervalSince1970
        _ = try writeSync { store in
            if let identifier {
                try store.writer.run("UPDATE items SET engagement = engagement + ? WHERE uid = ?", [.double(weight), .text(identifier)])
            }
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
