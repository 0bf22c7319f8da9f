import ExampleFeatures
import Foundation
import StateServer

// `state-server`: the server library with the four example features. A server of your own
// features is the same call in a package of its own (docs/FEATURES.md). The library never ends
// the process: this `main` reports its failure and exits with its status.
do throws(CommandFailure) {
    try await StateServer.run(
        HostedFeatures(settings: [ExampleSettings.loginCheckDelay]) { settings in
            ExampleFeatures.all(loginCheckDelay: .milliseconds(Int(settings[ExampleSettings.loginCheckDelay] * 1000)))
        })
} catch {
    error.report()
    exit(error.status)
}

/// The example features' settings: `state-server`'s own, not the library's (a server built on it
/// has none of them). Read and listed like every other setting (environment, file, default).
///
/// | key | type | default |
/// | --- | --- | --- |
/// | `login.checkDelay` | seconds | `0.2` |
enum ExampleSettings {
    /// Seconds the example login feature's simulated credential check takes.
    static let loginCheckDelay = FeatureSetting("login.checkDelay", default: 0.2, in: 0...3600, "login check seconds")
}
