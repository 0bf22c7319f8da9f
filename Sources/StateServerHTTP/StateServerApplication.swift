import Logging
import StatePersistence
import StateSessions
import StateStore
import Synchronization

/// The application `state-server` runs, built in one place: the sessions of the registered
/// features over a storage (memory mode: ``SessionManager/memoryStorage(_:_:)``), and the
/// responder that answers the v1 contract.
/// The in-process test server builds it the same way, so the contract suites exercise the
/// server's own wiring, not a copy of it.
public struct StateServerApplication: Sendable {
    public let sessions: SessionManager
    public let responder: StateServerResponder

    /// - Parameters:
    ///   - notify: what the sessions report (rejected follow-ups, recoveries, loads…).
    ///   - metrics: renders `GET /metrics` from the sessions and the number of open event
    ///     streams; `nil`: the route answers 404.
    ///   - forwarder: several nodes: how requests reach the node that owns their session.
    public init(
        registry: FeatureRegistry, sessions settings: SessionSettings, routes: RouteSettings,
        storage: any SessionStorage, logger: Logger,
        notify: @escaping @Sendable (SessionNotice) -> Void = { _ in },
        metrics: (@Sendable (_ sessions: SessionManager, _ streams: Int) -> [UInt8])? = nil,
        forwarder: (any RequestForwarder)? = nil
    ) {
        let sessions = SessionManager(
            registry: registry, settings: settings, storage: storage, events: ServerSentEvents(), notify: notify)
        // The stream count lives in the responder, which the metrics closure is handed to.
        let streams = Mutex<(@Sendable () -> Int)?>(nil)
        let render = metrics.map { render in
            { @Sendable () -> [UInt8] in render(sessions, streams.withLock { $0 }?() ?? 0) }
        }
        let responder = StateServerResponder(
            sessions: sessions, settings: routes, logger: logger, metrics: render, forwarder: forwarder)
        streams.withLock { $0 = { responder.streamCount } }
        // Logged once, here, where the application starts: what the schemas could not derive.
        for warning in responder.openAPI.warnings {
            logger.warning("a feature's schema is not fully derived", metadata: ["openapi.warning": "\(warning)"])
        }
        self.sessions = sessions
        self.responder = responder
    }
}
