import ArgumentParser
import CTerminationSignals
import Configuration
import Dispatch
import ExampleFeatures
import Foundation
import Logging
import CoreMetrics
import Metrics
import Prometheus
import Synchronization
import MicroHTTP
import StatePersistence
import StateSessions
import StateServerHTTP
import StateStore

@main
struct StateServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "state-server",
        abstract: "Hosts Redux-style state stores per client session over HTTP JSON and server-sent events.",
        discussion: ServerConfiguration.helpText,
        version: StateServerVersion.current,
        subcommands: [FeaturesCommand.self])

    @Option(help: "Address to listen on (default 127.0.0.1). Env: STATE_SERVER_HOST.")
    var host: String?

    @Option(help: "Port to listen on; 0 picks a free one (default 8080). Env: STATE_SERVER_PORT.")
    var port: Int?

    @Option(help: "Where sessions live: memory (default) or sqlite:PATH. Env: STATE_SERVER_STORAGE.")
    var storage: String?

    @Option(help: "YAML configuration file. Env: STATE_SERVER_CONFIG.")
    var config: String?

    @Option(help: "Seconds between heartbeats on idle event streams (default 15). Env: STATE_SERVER_HEARTBEAT.")
    var heartbeat: Double?

    @Option(help: "Log format: text or json (default text). Env: STATE_SERVER_LOG_FORMAT.")
    var logFormat: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (default info). Env: STATE_SERVER_LOG_LEVEL.")
    var logLevel: String?

    @Flag(help: "Print the effective settings as JSON and exit.")
    var printConfig = false

    func run() async throws {
        var flags: [AbsoluteConfigKey: ConfigValue] = [:]
        if let host { flags["host"] = .init(.string(host), isSecret: false) }
        if let port { flags["port"] = .init(.int(port), isSecret: false) }
        if let storage { flags["storage"] = .init(.string(storage), isSecret: false) }
        if let heartbeat { flags["heartbeat"] = .init(.double(heartbeat), isSecret: false) }
        if let logFormat { flags["log.format"] = .init(.string(logFormat), isSecret: false) }
        if let logLevel { flags["log.level"] = .init(.string(logLevel), isSecret: false) }
        let file = config ?? ProcessInfo.processInfo.environment["STATE_SERVER_CONFIG"]

        let settings: ServerConfiguration
        do {
            settings = try ServerConfiguration.load(from: try await ServerConfiguration.reader(flags: flags, file: file))
        } catch {
            throw ValidationError("\(error)")
        }
        if printConfig {
            print(settings.json)
            return
        }
        try await Server(settings: settings).run()
    }
}

/// `state-server features`: the registered features and their initial states.
struct FeaturesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "features", abstract: "Print the registered features with their initial states, as JSON lines.")

    func run() throws {
        for feature in try Features.registry(loginCheckDelay: 0.2).features {
            var line = JSONObjectWriter()
            line.string("name", feature.name)
            line.raw("initialState", feature.initialStateJSON)
            print(String(decoding: line.finish(), as: UTF8.self))
        }
    }
}

/// The features this server hosts. Register your own here (see README, "Write your own
/// feature"); `serve` and `features` both use this list.
enum Features {
    static func registry(loginCheckDelay seconds: Double) throws -> FeatureRegistry {
        try ExampleFeatures.registry(loginCheckDelay: .milliseconds(Int(seconds * 1000)))
    }
}

enum StateServerVersion {
    static let current = "1.0.0"
}

/// Wires the pieces together and runs until SIGTERM or SIGINT.
struct Server {
    let settings: ServerConfiguration

