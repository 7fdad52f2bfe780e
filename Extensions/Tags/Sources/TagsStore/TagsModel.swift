import Foundation
import SearchlightSQLite

/// What the Tags app indexes, shared by the app and its extension: the model of DESIGN §10 and
/// the delegate that adds a photo's tags as its keywords.
public enum TagsModel {
    public static let bundleIdentifier = "org.searchlight.sample.tags"

    /// Photos (displayName = their name, contentType `public.image`) and tags (displayName = the
    /// tag, `public.text`). Tagging or untagging a photo (a `photo_tags` row) re-indexes the
    /// photo; renaming or deleting a tag re-indexes the photos it is on.
    public static let model = SpotlightModel {
        Entity("Photo", table: "photos", key: "id", contentType: "public.image") {
            Attribute("userSpecifiedName", as: .displayName)
            Attribute("path", as: .contentURL)
            RelatedTable("photo_tags", foreignKey: "photo_id")
        }
        Entity("Tag", table: "tags", key: "id", contentType: "public.text") {
            Attribute("name", as: .displayName)
            Dependents("Photo", query: "SELECT photo_id FROM photo_tags WHERE tag_id = ?")
        }
    }

    /// The store: `--store PATH`, else `$XDG_DATA_HOME/searchlight-tags/tags.sqlite`.
    public static func storeURL(arguments: [String] = CommandLine.arguments,
                                environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        if let i = arguments.firstIndex(of: "--store"), i + 1 < arguments.count {
            return URL(fileURLWithPath: arguments[i + 1])
        }
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        return URL(fileURLWithPath: dataHome + "/searchlight-tags/tags.sqlite")
    }
}

/// The Tags app's store delegate: the model's attributes, plus a photo's tags as its keywords,
/// read through the join table on the same snapshot as the photo.
public final class TagsDelegate: SQLiteSpotlightDelegate, @unchecked Sendable {
    public convenience init(store: URL, socketPath: String? = nil) throws {
        try self.init(databaseAt: store, model: TagsModel.model, bundleIdentifier: TagsModel.bundleIdentifier, socketPath: socketPath)
    }

    public override func attributeSet(for row: Row) throws -> AttributeSet? {
        guard var attributes = try super.attributeSet(for: row) else { return nil }
        if row.entity.name == "Photo" {
            let tags = try row.strings("""
                SELECT tags.name FROM tags JOIN photo_tags ON photo_tags.tag_id = tags.id
                WHERE photo_tags.photo_id = ? ORDER BY tags.name
                """, row.key)
            if !tags.isEmpty { attributes.keywords = tags }
        }
        return attributes
    }
}
