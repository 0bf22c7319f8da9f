import Logging
import MicroHTTP
import StatePersistence
import StateSessions
import StateStore
import Synchronization

extension EventStream: EventSink {}

/// Limits the HTTP routes enforce.
public struct RouteSettings: Sendable {
    /// Request bodies larger than this are refused with 413 (the transport enforces it).
    public var bodyLimit = 64 * 1024
    public var maxStreamsPerSession = 32
    public var maxStreams = 10_000
    /// Event streams present at once per session (`?presence=`, `streams.presencePerSession`):
    /// one more is `429 presence_full`.
    public var maxPresencePerSession = 1000
    /// How long a present stream's client may leave bytes unacknowledged before it is taken as
    /// gone (``EventStream/peerTimeout``): it leaves within a heartbeat interval plus this.
    public static let presencePeerTimeout: Duration = .milliseconds(750)
    /// Bytes queued for one event subscriber before its stream is closed.
    public var streamBufferLimit = 1024 * 1024
    public var maxIdempotencyKeyLength = 200
    /// The server's version, written into recordings.
    public var serverVersion = "1.0.0"
    /// The SHA-256 of the admin token (`admin.tokenHash`); nil: no admin (the default).
    public var adminTokenHash: [UInt8]?
    /// Bytes a recording export may take (`recording.maxBytes`): past them the document ends
    /// early with `"complete": false`. Its starting states are always written.
    public var recordingMaxBytes = 64 << 20
    /// Several nodes: the cluster secret that authenticates forwarded requests
    /// (`cluster.secret`); nil: no request counts as forwarded.
    public var peers: PeerAuthentication?
    /// Bearer JWTs from the app's backend (`auth.jwtSecret` / `auth.jwtPublicKey`); nil: none.
    public var jwt: JWTVerifier?
    /// `auth.createSessions: jwt`: `POST /v1/sessions` needs a JWT with scope `create`.
    public var sessionsNeedJWT = false
    /// Abuse limits per client address and per session (`limits.*`); off by default here.
    public var limits = RateLimits()
    /// Cross-origin requests (`cors.allowedOrigins`); off by default.
    public var cors = CORSSettings()

    public init() {}
}

/// The routes of the v1 contract (`docs/API.md`) over MicroHTTP: a ``Router`` over the table
/// in ``router``, one file per route group (`Routes/`).
///
/// Requests on sessions in memory are answered on libmicrohttpd's threads without blocking
/// (a change runs synchronously through the session's change path when its storage answers
/// the commit at once: memory mode). Anything that waits is answered later: loading from
/// storage from a task (`.later`), a durable commit from the thread that gives its outcome (the
/// storage's answer queue, `.promised`: no task); the event threads never wait.
public final class StateServerResponder: HTTPResponder {
    let sessions: SessionManager
    let settings: RouteSettings
    let log: APIErrorLog
    /// Event streams open on this server: the one count (admission and the metric).
    let openStreams = Atomic<Int>(0)
    /// Event streams opened with a minted token, by session and token id: closed when the
    /// token is revoked.
    let streamsByToken = StreamsByToken()
    let featuresBody: [UInt8]
    let featuresTag: String
    /// `/openapi.json`, assembled from the contract and the registered features.
    public let openAPI: OpenAPIDescription
    let metrics: (@Sendable () -> [UInt8])?
    /// Several nodes: sends requests for sessions another node owns to that node.
    let forwarder: (any RequestForwarder)?
    /// The token buckets of `settings.limits`.
    let limits: ClientLimits
    let cors: CORSPolicy

    /// - Parameter metrics: the Prometheus text exposition served at `GET /metrics`
    ///   (404 when `nil`).
    public init(
        sessions: SessionManager, settings: RouteSettings, logger: Logger,
        metrics: (@Sendable () -> [UInt8])? = nil, forwarder: (any RequestForwarder)? = nil
    ) {
        self.sessions = sessions
        self.forwarder = forwarder
        self.settings = settings
        self.log = APIErrorLog(logger: logger)
        self.metrics = metrics
        limits = ClientLimits(settings.limits)
        cors = CORSPolicy(settings: settings.cors)
        var list: [UInt8] = [UInt8(ascii: "[")]
        for (index, feature) in sessions.registry.features.enumerated() {
            if index > 0 { list.append(UInt8(ascii: ",")) }
            var entry = JSONObjectWriter()
            entry.string("name", feature.name)
            entry.raw("initialState", feature.initialStateJSON)
            list += entry.finish()
        }
        list.append(UInt8(ascii: "]"))
        var body = JSONObjectWriter()
        body.raw("features", list)
        var features = body.finish()
        features.append(0x0A)
        featuresBody = features
        featuresTag = Reply.contentTag(features)
        openAPI = OpenAPIDescription(registry: sessions.registry)
    }

    /// The route table, in matching order.
    static let router = Router(routes: staticRoutes + sessionRoutes + tokenRoutes + stateRoutes + dispatchRoutes + eventRoutes + presenceRoutes + historyRoutes + timerRoutes + adminRoutes)

    /// Every route: its methods and path template. Tests and the OpenAPI check read this table.
    public static var routeList: [(methods: [String], template: String)] {
        router.routes.map { ($0.methods, $0.template) }
    }

    /// Event streams open now.
    public var streamCount: Int { openStreams.load(ordering: .relaxed) }

    public func respond(to request: HTTPRequest) -> HTTPResult {
        Self.router.respond(to: request, self)
    }

    public func refusalBeforeBody(_ request: HTTPRequest) -> HTTPResponse? {
        Self.router.refusalBeforeBody(request, self)
    }
}
