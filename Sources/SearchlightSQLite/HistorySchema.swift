import Foundation

/// The objects the delegate owns in the app's database (DESIGN §10), all named `searchlight_*`:
/// the history table the triggers append to, a small key-value table, and one trigger per
/// tracked table and operation. The app's own tables are never altered.
enum HistorySchema {
    /// The version of the trigger scheme (what a history row means); stored as `triggerVersion`.
    /// A version this code does not know is refused rather than silently reinterpreted.
    static let version = 1

    static let createHistory = """
        CREATE TABLE IF NOT EXISTS searchlight_history(token INTEGER PRIMARY KEY, entity TEXT NOT NULL, key, change TEXT NOT NULL)
        """
    // WITHOUT ROWID: no `sqlite_autoindex_…` object, so everything the delegate adds is named `searchlight_*`.
    static let createMeta = "CREATE TABLE IF NOT EXISTS searchlight_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID"

    /// The triggers a model needs, by name: `searchlight_<table>_<insert|update|delete>`. A
    /// trigger only appends `(entity, key, change)` rows; the token is the history's rowid, so a
    /// committed transaction's tokens are all above every token committed before it (SQLite has
    /// one writer at a time), and a reader's snapshot never has a gap below its highest token.
    static func triggers(for model: SpotlightModel) -> [String: String] {
        // What each table's rows stand for: its own entity (the change kind as is), or, for a
        // related table, the entity row that a foreign key names (always an `update` of it).
        var emissions: [String: [(entity: String, column: String, own: Bool)]] = [:]
        var order: [String] = []
        func add(_ table: String, _ emission: (String, String, Bool)) {
            if emissions[table] == nil { order.append(table) }
            emissions[table, default: []].append(emission)
        }
        for entity in model.entities {
            add(entity.table, (entity.name, entity.key, true))
            for related in entity.relatedTables { add(related.table, (entity.name, related.foreignKey, false)) }
        }
        var out: [String: String] = [:]
        for table in order {
            let rows = emissions[table]!
            func insert(_ entity: String, _ key: String, _ change: String, when: String? = nil) -> String {
                let values = "\(literal(entity)), \(key), '\(change)'"
                if let when { return "INSERT INTO searchlight_history(entity, key, change) SELECT \(values) WHERE \(when);" }
                return "INSERT INTO searchlight_history(entity, key, change) VALUES (\(values));"
            }
            func column(_ row: String, _ name: String) -> String { "\(row).\(keyExpression(name))" }
            let onInsert = rows.map { insert($0.entity, column("NEW", $0.column), $0.own ? "insert" : "update") }
            let onDelete = rows.map { insert($0.entity, column("OLD", $0.column), $0.own ? "delete" : "update") }
            // An update that changes the key (or a foreign key) touches two rows: the old key's and the new one's.
            let onUpdate = rows.flatMap {
                [insert($0.entity, column("OLD", $0.column), "update"),
                 insert($0.entity, column("NEW", $0.column), "update",
                        when: "\(column("NEW", $0.column)) IS NOT \(column("OLD", $0.column))")]
            }
            for (operation, body) in [("insert", onInsert), ("update", onUpdate), ("delete", onDelete)] {
                let name = triggerName(table, operation)
                out[name] = "CREATE TRIGGER \(quoted(name)) AFTER \(operation.uppercased()) ON \(quoted(table)) BEGIN "
                    + body.joined(separator: " ") + " END"
            }
        }
        return out
    }

    static func triggerName(_ table: String, _ operation: String) -> String { "searchlight_\(table)_\(operation)" }

    /// A key column in SQL: `rowid` and its aliases unquoted (a quoted "rowid" would not mean
    /// the rowid when the table has no such column), any other name quoted.
    static func keyExpression(_ column: String) -> String {
        ["rowid", "oid", "_rowid_"].contains(column.lowercased()) ? column : quoted(column)
    }

