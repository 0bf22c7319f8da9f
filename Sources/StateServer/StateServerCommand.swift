import ArgumentParser
import CAllocator
import CTerminationSignals
import Configuration
import Dispatch
import Foundation
import Logging
import CoreMetrics
import Metrics
import Prometheus
import ServiceLifecycle
import Synchronization
import MicroHTTP
import StatePersistence
import StateSessions
import StateServerHTTP
import StateStore

/// The command line of `state-server` and of every server built with
/// ``run(features:middleware:arguments:)``: serve, or one of the subcommands. It is named after
/// the program that runs it, and its help lists the settings of the features it hosts.
struct StateServerCommand: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: programName,
            abstract: "Hosts Redux-style state stores per client session over HTTP JSON and server-sent events.",
            discussion: ServerSettings.helpText,
            version: StateServerVersion.current,
            subcommands: [FeaturesCommand.self, HealthcheckCommand.self, ReplayCommand.self])
    }

    /// The running program's file name (`state-server`, `CartServer`), for usage and help.
    static var programName: String {
        let path = CommandLine.arguments.first ?? ""
        let name = path.split(separator: "/").last.map(String.init) ?? ""
        return name.isEmpty ? "state-server" : name
    }

    @Option(help: "Address to listen on (default 127.0.0.1). Env: STATE_SERVER_HOST.")
    var host: String?

    @Option(help: "Port to listen on; 0 picks a free one (default 8080). Env: STATE_SERVER_PORT.")
    var port: Int?

    @Option(help: "Where sessions live: memory (default), sqlite:PATH or postgres://USER[:PASSWORD]@HOST[:PORT]/DB. Env: STATE_SERVER_STORAGE.")
    var storage: String?

    @Option(help: "YAML configuration file. Env: STATE_SERVER_CONFIG.")
    var config: String?

    @Option(help: "Seconds between heartbeats on idle event streams (default 15). Env: STATE_SERVER_HEARTBEAT.")
    var heartbeat: Double?

    @Option(help: "Log format: text or json (default text). Env: STATE_SERVER_LOG_FORMAT.")
    var logFormat: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (default info). Env: STATE_SERVER_LOG_LEVEL.")
    var logLevel: String?

    @Option(help: "HTTPS: the certificate chain, a PEM file (with --tls-key; default none: plain HTTP). Env: STATE_SERVER_TLS_CERT.")
    var tlsCert: String?

    @Option(help: "HTTPS: the certificate's private key, an unencrypted PEM file. Env: STATE_SERVER_TLS_KEY.")
    var tlsKey: String?

    @Flag(help: "Print the effective settings as JSON and exit.")
    var printConfig = false

    func run() async throws {
        // A fatal signal leaves a line on stderr (and the runtime's backtrace where it has one).
        _ = ss_install_fatal_signal_handlers()
        var flags = FlagValues()
        flags.set(HTTPSettings.host, host)
        flags.set(HTTPSettings.port, port)
        flags.set(HTTPSettings.heartbeat, heartbeat)
        flags.set(TLSSettings.certificate, tlsCert)
        flags.set(TLSSettings.key, tlsKey)
        if let storage {
            guard let kind = StorageKind(content: .string(storage)) else {
                throw ValidationError("setting 'storage' must be \(StorageKind.expected); got '\(Settings.withoutPassword(storage))'")
            }
            flags.set(StorageSettings.kind, kind)
        }
        flags.set(LogSettings.format, try logFormat.map { try choice(LogSettings.format, $0) })
        flags.set(LogSettings.level, try logLevel.map { try choice(LogSettings.level, $0) })
        let file = config ?? ProcessInfo.processInfo.environment["STATE_SERVER_CONFIG"]

        let settings: ServerSettings
        do {
            settings = try ServerSettings(try await Settings.reader(flags: flags, file: file), features: HostedFeatures.settings)
        } catch {
            throw ValidationError("\(error)")
        }
        if printConfig {
            print(settings.json)
            return
        }
        // The open-file limit raised, and `http.connectionLimit: 0` fitted to it (FileLimit).
        let fileLimit = FileLimit.fit(connectionLimit: settings.http.server.connectionLimit)
        var fitted = settings
        fitted.http.server.connectionLimit = fileLimit.connectionLimit
        // The certificate and key are read and checked here, before anything else starts.
        do {
            fitted.http.server.tls = try settings.tls.load()
            fitted.tls.clusterTrust = try settings.tls.loadClusterTrust()
        } catch {
            throw ValidationError("\(error)")
        }
        try await Server(settings: fitted, fileLimit: fileLimit).run()
    }

    /// A flag's word as the setting's enum, or the setting's error.
    private func choice<Value: SettingChoice>(_ setting: Setting<Value>, _ text: String) throws -> Value {
        guard let value = Value(rawValue: text) else {
            throw ValidationError("setting '\(setting.key)' must be \(Value.expected); got '\(text)'")
        }
        return value
    }
}

