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
            if request.http.bodyTooLarge { throw .tooLarge(responder.settings.bodyLimit) }
            let sessions = responder.sessions
            return .later { () throws(APIError) in
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
            try responder.withSession(request) { session throws(APIError) in
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

    /// The session named by the path and the request's token, then `body` with it: at once
    /// when it is in memory, else on a task once it is loaded. Checks in the contract's order:
    /// 401 (no credentials), 404 (no such session for this token), 413 (body too large).
    /// `allowAdmin`: a read the admin credential may make on any session (history, events).
    func withSession(
        _ request: RouteRequest, allowQueryToken: Bool = false, allowAdmin: Bool = false,
        _ body: @escaping @Sendable (Session) throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        guard let id = request["id"] else { throw .notFound }
        guard let token = Credentials.token(request.http, allowQueryToken: allowQueryToken) else { throw .unauthorized }
        let admin = allowAdmin && Credentials.isAdmin(token, hash: settings.adminTokenHash)
        let tooLarge = request.http.bodyTooLarge
        let limit = settings.bodyLimit
        if let session = sessions.session(id: id, token: token, admin: admin) {
            if tooLarge { throw .tooLarge(limit) }
            return try handingOver(session, request, body(session))
        }
        guard sessions.isDurable else { throw .sessionNotFound }
        return .later { [self] () throws(APIError) in
            let session: Session
            switch try await find(request, id: id, token: token, admin: admin) {
            case .forwarded(let response): return response
            case .session(let found): session = found
            }
            if tooLarge { throw .tooLarge(limit) }
            switch try handingOver(session, request, body(session)) {
            case .now(let response): return response
            case .later(let work): return try await work()
            }
        }
    }

    /// The store of `feature`, then `body` with it: at once when it is in memory, else on a
    /// task once it is loaded.
    func withStore(
        _ session: Session, _ feature: String,
        _ body: @escaping @Sendable (any AnyStateStore) throws(APIError) -> Answer
    ) throws(APIError) -> Answer {
        if let store = session.loadedStore(feature) { return try body(store) }
        guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
        return .later { () throws(APIError) in
            let loaded: (any AnyStateStore)?
            do throws(SessionFailure) {
                loaded = try await session.store(feature)
            } catch {
                throw .session(error)
            }
            guard let store = loaded else { throw .unknownFeature(feature) }
            switch try body(store) {
            case .now(let response): return response
            case .later(let work): return try await work()
            }
        }
    }

    /// Submits a change through the session's change path and answers with its outcome: at
    /// once when the path finished synchronously, else when it does. A session evicted between
    /// the lookup and the change is loaded again and the change submitted to it.
    func change(_ session: Session, _ change: ChangeRequest, request: RouteRequest) -> Answer {
        let slot = OutcomeSlot()
        session.submit(change) { slot.fill($0) }
        let route = request.template
        if let outcome = slot.takeIfReady(), !outcome.isRetired {
            do throws(APIError) {
                return .now(try StateServerResponder.reply(outcome, route: route))
            } catch {
                return .now(error.response(route: route, log))
            }
        }
        return .later { [self] () throws(APIError) in
            var outcome = await slot.value()
            if outcome.isRetired {
                // Evicted meanwhile, or (several nodes) owned by another node now.
                let token = Credentials.token(request.http, allowQueryToken: false) ?? ""
                let fresh: Session
                switch try await find(request, id: session.id, token: token) {
                case .forwarded(let response): return response
                case .session(let found): fresh = found
                }
                do throws(SessionFailure) {
                    _ = try await fresh.store(change.feature)
                } catch {
                    throw .session(error)
                }
                outcome = await fresh.submit(change)
            }
            return try StateServerResponder.reply(outcome, route: route)
        }
    }

    static func reply(_ outcome: ChangeOutcome, route: String) throws(APIError) -> HTTPResponse {
        switch outcome {
        case .applied(_, let reply):
            return Reply.json(200, reply.body, route: route, headers: [Reply.etag(reply.version), Reply.noStore])
        case .replayed(let reply):
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

/// Hands a change's outcome from the change path to the request: read at once if it is already
/// there, or awaited.
final class OutcomeSlot: Sendable {
    private enum State {
        case empty
        case ready(ChangeOutcome)
        case waiting(CheckedContinuation<ChangeOutcome, Never>)
        case taken
    }

    private let state = Mutex(State.empty)

    func fill(_ outcome: ChangeOutcome) {
        let waiter = state.withLock { state -> CheckedContinuation<ChangeOutcome, Never>? in
            if case .waiting(let continuation) = state {
                state = .taken
                return continuation
            }
            state = .ready(outcome)
            return nil
        }
        waiter?.resume(returning: outcome)
    }

    /// The outcome if it is there already.
    func takeIfReady() -> ChangeOutcome? {
        state.withLock { state in
            if case .ready(let outcome) = state { return outcome }
            return nil
        }
    }

    func value() async -> ChangeOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<ChangeOutcome, Never>) in
            let ready = state.withLock { state -> ChangeOutcome? in
                if case .ready(let outcome) = state {
                    state = .taken
                    return outcome
                }
                state = .waiting(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
