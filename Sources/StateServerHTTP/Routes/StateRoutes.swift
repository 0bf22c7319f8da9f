import MicroHTTP
import StatePersistence
import StateSessions
import StateStore

/// Reading a session's states, and the changes that need no action: rehydrate (PUT) and reset
/// (DELETE).
extension StateServerResponder {
    static let stateRoutes: [Route] = [
        Route(["GET"], "/v1/sessions/{id}/state") { responder, request throws(APIError) in
            try responder.withSession(request, needs: .observe) { session, grant throws(APIError) in
                try responder.withLoaded(session, .everyStore) { () throws(APIError) in
                    .now(try allState(session, grant, route: request.template))
                }
            }
        },
        Route(["GET", "PUT", "DELETE"], "/v1/sessions/{id}/state/{feature}") { responder, request throws(APIError) in
            // Reading needs `observe`; setting (rehydrate) and resetting a state need `admin`.
            let scope: Grant.Scope = request.http.method == "PUT" || request.http.method == "DELETE" ? .admin : .observe
            return try responder.withSession(request, needs: scope) { session, grant throws(APIError) in
                guard let feature = request["feature"] else { throw .notFound }
                let http = request.http
                switch http.method {
                case "PUT":
                    let state = try StateServerResponder.stateBody(http)
                    guard responder.sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
                    try StateServerResponder.require(feature: feature, of: grant)
                    return responder.change(
                        session,
                        ChangeRequest(feature: feature, kind: .rehydrate(state), precondition: EntityTagCondition.precondition(http)),
                        request: request)
                case "DELETE":
                    guard responder.sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
                    try StateServerResponder.require(feature: feature, of: grant)
                    return responder.change(
                        session,
                        ChangeRequest(feature: feature, kind: .reset, precondition: EntityTagCondition.precondition(http)),
                        request: request)
                default:
                    // Several nodes: caught up first, so a read shows writes made on any node.
                    return try responder.withStore(session, feature) { store throws(APIError) in
                        try StateServerResponder.require(feature: feature, of: grant)
                        return .now(try readState(http, store, feature: feature, route: request.template))
                    }
                }
            }
        },
        Route(["POST"], "/v1/sessions/{id}/state/{feature}/travel") { responder, request throws(APIError) in
            try responder.withSession(request, needs: .admin) { session, grant throws(APIError) in
                guard let feature = request["feature"] else { throw .notFound }
                let version = try StateServerResponder.travelBody(request.http)
                let precondition = EntityTagCondition.precondition(request.http)
                return try responder.withStore(session, feature) { store throws(APIError) in
                    try StateServerResponder.require(feature: feature, of: grant)
                    return .later { () throws(APIError) in
                        let source: TravelSource
                        do throws(SessionFailure) {
                            source = try await session.stateForTravel(store, to: version)
                        } catch {
                            throw .session(error)
                        }
                        switch source {
                        case .unreachable(let oldest, let current):
                            throw .versionUnreachable(feature: feature, version: version, oldest: oldest, current: current)
                        case .state(let state):
                            let change = ChangeRequest(feature: feature, kind: .travel(state), precondition: precondition)
                            return try await responder.change(session, change, request: request).value()
                        }
                    }
                }
            }
        },
    ]

    /// A travel body: `{"version": N}`, N a whole number ≥ 0 (checked before the feature, like
    /// dispatch bodies).
    static func travelBody(_ request: HTTPRequest) throws(APIError) -> Int {
        let json = try APIError.parse(request.body)
        guard case .object(let fields) = json else {
            throw .invalidRequest("the body must be a JSON object like {\"version\": 3}")
        }
        guard let value = fields["version"] else { throw .invalidRequest("the body is missing the field 'version'") }
        guard case .int(let version) = value, version >= 0 else {
            throw .invalidRequest("'version' must be a whole number from 0 up")
        }
        return Int(version)
    }

    /// A PUT body: `{"state": ...}` (checked before the feature, like dispatch bodies).
    static func stateBody(_ request: HTTPRequest) throws(APIError) -> JSONValue {
        let json = try APIError.parse(request.body)
        guard case .object(let fields) = json else {
            throw .invalidRequest("the body must be a JSON object like {\"state\": {...}}")
        }
        guard let state = fields["state"] else { throw .invalidRequest("the body is missing the field 'state'") }
        return state
    }

    /// Every store's state the grant reaches.
    static func allState(_ session: Session, _ grant: Grant, route: String) throws(APIError) -> HTTPResponse {
        do throws(StoreError) {
            var features = JSONObjectWriter()
            for entry in try session.allStates() where grant.reaches(feature: entry.feature) {
                var item = JSONObjectWriter(capacity: entry.state.count + 32)
                item.int("version", entry.version)
                item.raw("state", entry.state)
                features.raw(entry.feature, item.finish())
            }
            var body = JSONObjectWriter()
            body.string("session", session.id)
            body.raw("features", features.finish())
            // No validator (it covers several stores): nothing a cache could reuse.
            return Reply.json(200, body.finish(), route: route, headers: [Reply.noStore])
        } catch {
            throw .internalError(error)
        }
    }

    /// GET and HEAD: the store's state with its ETag, or 304 when `If-None-Match` names it.
    static func readState(
        _ request: HTTPRequest, _ store: any AnyStateStore, feature: String, route: String
    ) throws(APIError) -> HTTPResponse {
        let state: [UInt8]
        let version: Int
        do throws(StoreError) {
            (state, version) = try store.currentJSON()
        } catch {
            throw .internalError(error)
        }
        if let condition = EntityTagCondition(request, "if-none-match", weak: true), condition.matches(version) {
            return Reply.empty(304, route: route, headers: [Reply.etag(version), Reply.privateRevalidate])
        }
        var body = JSONObjectWriter(capacity: state.count + 64)
        body.string("feature", feature)
        body.int("version", version)
        body.raw("state", state)
        return Reply.versioned(body.finish(), version: version, caching: Reply.privateRevalidate, route: route)
    }
}
