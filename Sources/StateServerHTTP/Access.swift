import MicroHTTP
import StateSessions
import StateStore

/// Who may call a route, declared on it as data (``Route/access``). The router and
/// ``StateServerResponder/answer(_:_:)`` check it in the contract's order (docs/API.md, "Order of
/// checks") before the handler runs, and as far as the head allows before the body of a request
/// with `Expect: 100-continue` is read (``StateServerResponder/refuseFromHead(_:_:length:)``).
/// Nothing about access is judged from a template's text.
enum Access: Sendable, Equatable {
    /// Anyone: the page, health, metrics, the description of the API.
    case open
    /// The server's admin credential (`admin.tokenHash`): `401` without a bearer token, `403`
    /// with another.
    case admin
    /// Creates a session: counted in `limits.sessionsPerMinute` (`429`); with
    /// `auth.createSessions: jwt`, a JWT of scope `create` from the app's backend (`401` at once
    /// without a bearer token; verified on a task); then `413` for a body over the limit.
    /// `admin`: the admin credential may call it too, and then needs no JWT (an import as
    /// recorded). The handler is given what was presented (``Creator``).
    case creating(admin: Bool)
    /// The session named by the path's `{id}` (``SessionAccess``).
    case session(SessionAccess)
}

/// A session route's declaration: the scope its credential needs, where the credential may
/// come from, whether it opens an event stream, and what it reads.
///
/// The router resolves the credential, the session and the grant once: at once when the session
/// is in memory, else on a task (a JWT is always verified on one), and checks, in order, `401`
/// (no credential, a JWT that does not verify or names another session), `404
/// session_not_found` (no such session for this credential), `403` (the grant's scope below
/// ``scope``), `413` (the body over the server's limit or ``bodyLimit``). Then it loads what the
/// route ``reads`` and runs the handler with a ``SessionRequest``.
struct SessionAccess: Sendable, Equatable {
    /// What a route reads from the session before its handler runs.
    enum Reads: Sendable, Equatable {
        /// Nothing beforehand: a change finds (and loads) its store in the change path, and a
        /// route that loads as one of its own checks (a travel, after its body) does it itself.
        case nothing
        /// Every feature's store (``SessionNeeds/everyStore``).
        case everyStore
        /// The store of the path's `{feature}` (`404 unknown_feature` when none has that name),
        /// given to the handler (``Route/session(_:_:_:readingStore:)``).
        case pathFeature
        /// What the route's own query names (``SessionQuery/needs``): parsed once, after the
        /// credential checks, and given to the handler (``Route/session(_:_:_:head:query:_:)``).
        case query
    }

    /// The least scope the credential needs: `403 forbidden` below it.
    var scope: Grant.Scope
    /// The token may come as the query argument `access_token` (an `EventSource` cannot send
    /// headers). Only event streams: a token in a URL ends up in logs.
    var queryToken = false
    /// The server's admin credential may call it too, as a reader of every feature
    /// (``StateServerResponder/serverAdmin``): history, events, the recording.
    var admin = false
    /// Opens an event stream: relayed from the session's owner as a stream, and counted in this
    /// node's `streams.total` as one served here (several nodes).
    var eventStream = false
    var reads = Reads.nothing
    /// Bytes of body the route takes, when fewer than the server's `bodyLimit`: over them
    /// `413` with this limit (before the body is read when `Content-Length` says so).
    var bodyLimit: Int?

    /// A route that needs `scope` and reads nothing beforehand.
    static func needs(_ scope: Grant.Scope) -> SessionAccess { SessionAccess(scope: scope) }

    /// A read the server's admin credential may make too (history, the recording).
    static let adminMayRead = SessionAccess(scope: .observe, admin: true)

    /// An event stream: `observe`, the token in the query allowed (`EventSource`), the admin
    /// credential too.
    static let eventStream = SessionAccess(scope: .observe, queryToken: true, admin: true, eventStream: true)
}

/// A session route's request once its declaration is resolved: what its handler is given.
struct SessionRequest: Sendable {
    let route: RouteRequest
    let access: SessionAccess
    let session: Session
    /// What the credential may do on the session.
    let grant: Grant
    /// The credential as presented (the header's, or on an event stream the query's).
    let token: String
    /// The credential was proved otherwise than by the session's own tokens (the admin
    /// credential, a verified JWT): a lookup again does not check the token.
    let proven: Bool

    var http: HTTPRequest { route.http }
    var template: String { route.template }

    /// The value of the path parameter `{name}`.
    subscript(_ name: String) -> String? { route[name] }
}

