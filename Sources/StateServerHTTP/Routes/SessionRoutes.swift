import MicroHTTP
import StatePersistence
import StateSessions
import StateStore
import Synchronization

/// Creating and deleting sessions, and what every session route shares: credentials, the
/// session lookup (in memory at once, from storage on a task), the body limit, and turning a
/// change's outcome into the reply.
extension StateServerResponder {
    static let sessionRoutes: [Route] = [
        Route(["POST"], "/v1/sessions") { responder, request throws(APIError) in
            let creator = try responder.creator(request)
            if request.http.bodyTooLarge { throw .tooLarge(responder.settings.bodyLimit) }
            let sessions = responder.sessions
            return .later { () throws(APIError) in
                try await creator?.verify()
                do throws(SessionManager.CreateFailure) {
                    let (session, token) = try await sessions.create()
                    var body = JSONObjectWriter()
                    body.string("id", session.id)
                    body.string("token", token)
                    return Reply.json(
                        201, body.finish(), route: "/v1/sessions", headers: [("Location", "/v1/sessions/\(session.id)"), Reply.noStore])
                } catch {
                    switch error {
                    case .limitReached: throw .sessionLimit
                    case .storage(let error): throw .storage(error)
                    }
                }
            }
        },
        Route(["DELETE"], "/v1/sessions/{id}") { responder, request throws(APIError) in
            try responder.withSession(request, needs: .admin) { session, caller throws(APIError) in
                // It destroys every feature: a credential limited to some cannot.
                guard caller.spansSession else {
                    throw .forbidden("deleting the session needs a credential over the whole session; this one is limited to some features or action types")
                }
                let sessions = responder.sessions
                return .later { () throws(APIError) in
                    do throws(SessionFailure) {
                        try await sessions.delete(session)
                    } catch {
                        throw .session(error)
                    }
                    return Reply.empty(204, route: request.template, headers: [Reply.noStore])
                }
            }
        },
    ]

    /// `auth.createSessions: jwt`: what creating a session needs (`POST /v1/sessions`, and an
    /// import, `POST /v1/recordings`, which creates one too): a JWT of scope `create` from the
    /// app's backend, `401` at once without a credential. Nil when creation is open, or (an
    /// import: `admin`) when the credential is the server's admin.
    func creator(_ request: RouteRequest, admin: Bool = false) throws(APIError) -> CreatorCheck? {
        guard settings.sessionsNeedJWT, let jwt = settings.jwt, !admin else { return nil }
        guard let token = Credentials.token(request.http, allowQueryToken: false) else { throw .unauthorized }
        return CreatorCheck(jwt: jwt, token: token)
    }

    /// The JWT of scope `create` that ``creator(_:admin:)`` asks for, verified on a task.
    struct CreatorCheck: Sendable {
        let jwt: JWTVerifier
        let token: String

        func verify() async throws(APIError) {
            guard JWTVerifier.looksLikeJWT(token) else {
                throw JWTVerifier.refused("creating a session needs a JWT of scope 'create' from the app's backend")
            }
            switch await jwt.verify(token) {
            case .failure(let error): throw error
            case .success(let claims):
                guard claims.scope == "create" else {
                    throw JWTVerifier.refused("its scope is '\(claims.scope)'; creating a session needs 'create'")
                }
            }
        }
    }

