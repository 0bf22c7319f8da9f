import ArgumentParser
import StateSessions
@_exported import StateStore

/// The whole server — every setting, subcommand, storage, several nodes, metrics, the page and
/// devtools — for the features you give it. Your package's executable is one call:
///
/// ```swift
/// import StateServer
///
/// @main struct CartServer {
///     static func main() async throws {
///         try await StateServer.run(features: [CartFeature(), TodosFeature()])
///     }
/// }
/// ```
///
/// It reads the same command line, environment (`STATE_SERVER_*`) and configuration file as
/// `state-server`: `CartServer --port 0 --storage memory`, `CartServer features`,
/// `CartServer replay FILE`, `CartServer healthcheck`, `CartServer --print-config`.
/// `state-server` itself is this call with the example features.
public enum StateServer {
    /// Serves `features` (each name once) with `middleware` around every client dispatch, in
    /// order (see docs/FEATURES.md, "Middleware"); `arguments` are the command line without the
    /// program's name (by default the process's own).
    ///
    /// Returns when the server has shut down (SIGTERM or SIGINT) or a subcommand has finished.
    /// A usage error or a server that cannot start ends the process as `state-server` does:
    /// the message on stderr, a non-zero exit status.
    ///
    /// - Throws: ``RegistryError`` when `features` cannot be served together (none, or two with
    ///   one name), before anything starts.
    public static func run(
        features: [any Feature], middleware: MiddlewareChain = MiddlewareChain(),
        arguments: [String] = Array(CommandLine.arguments.dropFirst())
    ) async throws {
        _ = try HostedFeatures.registry(of: features)
        await run(HostedFeatures(make: { _ in features }, middleware: middleware), arguments: arguments)
    }

    /// `state-server`'s own entry: the example features are built from their settings
    /// (`login.checkDelay`).
    package static func run(
        _ hosted: HostedFeatures, arguments: [String] = Array(CommandLine.arguments.dropFirst())
    ) async {
        do {
            var command = try StateServerCommand.parseAsRoot(arguments)
            try await HostedFeatures.$current.withValue(hosted) {
                if var command = command as? any AsyncParsableCommand {
                    try await command.run()
                } else {
                    try command.run()
                }
            }
        } catch {
            StateServerCommand.exit(withError: error)
        }
    }
}

/// Middleware around every client dispatch (see docs/FEATURES.md, "Middleware").
public typealias MiddlewareChain = StateSessions.MiddlewareChain
/// One middleware: `handle(action, context, next)`.
public typealias DispatchMiddleware = StateSessions.DispatchMiddleware
/// What a middleware knows of the dispatch it wraps.
public typealias DispatchContext = StateSessions.DispatchContext
/// A middleware that refuses every action type not in its list (`403 forbidden`).
public typealias ActionAllowList = StateSessions.ActionAllowList

/// The features a server hosts and the middleware around their dispatches, for the command
/// that runs (the server, `features`, `replay`).
package struct HostedFeatures: Sendable {
    /// The features, from the example features' settings (only `state-server`'s login reads them).
    package let make: @Sendable (FeatureSettings) throws -> [any Feature]
    package let middleware: MiddlewareChain

    package init(make: @escaping @Sendable (FeatureSettings) throws -> [any Feature], middleware: MiddlewareChain = MiddlewareChain()) {
        self.make = make
        self.middleware = middleware
    }

    /// Set by ``StateServer/run(features:middleware:arguments:)`` around the command it runs.
    @TaskLocal static var current: HostedFeatures?

    /// The hosted features as a registry, for these settings.
    static func registry(_ settings: FeatureSettings) throws -> FeatureRegistry {
        guard let hosted = current else {
            throw RegistryError(message: "no features: start the server with StateServer.run(features:)")
        }
        return try registry(of: hosted.make(settings))
    }

    static var middleware: MiddlewareChain { current?.middleware ?? MiddlewareChain() }

    static func registry(of features: [any Feature]) throws -> FeatureRegistry {
        guard !features.isEmpty else {
            throw RegistryError(message: "StateServer.run(features:) needs at least one feature")
        }
        return try FeatureRegistry(features)
    }
}