/// A session route's query (and the headers that go with it), parsed once: after the credential
/// checks (it may name features the grant must reach), before anything is loaded, since what
/// the route reads may depend on it.
protocol SessionQuery: Sendable {
    init(_ request: SessionRequest, features: FeatureRegistry) throws(APIError)
    /// What the route reads, loaded before its handler runs; nil: nothing.
    var needs: SessionNeeds? { get }
}

/// What a route that creates a session was called with (``Access/creating(admin:)``).
struct Creator: Sendable {
    /// The JWT of scope `create` to verify on a task; nil when creation is open, or the
    /// credential is the server's admin.
    let check: StateServerResponder.CreatorCheck?
    /// The server's admin credential was presented (on a route that allows it).
    let isAdmin: Bool
}

extension StateServerResponder {
    /// Runs `endpoint` for `request` once the access it declares is resolved (the router asked
    /// for the path and the method already).
    func answer(_ endpoint: Route.Endpoint, _ request: RouteRequest) throws(APIError) -> Answer {
        switch endpoint {
        case .open(let handler):
            return try handler(self, request)
        case .admin(let handler):
            try requireAdmin(request.http)
            return try handler(self, request)
        case .creating(let admin, let handler):
            try limits.checkCreation(request.http, forwarded: request.forwarded)
            let creator = try creator(request.http, adminMay: admin)
            try requireBody(request.http, within: nil)
            return try handler(self, request, creator)
        case .session(let access, let handler):
            return try serve(access, request, handler)
        }
    }

    /// What `endpoint` refuses from `request`'s head alone (``Router/refusalBeforeBody(_:_:)``):
    /// the checks ``answer(_:_:)`` makes first, as far as they need no body and no waiting.
    /// `length`: the `Content-Length` announced.
    func refuseFromHead(_ endpoint: Route.Endpoint, _ request: RouteRequest, length: UInt64?) throws(APIError) {
        switch endpoint {
        case .open, .creating:
            // Creation counts toward `limits.sessionsPerMinute` before its credential is judged,
            // and is counted with the body.
            return
        case .admin:
            try requireAdmin(request.http)
        case .session(let access, _):
            guard let id = request["id"] else { throw .notFound }
            guard let token = Credentials.token(request.http, allowQueryToken: access.queryToken) else { throw .unauthorized }
            // A session that needs a task to find (or a JWT to verify) is judged with the body.
            guard case .now = try resolve(access, id: id, token: token) else { return }
            if let limit = access.bodyLimit, let length, length > UInt64(max(0, limit)) { throw .tooLarge(limit) }
        }
    }

    /// `401` without a bearer token, `403 forbidden` unless it is the admin credential.
    func requireAdmin(_ request: HTTPRequest) throws(APIError) {
        guard let token = Credentials.token(request, allowQueryToken: false) else { throw .unauthorized }
        guard Credentials.isAdmin(token, hash: settings.adminTokenHash) else { throw .notAdmin }
    }

    /// `413` for a body over the server's limit (the transport kept none of it) or over
    /// `limit`, the route's own.
    func requireBody(_ request: HTTPRequest, within limit: Int?) throws(APIError) {
        if request.bodyTooLarge { throw .tooLarge(settings.bodyLimit) }
        if let limit, request.body.count > limit { throw .tooLarge(limit) }
    }

    /// What a route that creates a session was called with: `auth.createSessions: jwt` needs a
    /// JWT of scope `create` from the app's backend, `401` at once without a credential (none
    /// needed when creation is open, or, `adminMay`, from the server's admin).
    func creator(_ request: HTTPRequest, adminMay: Bool) throws(APIError) -> Creator {
        let token = Credentials.token(request, allowQueryToken: false)
        let isAdmin = adminMay && token.map { Credentials.isAdmin($0, hash: settings.adminTokenHash) } ?? false
        guard settings.sessionsNeedJWT, let jwt = settings.jwt, !isAdmin else { return Creator(check: nil, isAdmin: isAdmin) }
        guard let token else { throw .unauthorized }
        return Creator(check: CreatorCheck(jwt: jwt, token: token), isAdmin: isAdmin)
    }

    /// A session credential's checks as far as they can be made without waiting.
    enum Resolved {
        /// The session is in memory: its grant for the credential, its scope checked.
        case now(Session, Grant, proven: Bool)
        /// Judged on a task: a JWT to verify (`jwt`), or a session to load or find on the node
        /// that owns it. `admin`: the credential is the server's admin.
        case later(jwt: JWTVerifier?, admin: Bool)
    }