    func run() async throws {
        let termination = catchTermination()
        let level = Logger.Level(rawValue: settings.logLevel) ?? .info
        let format: StderrLogHandler.Format = settings.logFormat == "json" ? .json : .text
        LoggingSystem.bootstrap { label in StderrLogHandler(label: label, format: format, logLevel: level) }
        let logger = Logger(label: "state-server")
        raiseFileLimit(logger: logger)
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: prometheus))

        let registry = try Features.registry(loginCheckDelay: settings.loginCheckDelay)
        var sessionSettings = SessionSettings()
        sessionSettings.replayBuffer = settings.replayBuffer
        sessionSettings.maxSessions = settings.maxSessions
        sessionSettings.idempotencyKeys = settings.idempotencyKeys
        sessionSettings.snapshotEvery = settings.snapshotEvery
        sessionSettings.idleTimeout = .milliseconds(Int(settings.idleTimeout * 1000))
        sessionSettings.ttl = .milliseconds(Int(settings.ttl * 1000))

        let storage: (any SessionStorage)?
        if settings.storage.hasPrefix("sqlite:") {
            do {
                storage = try SQLiteStorage(
                    path: String(settings.storage.dropFirst("sqlite:".count)),
                    maxBytes: settings.storageMaxBytes > 0 ? settings.storageMaxBytes : nil,
                    durability: settings.sync == "normal" ? .normal : .full)
            } catch {
                logger.critical("cannot open storage", metadata: ["storage": "\(settings.storage)", "error": "\(error)"])
                StderrLogWriter.shared.flush()
                throw ExitCode(1)
            }
        } else {
            storage = nil
        }
        let sessions = SessionManager(registry: registry, settings: sessionSettings, storage: storage) { notice in
            switch notice {
            case .followUpRejected(let session, let error):
                logger.warning("follow-up action rejected", metadata: ["session.id": "\(session)", "error": "\(error)"])
            case .followUpNotStored(let session, let error):
                logger.error("follow-up action not stored", metadata: ["session.id": "\(session)", "error": "\(error)"])
            case .storeRecovered(let session, let feature, let how, let reason):
                logger.warning(
                    "store recovered", metadata: ["session.id": "\(session)", "feature": "\(feature)", "how": "\(how)", "reason": "\(reason)"])
            }
        }
        var routeSettings = RouteSettings()
        routeSettings.bodyLimit = settings.bodyLimit
        routeSettings.maxStreamsPerSession = settings.streamsPerSession
        routeSettings.maxStreams = settings.streamsTotal
        routeSettings.streamBufferLimit = settings.streamBufferLimit
        let gauges = (
            sessions: Gauge(label: "stateserver_sessions_in_memory"),
            stores: Gauge(label: "stateserver_stores_in_memory"),
            streams: Gauge(label: "stateserver_event_streams_open")
        )
        let streamCount = Mutex<(@Sendable () -> Int)?>(nil)
        let responder = StateServerResponder(sessions: sessions, settings: routeSettings, logger: logger) {
            gauges.sessions.record(sessions.count)
            gauges.stores.record(sessions.storeCount)
            gauges.streams.record(streamCount.withLock { $0 }?() ?? 0)
            return prometheus.emitToBuffer()
        }
        streamCount.withLock { $0 = { responder.streamCount } }
        let dispatchTimer = Timer(label: "stateserver_dispatch_duration_seconds")

        var http = HTTPServer.Configuration()
        http.host = settings.host
        http.port = settings.port
        http.threads = settings.httpThreads
        http.bodyLimit = settings.bodyLimit
        http.connectionLimit = settings.connectionLimit
        http.connectionTimeout = settings.connectionTimeout
        http.connectionMemoryLimit = settings.connectionMemoryLimit
        http.heartbeat = .milliseconds(Int(settings.heartbeat * 1000))
        let accessLogger = logger
        let requestCounters = RequestCounters()
        let server = HTTPServer(configuration: http, responder: responder) { record in
            requestCounters.counter(route: record.route, status: record.status).increment()
            if record.route == "/v1/sessions/{id}/dispatch" {
                let (seconds, attoseconds) = record.duration.components
                dispatchTimer.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
            }
            accessLogger.info(
                "request",
                metadata: [
                    "http.method": "\(record.method)", "http.route": "\(record.route)",
                    "http.status": "\(record.status)",
                    "duration_ms": "\(Double(record.duration.components.attoseconds / 1_000_000_000_000) / 1000)",
                ])
        }

        let port: Int
        do {
            port = try server.start()
        } catch {
            logger.critical("cannot start", metadata: ["error": "\(error)"])
            StderrLogWriter.shared.flush()
            throw ExitCode(1)
        }
        let shownHost = settings.host.contains(":") ? "[\(settings.host)]" : settings.host
        let line = "listening on http://\(shownHost):\(port)\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        logger.info(
            "listening on http://\(shownHost):\(port)",
            metadata: [
                "features": "\(registry.names.joined(separator: ","))", "version": "\(StateServerVersion.current)",
                "storage": "\(settings.storage)",
            ])

        let interval = Duration.milliseconds(Int(settings.sweepInterval * 1000))
        let sweeper = Task.detached {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { return }
                let (evicted, purged) = await sessions.sweep()
                if evicted + purged > 0 {
                    logger.info("swept sessions", metadata: ["evicted": "\(evicted)", "purged": "\(purged)"])
                }
            }
        }

        let signal = await waitForTermination(termination)
        logger.info("shutting down", metadata: ["signal": "\(signal)", "event_streams": "\(server.openStreams)"])
        sweeper.cancel()
        await server.stop(grace: .seconds(2))
        await storage?.close()
        logger.info("stopped")
        StderrLogWriter.shared.flush()
    }

    /// Catches SIGTERM and SIGINT from now on: C handlers (installed synchronously, replacing an
    /// inherited SIG_IGN) write the signal to a pipe; a thread of its own waits on the pipe, so
    /// a signal sent at any moment after this is handled, never lost.
    private func catchTermination() -> Signalled {
        let signalled = Signalled()
        if ss_install_termination_handlers() == 0 {
            let thread = Thread {
                let number = ss_wait_for_termination()
                signalled.fire(number == SIGINT ? "SIGINT" : "SIGTERM")
            }
            thread.name = "signals"
            thread.start()
        }
        return signalled
    }

    /// Suspends until SIGTERM or SIGINT arrives; returns its name.
    private func waitForTermination(_ signalled: Signalled) async -> String {
        await withCheckedContinuation { signalled.wait($0) }
    }

    /// Files the server opens besides its connections: standard streams, the listening socket,
    /// an epoll descriptor and wake-up pipe per HTTP thread, the SQLite database, its journal
    /// and shared memory, the signal pipe — about 20 — with room to spare.
    static let fileLimitReserve = 64

    /// Each connection, event streams included, holds a descriptor: when the soft open-file
    /// limit is below `http.connectionLimit` plus what the server opens itself, raise it to the
    /// hard limit (and the hard limit too, where the process may); warn, saying what to do,
    /// only when it is still too low.
    private func raiseFileLimit(logger: Logger) {
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        let needed = settings.connectionLimit + Self.fileLimitReserve
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < rlim_t(needed) else { return }
        if limit.rlim_max < rlim_t(needed) {
            var raised = rlimit(rlim_cur: rlim_t(needed), rlim_max: rlim_t(needed))
            if setrlimit(resource, &raised) == 0 { return }  // allowed to (CAP_SYS_RESOURCE)
        }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < rlim_t(needed) else { return }
        let fitting = max(0, Int(limit.rlim_cur) - Self.fileLimitReserve)
        logger.warning(
            "open-file limit too low for http.connectionLimit: raise it (ulimit -n) or lower http.connectionLimit",
            metadata: [
                "nofile": "\(limit.rlim_cur)", "nofile.needed": "\(needed)",
                "http.connectionLimit": "\(settings.connectionLimit)", "http.connectionLimit.fitting": "\(fitting)",
            ])
    }
}

