import Foundation
import SearchlightSQLite

/// Everything the app and its extension share: the bundle identifier, the database and its
/// schema, the model and the delegate.
public enum Recipes {
    /// The app's bundle: the `BundleIdentifier` of `com.example.recipes.plist` (the extension's
    /// unit) must be the same, or the app and its extension fill two different indexes.
    public static let bundleIdentifier = "com.example.recipes"

    public static let schema = """
        PRAGMA journal_mode = WAL;
        CREATE TABLE IF NOT EXISTS recipes(id INTEGER PRIMARY KEY, title TEXT NOT NULL, ingredients TEXT, steps TEXT);
        """

    /// One item per recipe: its title, its steps as text content, its ingredients as keywords.
    public static let model = SpotlightModel {
        Entity("Recipe", table: "recipes", key: "id", contentType: "public.text") {
            Attribute("title", as: .title, .displayName)
            Attribute("steps", as: .textContent)
        }
    }

    /// `--store PATH`, else `$XDG_DATA_HOME/recipes/recipes.sqlite` (`~/.local/share/…`).
    public static func storeURL(arguments: [String] = CommandLine.arguments,
                                environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        if let i = arguments.firstIndex(of: "--store"), i + 1 < arguments.count {
            return URL(fileURLWithPath: arguments[i + 1])
        }
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
        return URL(fileURLWithPath: dataHome + "/recipes/recipes.sqlite")
    }

    /// The app's own connection, its folder, file and table created when missing.
    public static func open(_ url: URL) throws -> SQLiteConnection {
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        let db = try SQLiteConnection(path: url.path)
        try db.execute(schema)
        return db
    }
}

/// The store delegate: the model's attributes, plus the `ingredients` column ("flour, eggs") as
/// keywords, read from the same row (`row["ingredients"]` is a `DatabaseValue?`).
public final class RecipesDelegate: SQLiteSpotlightDelegate, @unchecked Sendable {
    public convenience init(store: URL) throws {
        try self.init(databaseAt: store, model: Recipes.model, bundleIdentifier: Recipes.bundleIdentifier)
    }

    public override func attributeSet(for row: Row) throws -> AttributeSet? {
        guard var attributes = try super.attributeSet(for: row) else { return nil }
        if let ingredients = row["ingredients"]?.stringValue {
            attributes.keywords = ingredients.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        }
        return attributes
    }
}
