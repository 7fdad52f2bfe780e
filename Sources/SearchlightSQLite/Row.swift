import Foundation

/// One row of an entity's table, as `attributeSet(for:)` receives it: every column of the row,
/// read on the same snapshot of the database as the history being indexed. `select` reads more
/// of that snapshot (a relationship: a photo's tags through a join table). A row is only valid
/// during the call that received it.
public struct Row {
    public let entity: Entity
    /// The value of the entity's key column.
    public let key: DatabaseValue
    public let columnNames: [String]
    public let values: [DatabaseValue]
    unowned(unsafe) let database: SQLiteDatabase

    init(entity: Entity, key: DatabaseValue, columnNames: [String], values: [DatabaseValue], database: SQLiteDatabase) {
        self.entity = entity
        self.key = key
        self.columnNames = columnNames
        self.values = values
        self.database = database
    }

    /// The value of a column; nil when the table has no such column.
    public subscript(_ column: String) -> DatabaseValue? {
        guard let i = columnNames.firstIndex(of: column) ?? columnNames.firstIndex(where: { $0.caseInsensitiveCompare(column) == .orderedSame })
        else { return nil }
        return values[i]
    }

    /// The item identifier of this row (`photo-12`).
    public var uniqueIdentifier: String { entity.uniqueIdentifier(for: key) }

    /// The attributes the model maps from this row's columns, with the entity's content type:
    /// what the default `attributeSet(for:)` returns.
    public var modelAttributes: AttributeSet {
        var attributes = AttributeSet(contentType: entity.contentType)
        for attribute in entity.attributes {
            guard let value = self[attribute.column] else { continue }
            for key in attribute.keys { attributes.set(key, from: value) }
        }
        return attributes
    }

    /// Runs a read-only query on the row's snapshot of the database; the rows' values.
    public func select(_ sql: String, _ arguments: [DatabaseValue] = []) throws -> [[DatabaseValue]] {
        try database.rows(sql, arguments, readOnly: true)
    }

    /// The first column of each row of a query, as text (NULLs left out):
    /// `try row.strings("SELECT name FROM tags JOIN photo_tags ON … WHERE photo_id = ?", row.key)`.
    public func strings(_ sql: String, _ arguments: DatabaseValue...) throws -> [String] {
        try database.rows(sql, arguments, readOnly: true).compactMap { $0.first?.stringValue }
    }
}