/// `stateserver_http_requests_total{route,status}` counters, made once per label pair (making
/// a `Counter` looks it up in the registry; this runs for every request).
private final class RequestCounters: Sendable {
    private struct Key: Hashable {
        let route: String
        let status: Int
    }

    private let counters = Mutex<[Key: CoreMetrics.Counter]>([:])

    func counter(route: String, status: Int) -> CoreMetrics.Counter {
        let key = Key(route: route, status: status)
        if let counter = counters.withLock({ $0[key] }) { return counter }
        let counter = CoreMetrics.Counter(label: "stateserver_http_requests_total", dimensions: [("route", route), ("status", String(status))])
        counters.withLock { $0[key] = counter }
        return counter
    }
}

/// The first signal received, handed to one waiting continuation.
final class Signalled: Sendable {
    private struct State {
        var continuation: CheckedContinuation<String, Never>?
        var name: String?
    }
    private let state = Mutex(State())

    func fire(_ name: String) {
        let waiting = state.withLock { state -> CheckedContinuation<String, Never>? in
            guard state.name == nil else { return nil }
            state.name = name
            return state.continuation.take()
        }
        waiting?.resume(returning: name)
    }

    func wait(_ continuation: CheckedContinuation<String, Never>) {
        let ready = state.withLock { state -> String? in
            if let name = state.name { return name }
            state.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(returning: ready) }
    }
}
