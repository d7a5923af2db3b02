// swift-tools-version: 6.1
import PackageDescription

// Every target, lowest first; dependency arrows point one way (a target
// depends only on targets before it):
//   CLMDB, CSodium (system libraries: LMDB, libsodium), CGF64 (GF(2^64) in C for sync's sketches)
//     -> ChorusCBOR, ChorusParallel (CPU work over all cores), ChorusCrypto, ChorusStorage (LMDB environment)
//     -> ChorusEvents (format, kinds, schemas, clock)
//     -> ChorusEncryption (chat encryption: epoch keys, key wraps, sealed values)
//     -> ChorusLog (feeds in LMDB: append, chain checks, forks, arrival log), ChorusBlobs (picture bytes)
//     -> ChorusProjections (CRDT merge into profiles, pictures, chats, coins; queries; digest)
//     -> ChorusStore (one environment's log, blobs and projections, and the commit that writes them)
//     -> ChorusNode (the embeddable node: identity, single writer, ingest, typed mutations)
//     -> ChorusNoise (Noise_XXpsk3 on libsodium) -> ChorusSync (peer sync over TCP with SwiftNIO)
//     -> Chorus (the library product an app embeds: re-exports node, queries, events, ids, sync)
//     -> ChorusReplay (audits: verify, rebuild and diff, history, as-of, coin audit, stats)
//     -> ChorusOperations (typed operations with Encodable results and stable error codes)
//     -> ChorusService (the local HTTP API, metrics, logs, `node.serveAPI`; no ArgumentParser)
//     -> ChorusCommandLine (what both tools share, ArgumentParser)
//     -> ChorusReplayCLI (`chorus-replay`)
//     -> ChorusCommands (every `chorus` command; `ChorusProgram.runner` for a served API's command line)
//     -> ChorusCLI (`chorus`)
// Harnesses in Tools/: ChorusSimulation (the many-relays network) -> ChorusBench (`chorus-bench`);
//   ChorusCrashWriter (the crash test's child process); ChorusFuzzTargets (parsers of outside bytes as
//   fuzz targets) -> ChorusFuzz (`chorus-fuzz`).
// Tests: ChorusTestSupport (helpers most test targets share), then ChorusCBORTests, ChorusParallelTests,
//   ChorusStorageTests, ChorusEventsTests, ChorusEncryptionTests, ChorusProjectionsTests, ChorusNodeTests,
//   ChorusNoiseTests, ChorusSyncTests, ChorusReplayTests, ChorusOperationsTests, ChorusServiceTests,
//   ChorusFuzzTargetsTests and ChorusLibraryTests (the `Chorus` product alone).
// The HTTP API server and the service life cycle (Hummingbird, swift-prometheus,
// swift-service-lifecycle) are the `Service` trait, off by default: an app that
// depends on the `Chorus` product resolves none of their packages. `chorus serve`'s
// API, `node.serveAPI` and their tests need it: `swift build --traits Service`
// (Tools/chorus, Tools/test and Tools/bench pass it).
let service = TargetDependencyCondition.when(traits: ["Service"])

