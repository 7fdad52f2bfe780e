import Foundation

/// Which tables of the app's database are indexed, and how their rows become items (the
/// counterpart of the Core Data model an `NSCoreDataCoreSpotlightDelegate` reads):
///
/// ```swift
/// let model = SpotlightModel {
///     Entity("Photo", table: "photos", key: "id", contentType: "public.image") {
///         Attribute("userSpecifiedName", as: .displayName, .title)
///         RelatedTable("photo_tags", foreignKey: "photo_id")   // tagging a photo re-indexes it
///     }
///     Entity("Tag", table: "tags", key: "id", contentType: "public.text") {
///         Attribute("name", as: .displayName)
///         Dependents("Photo", query: "SELECT photo_id FROM photo_tags WHERE tag_id = ?")  // a renamed tag re-indexes its photos
///     }
/// }
/// ```
public struct SpotlightModel: Sendable {
    public let entities: [Entity]

    public init(@SpotlightModelBuilder _ entities: () -> [Entity]) {
        self.entities = entities()
    }

    public init(entities: [Entity]) {
        self.entities = entities
    }

    public func entity(named name: String) -> Entity? { entities.first { $0.name == name } }

    /// The entity whose identifiers start with `identifier`'s prefix (the longest that fits),
    /// and the key it names.
    func entityAndKey(of identifier: String) -> (Entity, String)? {
        var best: (Entity, String)?
        for entity in entities {
            let prefix = entity.identifierPrefix + "-"
            guard identifier.hasPrefix(prefix), identifier.count > prefix.count else { continue }
            if best == nil || entity.identifierPrefix.count > best!.0.identifierPrefix.count {
                best = (entity, String(identifier.dropFirst(prefix.count)))
            }
        }
        return best
    }

    /// Checks the model on its own (names, prefixes, custom attribute names); the database's
    /// schema is checked when indexing starts.
    func validate() throws(SpotlightModelError) {
        guard !entities.isEmpty else { throw .invalid("the model has no entity; add at least one Entity(…)") }
        var names = Set<String>(), prefixes = Set<String>(), tables = Set<String>()
        for entity in entities {
            guard !entity.name.isEmpty, !entity.table.isEmpty, !entity.key.isEmpty else {
                throw .invalid("an entity needs a name, a table and a key column (entity \"\(entity.name)\", table \"\(entity.table)\")")
            }
            guard names.insert(entity.name).inserted else { throw .invalid("two entities are named \"\(entity.name)\"; names must be unique") }
            guard tables.insert(entity.table).inserted else {
                throw .invalid("two entities use the table \"\(entity.table)\"; each table is one entity")
            }
            guard !entity.identifierPrefix.isEmpty, prefixes.insert(entity.identifierPrefix).inserted else {
                throw .invalid("entity \(entity.name): the identifier prefix \"\(entity.identifierPrefix)\" is empty or used by another entity; pass identifierPrefix:")
            }
            for attribute in entity.attributes {
                for key in attribute.keys {
                    if let custom = key.customName, !AttributeCatalog.isValidCustomName(custom) {
                        throw .invalid("entity \(entity.name), column \(attribute.column): the custom attribute name \"\(custom)\" must be 1 to 128 of [A-Za-z0-9_]")
                    }
                }
            }
            for dependents in entity.dependents where self.entity(named: dependents.entity) == nil {
                throw .invalid("entity \(entity.name) declares Dependents(\"\(dependents.entity)\"), which is not an entity of the model")
            }
        }
    }
}

/// One indexed table: each of its rows is one item, identified as `<prefix>-<key>` (the prefix
/// is the entity's name in lower case unless given: `photo-12`).
public struct Entity: Sendable {
    public let name: String
    public let table: String
    /// The column that identifies a row (its primary key, or `rowid`).
    public let key: String
    /// The items' `contentType` (a UTI such as `public.image`), unless `attributeSet(for:)` sets one.
    public var contentType: String?
    public let identifierPrefix: String
    public private(set) var attributes: [Attribute] = []
    public private(set) var relatedTables: [RelatedTable] = []
    public private(set) var dependents: [Dependents] = []

    public init(_ name: String, table: String, key: String = "rowid", contentType: String? = nil,
                identifierPrefix: String? = nil, @EntityBuilder _ components: () -> [EntityComponent] = { [] }) {
        self.name = name
        self.table = table
        self.key = key
        self.contentType = contentType
        self.identifierPrefix = identifierPrefix ?? name.lowercased()
        for component in components() {
            switch component.kind {
            case .attribute(let a): attributes.append(a)
            case .relatedTable(let r): relatedTables.append(r)
            case .dependents(let d): dependents.append(d)
            }
        }
    }

