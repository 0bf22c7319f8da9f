import MicroHTTP
import StateSessions
import StateStore

/// `POST /v1/sessions/{id}/dispatch`: a client's action, through the session's change path.
extension StateServerResponder {
    static let dispatchRoutes: [Route] = [
        Route(["POST"], "/v1/sessions/{id}/dispatch") { responder, request throws(APIError) in
            try responder.withSession(request) { session throws(APIError) in
                try responder.limits.checkDispatch(session)
                let change = try responder.dispatchRequest(request.http)
                return try responder.withStore(session, change.feature) { _ in
                    responder.change(session, change, request: request)
                }
            }
        }
    ]

    /// The body `{"feature": ..., "action": {...}}` with its `If-Match` and `Idempotency-Key`,
    /// checked in the contract's order (body, key, feature).
    func dispatchRequest(_ request: HTTPRequest) throws(APIError) -> ChangeRequest {
        let json = try APIError.parse(request.body)
        guard case .object(let fields) = json else {
            throw .invalidRequest(
                "the body must be a JSON object like {\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}}")
        }
        guard let featureValue = fields["feature"] else { throw .invalidRequest("the body is missing the field 'feature'") }
        guard case .string(let feature) = featureValue else {
            throw .invalidRequest("the field 'feature' must be a string, not \(featureValue.typeName)")
        }
        guard let action = fields["action"] else { throw .invalidRequest("the body is missing the field 'action'") }
        guard case .object = action else {
            throw .invalidRequest("the field 'action' must be an object, not \(action.typeName)")
        }
        var key: String?
        if let header = request.header("idempotency-key") {
            // Bytes of UTF-8, not characters: `a` and 1,500 combining marks are one character.
            guard !header.isEmpty, header.utf8.count <= settings.maxIdempotencyKeyLength else {
                throw .invalidRequest("the header 'Idempotency-Key' must have 1 to \(settings.maxIdempotencyKeyLength) bytes")
            }
            key = header
        }
        guard sessions.registry[feature] != nil else { throw .unknownFeature(feature) }
        return ChangeRequest(
            feature: feature, kind: .dispatch(action), precondition: EntityTagCondition.precondition(request),
            idempotencyKey: key)
    }
}
