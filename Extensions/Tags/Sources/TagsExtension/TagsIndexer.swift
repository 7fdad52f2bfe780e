import Foundation
import SearchlightSQLite
import TagsStore

/// The Tags app's index extension: `searchlightd` launches it to rebuild the index from the
/// store (`searchlight reindex org.searchlight.sample.tags --all`, migration, corruption
/// recovery) or to re-read some rows, while the app is not running. The delegate and model are
/// the app's own; the SDK owns `main()`.
@main
struct TagsIndexer: SQLiteIndexExtension {
    static var label: String { "org.searchlight.sample.tags" }

    let store: URL

    /// `tags-extension [--store PATH]` (from the unit's ProgramArguments), else the app's default store.
    init(context: ExtensionContext) {
        store = TagsModel.storeURL(arguments: [context.executable] + context.arguments, environment: context.environment)
    }

    func makeDelegate() throws -> SQLiteSpotlightDelegate {
        try TagsDelegate(store: store)
    }
}
