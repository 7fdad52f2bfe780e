// swift-tools-version:6.0
// A sample index extension, built the way a plugin author builds one: its own package, linking
// only the SearchlightKit SDK of the Searchlight package two folders up. The HTML reading
// (WebMarkup) is a library of its own so that its tests run without a daemon:
// `swift test --package-path Extensions/WebPages`.
import PackageDescription

let package = Package(
    name: "WebPages",
    platforms: [.macOS(.v15)],
    products: [.executable(name: "webpages-extension", targets: ["WebPagesExtension"])],
    dependencies: [.package(name: "Searchlight", path: "../..")],
    targets: [
        .target(name: "WebMarkup", swiftSettings: [.swiftLanguageMode(.v6)]),
        .executableTarget(
            name: "WebPagesExtension",
            dependencies: ["WebMarkup", .product(name: "SearchlightKit", package: "Searchlight")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(name: "WebMarkupTests", dependencies: ["WebMarkup"], swiftSettings: [.swiftLanguageMode(.v6)]),
    ]
)
