import MicroHTTP
import StateSessions
import StateStore

/// `POST /v1/sessions/{id}/dispatch`: a client's action, through the session's change path.
extension StateServerResponder {
    static let dispatchRoutes: [Route] = [
        .session(["POST"], "/v1/sessions/{id}/dispatch", .needs(.dispatch)) { responder, request throws(APIError) in
            try responder.limits.checkDispatch(request.session)
            var asked = try responder.dispatchRequest(request.http)
            try StateServerResponder.require(dispatchOf: asked, by: request.grant)
            asked.subject = request.grant.subject
            asked.tokenID = request.grant.tokenID
            // The change path finds the store (and loads it in its turn when it is not in
            // memory): nothing to look up here.
            return responder.change(request, asked)
        }
    ]

    /// `403 forbidden` unless `grant` may dispatch this action to this feature.
    static func require(dispatchOf change: ChangeRequest, by grant: Grant) throws(APIError) {
        try require(feature: change.feature, of: grant)
        guard grant.actions[change.feature] != nil, case .dispatch(let action) = change.kind else { return }
        let type = if case .string(let type)? = action["type"] { type } else { "" }
        guard grant.allows(action: type, in: change.feature) else {
            let allowed = Grant.list(grant.actions[change.feature] ?? [])
            throw .forbidden("this token may dispatch only \(allowed) to '\(change.feature)', not '\(type)'")
        }
    }

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
