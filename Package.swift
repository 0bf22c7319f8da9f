// swift-tools-version: 6.2
import PackageDescription

/// `make test-sanitized`'s ThreadSanitizer build (scripts/test-sanitized.sh sets
/// STATESERVER_SANITIZER=thread): STATE_TSAN compiles Mutex+ThreadSanitizer.swift, a Mutex that
/// tells ThreadSanitizer about each lock. Any other build is unchanged.
let sanitizerSettings: [SwiftSetting] =
    Context.environment["STATESERVER_SANITIZER"] == "thread" ? [.define("STATE_TSAN")] : []

/// Strict settings applied to every Swift target.
let strictSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
] + sanitizerSettings

/// Unsafe code (`Unsafe*` pointers, C calls that take them) lives only in the modules that
/// bridge C: MicroHTTP (libmicrohttpd), StatePersistence (SQLite, GnuTLS's SHA-256, flock) and
/// the server library's stderr writer, signal pipe and TLS health probe. Every other target,
/// StatePostgres included, is compiled with strict memory safety, so an unsafe construct there is
/// a diagnostic.
let safeSettings: [SwiftSetting] = strictSettings + [.strictMemorySafety()]

let package = Package(
    name: "StateServer",
    // Synchronization.Mutex needs these; the server itself runs on Linux.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        // The store core: no HTTP, no C. Embed it in an app or another server.
        .library(name: "StateStore", targets: ["StateStore"]),
        // The four example features shipped with the server.
        .library(name: "ExampleFeatures", targets: ["ExampleFeatures"]),
        // A typed Swift client (Foundation only) for apps: RemoteStore<Feature>.
        .library(name: "StateClient", targets: ["StateClient"]),
        // An exhaustive TestStore (Swift Testing) for testing your own features.
        .library(name: "StateStoreTesting", targets: ["StateStoreTesting"]),
        // The whole server as a library: `StateServer.run(features:)` in your own package's
        // executable serves your features; it throws `CommandFailure` and your `main` exits
        // (docs/FEATURES.md).
        .library(name: "StateServer", targets: ["StateServer"]),
        .executable(name: "state-server", targets: ["state-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(
            url: "https://github.com/apple/swift-configuration", from: "1.4.0",
            // Named, not `.defaults`: the package computes its default traits from the environment.
            traits: ["JSON", "YAML"]
        ),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Several nodes: forwarding a request to the node that owns its session.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // Bearer JWTs from an app's backend (auth.jwtSecret / auth.jwtPublicKey), on swift-crypto
        // and swift-certificates, which the graph already has (postgres-nio, async-http-client).
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.8.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // Already in the graph through async-http-client: the certificates nodes trust for each
        // other's https:// URLs (cluster.caFile).
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // Already in the graph through swift-configuration's YAML trait; DeploymentTests read deploy/*.yaml.
        .package(url: "https://github.com/jpsim/Yams", "5.4.0"..<"7.0.0"),
    ],
    targets: [
        // MARK: Store core (library, no HTTP, no C)
        // JSON: a strict parser, `JSONValue`, its Codable encoder/decoder, tagged objects.
        .target(
            name: "StateJSON",
            swiftSettings: safeSettings
        ),
        // A value now or later: how an answer travels from the session layer to the socket.
        .target(
            name: "NowOrLater",
            swiftSettings: safeSettings
        ),
        .target(
            name: "StateStore",
            dependencies: ["StateJSON"],
            swiftSettings: safeSettings
        ),
        .target(
            name: "ExampleFeatures",
            dependencies: ["StateStore"],
            swiftSettings: safeSettings
        ),
        // TestStore and Recorder for tests of features (imports Swift Testing).
        .target(
            name: "StateStoreTesting",
            dependencies: ["StateStore"],
            swiftSettings: safeSettings
        ),

        // MARK: The Swift client (Foundation only; shares the features' types with the server)
        .target(
            name: "StateClient",
            dependencies: ["StateStore"],
            swiftSettings: safeSettings
        ),

        // MARK: OpenAPI from the registered features (no HTTP)
        // Reads enum case names from the Swift runtime's type metadata (the only unsafe code
        // of schema derivation; the Swift side passes the metadata as an integer).
        .target(name: "CTypeReflection"),
        // Derives JSON Schemas from features' Codable types and assembles /openapi.json.
        .target(
            name: "StateSchema",
            dependencies: ["StateStore", "CTypeReflection"],
            swiftSettings: safeSettings
        ),

        // MARK: The C bridge (the only place with MHD_* and Unsafe*)
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        // Also checks TLS certificates and keys with GnuTLS (libmicrohttpd's own TLS library).
        .target(
            name: "CMicroHTTPDShim",
            dependencies: ["CMicroHTTPD", "CGnuTLS"]
        ),
        .target(
            name: "MicroHTTP",
            dependencies: [
                "CMicroHTTPD", "CMicroHTTPDShim", "NowOrLater",
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: strictSettings
        ),

        // MARK: Persistence: a storage protocol, SQLite and an in-memory twin (no HTTP)
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // SHA-256 for token hashes, from the GnuTLS that libmicrohttpd already links; the
        // healthcheck's HTTPS client and the shim's certificate checks.
        .systemLibrary(
            name: "CGnuTLS",
            pkgConfig: "gnutls",
            providers: [.apt(["libgnutls28-dev"])]
        ),
        .target(
            name: "StatePersistence",
            dependencies: [
                "CSQLite", "CGnuTLS", "StateStore",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: strictSettings
        ),

        // MARK: PostgreSQL storage: the same protocol over a connection pool, for several nodes
        .target(
            name: "StatePostgres",
            dependencies: [
                "StatePersistence",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: safeSettings
        ),

        // MARK: Sessions, event hub, idempotency (no HTTP)
        .target(
            name: "StateSessions",
            dependencies: [
                "StateStore", "StatePersistence", "NowOrLater",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: safeSettings
        ),

        // MARK: Routes of the v1 contract over MicroHTTP
        .target(
            name: "StateServerHTTP",
            dependencies: [
                "StateStore", "StateSessions", "StatePersistence", "MicroHTTP",
                "StateSchema",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ],
            resources: [
                .embedInCode("Resources/index.html"),
                .embedInCode("Resources/client.js"),
                .embedInCode("Resources/openapi.json"),
                .embedInCode("Resources/devtools.html"),
                .embedInCode("Resources/app.js"),
                .embedInCode("Resources/devtools.js"),
            ],
            swiftSettings: safeSettings
        ),

        // MARK: The server library and the executable
        // SIGTERM/SIGINT handlers that write to a pipe, read by one thread (no signal lost).
        .target(name: "CTerminationSignals"),
        // glibc's allocator settings (mallopt), applied once at start.
        .target(name: "CAllocator"),
        // The server (settings, subcommands, storage, several nodes, metrics, the page) for the
        // features it is given; `state-server` is this library with the example features.
        .target(
            name: "StateServer",
            dependencies: [
                "CTerminationSignals", "CAllocator", "CGnuTLS",
                "StateServerHTTP", "StateStore", "StateSessions", "StatePersistence", "StatePostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictSettings
        ),
        .executableTarget(
            name: "state-server",
            dependencies: ["StateServer", "ExampleFeatures"],
            swiftSettings: safeSettings
        ),

        // MARK: Tests
        // One test-support target for every suite (`package` access): a socket HTTP/1.1 client,
        // an SSE reader (StateClient's parser), the server process and its suite trait, the
        // in-process server (the same application builder, no socket), the `SessionStorage`
        // behaviour checks every storage passes, nginx, temporary folders, API and JSON helpers.
        .target(
            name: "TestSupport",
            dependencies: [
                "StateClient", "StateServerHTTP", "StateSessions", "StatePersistence", "ExampleFeatures", "MicroHTTP",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/TestSupport",
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "MicroHTTPTests",
            dependencies: ["MicroHTTP", "TestSupport"],
            swiftSettings: strictSettings
        ),
        // The JSON parser, JSON Patch, OrderedJSON and TaggedJSON, and the fuzz findings.
        .testTarget(
            name: "StateJSONTests",
            dependencies: ["StateJSON"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "StateStoreTests",
            dependencies: ["StateStore", "StateStoreTesting",
                // Schema derivation, checked with TestSupport's JSON Schema checker.
                "StateSchema", "TestSupport",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "ExampleFeaturesTests",
            dependencies: ["ExampleFeatures", "StateStore", "StateStoreTesting"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PersistenceTests",
            dependencies: [
                "StatePersistence", "StateSessions", "StateStore", "ExampleFeatures", "StateServerHTTP", "StateClient", "TestSupport",
            ],
            swiftSettings: strictSettings
        ),
        // Sessions over the in-memory storage: failures, memory bounds, event numbering, several nodes on one
        // shared storage. Support/ links PersistenceTests' session helpers.
        .testTarget(
            name: "StateSessionsTests",
            dependencies: [
                "StateSessions", "StatePersistence", "StateStore", "ExampleFeatures", "StateServerHTTP", "StateClient", "TestSupport",
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "PostgresTests",
            dependencies: ["StatePostgres", "StatePersistence", "TestSupport", "state-server"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "DurabilityTests",
            dependencies: ["state-server", "StatePersistence", "TestSupport"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "StateClientTests",
            dependencies: ["StateClient", "ExampleFeatures", "StateStore", "state-server", "TestSupport", "MicroHTTP"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "RepositoryTests",
            dependencies: ["state-server", "StateServerHTTP", "TestSupport",
                "ExampleFeatures", "StateSchema",
            ],
            swiftSettings: strictSettings
        ),
        // deploy/ checked without a Docker engine, and a real nginx in front of the real server.
        .testTarget(
            name: "DeploymentTests",
            dependencies: ["state-server", "TestSupport", .product(name: "Yams", package: "Yams")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "StateServerIntegrationTests",
            // StateServerHTTP and MicroHTTP directly: the abuse limits' token buckets are tested
            // on an injected clock (@testable).
            dependencies: [
                "state-server", "TestSupport", "StateServerHTTP", "MicroHTTP",
                // The app's backend in the JWT tests: signs HS256, ES256 and RS256 tokens.
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strictSettings
        ),
    ]
)
