// swift-tools-version: 6.2
import PackageDescription

// A server of your own features on StateServer: copy this folder, rename Cart, and point the
// dependency at StateServer's repository (`.package(url: "https://github.com/.../StateServer",
// from: "1.0.0")`) instead of the path of the checkout it lives in.
let package = Package(
    name: "CartServer",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "StateServer", path: "../.."),
    ],
    targets: [
        // The features: plain Swift on the store core (no HTTP), so an app can embed them too.
        .target(
            name: "Cart",
            dependencies: [.product(name: "StateStore", package: "StateServer")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The server: StateServer.run(features:) with every setting and subcommand of state-server.
        .executableTarget(
            name: "CartServer",
            dependencies: ["Cart", .product(name: "StateServer", package: "StateServer")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        // The features' tests: TestStore asserts every change, effect and follow-up.
        .testTarget(
            name: "CartTests",
            dependencies: ["Cart", .product(name: "StateStoreTesting", package: "StateServer")],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
