import MicroHTTP
import StatePersistence
import StateSessions
import StateStore

/// Reading a session's states, and the changes that need no action: rehydrate (PUT) and reset
/// (DELETE).
extension StateServerResponder {
    static let stateRoutes: [Route] = [
        .session(["GET"], "/v1/sessions/{id}/state", SessionAccess(scope: .observe, reads: .everyStore)) { _, request throws(APIError) in
            .now(try allState(request.session, request.grant, route: request.template))
        },
        .session(["GET"], "/v1/sessions/{id}/state/{feature}", .needs(.observe), readingStore: { _, request, store throws(APIError) in
            guard let feature = request["feature"] else { throw .notFound }
            try require(feature: feature, of: request.grant)
            return .now(try readState(request.http, store, feature: feature, route: request.template))
        }),
        // Setting a state (rehydrate) and resetting one need `admin`.
        .session(["PUT"], "/v1/sessions/{id}/state/{feature}", .needs(.admin)) { responder, request throws(APIError) in
            guard let feature = request["feature"] else { throw .notFound }
            let state = try stateBody(request.http)
            guard responder.sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
            try require(feature: feature, of: request.grant)
            let precondition = EntityTagCondition.precondition(request.http)
            return responder.change(request, ChangeRequest(feature: feature, kind: .rehydrate(state), precondition: precondition))
        },
        .session(["DELETE"], "/v1/sessions/{id}/state/{feature}", .needs(.admin)) { responder, request throws(APIError) in
            guard let feature = request["feature"] else { throw .notFound }
            guard responder.sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
            try require(feature: feature, of: request.grant)
            let precondition = EntityTagCondition.precondition(request.http)
            return responder.change(request, ChangeRequest(feature: feature, kind: .reset, precondition: precondition))
        },
        // The store is loaded after the body is read (`400` before `404 unknown_feature`).
        .session(["POST"], "/v1/sessions/{id}/state/{feature}/travel", .needs(.admin)) { responder, request throws(APIError) in
            let version = try StateServerResponder.travelBody(request.http)
            let precondition = EntityTagCondition.precondition(request.http)
            return try responder.withStore(request) { responder, request, store throws(APIError) in
                guard let feature = request["feature"] else { throw .notFound }
                try require(feature: feature, of: request.grant)
                let session = request.session
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
                        return try await responder.change(request, change).value()
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
