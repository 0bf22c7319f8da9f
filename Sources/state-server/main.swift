import ExampleFeatures
import StateServer

// `state-server`: the server library with the four example features. A server of your own
// features is the same call in a package of its own (docs/FEATURES.md).
await StateServer.run(
    HostedFeatures(make: { settings in
        ExampleFeatures.all(loginCheckDelay: .milliseconds(Int(settings.loginCheckDelay * 1000)))
    }))
