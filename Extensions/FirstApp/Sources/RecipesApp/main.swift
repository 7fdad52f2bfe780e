import Foundation
import RecipesStore
import SearchlightSQLite

// recipes [--store PATH] add TITLE INGREDIENTS STEPS   a recipe, indexed before the command exits
// recipes [--store PATH] search TEXT…                  the index's answer, best first
// recipes [--store PATH] searchlight-item:BUNDLE/ID    what the desktop's search runs to open a result
// recipes [--store PATH] list                          the database's rows

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("recipes: \(message)\n".utf8))
    exit(1)
}

var arguments = Array(CommandLine.arguments.dropFirst())
if let i = arguments.firstIndex(of: "--store") { arguments.removeSubrange(i...min(i + 1, arguments.count - 1)) }
let store = Recipes.storeURL()

do {
    if let activity = SearchableItemActivity.fromLaunchArguments() {
        // Opened from the desktop's search: show the recipe the item names.
        let db = try Recipes.open(store)
        let id = activity.uniqueIdentifier.split(separator: "-").last.flatMap { Int64($0) } ?? -1
        guard let row = try db.rows("SELECT title, ingredients, steps FROM recipes WHERE id = ?", .integer(id)).first else {
            fail("no recipe \(activity.uniqueIdentifier)")
        }
        print("opened \(activity.uniqueIdentifier): \(row[0].stringValue ?? "")")
        print("ingredients: \(row[1].stringValue ?? "")")
        print(row[2].stringValue ?? "")
        exit(0)
    }
    switch arguments.first {
    case "add":
        guard arguments.count == 4 else { fail("usage: recipes add TITLE INGREDIENTS STEPS") }
        let db = try Recipes.open(store)
        try db.run("INSERT INTO recipes(title, ingredients, steps) VALUES (?, ?, ?)",
                   .text(arguments[1]), .text(arguments[2]), .text(arguments[3]))
        let id = db.lastInsertRowID
        // Two lines keep the database in the index; a command-line app also waits for its change
        // before it exits (a GUI app that keeps running need not).
        let delegate = try RecipesDelegate(store: store)
        try await delegate.startSpotlightIndexing()
        try await delegate.waitUntilIndexed(timeout: .seconds(30))
        await delegate.stopSpotlightIndexing()
        print("added recipe-\(id), indexed through history token \(delegate.indexedHistoryToken ?? 0)")
    case "search":
        let text = arguments.dropFirst().joined(separator: " ")
        guard !text.isEmpty else { fail("usage: recipes search TEXT") }
        let index = SearchableIndex(bundleIdentifier: Recipes.bundleIdentifier)
        var context = UserQueryContext()
        context.maxSuggestionCount = 3
        context.explain = true
        // The list a UI shows is every item; the ranked ones (★) are its top hits.
        for try await response in UserQuery(userQueryString: text, userQueryContext: context, index: index).responses {
            switch response {
            case .item(let result):
                let title = result.item.attributeSet.displayName ?? result.item.uniqueIdentifier
                print("\(result.isRanked ? "★" : " ") \(result.item.uniqueIdentifier)\t\(title)")
            case .suggestion(let suggestion):
                print("  did you mean: \(suggestion.text)")
            }
        }
        await index.close()
    case "list":
        let db = try Recipes.open(store)
        for row in try db.rows("SELECT id, title FROM recipes ORDER BY id") {
            print("recipe-\(row[0].int64Value ?? 0)\t\(row[1].stringValue ?? "")")
        }
    default:
        fail("usage: recipes [--store PATH] add TITLE INGREDIENTS STEPS | search TEXT | list | searchlight-item:…")
    }
} catch {
    fail("\(error)")
}
