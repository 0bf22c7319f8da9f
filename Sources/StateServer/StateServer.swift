import ArgumentParser
import Foundation
import StateSessions
@_exported import StateStore

/// Serves `features` (each name once) with `middleware` around every client dispatch, in order
/// (see docs/FEATURES.md, "Middleware"): the whole server — every setting, subcommand, storage,
/// several nodes, metrics, the page and devtools. `arguments` are the command line without the
/// program's name (by default the process's own). Your package's executable is one call, and its
/// `main` decides how the process ends:
///
/// ```swift
/// import Foundation
/// import StateServer
///
/// do throws(CommandFailure) {
///     try await StateServer.run(features: [CartFeature(), TodosFeature()])
/// } catch {
///     error.report()
///     exit(error.status)
/// }
/// ```
///
/// It reads the same command line, environment (`STATE_SERVER_*`) and configuration file as
/// `state-server`: `CartServer --port 0 --storage memory`, `CartServer features`,
/// `CartServer replay FILE`, `CartServer healthcheck`, `CartServer --print-config`.
/// `state-server` itself is this call with the example features.
///
/// Returns when the server has shut down (SIGTERM or SIGINT), a subcommand has finished, or
/// `--help` or `--version` was printed (on stdout). It never ends the process itself.
///
/// - Throws: ``CommandFailure`` with the exit status and message `state-server` ends with: a usage
///   error or a setting that cannot be used (64), a server that cannot start or failed (1),
///   `replay`'s and `healthcheck`'s own statuses, or `features` that cannot be served together
///   (none, or two with one name: 1), found before anything starts.
public func run(
    features: [any Feature], middleware: MiddlewareChain = MiddlewareChain(),
    arguments: [String] = Array(CommandLine.arguments.dropFirst())
) async throws(CommandFailure) {
    do {
        _ = try HostedFeatures.registry(of: features)
    } catch {
        throw CommandFailure(error)
    }
    try await run(HostedFeatures(middleware: middleware) { _ in features }, arguments: arguments)
}

/// `state-server`'s own entry: the example features are built from their own settings
/// (`login.checkDelay`, which only `state-server` declares).
package func run(
    _ hosted: HostedFeatures, arguments: [String] = Array(CommandLine.arguments.dropFirst())
) async throws(CommandFailure) {
    // Parsed, run and reported with the hosted features set: `--help` lists their settings.
    let failure = await HostedFeatures.$current.withValue(hosted) { () async -> CommandFailure? in
        do {
            var command = try StateServerCommand.parseAsRoot(arguments)
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
            return nil
        } catch {
            return CommandFailure(error)
        }
    }
    guard let failure else { return }
    guard failure.status == 0 else { throw failure }
    // `--help`, `--version`: the text on stdout, and the command has finished.
    if !failure.message.isEmpty { print(failure.message) }
}

/// Why the command that ``run(features:middleware:arguments:)`` ran failed: the exit status and
/// the message `state-server` ends with. The library never ends the process; the executable's
/// `main` does, with ``report()`` and `exit(status)`.
///
/// Statuses: 64 for a usage error or a setting that cannot be used (the message names it, then
/// the usage); 1 for a server that cannot start or failed (its log says why, and the message is
/// empty), for `healthcheck` when the server is not ready, and for features that cannot be
/// served together; `replay`'s 1 (a state differs) and 2 (not a recording).
public struct CommandFailure: Error, CustomStringConvertible, Sendable {
    /// The exit status to end the process with; never 0.
    public let status: Int32
    /// What to tell the user on stderr, as `state-server` does (`Error: …` and, for a usage
    /// error, the usage); empty when it was said already (logged, or written by the subcommand).
    public let message: String

    public var description: String { message.isEmpty ? "exit status \(status)" : message }

    /// Writes ``message`` and a newline to stderr; nothing when it is empty.
    public func report() {
        guard !message.isEmpty else { return }
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }

    /// `error`'s status and message as swift-argument-parser would end the process with them
    /// (status 0 for `--help` and `--version`, whose text is the message).
    init(_ error: any Error) {
        status = StateServerCommand.exitCode(for: error).rawValue
        message = StateServerCommand.fullMessage(for: error)
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

/// The features a server hosts, their own settings and the middleware around their
/// dispatches, for the command that runs (the server, `features`, `replay`).
package struct HostedFeatures: Sendable {
    /// Settings of the features themselves, read with the server's and listed by `--help` and
    /// `--print-config`: `state-server` declares `login.checkDelay` for its example login; a
    /// server built with ``run(features:middleware:arguments:)`` declares none.
    package let settings: [FeatureSetting]
    /// The features, from the values of their settings.
    package let make: @Sendable (FeatureSettings) throws -> [any Feature]
    package let middleware: MiddlewareChain

    package init(
        settings: [FeatureSetting] = [], middleware: MiddlewareChain = MiddlewareChain(),
        make: @escaping @Sendable (FeatureSettings) throws -> [any Feature]
    ) {
        self.settings = settings
        self.make = make
        self.middleware = middleware
    }

    /// Set by ``run(_:arguments:)`` around the command it parses and runs.
    @TaskLocal static var current: HostedFeatures?

    /// The hosted features as a registry, for these settings.
    static func registry(_ settings: FeatureSettings) throws -> FeatureRegistry {
        guard let hosted = current else {
            throw RegistryError(message: "no features: start the server with StateServer.run(features:)")
        }
        return try registry(of: hosted.make(settings))
    }

    /// The hosted features' own settings (none outside ``run(_:arguments:)``).
    static var settings: [FeatureSetting] { current?.settings ?? [] }

    static var middleware: MiddlewareChain { current?.middleware ?? MiddlewareChain() }

    static func registry(of features: [any Feature]) throws -> FeatureRegistry {
        guard !features.isEmpty else {
            throw RegistryError(message: "StateServer.run(features:) needs at least one feature")
        }
        return try FeatureRegistry(features)
    }
}
