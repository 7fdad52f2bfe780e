// swift-tools-version:6.0
// Searchlight: a private, on-device search index service for Linux.
// No package dependencies by the owner's decision (DESIGN §1): toolchain + system libsqlite3 and libopenblas.
import PackageDescription

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]

let package = Package(
    name: "Searchlight",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "SearchlightKit", targets: ["SearchlightKit"]),
        .library(name: "SearchlightWire", targets: ["SearchlightWire"]),
        .library(name: "SearchlightSQLite", targets: ["SearchlightSQLite"]),
        .executable(name: "searchlightd", targets: ["searchlightd"]),
        .executable(name: "searchlight", targets: ["searchlight"]),
        .executable(name: "searchlight-bench", targets: ["searchlight-bench"]),
        .executable(name: "searchlight-desktop", targets: ["searchlight-desktop"]),
    ],
    targets: [
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // sd-bus, the D-Bus library of the platform (pkg-config libsystemd; apt libsystemd-dev), linked
        // only by searchlight-desktop (DESIGN §1, §12); CDesktopBus holds the provider's vtables,
        // which sd-bus's C macros build.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        .target(name: "CDesktopBus", dependencies: ["CSystemd"]),
        // zlib (apt zlib1g-dev, which the Swift toolchain needs too): inflating PNG thumbnails into
        // the pixels KRunner takes (SearchlightDesktop's ThumbnailImage).
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // OpenBLAS for the transformer's matrix products; linked by SearchlightSemantic only (DESIGN §1).
        .systemLibrary(
            name: "COpenBLAS",
            pkgConfig: "openblas",
            providers: [.apt(["libopenblas-dev"])]
        ),
        // The signal handler that only writes to a pipe (SignalEvents, in SearchlightWire): in C, so
        // that nothing of the Swift runtime runs in a handler.
        .target(name: "CSignalPipe"),
        .target(name: "SearchlightWire", dependencies: ["CSignalPipe"], swiftSettings: strict),
        // Launchd-like unit files: parser, model, checks (the daemon, the CLI and the fuzzer use it).
        .target(name: "SearchlightUnits", dependencies: ["SearchlightWire"], swiftSettings: strict),
        .target(name: "SearchlightStore", dependencies: ["CSQLite", "SearchlightWire", "SearchlightSemantic"], swiftSettings: strict),
        // The semantic layer's hot loops (Docs/SemanticSearch.md): the transformer's linear layers on
        // half-precision packed weights and GELU with AVX-512, the vector index's scans with POPCNT
        // and AVX-512BW, each chosen at run time (the Swift/OpenBLAS paths remain for other CPUs).
        // Optimised in debug builds too: at -O0 the intrinsics spill every register and a query
        // takes 40× longer, so the test suite's encoder tests held the test pool's threads for minutes.
        .target(name: "CSemanticKernels", cSettings: [.unsafeFlags(["-O2"])]),
        .target(
            name: "SearchlightSemantic",
            dependencies: ["COpenBLAS", "CSemanticKernels", "SearchlightWire"],
            swiftSettings: strict
        ),
        // Offline tools of the semantic layer: embeddings for the static table's fit, the
        // debtags relevance evaluation, speed measurements (Docs/SemanticSearch.md).
        .executableTarget(
            name: "searchlight-semantic",
            dependencies: ["SearchlightSemantic", "SearchlightStore", "SearchlightWire"],
            swiftSettings: strict
        ),
        .target(name: "SearchlightKit", dependencies: ["SearchlightWire"], swiftSettings: strict),
        // Opening an item from the desktop's search (desktop files, gio launch/open), for the CLI
        // (`searchlight open`) and searchlight-desktop; no D-Bus in it.
        .target(name: "SearchlightDesktop", dependencies: ["SearchlightKit", "CZlib"], swiftSettings: strict),
        // The store delegate (DESIGN §10): an app's SQLite database kept in its index. It links the
        // system SQLite so that the Kit does not: plugin authors who do not use it do not pay for it.
        .target(name: "SearchlightSQLite", dependencies: ["SearchlightKit", "CSQLite"], swiftSettings: strict),
        .target(name: "CSpawn"),
        .target(name: "CPeerProcess"),
        .target(
            name: "SearchlightSupervisor",
            dependencies: ["SearchlightWire", "SearchlightUnits", "SearchlightStore", "SearchlightSemantic", "CSpawn", "CPeerProcess"],
            swiftSettings: strict
        ),
        // The fuzz targets and the deterministic mutation fuzzer (`make test` runs them bounded;
        // `make fuzz` runs them long, under libFuzzer when the toolchain has it).
        .target(
            name: "SearchlightFuzz",
            dependencies: ["SearchlightWire", "SearchlightUnits", "SearchlightStore"],
            swiftSettings: strict
        ),
        .executableTarget(name: "searchlight-fuzz", dependencies: ["SearchlightFuzz"], swiftSettings: strict),
        .executableTarget(name: "searchlightd", dependencies: ["SearchlightSupervisor"], swiftSettings: strict),
        // The CLI links the SDK, the wire types and the unit parser (for `units --verify`), never the daemon.
        .executableTarget(
            name: "searchlight", dependencies: ["SearchlightKit", "SearchlightWire", "SearchlightUnits", "SearchlightDesktop"],
            swiftSettings: strict
        ),
        // The desktop search provider (DESIGN §12): GNOME Shell's SearchProvider2 and KRunner's
        // krunner1 on the session bus, a client of searchlightd in the desktop role.
        .executableTarget(
            name: "searchlight-desktop", dependencies: ["SearchlightKit", "SearchlightWire", "SearchlightDesktop", "CDesktopBus", "CSystemd"],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "searchlight-bench",
            dependencies: ["SearchlightKit", "SearchlightWire", "SearchlightStore", "SearchlightSemantic", "SearchlightSQLite", "SearchlightDesktop", "CSQLite"],
            swiftSettings: strict
        ),
        // A fake extension that crashes, hangs, answers garbage … on command, for the integration tests.
        .executableTarget(
            name: "searchlight-test-extension", dependencies: ["SearchlightKit"], path: "Tests/TestExtension",
            swiftSettings: strict
        ),
        // A client process the integration tests run as another user (setpriv): holds connections, fills bundles.
        .executableTarget(
            name: "searchlight-test-client", dependencies: ["SearchlightKit"], path: "Tests/TestClient",
            swiftSettings: strict
        ),
        // `.onOwnThreads` (Docs/Architecture.md): test suites whose bodies block run on threads the
        // test process owns, never on Swift's cooperative pool.
        .target(name: "TestThreads", path: "Tests/TestThreads", swiftSettings: strict),
        .testTarget(name: "SearchlightWireTests", dependencies: ["SearchlightWire", "TestThreads"], swiftSettings: strict),
        .testTarget(name: "SearchlightStoreTests", dependencies: ["SearchlightStore", "SearchlightSemantic", "CSQLite", "TestThreads"], swiftSettings: strict),
        .testTarget(
            name: "SearchlightSemanticTests",
            dependencies: ["SearchlightSemantic", "SearchlightStore", "SearchlightWire", "TestThreads"],
            exclude: ["Fixtures"],
            swiftSettings: strict
        ),
        .testTarget(name: "SearchlightKitTests", dependencies: ["SearchlightKit", "TestThreads"], swiftSettings: strict),
        .testTarget(name: "SearchlightDesktopTests", dependencies: ["SearchlightDesktop", "TestThreads"], swiftSettings: strict),
        .testTarget(name: "SearchlightUnitsTests", dependencies: ["SearchlightUnits", "TestThreads"], swiftSettings: strict),
        .testTarget(name: "SearchlightSQLiteTests", dependencies: ["SearchlightSQLite", "CSQLite", "TestThreads"], swiftSettings: strict),
        .testTarget(
            name: "SearchlightSupervisorTests",
            dependencies: ["SearchlightSupervisor", "TestThreads"],
            swiftSettings: strict
        ),
        .testTarget(name: "SearchlightFuzzTests", dependencies: ["SearchlightFuzz", "TestThreads"], swiftSettings: strict),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["SearchlightKit", "SearchlightWire", "SearchlightFuzz", "SearchlightStore", "SearchlightSQLite", "CSQLite", "TestThreads",
                           // sd-bus for the fake notification server the desktop tests own on their session bus.
                           "CSystemd"],
            swiftSettings: strict
        ),
    ]
)
