// swift-tools-version:5.4
// The Swift libFuzzer targets, a package of their own so that `swift build` and `make test` of
// StateServer never build them. scripts/fuzz.sh builds them with
// `-Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library` into .build-fuzz.
//
// Tools version 5.4 on purpose: from 5.5 on, SwiftPM renames an executable's entry point to
// `<module>_main` and links `main` to it, and a libFuzzer target has no entry point of its own
// (libFuzzer's `main` calls `LLVMFuzzerTestOneInput`). The same choice as swift-protobuf's
// FuzzTesting package.
import PackageDescription

let package = Package(
    name: "StateServerFuzz",
    dependencies: [
        // The server's package; only StateStore (with StateJSON) and ExampleFeatures are built.
        .package(name: "StateServer", path: ".."),
    ],
    targets: [
        // Oracles shared by the targets: a finding prints what broke and traps.
        .target(
            name: "FuzzSupport",
            dependencies: [.product(name: "StateStore", package: "StateServer")]),
        // JSONParser: anything that parses writes canonical JSON that parses to the same value.
        .executableTarget(
            name: "FuzzJSON",
            dependencies: ["FuzzSupport", .product(name: "StateStore", package: "StateServer")]),
        // The example features: actions and states decoded as the server's routes and loads do.
        .executableTarget(
            name: "FuzzFeatures",
            dependencies: [
                "FuzzSupport",
                .product(name: "StateStore", package: "StateServer"),
                .product(name: "ExampleFeatures", package: "StateServer"),
            ]),
        // JSON Patch: diff(a, b) applied to a gives b; any patch applies or refuses, whole.
        .executableTarget(
            name: "FuzzPatch",
            dependencies: ["FuzzSupport", .product(name: "StateStore", package: "StateServer")]),
        // Recordings: read, replayed offline and imported at the stores, as the server does.
        .executableTarget(
            name: "FuzzRecording",
            dependencies: [
                "FuzzSupport",
                .product(name: "StateStore", package: "StateServer"),
                .product(name: "ExampleFeatures", package: "StateServer"),
            ]),
    ]
)