    /// `404` when the session is not in memory and could not be anywhere else (memory mode),
    /// `403` when it is in memory and the grant's scope is below `access.scope`.
    func resolve(_ access: SessionAccess, id: String, token: String) throws(APIError) -> Resolved {
        if let jwt = settings.jwt, JWTVerifier.looksLikeJWT(token) { return .later(jwt: jwt, admin: false) }
        let admin = access.admin && Credentials.isAdmin(token, hash: settings.adminTokenHash)
        let found = admin
            ? sessions.session(id: id, token: token, admin: true).map { ($0, Self.serverAdmin) }
            : sessions.authorized(id: id, token: token)
        if let (session, grant) = found {
            try Self.require(access.scope, of: grant)
            return .now(session, grant, proven: admin)
        }
        if sessions.holdsEverySession { throw .sessionNotFound }
        return .later(jwt: nil, admin: admin)
    }

    /// A session route: the session named by the path and the request's credential, resolved
    /// once as `access` declares (``SessionAccess``), then `handler` with them: at once when the
    /// session is in memory, else on a task once it is loaded (a JWT is always verified on a
    /// task), or the owner's reply when another node owns the session (several nodes).
    func serve(_ access: SessionAccess, _ request: RouteRequest, _ handler: @escaping Route.SessionHandler) throws(APIError) -> Answer {
        guard let id = request["id"] else { throw .notFound }
        guard let token = Credentials.token(request.http, allowQueryToken: access.queryToken) else { throw .unauthorized }
        switch try resolve(access, id: id, token: token) {
        case .now(let session, let grant, let proven):
            try requireBody(request.http, within: access.bodyLimit)
            let resolved = SessionRequest(route: request, access: access, session: session, grant: grant, token: token, proven: proven)
            return handingOver(session, request, try run(handler, resolved))
        case .later(let jwt, let admin):
            return .later { [self] () throws(APIError) in
                var verified: Grant?
                if let jwt { verified = try await Self.sessionGrant(jwt, token, session: id) }
                // A verified JWT names the session: no token of its own to check.
                let proven = admin || verified != nil
                let session: Session
                switch try await find(request, access, id: id, token: token, admin: proven) {
                case .forwarded(let response): return response
                case .session(let found): session = found
                }
                guard let grant = verified ?? (admin ? Self.serverAdmin : session.grant(for: token)) else { throw .sessionNotFound }
                try Self.require(access.scope, of: grant)
                try requireBody(request.http, within: access.bodyLimit)
                let resolved = SessionRequest(route: request, access: access, session: session, grant: grant, token: token, proven: proven)
                return try await handingOver(session, request, run(handler, resolved)).value()
            }
        }
    }

    /// `handler`, once every store is in memory when the route reads every store.
    private func run(_ handler: @escaping Route.SessionHandler, _ request: SessionRequest) throws(APIError) -> Answer {
        guard request.access.reads == .everyStore else { return try handler(self, request) }
        return try withLoaded(request.session, .everyStore) { () throws(APIError) in try handler(self, request) }
    }

    /// `handler` with the store of the path's `{feature}`: now when it is in memory, else later
    /// once loaded (``withLoaded(_:_:_:)``); `404 unknown_feature` when no feature has the name.
    func withStore(
        _ request: SessionRequest,
        _ handler: @escaping @Sendable (StateServerResponder, SessionRequest, any AnyStateStore) throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        guard let feature = request["feature"] else { throw .notFound }
        let session = request.session
        // The common case first, with one lookup of the store.
        if let store = session.loadedStore(feature) { return try handler(self, request, store) }
        guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
        return try withLoaded(session, .store(feature)) { [self] () throws(APIError) in
            guard let store = session.loadedStore(feature) else { throw .unknownFeature(feature) }
            return try handler(self, request, store)
        }
    }

    /// The server's admin credential on a session: reads only (history, events, recording).
    static let serverAdmin = Grant(scope: .observe, subject: "admin")

    /// `403 forbidden` unless `grant`'s scope reaches `scope`.
    static func require(_ scope: Grant.Scope, of grant: Grant) throws(APIError) {
        guard grant.scope >= scope else {
            throw .forbidden("this token's scope is '\(grant.scope.name)'; this request needs '\(scope.name)'")
        }
    }

    /// `403 forbidden` unless `grant` reaches `feature`.
    static func require(feature: String, of grant: Grant) throws(APIError) {
        guard grant.reaches(feature: feature) else {
            throw .forbidden("this token does not reach the feature '\(feature)'")
        }
    }

    /// What a verified JWT may do on session `id`: `401` when it does not verify, is not a
    /// session scope (`create`), or names another session.
    static func sessionGrant(_ jwt: JWTVerifier, _ token: String, session id: String) async throws(APIError) -> Grant {
        let claims: JWTVerifier.Claims
        switch await jwt.verify(token) {
        case .success(let verified): claims = verified
        case .failure(let error): throw error
        }
        guard let grant = claims.grant else {
            throw JWTVerifier.refused("its scope 'create' only creates sessions")
        }
        guard claims.session == id else { throw JWTVerifier.refused("it is for another session") }
        return grant
    }
}
