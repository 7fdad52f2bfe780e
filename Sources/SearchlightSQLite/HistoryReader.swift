import Foundation

/// What one batch sends: items to index and identifiers to delete, for a history range
/// `(from, through]` or for a whole rebuild (which covers the history up to `through`).
struct ChangeSet: Sendable {
    var from: Int64?
    var through: Int64
    var historyRows = 0
    var items: [SearchableItem] = []
    var deletes: [String] = []
    var isRebuild: Bool { from == nil }
    /// For a rebuild: the `rebuildNeeded` generation it answers (cleared after it commits).
    var rebuildGeneration: String?
}

/// Reads the app's database for the delegate, always inside one read transaction, so that the
/// history range, the rows and whatever `attributeSet(for:)` selects are one snapshot. It
/// decides by the rows themselves, not by the change kinds: a key whose row exists is indexed
/// (or deleted when `attributeSet(for:)` answers nil), a key whose row is gone is deleted. So a
/// range's changes are applied as the snapshot's final state, whatever order they came in.
struct HistoryReader: Sendable {
    let model: SpotlightModel
    /// The item for a row, or nil for "do not index it" (the delegate's `attributeSet(for:)`).
    let item: @Sendable (Row) throws -> SearchableItem?

    /// The next history range after `token`, at most `limit` rows, with the items and deletes it
    /// implies; nil when there is no history after `token`.
    func range(after token: Int64, limit: Int, _ db: SQLiteDatabase) throws -> ChangeSet? {
        try db.read {
            var changed = KeySet()
            var last: Int64?
            var count = 0
            try db.query("SELECT token, entity, key FROM searchlight_history WHERE token > ? ORDER BY token LIMIT ?",
                         [.integer(token), .integer(Int64(limit))]) { _, v in
                count += 1
                last = v[0].int64Value
                // A key of NULL (an app's nullable key column) names no row; an entity the model
                // no longer has names no item we could compute.
                if let name = v[1].stringValue, let entity = model.entity(named: name), !v[2].isNull {
                    changed.insert(entity, v[2])
                }
            }
            guard let last else { return nil }
            var set = ChangeSet(from: token, through: last, historyRows: count)
            try addDependents(to: &changed, db)
            try read(changed, into: &set, db)
            return set
        }
    }

    /// Everything: every row of every entity, and the history's last token at that snapshot,
    /// which the rebuild's batch stores as the client state (it covers the history up to there).
    func everything(_ db: SQLiteDatabase) throws -> ChangeSet {
        try db.read {
            let last = try db.scalar("SELECT max(token) FROM searchlight_history")?.int64Value ?? 0
            var set = ChangeSet(from: nil, through: last)
            set.rebuildGeneration = try HistorySchema.meta("rebuildNeeded", db)?.stringValue
            for entity in model.entities {
                var rows: [(DatabaseValue, [String], [DatabaseValue])] = []
                try db.query("SELECT \(HistorySchema.keyExpression(entity.key)), * FROM \(quoted(entity.table))") { names, v in
                    rows.append((v[0], Array(names.dropFirst()), Array(v.dropFirst())))
                }
                for (key, names, values) in rows where !key.isNull {
                    let row = Row(entity: entity, key: key, columnNames: names, values: values, database: db)
                    if let item = try item(row) { set.items.append(item) }
                }
            }
            return set
        }
    }

    /// The rows these identifiers name, re-read now (reindex-identifiers): items for the rows
    /// that exist and are indexed, deletes for the others (a missing row is a delete, and so is
    /// an identifier no entity of the model claims).
    func rows(identifiers: [String], _ db: SQLiteDatabase) throws -> (items: [SearchableItem], deletes: [String]) {
        try db.read {
            var set = ChangeSet(from: 0, through: 0)
            var keys = KeySet()
            for identifier in identifiers {
                guard let (entity, keyText) = model.entityAndKey(of: identifier) else {
                    set.deletes.append(identifier)
                    continue
                }
                // A key that spells an integer is bound as one: it matches an INTEGER key and,
                // by SQLite's affinity rules, a TEXT key holding the same digits.
                let key: DatabaseValue = Int64(keyText).map { String($0) == keyText ? .integer($0) : .text(keyText) } ?? .text(keyText)
                keys.insert(entity, key)
            }
            try read(keys, into: &set, db)
            return (set.items, set.deletes)
        }
    }

    /// Adds the keys that `Dependents` queries name for the changed keys, following dependents
    /// of dependents once each.
    private func addDependents(to keys: inout KeySet, _ db: SQLiteDatabase) throws {
        var next = 0
        while next < keys.ordered.count {
            let (entity, key) = keys.ordered[next]
            next += 1
            for dependents in entity.dependents {
                guard let target = model.entity(named: dependents.entity) else { continue }
                for row in try db.rows(dependents.query, [key]) {
                    if let k = row.first, !k.isNull { keys.insert(target, k) }
                }
            }
        }
    }

    /// Reads the row of each key: an item, or a delete.
    private func read(_ keys: KeySet, into set: inout ChangeSet, _ db: SQLiteDatabase) throws {
        for (entity, key) in keys.ordered {
            var found: (DatabaseValue, [String], [DatabaseValue])?
            let keyColumn = HistorySchema.keyExpression(entity.key)
            try db.query("SELECT \(keyColumn), * FROM \(quoted(entity.table)) WHERE \(keyColumn) = ?", [key]) { names, v in
                if found == nil { found = (v[0], Array(names.dropFirst()), Array(v.dropFirst())) }
            }
            let identifier = entity.uniqueIdentifier(for: key)
            guard let (rowKey, names, values) = found,
                  let item = try item(Row(entity: entity, key: rowKey, columnNames: names, values: values, database: db))
            else {
                set.deletes.append(identifier)
                continue
            }
            set.items.append(item)
            // The row matched by affinity under another spelling (`photo-05` for key 5): that
            // spelling names no row of its own.
            if item.uniqueIdentifier != identifier { set.deletes.append(identifier) }
        }
    }
}

/// Entity keys in first-seen order, each once.
struct KeySet {
    private(set) var ordered: [(Entity, DatabaseValue)] = []
    private var seen = Set<Pair>()

    private struct Pair: Hashable {
        var entity: String
        var key: DatabaseValue
    }

    mutating func insert(_ entity: Entity, _ key: DatabaseValue) {
        if seen.insert(Pair(entity: entity.name, key: key)).inserted { ordered.append((entity, key)) }
    }
}