    /// The item identifier of the row with this key.
    public func uniqueIdentifier(for key: DatabaseValue) -> String {
        identifierPrefix + "-" + (key.stringValue ?? key.description)
    }

    /// The columns the model reads from the entity's table (the key and the attributes').
    var modelledColumns: [String] { [key] + attributes.map(\.column) }
}

/// A column of an entity's table, mapped to one or more attributes of the item.
public struct Attribute: Sendable {
    public let column: String
    public let keys: [AttributeKey]

    public init(_ column: String, as keys: AttributeKey...) {
        self.column = column
        self.keys = keys
    }
}

/// Rows of another table that belong to a row of the entity (a join table, a child table): when
/// one of them is inserted, updated or deleted, the entity's row named by `foreignKey` is
/// indexed again. `RelatedTable("photo_tags", foreignKey: "photo_id")`: tagging or untagging a
/// photo re-indexes the photo.
public struct RelatedTable: Sendable {
    public let table: String
    /// The column of `table` holding the entity's key.
    public let foreignKey: String

    public init(_ table: String, foreignKey: String) {
        self.table = table
        self.foreignKey = foreignKey
    }
}

/// Rows of another entity whose items show this entity's data: when a row of this entity
/// changes, the keys that `query` selects (the changed row's key bound to its one parameter)
/// are indexed again. `Dependents("Photo", query: "SELECT photo_id FROM photo_tags WHERE tag_id = ?")`
/// on the tag entity: renaming a tag re-indexes its photos. The query runs when the history is
/// processed, on the same snapshot as the rows it reads, so it costs nothing in the app's writes.
public struct Dependents: Sendable {
    public let entity: String
    public let query: String

    public init(_ entity: String, query: String) {
        self.entity = entity
        self.query = query
    }
}

/// One line of an `Entity { … }` block.
public struct EntityComponent: Sendable {
    enum Kind: Sendable {
        case attribute(Attribute)
        case relatedTable(RelatedTable)
        case dependents(Dependents)
    }
    let kind: Kind
}

@resultBuilder
public enum EntityBuilder {
    public static func buildExpression(_ attribute: Attribute) -> [EntityComponent] { [EntityComponent(kind: .attribute(attribute))] }
    public static func buildExpression(_ related: RelatedTable) -> [EntityComponent] { [EntityComponent(kind: .relatedTable(related))] }
    public static func buildExpression(_ dependents: Dependents) -> [EntityComponent] { [EntityComponent(kind: .dependents(dependents))] }
    public static func buildBlock(_ parts: [EntityComponent]...) -> [EntityComponent] { parts.flatMap { $0 } }
    public static func buildArray(_ parts: [[EntityComponent]]) -> [EntityComponent] { parts.flatMap { $0 } }
    public static func buildOptional(_ part: [EntityComponent]?) -> [EntityComponent] { part ?? [] }
    public static func buildEither(first: [EntityComponent]) -> [EntityComponent] { first }
    public static func buildEither(second: [EntityComponent]) -> [EntityComponent] { second }
}

@resultBuilder
public enum SpotlightModelBuilder {
    public static func buildExpression(_ entity: Entity) -> [Entity] { [entity] }
    public static func buildBlock(_ parts: [Entity]...) -> [Entity] { parts.flatMap { $0 } }
    public static func buildArray(_ parts: [[Entity]]) -> [Entity] { parts.flatMap { $0 } }
    public static func buildOptional(_ part: [Entity]?) -> [Entity] { part ?? [] }
    public static func buildEither(first: [Entity]) -> [Entity] { first }
    public static func buildEither(second: [Entity]) -> [Entity] { second }
}

/// What is wrong with a model, or between a model and the database's schema. The message names
/// the entity and the column or table, and the fix.
public struct SpotlightModelError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The model itself is inconsistent.
        case invalidModel
        /// The entity's table (or a related table) is not in the database.
        case missingTable(entity: String, table: String)
        /// A column the model maps is not in its table (dropped or renamed by a schema change).
        case missingColumn(entity: String, table: String, column: String)
        /// A `Dependents` query does not compile.
        case invalidQuery(entity: String)
    }

    public let kind: Kind
    public let description: String

    init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }

    static func invalid(_ message: String) -> SpotlightModelError { SpotlightModelError(.invalidModel, message) }
}
