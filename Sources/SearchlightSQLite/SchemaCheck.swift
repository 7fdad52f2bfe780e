import Foundation

/// Checks a model against the database's schema: every entity's table and every column it maps,
/// every related table and foreign key, every `Dependents` query. Run when indexing starts and
/// again whenever the schema changes (`PRAGMA schema_version`), so that an app's migration that
/// drops a modelled column stops indexing with an error naming the entity and the column
/// instead of indexing rows without it. New columns are fine.
enum SchemaCheck {
    static func validate(_ model: SpotlightModel, _ db: SQLiteDatabase) throws {
        for entity in model.entities {
            let columns = try self.columns(of: entity.table, db)
            guard let columns else {
                throw SpotlightModelError(.missingTable(entity: entity.name, table: entity.table),
                    "entity \(entity.name): the table \"\(entity.table)\" is not in the database (or is a view); create it before indexing starts, or fix the model's table name")
            }
            for column in entity.modelledColumns {
                try require(column, in: entity.table, columns: columns, entity: entity.name, db)
            }
            for related in entity.relatedTables {
                guard let relatedColumns = try self.columns(of: related.table, db) else {
                    throw SpotlightModelError(.missingTable(entity: entity.name, table: related.table),
                        "entity \(entity.name): the related table \"\(related.table)\" is not in the database; create it, or remove RelatedTable(\"\(related.table)\", …) from the model")
                }
                try require(related.foreignKey, in: related.table, columns: relatedColumns, entity: entity.name, db)
            }
            for dependents in entity.dependents {
                do {
                    let parameters = try db.parameterCount(dependents.query, readOnly: true)
                    guard parameters == 1 else {
                        throw SpotlightModelError(.invalidQuery(entity: entity.name),
                            "entity \(entity.name): the Dependents(\"\(dependents.entity)\") query must have exactly one parameter (the changed row's key), not \(parameters): \(dependents.query)")
                    }
                } catch let error as SQLiteError {
                    throw SpotlightModelError(.invalidQuery(entity: entity.name),
                        "entity \(entity.name): the Dependents(\"\(dependents.entity)\") query does not compile against the database (\(error.message)); fix it: \(dependents.query)")
                }
            }
        }
    }

    /// The table's columns, or nil when there is no such table (views count as absent: they
    /// cannot carry the history triggers).
    static func columns(of table: String, _ db: SQLiteDatabase) throws -> Set<String>? {
        guard try db.scalar("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", [.text(table)]) != nil
        else { return nil }
        var names = Set<String>()
        try db.query("SELECT name FROM pragma_table_info(?)", [.text(table)]) { _, v in
            if let name = v[0].stringValue { names.insert(name.lowercased()) }
        }
        return names
    }

    private static func require(_ column: String, in table: String, columns: Set<String>, entity: String,
                                _ db: SQLiteDatabase) throws {
        if columns.contains(column.lowercased()) { return }
        // The rowid and its aliases are not in table_info; they exist unless the table is WITHOUT ROWID.
        if ["rowid", "oid", "_rowid_"].contains(column.lowercased()),
           (try? db.parameterCount("SELECT \(column) FROM \(quoted(table)) LIMIT 0", readOnly: true)) != nil {
            return
        }
        throw SpotlightModelError(.missingColumn(entity: entity, table: table, column: column),
            "entity \(entity): the column \"\(column)\" of the table \"\(table)\" is not in the database (dropped or renamed by a schema change?); remove it from the model or restore the column")
    }
}
