import StateStore

/// The four example features shipped with the server: `counter`, `todos`, `settings` and
/// `login`. Copy one to write your own.
public enum ExampleFeatures {
    /// The example features, in the order counter, todos, settings, login.
    ///
    /// - Parameter loginCheckDelay: how long the login feature's simulated credential check takes.
    public static func all(loginCheckDelay: Duration = .milliseconds(200)) -> [any Feature] {
        [CounterFeature(), TodosFeature(), SettingsFeature(), LoginFeature(checkDelay: loginCheckDelay)]
    }

    /// A registry with the example features, in the order counter, todos, settings, login.
    ///
    /// - Parameter loginCheckDelay: how long the login feature's simulated credential check takes.
    public static func registry(loginCheckDelay: Duration = .milliseconds(200)) throws -> FeatureRegistry {
        try FeatureRegistry(all(loginCheckDelay: loginCheckDelay))
    }
}