    /// The session named by the path and the request's credential, then `body` with it and what
    /// the credential may do there: at once when the session is in memory, else on a task once it
    /// is loaded (a JWT is always verified on a task). Checks in the contract's order: 401 (no
    /// credentials, a JWT that does not verify or names another session), 404 (no such session
    /// for this token), 403 (the credential's scope is below `scope`), 413 (body too large).
    /// `allowAdmin`: a read the admin credential may make on any session (history, events,
    /// recording).
    func withSession(
        _ request: RouteRequest, needs scope: Grant.Scope, allowQueryToken: Bool = false, allowAdmin: Bool = false,
        _ body: @escaping @Sendable (Session, Grant) throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        guard let id = request["id"] else { throw .notFound }
        guard let token = Credentials.token(request.http, allowQueryToken: allowQueryToken) else { throw .unauthorized }
        let tooLarge = request.http.bodyTooLarge
        let limit = settings.bodyLimit
        if let jwt = settings.jwt, JWTVerifier.looksLikeJWT(token) {
            return .later { [self] () throws(APIError) in
                let grant = try await Self.sessionGrant(jwt, token, session: id)
                let session: Session
                switch try await find(request, id: id, token: token, admin: true) {
                case .forwarded(let response): return response
                case .session(let found): session = found
                }
                try Self.require(scope, of: grant)
                if tooLarge { throw .tooLarge(limit) }
                return try await handingOver(session, request, body(session, grant)).value()
            }
        }
        let admin = allowAdmin && Credentials.isAdmin(token, hash: settings.adminTokenHash)
        let found = admin
            ? sessions.session(id: id, token: token, admin: true).map { ($0, Self.serverAdmin) }
            : sessions.authorized(id: id, token: token)
        if let (session, grant) = found {
            try Self.require(scope, of: grant)
            if tooLarge { throw .tooLarge(limit) }
            return try handingOver(session, request, body(session, grant))
        }
        if sessions.holdsEverySession { throw .sessionNotFound }
        return .later { [self] () throws(APIError) in
            let session: Session
            switch try await find(request, id: id, token: token, admin: admin) {
            case .forwarded(let response): return response
            case .session(let found): session = found
            }
            guard let grant = admin ? Self.serverAdmin : session.grant(for: token) else { throw .sessionNotFound }
            try Self.require(scope, of: grant)
            if tooLarge { throw .tooLarge(limit) }
            return try await handingOver(session, request, body(session, grant)).value()
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

    /// The store of `feature`, then `body` with it: now when it is
    /// in memory, else later once loaded (``withLoaded(_:_:_:)`` with `.store(feature)`).
    func withStore(
        _ session: Session, _ feature: String,
        _ body: @escaping @Sendable (any AnyStateStore) throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        // The common case first, with one lookup of the store.
        if let store = session.loadedStore(feature) { return try body(store) }
        guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
        return try withLoaded(session, .store(feature)) { () throws(APIError) in
            guard let store = session.loadedStore(feature) else { throw .unknownFeature(feature) }
            return try body(store)
        }
    }

    /// `body`, once what it reads is in memory: the stores of `needs.features` (nil: every
    /// feature's), and (a stream resuming) the events after
    /// `needs.resumingAfter`. Now when all of it is in memory already, else later, once loaded
    /// (`503` when a store still cannot be: ``Session/loadEveryStore(_:)``). A route gives one
    /// body and declares what it needs; which of the two answers it gets is decided here.
    func withLoaded(
        _ session: Session, _ needs: SessionNeeds, _ body: @escaping @Sendable () throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        if session.isReady(for: needs.features), !session.needsBackfill(after: needs.resumingAfter) { return try body() }
        return .later { () throws(APIError) in
            let loaded: Bool
            do throws(SessionFailure) {
                loaded = try await session.loadEveryStore(needs.features)
            } catch {
                throw .session(error)
            }
            guard loaded else { throw .storage(StorageError(.unavailable, "the session's stores could not be loaded")) }
            if let lastEventID = needs.resumingAfter { await session.backfill(after: lastEventID) }
            return try await body().value()
        }
    }

    /// Submits a change through the session's change path and answers with its outcome: at
    /// once when the path finished synchronously, else when it does. A session that left memory
    /// between the lookup and the change is the session layer's to retry
    /// (``SessionManager/submitAgain(_:id:token:admin:)``); this only forwards the request when
    /// another node owns the session now.
    /// `grant`: the asking credential's; a remembered `Idempotency-Key` reply is judged
    /// against it (``reply(_:route:to:by:)``).
    func change(_ session: Session, _ change: ChangeRequest, request: RouteRequest, grant: Grant = .owner) -> Answer {
        let submitted = session.submit(change)
        let route = request.template
        if let outcome = submitted.now, !outcome.isRetired {
            do throws(APIError) {
                return .now(try StateServerResponder.reply(outcome, route: route, to: change, by: grant))
            } catch {
                return .now(error.response(route: route, log))
            }
        }
        // Answered from the thread that gives the outcome (a storage's answer queue): no task,
        // unless the session was retired meanwhile.
        return .promised { [self] done in
            submitted.whenReady { result in
                let outcome: ChangeOutcome
                switch result {
                case .success(let value): outcome = value
                }
                guard outcome.isRetired else {
                    do throws(APIError) {
                        done(.success(try StateServerResponder.reply(outcome, route: route, to: change, by: grant)))
                    } catch {
                        done(.failure(error))
                    }
                    return
                }
                Task {
                    do throws(APIError) {
                        done(.success(try await self.resubmit(session, change, request: request, grant: grant)))
                    } catch {
                        done(.failure(error))
                    }
                }
            }
        }
    }

    /// A change whose session was evicted meanwhile, or (several nodes) is owned by another
    /// node now: submitted again where the session is.
    func resubmit(
        _ session: Session, _ change: ChangeRequest, request: RouteRequest, grant: Grant
    ) async throws(APIError) -> HTTPResponse {
        let token = Credentials.token(request.http, allowQueryToken: false) ?? ""
        // A JWT was verified already; any other token is checked again.
        let verified = settings.jwt != nil && JWTVerifier.looksLikeJWT(token)
        let again: SessionManager.Resubmitted
        do throws(SessionFailure) {
            again = try await sessions.submitAgain(change, id: session.id, token: token, admin: verified)
        } catch {
            throw .session(error)
        }
        let outcome: ChangeOutcome
        switch again {
        case .outcome(let found): outcome = found
        case .notFound: throw .sessionNotFound
        case .elsewhere:
            // Forwarded to the owner (which looks the session up as every node does).
            switch try await find(request, id: session.id, token: token, admin: verified) {
            case .forwarded(let response): return response
            case .session(let found): outcome = await found.submit(change).value()
            }
        }
        return try StateServerResponder.reply(outcome, route: request.template, to: change, by: grant)
    }

    /// The reply to `change`'s outcome. A remembered `Idempotency-Key` reply is judged against
    /// the grant of the credential that asks, not the one that made it: a reply of a feature
    /// it does not reach is `403`, as is one of another feature whose action types it is limited
    /// to (the type it sent was checked for its own feature only).
    static func reply(
        _ outcome: ChangeOutcome, route: String, to change: ChangeRequest, by grant: Grant
    ) throws(APIError) -> HTTPResponse {
        switch outcome {
        case .applied(_, let reply):
            return Reply.versioned(reply.body, version: reply.version, caching: Reply.noStore, route: route)
        case .replayed(let reply):
            if !grant.spansSession {
                guard case .object(let fields)? = try? JSONParser.parse(reply.body), case .string(let feature)? = fields["feature"] else {
                    throw .forbidden("this token does not reach the change this Idempotency-Key made")
                }
                try require(feature: feature, of: grant)
                if feature != change.feature, grant.actions[feature] != nil {
                    throw .forbidden("this token may dispatch only some action types to '\(feature)', where this Idempotency-Key was used")
                }
            }
            var headers = reply.status == 200 ? [Reply.etag(reply.version), Reply.noStore] : [Reply.noStore]
            headers.append(("Idempotent-Replayed", "true"))
            return Reply.json(reply.status, reply.body, route: route, headers: headers)
        case .failed(let failure):
            throw .session(failure)
        }
    }
}

extension ChangeOutcome {
    var isRetired: Bool {
        if case .failed(.retired) = self { return true }
        return false
    }
}

/// What a route reads from a session, loaded before its body runs
/// (``StateServerResponder/withLoaded(_:_:_:)``).
struct SessionNeeds: Sendable {
    /// The features whose stores are read; nil: every feature's.
    var features: [String]?
    /// A stream resuming after this event id: the events after it, rebuilt from the journal
    /// when the replay buffer does not hold them.
    var resumingAfter: Int?

    static let everyStore = SessionNeeds(features: nil)

    static func store(_ feature: String) -> SessionNeeds { SessionNeeds(features: [feature]) }
}