    /// The `searchlight_*` triggers in the database, by name, with their SQL.
    static func installedTriggers(_ db: SQLiteDatabase) throws -> [String: String] {
        var out: [String: String] = [:]
        try db.query("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name GLOB 'searchlight_*'") { _, v in
            if let name = v[0].stringValue { out[name] = v[1].stringValue ?? "" }
        }
        return out
    }

    static func tableExists(_ name: String, _ db: SQLiteDatabase) throws -> Bool {
        try db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [.text(name)]) != nil
    }

    static func meta(_ key: String, _ db: SQLiteDatabase) throws -> DatabaseValue? {
        guard try tableExists("searchlight_meta", db) else { return nil }
        return try db.scalar("SELECT value FROM searchlight_meta WHERE key = ?", [.text(key)])
    }

    /// What `install` found or did.
    struct Installation: Sendable {
        var storeIdentifier: String
        /// The triggers were created or changed now: changes made before may be missing from
        /// the history, so the index must be rebuilt once (recorded as `rebuildNeeded`).
        var changed: Bool
    }

    /// Checks the model against the schema, then makes the history table, the meta table and
    /// the model's triggers exist exactly as the model needs them. Idempotent: when everything
    /// is in place it only reads (no write lock, no change other processes would notice).
    static func install(_ model: SpotlightModel, _ db: SQLiteDatabase) throws -> Installation {
        try SchemaCheck.validate(model, db)
        let expected = triggers(for: model)
        if let identifier = try complete(expected, db) { return Installation(storeIdentifier: identifier, changed: false) }
        return try db.write {
            if let identifier = try complete(expected, db) { return Installation(storeIdentifier: identifier, changed: false) }
            try db.execute(createHistory)
            try db.execute(createMeta)
            let identifier: String
            if let existing = try meta("storeIdentifier", db)?.stringValue {
                identifier = existing
            } else {
                identifier = UUID().uuidString
                try db.run("INSERT INTO searchlight_meta(key, value) VALUES ('storeIdentifier', ?)", [.text(identifier)])
            }
            let installed = try installedTriggers(db)
            for (name, sql) in installed where expected[name] != sql { try db.execute("DROP TRIGGER \(quoted(name))") }
            for (name, sql) in expected.sorted(by: { $0.key < $1.key }) where installed[name] != sql { try db.execute(sql) }
            try db.run("INSERT OR REPLACE INTO searchlight_meta(key, value) VALUES ('triggerVersion', ?)", [.integer(Int64(version))])
            // A generation, so that a rebuild clears only the request it answered.
            try db.run("INSERT OR REPLACE INTO searchlight_meta(key, value) VALUES ('rebuildNeeded', ?)", [.text(UUID().uuidString)])
            return Installation(storeIdentifier: identifier, changed: true)
        }
    }

    /// The store identifier when tables, version and triggers are all as expected, else nil.
    private static func complete(_ expected: [String: String], _ db: SQLiteDatabase) throws -> String? {
        guard try tableExists("searchlight_history", db), let identifier = try meta("storeIdentifier", db)?.stringValue
        else { return nil }
        let installedVersion = try meta("triggerVersion", db)?.int64Value ?? 0
        guard installedVersion <= Int64(version) else {
            throw SpotlightModelError.invalid(
                "the database's history triggers are version \(installedVersion), newer than this SearchlightSQLite (\(version)); update the app (or call deleteSpotlightIndex() to start over)")
        }
        guard installedVersion == Int64(version), try installedTriggers(db) == expected else { return nil }
        return identifier
    }

    /// Removes every `searchlight_*` object (triggers first, so no app write meets a trigger
    /// whose table is gone); the app's tables and rows are untouched.
    static func uninstall(_ db: SQLiteDatabase) throws {
        try db.write {
            for name in try installedTriggers(db).keys { try db.execute("DROP TRIGGER \(quoted(name))") }
            try db.execute("DROP TABLE IF EXISTS searchlight_history")
            try db.execute("DROP TABLE IF EXISTS searchlight_meta")
        }
    }
}
