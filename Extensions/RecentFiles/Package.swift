// swift-tools-version:6.0
// A sample index extension, built the way a plugin author builds one: its own package, linking
// only the SearchlightKit SDK of the Searchlight package two folders up. It imports the user's
// recent files (freedesktop's recently-used.xbel) as user activities of the apps that opened
// them. The reading (RecentFilesCore) is a library of its own so that its tests run without a
// daemon: `swift test --package-path Extensions/RecentFiles`.
import PackageDescription

let package = Package(
    name: "RecentFiles",
    platforms: [.macOS(.v15)],
    products: [.executable(name: "recentfiles-extension", targets: ["RecentFilesExtension"])],
    dependencies: [.package(name: "Searchlight", path: "../..")],
    targets: [
        .target(name: "RecentFilesCore", swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "RecentFilesExtension",
            dependencies: ["RecentFilesCore", .product(name: "SearchlightKit", package: "Searchlight")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(name: "RecentFilesCoreTests", dependencies: ["RecentFilesCore"], swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
