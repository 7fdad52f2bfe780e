// swift-tools-version:6.0
// "Your first app" (Docs/FirstApp.md): a recipes app whose SQLite database is kept in its
// Searchlight index by the store delegate, searched with UserQuery, shown in the desktop's search,
// and rebuilt by its own index extension. Copy this folder to start an app; change the path below
// to where your Searchlight checkout is (or its git URL), and the bundle identifier in
// Sources/RecipesStore/Recipes.swift, the unit file and the desktop file.
import PackageDescription

let package = Package(
    name: "Recipes",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "recipes", targets: ["RecipesApp"]),
        .executable(name: "recipes-extension", targets: ["RecipesExtension"]),
    ],
    dependencies: [.package(name: "Searchlight", path: "../..")],
    targets: [
        // The schema, the model, the bundle identifier and the delegate: shared by the app and its
        // extension, so both index the same bundle. The app's own SQLite access is
        // SearchlightSQLite's SQLiteConnection: no systemLibrary target of its own.
        .target(
            name: "RecipesStore",
            dependencies: [.product(name: "SearchlightSQLite", package: "Searchlight")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(name: "RecipesApp", dependencies: ["RecipesStore"], swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(name: "RecipesExtension", dependencies: ["RecipesStore"], swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