/// `state-server features`: the registered features and their initial states.
struct FeaturesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "features", abstract: "Print the registered features with their initial states, as JSON lines.")

    func run() throws {
        for feature in try HostedFeatures.registry(FeatureSettings()).features {
            var line = JSONObjectWriter()
            line.string("name", feature.name)
            line.raw("initialState", feature.initialStateJSON)
            print(String(decoding: line.finish(), as: UTF8.self))
        }
    }
}

enum StateServerVersion {
    static let current = "1.0.0"
}

/// Builds the components from their settings and runs them as services of one `ServiceGroup`
/// until SIGTERM or SIGINT.
struct Server {
    let settings: ServerSettings
    /// How the open-file limit and the connection limit were fitted; its warning is logged.
    var fileLimit: FileLimit.Outcome?

    func run() async throws {
        // Before any thread allocates: see Sources/CAllocator/include/allocator.h. A reload of
        // a 500 KB state raised RSS by 3.1-4.6 MB with glibc's defaults, 1.6 MB with these
        // (bench/bigstate.sh).
        let tuned = ss_tune_allocator(Int32(max(2, ProcessInfo.processInfo.activeProcessorCount)), 64 << 10)
        let termination = Termination.catch()
        settings.log.bootstrap()
        let logger = Logger(label: "state-server")
        if tuned < 0 { logger.warning("the allocator refused its settings (mallopt); running with glibc's defaults") }
        fileLimit?.log(to: logger)
        if let tls = settings.http.server.tls { TLSSettings.logValidity(tls, logger: logger) }
        let prometheus = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(CatalogMetricsFactory(registry: prometheus))

        let registry = try HostedFeatures.registry(settings.features)
        // Several nodes forward requests to each other, and a forwarded request is believed
        // only with a MAC under the shared secret: without one, any client could say it is a
        // node (and move sessions). PostgreSQL storage is a cluster of one or more nodes.
        if case .postgres = settings.storage.kind, settings.storage.secrets.isEmpty {
            logger.critical(
                "setting 'cluster.secret' is required with PostgreSQL storage: nodes sharing a database forward requests to each other, signed with this secret; give every node the same one (e.g. `openssl rand -hex 32`, STATE_SERVER_CLUSTER_SECRET)")
            StderrLogWriter.shared.flush()
            throw ExitCode(1)
        }
        let storage: (any SessionStorage)?
        do {
            storage = try await settings.storage.open(logger: logger).map { TimedStorage($0) }
        } catch {
            logger.critical("cannot open storage", metadata: ["storage": "\(settings.storage.kind)", "error": "\(error)"])
            StderrLogWriter.shared.flush()
            throw ExitCode(1)
        }
        let notify: @Sendable (SessionNotice) -> Void = { notice in
            switch notice {
            case .timersScheduled: break
            case .followUpRejected(let session, let error):
                logger.warning("follow-up action rejected", metadata: ["session.id": "\(session)", "error": "\(error)"])
            case .followUpNotStored(let session, let error):
                logger.error("follow-up action not stored", metadata: ["session.id": "\(session)", "error": "\(error)"])
            case .sequenceRefused(let session, let feature, let seq, let last):
                logger.error(
                    "change not published: its sequence number is not after the last one",
                    metadata: ["session.id": "\(session)", "feature": "\(feature)", "seq": "\(seq)", "last": "\(last)"])
            case .storeRecovered(let session, let feature, let how, let reason):
                logger.warning(
                    "store recovered", metadata: ["session.id": "\(session)", "feature": "\(feature)", "how": "\(how)", "reason": "\(reason)"])
            case .storeLoaded(_, _, let bytes):
                // A large load leaves freed copies of its state in the allocator's arenas:
                // give them back (a 500 KB reload: about 2x its state in RSS, 0.9x after).
                if bytes >= Self.trimAfterLoadBytes { ss_release_free_memory() }
            case .following(true):
                logger.info("hearing other nodes' changes", metadata: ["storage": "\(settings.storage.kind)"])
            case .membership(member: false):
                logger.warning("dropped every session in memory: this node is no longer a member of the cluster")
            case .membership(member: true):
                break
            case .handedOver(let session, let moved):
                logger.debug("session handed over", metadata: ["session.id": "\(session)", "moved": "\(moved)"])
            case .following(false):
                logger.warning("stopped hearing other nodes' changes; event streams ended until it is back",
                    metadata: ["storage": "\(settings.storage.kind)"])
            }
        }
        // Several nodes (one owner per session): requests for sessions another node owns are
        // forwarded to it.
        let ownership = storage?.ownership
        let advertised = settings.storage.advertiseURL
        if ownership != nil, !advertised.isEmpty, !(advertised.hasPrefix("http://") || advertised.hasPrefix("https://")) {
            logger.critical("setting 'cluster.advertiseUrl' must be an http:// or https:// URL", metadata: ["value": "\(advertised)"])
            StderrLogWriter.shared.flush()
            throw ExitCode(1)
        }
        let peers = settings.storage.secrets.isEmpty
            ? nil : PeerAuthentication(secrets: settings.storage.secrets, now: { Int64(Date().timeIntervalSince1970) })
        let forwarder = ownership.flatMap { ownership in
            peers.map { peers in
            Forwarder(
                epoch: { ownership.epoch }, peers: peers, lease: settings.storage.lease, streamBufferLimit: settings.http.routes.streamBufferLimit,
                streamLimit: settings.http.routes.maxStreams, trust: settings.tls.clusterTrust, logger: logger)
            }
        }
        let application = makeApplication(
            registry: registry, storage: storage, prometheus: prometheus, logger: logger, notify: notify, forwarder: forwarder,
            peers: peers)
        let sessions = application.sessions
        let server = makeHTTPServer(application.responder, logger: logger)

        // Started in this order, stopped in reverse: HTTP first (no new requests, streams
        // ended), then the follower of other nodes, the sweeper, then the storage (pending commits written, then closed).
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if let storage {
            services.append(.init(service: StorageService(storage: storage, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        services.append(.init(service: SweeperService(sessions: sessions, settings: settings.sweeper, logger: logger)))
        services.append(.init(service: TimerService(sessions: sessions, logger: logger)))
        if storage?.isShared == true {
            services.append(.init(service: FollowerService(sessions: sessions)))
        }
        if let forwarder {
            services.append(.init(service: ForwarderService(forwarder: forwarder)))
            services.append(.init(service: MembershipService(sessions: sessions)))
        }
        let host = settings.http.shownHost
        let isWildcard = settings.http.server.host == "0.0.0.0" || settings.http.server.host == "::"
        services.append(
            .init(
                service: HTTPService(
                    server: server, settings: settings.http, logger: logger,
                    metadata: [
                        "features": "\(registry.names.joined(separator: ","))", "version": "\(StateServerVersion.current)",
                        "storage": "\(settings.storage.kind)", "http.connectionLimit": "\(settings.http.server.connectionLimit)",
                    ].merging(TLSSettings.metadata(settings.http.server.tls)) { $1 },
                    // Several nodes: serve once other nodes' changes are heard (or after a few
                    // seconds; /readyz and event streams answer 503 until then).
                    before: { await sessions.untilFollowing(atMost: .seconds(5)) },
                    // Several nodes: join the cluster once the port is known, before the
                    // `listening on` line (ready means a member).
                    after: { port in
                        guard let ownership else { return }
                        let url = advertised.isEmpty
                            ? "\(settings.http.scheme)://\(isWildcard ? ProcessInfo.processInfo.hostName : host):\(port)" : advertised
                        do {
                            try await ownership.join(advertising: url)
                        } catch {
                            logger.critical("cannot join the cluster", metadata: ["error": "\(error)"])
                            throw error
                        }
                    }),
                successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup))
        // No signals of its own: ServiceGroup would install them (through Dispatch) only once it
        // runs, after the storage is open, and replace the handlers `Termination` installed
        // first thing. The signal caught there triggers its graceful shutdown instead.
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [], cancellationSignals: [], logger: logger))
        let trigger = Task {
            guard let signal = await termination.next() else { return }
            logger.info("shutting down", metadata: ["signal": "\(signal)", "event_streams": "\(server.openStreams)"])
            await group.triggerGracefulShutdown()
        }
        defer { trigger.cancel() }
        do {
            try await group.run()
        } catch {
            // A service failed (it logged why); the others were shut down in order.
            StderrLogWriter.shared.flush()
            throw ExitCode(1)
        }
        logger.info("stopped")
        StderrLogWriter.shared.flush()
    }

    /// The HTTP server over the v1 routes, with metrics and the access log.
    /// The application (StateServerHTTP's builder, shared with the in-process tests), with
    /// `GET /metrics` rendered from Prometheus.
    private func makeApplication(
        registry: FeatureRegistry, storage: (any SessionStorage)?, prometheus: PrometheusCollectorRegistry, logger: Logger,
        notify: @escaping @Sendable (SessionNotice) -> Void, forwarder: Forwarder?, peers: PeerAuthentication?
    ) -> StateServerApplication {
        let gauges = (
            sessions: Gauge(label: MetricCatalog.sessionsInMemory),
            stores: Gauge(label: MetricCatalog.storesInMemory),
            streams: Gauge(label: MetricCatalog.eventStreamsOpen)
        )
        let process = ProcessMetrics(registry: prometheus)
        var sessions = settings.sessions.manager
        var middleware = MiddlewareChain()
        // The audit line comes first, so it also sees what later middleware refuse.
        if settings.log.audit { middleware.use(AuditLog(logger: logger)) }
        middleware.append(HostedFeatures.middleware)
        sessions.middleware = middleware
        var routes = settings.http.routes
        routes.peers = peers
        routes.jwt = settings.auth.jwt
        routes.sessionsNeedJWT = settings.auth.createSessions == .jwt
        return StateServerApplication(
            registry: registry, sessions: sessions, routes: routes,
            // Memory mode is decided here, once: its storage is the process's bounded journal.
            storage: storage ?? SessionManager.memoryStorage(registry, sessions),
            logger: logger, notify: notify, metrics: { sessions, streams in
            gauges.sessions.record(sessions.count)
            gauges.stores.record(sessions.storeCount)
            gauges.streams.record(streams)
            process?.update()
            return prometheus.emitToBuffer()
        }, forwarder: forwarder)
    }

    private func makeHTTPServer(_ responder: StateServerResponder, logger: Logger) -> HTTPServer {
        let dispatchTimer = Timer(label: MetricCatalog.dispatchDuration)
        let requestMetrics = RequestMetrics()
        return HTTPServer(configuration: settings.http.server, responder: responder) { record in
            requestMetrics.counter(route: record.route, status: record.status).increment()
            requestMetrics.timer(route: record.route).recordNanoseconds(record.nanoseconds)
            if record.route == "/v1/sessions/{id}/dispatch" {
                dispatchTimer.recordNanoseconds(record.nanoseconds)
            }
            // Built only when it is logged: formatting it costs more than the rest of this
            // callback (every request goes through here).
            guard logger.logLevel <= .info else { return }
            var metadata: Logger.Metadata = [
                "http.method": "\(record.method)", "http.route": "\(record.route)",
                "http.status": "\(record.status)",
                "duration_ms": "\(Double(record.nanoseconds / 1000) / 1000)",
            ]
            // A head refused before routing says why (a smuggling attempt, a broken client).
            if let refusal = record.refusal { metadata["http.refused"] = "\(refusal)" }
            logger.info("request", metadata: metadata)
        }
    }

    /// A store loaded with at least this much state is followed by giving free memory back.
    static let trimAfterLoadBytes = 256 << 10
}

/// `stateserver_http_requests_total{route,status}` counters and
/// `stateserver_http_request_duration_seconds{route}` histograms, made once per label set
/// (making a metric looks it up in the registry; this runs for every request). Found by status,
/// then by route among the few seen with that status: routes are the table's templates, so
/// comparing them is usually a pointer comparison, where hashing the route cost about a
/// thousand instructions a request.
private final class RequestMetrics: Sendable {
    private let counters = Mutex<[Int: [(route: String, counter: CoreMetrics.Counter)]]>([:])
    private let timers = Mutex<[(route: String, timer: CoreMetrics.Timer)]>([])

    func counter(route: String, status: Int) -> CoreMetrics.Counter {
        let found = counters.withLock { counters in
            counters[status]?.first { $0.route == route }?.counter
        }
        if let found { return found }
        let counter = CoreMetrics.Counter(label: MetricCatalog.httpRequests, dimensions: [("route", route), ("status", String(status))])
        counters.withLock { counters in
            if counters[status]?.contains(where: { $0.route == route }) != true {
                counters[status, default: []].append((route, counter))
            }
        }
        return counter
    }

    func timer(route: String) -> CoreMetrics.Timer {
        if let found = timers.withLock({ timers in timers.first { $0.route == route }?.timer }) { return found }
        let timer = CoreMetrics.Timer(label: MetricCatalog.httpRequestDuration, dimensions: [("route", route)])
        timers.withLock { timers in
            if !timers.contains(where: { $0.route == route }) { timers.append((route, timer)) }
        }
        return timer
    }
}

/// SIGTERM and SIGINT, caught from the moment `catch()` returns.
///
/// C handlers (sigaction, installed synchronously, replacing an inherited SIG_IGN) write the
/// signal to a pipe; a thread of its own waits on the pipe. A signal sent at any moment after
/// `catch()` — while the storage opens, before the `ServiceGroup` runs — is kept, never lost.
final class Termination: Sendable {
    private struct State {
        var waiter: CheckedContinuation<String?, Never>?
        var name: String?
        var cancelled = false
    }
    private let state = Mutex(State())

    private init() {}

    /// Installs the handlers and starts the thread that reads the pipe.
    static func `catch`() -> Termination {
        let termination = Termination()
        if ss_install_termination_handlers() == 0 {
            let thread = Thread {
                let number = ss_wait_for_termination()
                termination.fire(number == SIGINT ? "SIGINT" : "SIGTERM")
            }
            thread.name = "signals"
            thread.start()
        }
        return termination
    }

    private func fire(_ name: String) {
        let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
            guard state.name == nil else { return nil }
            state.name = name
            return state.waiter.take()
        }
        waiter?.resume(returning: name)
    }

    /// The first signal's name (at once if it already came); `nil` if the task is cancelled.
    func next() async -> String? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                let ready = state.withLock { state -> String?? in
                    if let name = state.name { return .some(name) }
                    if state.cancelled { return .some(nil) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
                state.cancelled = true
                return state.waiter.take()
            }
            waiter?.resume(returning: nil)
        }
    }
}