let package = Package(
    name: "Chorus",
    // Synchronization's Mutex and Atomic need macOS 15 / iOS 18; on Linux any Swift 6.
    platforms: [.macOS(.v15), .iOS(.v18)],
    products: [
        // What an app embeds: `import Chorus` (node, queries, ids, payloads, sync).
        .library(name: "Chorus", targets: ["Chorus"]),
        .library(name: "ChorusNode", targets: ["ChorusNode"]),
        // A node's local HTTP API for an app that serves one (`node.serveAPI`): the typed endpoints, without ArgumentParser.
        .library(name: "ChorusService", targets: ["ChorusService"]),
        // Every `chorus` command, for a served API that also runs them (`serveAPI(commandLine: ChorusProgram.runner(node:))`).
        .library(name: "ChorusCommands", targets: ["ChorusCommands"]),
        .executable(name: "chorus", targets: ["ChorusCLI"]),
        .executable(name: "chorus-replay", targets: ["ChorusReplayCLI"]),
        .executable(name: "chorus-bench", targets: ["ChorusBench"]),
        .executable(name: "chorus-fuzz", targets: ["ChorusFuzz"]),
    ],
    traits: [
        .trait(
            name: "Service",
            description: "The node's HTTP API (Hummingbird), Prometheus metrics and graceful shutdown for chorus serve and node.serveAPI."),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        // Without its default traits: no swift-configuration (our config file is JSON read by Foundation).
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.5.0", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLMDB", path: "Sources/CLMDB", pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]),
        .systemLibrary(
            name: "CSodium", path: "Sources/CSodium", pkgConfig: "libsodium",
            providers: [.apt(["libsodium-dev"]), .brew(["libsodium"])]),

        // GF(2^64) for sync's sketches: the CPU's carry-less multiply where there is one.
        .target(name: "CGF64", path: "Sources/CGF64"),

        .target(name: "ChorusCBOR"),
        .target(name: "ChorusParallel"),
        .target(name: "ChorusCrypto", dependencies: ["CSodium"]),
        .target(name: "ChorusStorage", dependencies: ["CLMDB"]),
        .target(name: "ChorusEvents", dependencies: ["ChorusCBOR", "ChorusCrypto"]),
        .target(name: "ChorusEncryption", dependencies: ["ChorusEvents", "ChorusCBOR", "ChorusCrypto"]),
        .target(name: "ChorusLog", dependencies: ["ChorusEvents", "ChorusStorage", "ChorusParallel", "ChorusCBOR", "ChorusCrypto"]),
        .target(name: "ChorusBlobs", dependencies: ["ChorusStorage", "ChorusCrypto"]),
        .target(
            name: "ChorusProjections",
            dependencies: ["ChorusParallel", "ChorusLog", "ChorusBlobs", "ChorusEvents", "ChorusEncryption", "ChorusStorage", "ChorusCrypto", "ChorusCBOR",
                           .product(name: "HeapModule", package: "swift-collections")]),
        .target(
            name: "ChorusStore", dependencies: ["ChorusProjections", "ChorusLog", "ChorusBlobs", "ChorusEvents", "ChorusCrypto", "ChorusStorage"]),
        .target(
            name: "ChorusNode",
            dependencies: ["ChorusParallel", "ChorusStore", "ChorusProjections", "ChorusEncryption", "ChorusBlobs", "ChorusLog", "ChorusEvents",
                           "ChorusCrypto", "ChorusStorage", "ChorusCBOR", .product(name: "Metrics", package: "swift-metrics")]),
        .target(name: "ChorusNoise", dependencies: ["CSodium"]),
        .target(
            name: "ChorusSync",
            dependencies: ["ChorusParallel", "ChorusNoise", "ChorusNode", "ChorusStore", "ChorusProjections", "ChorusBlobs", "ChorusLog", "ChorusEvents",
                           "ChorusStorage", "ChorusCrypto", "ChorusCBOR", "CGF64",
                           .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics")]),
        .target(
            name: "ChorusReplay",
            dependencies: ["ChorusParallel", "ChorusStore", "ChorusProjections", "ChorusEncryption", "ChorusBlobs", "ChorusLog", "ChorusEvents", "ChorusStorage",
                           "ChorusCrypto", "ChorusCBOR"]),
        .target(
            name: "ChorusOperations",
            dependencies: ["ChorusReplay", "ChorusSync", "ChorusNode", "ChorusProjections", "ChorusEncryption", "ChorusLog", "ChorusBlobs", "ChorusEvents", "ChorusStorage", "ChorusCrypto",
                           "ChorusCBOR"]),
        .target(
            name: "ChorusService",
            dependencies: ["ChorusOperations", "ChorusNode", "ChorusProjections", "ChorusLog", "ChorusEvents", "ChorusSync", "ChorusStorage", "ChorusCrypto",
                           .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "Hummingbird", package: "hummingbird", condition: service),
                           .product(name: "HummingbirdCore", package: "hummingbird", condition: service),
                           .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket", condition: service),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "Prometheus", package: "swift-prometheus", condition: service),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service)]),
        .target(
            name: "Chorus",
            dependencies: [
                "ChorusCBOR", "ChorusCrypto", "ChorusEncryption", "ChorusEvents", "ChorusNode", "ChorusProjections", "ChorusSync",
                "ChorusBlobs", "ChorusLog", "ChorusStorage",
            ]),
        .target(
            name: "ChorusCommandLine",
            dependencies: ["ChorusOperations", "ChorusNode", "ChorusReplay", "ChorusLog", "ChorusProjections", "ChorusEvents", "ChorusCrypto",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .executableTarget(
            name: "ChorusReplayCLI",
            dependencies: ["ChorusCommandLine", "ChorusOperations", "ChorusReplay", "ChorusNode", "ChorusProjections", "ChorusCrypto", "ChorusCBOR",
                           "ChorusStorage", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .target(
            name: "ChorusCommands",
            dependencies: ["ChorusCommandLine", "ChorusOperations", "ChorusNode", "ChorusReplay", "ChorusSync", "ChorusService", "ChorusEncryption",
                           "ChorusStorage", "ChorusProjections", "ChorusLog", "ChorusEvents", "ChorusCrypto", "ChorusCBOR",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "Metrics", package: "swift-metrics"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service)]),
        .executableTarget(name: "ChorusCLI", dependencies: ["ChorusCommands"]),
        // Harnesses that live with the tools, not the product.
        .executableTarget(
            name: "ChorusBench",
            dependencies: ["ChorusParallel", "ChorusNode", "ChorusReplay", "ChorusStore", "ChorusLog", "ChorusProjections", "ChorusEvents", "ChorusCrypto", "ChorusCBOR",
                           "ChorusStorage", "CLMDB", "CSodium", "ChorusSync", "ChorusEncryption", "ChorusService", "ChorusCommands", "ChorusSimulation", "ChorusOperations",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            path: "Tools/Benchmark", exclude: ["README.md"]),
        // The many-relays network simulation, shared by chorus-bench and the tests.
        .target(
            name: "ChorusSimulation", dependencies: ["ChorusNode", "ChorusParallel", "ChorusSync", "ChorusProjections", "ChorusEvents", "ChorusCrypto"],
            path: "Tools/Simulation"),
        // The parsers of outside bytes as fuzz targets, and `chorus-fuzz`, which runs them
        // under libFuzzer (Tools/fuzz) or replays files through them.
        .target(
            name: "ChorusFuzzTargets",
            dependencies: ["ChorusCBOR", "ChorusCrypto", "ChorusEncryption", "ChorusEvents", "ChorusNode", "ChorusNoise", "ChorusOperations",
                           "ChorusProjections", "ChorusSync"],
            path: "Tools/Fuzz/Targets"),
        .target(name: "CFuzzDriver", path: "Tools/Fuzz/Driver"),
        .executableTarget(name: "ChorusFuzz", dependencies: ["ChorusFuzzTargets", "CFuzzDriver"], path: "Tools/Fuzz/Runner"),
        .executableTarget(
            name: "ChorusCrashWriter", dependencies: ["ChorusNode", "ChorusProjections", "ChorusCBOR", "ChorusCrypto", "ChorusEvents"],
            path: "Tools/CrashWriter"),

        // Helpers the test targets share (seeded randomness, vector files).
        .target(name: "ChorusTestSupport", dependencies: ["ChorusCrypto", "ChorusNode"], path: "Tests/ChorusTestSupport"),
        .testTarget(name: "ChorusLibraryTests", dependencies: ["Chorus", "ChorusTestSupport"]),
        .testTarget(
            name: "ChorusServiceTests",
            dependencies: [
                "ChorusTestSupport", "ChorusService", "ChorusOperations", "ChorusCommands", "ChorusCLI", "ChorusNode", "ChorusProjections", "ChorusSync",
                "ChorusCrypto", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: service),
            ]),
        .testTarget(name: "ChorusCBORTests", dependencies: ["ChorusTestSupport", "ChorusCBOR"]),
        .testTarget(name: "ChorusFuzzTargetsTests", dependencies: ["ChorusTestSupport", "ChorusFuzzTargets", "ChorusCBOR", "ChorusEvents", "ChorusSync"]),
        .testTarget(name: "ChorusParallelTests", dependencies: ["ChorusParallel"]),
        .testTarget(name: "ChorusOperationsTests", dependencies: ["ChorusTestSupport", "ChorusOperations", "ChorusNode", "ChorusProjections", "ChorusStorage", "ChorusEvents", "ChorusCrypto"]),
        .testTarget(name: "ChorusStorageTests", dependencies: ["ChorusTestSupport", "ChorusStorage"]),
        .testTarget(name: "ChorusEncryptionTests", dependencies: ["ChorusTestSupport", "ChorusEncryption", "ChorusEvents", "ChorusCBOR", "ChorusCrypto"]),
        .testTarget(name: "ChorusEventsTests", dependencies: ["ChorusTestSupport", "ChorusEvents", "ChorusCBOR", "ChorusCrypto"]),
        .testTarget(
            name: "ChorusProjectionsTests",
            dependencies: ["ChorusTestSupport", "ChorusStore", "ChorusProjections", "ChorusNode", "ChorusBlobs", "ChorusLog", "ChorusEvents", "ChorusStorage",
                           "ChorusCBOR", "ChorusCrypto"]),
        .testTarget(name: "ChorusNoiseTests", dependencies: ["ChorusTestSupport", "ChorusNoise", "ChorusCrypto"]),
        .testTarget(
            name: "ChorusSyncTests",
            dependencies: ["ChorusTestSupport", "ChorusSync", "ChorusNoise", "ChorusNode", "ChorusProjections", "ChorusLog", "ChorusEvents", "ChorusStorage",
                           "ChorusCBOR", "ChorusCrypto", "ChorusCLI", "CGF64", "ChorusSimulation",
                           .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "Logging", package: "swift-log")]),
        .testTarget(
            name: "ChorusReplayTests",
            dependencies: ["ChorusTestSupport", "ChorusReplay", "ChorusReplayCLI", "ChorusCLI", "ChorusNode", "ChorusStore", "ChorusProjections", "ChorusLog",
                           "ChorusEvents", "ChorusStorage", "ChorusCBOR", "ChorusCrypto"]),
        .testTarget(
            name: "ChorusNodeTests",
            dependencies: ["ChorusTestSupport", "ChorusNode", "ChorusProjections", "ChorusBlobs", "ChorusLog", "ChorusEvents", "ChorusStorage", "ChorusStore",
                           "ChorusCBOR", "ChorusCrypto", "ChorusCrashWriter", "ChorusCLI"]),
    ],
    swiftLanguageModes: [.v6]
)
