// swift-tools-version:6.0
// The photo-tagging app of Apple's WWDC21 session "Showcase app data in Spotlight", as a small
// CLI over a SQLite store, kept in its index by the store delegate (SearchlightSQLite), with its
// index extension. Its own package, like the other samples, linking the Searchlight package two
// folders up. The app reaches its own database through its own system-library target (as any
// app has its own SQLite access); the delegate links SQLite separately.
import PackageDescription

let package = Package(
    name: "Tags",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "tags", targets: ["TagsApp"]),
        .executable(name: "tags-extension", targets: ["TagsExtension"]),
    ],
    dependencies: [.package(name: "Searchlight", path: "../..")],
    targets: [
        .systemLibrary(name: "CTagsSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        // The store: schema, model and delegate, shared by the app and its extension.
        .target(
            name: "TagsStore",
            dependencies: ["CTagsSQLite", .product(name: "SearchlightSQLite", package: "Searchlight")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(name: "TagsApp", dependencies: ["TagsStore"], swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(name: "TagsExtension", dependencies: ["TagsStore"], swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
