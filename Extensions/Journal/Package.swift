// swift-tools-version:6.0
// A sample index extension, built the way a plugin author builds one: its own package, linking
// only the SearchlightKit SDK of the Searchlight package two folders up.
import PackageDescription

let package = Package(
    name: "Journal",
    platforms: [.macOS(.v15)],
    products: [.executable(name: "journal-extension", targets: ["JournalExtension"])],
    dependencies: [.package(name: "Searchlight", path: "../..")],
    targets: [
        .executableTarget(
            name: "JournalExtension",
            dependencies: [.product(name: "SearchlightKit", package: "Searchlight")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
