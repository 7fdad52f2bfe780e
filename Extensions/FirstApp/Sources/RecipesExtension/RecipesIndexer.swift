import Foundation
import RecipesStore
import SearchlightSQLite

/// The app's index extension: the daemon starts it (from `com.example.recipes.plist`) to rebuild
/// the index from the database while the app is not running, e.g. `searchlight reindex
/// com.example.recipes --all`. The delegate is the app's; the SDK owns `main()`.
@main
struct RecipesIndexer: SQLiteIndexExtension {
    static var label: String { Recipes.bundleIdentifier }

    let store: URL

    /// `recipes-extension [--store PATH]`, from the unit's ProgramArguments.
    init(context: ExtensionContext) {
        store = Recipes.storeURL(arguments: [context.executable] + context.arguments, environment: context.environment)
    }

    func makeDelegate() throws -> SQLiteSpotlightDelegate {
        try RecipesDelegate(store: store)
    }
}
