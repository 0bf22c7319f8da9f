import MicroHTTP
import StatePersistence
import StateSessions
import StateStore
import Synchronization

/// Creating and deleting sessions, and what session routes share: loading what a route reads,
/// and turning a change's outcome into the reply. (Who may call a route, and the session lookup:
/// Access.swift.)
extension StateServerResponder {
    static let sessionRoutes: [Route] = [
        .creating("/v1/sessions") { responder, request, creator throws(APIError) in
            let sessions = responder.sessions
            return .later { () throws(APIError) in
                try await creator.check?.verify()
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
        .session(["DELETE"], "/v1/sessions/{id}", .needs(.admin)) { responder, request throws(APIError) in
            // It destroys every feature: a credential limited to some cannot.
            guard request.grant.spansSession else {
                throw .forbidden("deleting the session needs a credential over the whole session; this one is limited to some features or action types")
            }
            let sessions = responder.sessions
            let session = request.session
            return .later { () throws(APIError) in
                do throws(SessionFailure) {
                    try await sessions.delete(session)
                } catch {
                    throw .session(error)
                }
                return Reply.empty(204, route: request.template, headers: [Reply.noStore])
            }
        },
    ]

    /// The JWT of scope `create` that ``creator(_:adminMay:)`` asks for, verified on a task.
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

    /// Submits a change through the session layer (``SessionManager/submit(_:to:token:admin:)``)
    /// and answers with its outcome: at once when the change path finished synchronously, else
    /// from the thread that gives the outcome (a storage's answer queue), no task. A session
    /// that left memory between the lookup and the change is the session layer's to look up
    /// again; this only forwards the request when another node serves the session now. A
    /// remembered `Idempotency-Key` reply is judged against the asking credential's grant
    /// (``reply(_:route:to:by:)``).
    func change(_ request: SessionRequest, _ change: ChangeRequest) -> Answer {
        let submitted = sessions.submit(change, to: request.session, token: request.token, admin: request.proven)
        let route = request.template
        if case .outcome(let outcome)? = submitted.now {
            do throws(APIError) {
                return .now(try Self.reply(outcome, route: route, to: change, by: request.grant))
            } catch {
                return .now(error.response(route: route, log))
            }
        }
        return .promised { [self] done in
            submitted.whenReady { result in
                let placed: SessionManager.Submitted
                switch result {
                case .success(let value): placed = value
                }
                if case .outcome(let outcome) = placed {
                    do throws(APIError) {
                        done(.success(try Self.reply(outcome, route: route, to: change, by: request.grant)))
                    } catch {
                        done(.failure(error))
                    }
                    return
                }
                // Served by another node now (or gone): forwarding waits for that node.
                Task {
                    do throws(APIError) {
                        done(.success(try await self.reply(placed, request, change)))
                    } catch {
                        done(.failure(error))
                    }
                }
            }
        }
    }

    /// The reply once the session layer says where `change` went: its outcome here, or the
    /// reply of the node that serves the session now (the request forwarded there).
    private func reply(
        _ placed: SessionManager.Submitted, _ request: SessionRequest, _ change: ChangeRequest
    ) async throws(APIError) -> HTTPResponse {
        let outcome: ChangeOutcome
        switch placed {
        case .outcome(let found): outcome = found
        case .notFound: throw .sessionNotFound
        case .elsewhere(let url):
            let found = try await find(
                request.route, request.access, id: request.session.id, token: request.token, admin: request.proven,
                known: .elsewhere(url: url))
            switch found {
            case .forwarded(let response): return response
            case .session(let session):
                // Served here again (its owner changed back meanwhile).
                switch await sessions.submit(change, to: session, token: request.token, admin: request.proven).value() {
                case .outcome(let again): outcome = again
                case .notFound: throw .sessionNotFound
                case .elsewhere: throw .ownerUnavailable("the session's owner is changing; try again")
                }
            }
        }
        return try Self.reply(outcome, route: request.template, to: change, by: request.grant)
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

/// What a route reads from a session, loaded before its handler runs
/// (``StateServerResponder/withLoaded(_:_:_:)``; declared as ``SessionAccess/Reads``).
struct SessionNeeds: Sendable {
    /// The features whose stores are read; nil: every feature's.
    var features: [String]?
    /// A stream resuming after this event id: the events after it, rebuilt from the journal
    /// when the replay buffer does not hold them.
    var resumingAfter: Int?

    static let everyStore = SessionNeeds(features: nil)

    static func store(_ feature: String) -> SessionNeeds { SessionNeeds(features: [feature]) }
}
