import Logging
import MicroHTTP
import StatePersistence
import StateSessions
import StateStore

/// Where 5xx causes go (fixed messages, values in metadata).
struct APIErrorLog: Sendable {
    let logger: Logger
}

/// Every error a route answers with, in the contract's shape
/// `{"error": {"code": "<snake_case_code>", "message": "<one human sentence>"}}`. Handlers throw
/// it; ``Router`` turns it into the response in one place.
struct APIError: Error, Sendable {
    let status: Int
    let code: String
    let message: String
    var headers: [(name: String, value: String)] = []
    /// What is logged for 5xx answers (never sent to the client).
    var cause: String?

    func response(route: String, _ log: APIErrorLog) -> HTTPResponse {
        if let cause {
            log.logger.error(
                status == 503 ? "storage unavailable" : "internal error",
                metadata: ["http.route": "\(route)", "error": "\(cause)"])
        }
        return Reply.error(status, code, message, route: route, headers: headers)
    }

    static let notFound = APIError(status: 404, code: "not_found", message: "there is no resource at this path")

    static func methodNotAllowed(_ method: String, _ methods: [String]) -> APIError {
        APIError(
            status: 405, code: "method_not_allowed",
            message: "\(method) is not allowed here; use \(methods.joined(separator: ", "))",
            headers: [("Allow", methods.joined(separator: ", "))])
    }

    static let unauthorized = APIError(
        status: 401, code: "unauthorized", message: "this request needs the header 'Authorization: Bearer <token>'",
        headers: [("WWW-Authenticate", "Bearer")])

    /// `401 unauthorized` saying why the credential is refused (a JWT that does not verify).
    static func unauthorizedBecause(_ message: String) -> APIError {
        APIError(status: 401, code: "unauthorized", message: message, headers: [("WWW-Authenticate", "Bearer error=\"invalid_token\"")])
    }

    /// `403 forbidden`: the credential is the session's but does not reach this (its scope, its
    /// features, its action types); says why.
    static func forbidden(_ message: String) -> APIError {
        APIError(status: 403, code: "forbidden", message: message)
    }

    static func tokenNotFound(_ id: String) -> APIError {
        APIError(status: 404, code: "token_not_found", message: "this session has no live token with the id '\(id)'")
    }

    static func tooManyTokens(_ limit: Int) -> APIError {
        APIError(
            status: 409, code: "too_many_tokens",
            message: "this session holds \(limit) live tokens, the most it may; revoke some first")
    }

    static func tooManyTokenBytes(held: Int, limit: Int) -> APIError {
        APIError(
            status: 409, code: "too_many_tokens",
            message: "this session's live tokens hold \(held) bytes of grants, and one more would pass the limit of \(limit); revoke some first")
    }

    static let sessionNotFound = APIError(status: 404, code: "session_not_found", message: "no session with this id and token")

    static func tooLarge(_ limit: Int) -> APIError {
        APIError(status: 413, code: "payload_too_large", message: "the request body is larger than the limit of \(limit) bytes")
    }

    static let malformed = APIError(status: 400, code: "malformed_json", message: "the request body is not valid JSON")

    /// The body parsed, or `400 malformed_json` saying what is wrong and where (byte offset,
    /// line and column).
    static func parse(_ body: [UInt8]) throws(APIError) -> JSONValue {
        switch JSONCoding.parseOrFailure(body) {
        case .success(let value): return value
        case .failure(let failure):
            throw APIError(status: 400, code: "malformed_json", message: "the request body is not valid JSON: \(failure)")
        }
    }

    static func invalidRequest(_ message: String) -> APIError {
        APIError(status: 400, code: "invalid_request", message: message)
    }

    /// `422 version_unreachable`: a travel to a version the store never had, or whose state
    /// the journal no longer keeps; says which versions can be reached.
    static func versionUnreachable(feature: String, version: Int, oldest: Int, current: Int) -> APIError {
        let reachable = oldest <= 1 ? "0 to \(current)" : "0 (the initial state) or \(oldest) to \(current)"
        let why = version > current ? "\(feature) is at version \(current)" : "the state of version \(version) of \(feature) is no longer kept"
        return APIError(
            status: 422, code: "version_unreachable",
            message: "cannot travel to version \(version): \(why); versions \(reachable) can be reached")
    }

    /// `403 forbidden`: an admin route without the admin credential.
    static let notAdmin = APIError(status: 403, code: "forbidden", message: "this route needs the admin credential")

    /// `422 recording_diverges`: an imported recording that today's reducers do not follow.
    static func recordingDiverges(_ divergence: String) -> APIError {
        APIError(status: 422, code: "recording_diverges", message: "the recording diverges from this server's reducers at \(divergence)")
    }

    static func unknownFeature(_ name: String) -> APIError {
        APIError(status: 404, code: "unknown_feature", message: "there is no feature named '\(name)'")
    }

    static let sessionLimit = APIError(
        status: 503, code: "session_limit_reached",
        message: "the server holds its maximum number of sessions; try again later", headers: [("Retry-After", "60")])

    static func tooManyStreams(_ message: String) -> APIError {
        APIError(status: 429, code: "too_many_streams", message: message, headers: [("Retry-After", "5")])
    }

    /// The session already has `streams.presencePerSession` streams present: this one does
    /// not join (nothing was opened).
    static func presenceFull(_ message: String) -> APIError {
        APIError(status: 429, code: "presence_full", message: message, headers: [("Retry-After", "5")])
    }

    static func storage(_ error: StorageError) -> APIError {
        if error.kind == .sessionGone { return sessionNotFound }
        if error.kind == .notOwner { return ownerUnavailable("another node owns this session now; try again") }
        return APIError(
            status: 503, code: "storage_unavailable",
            message: "the server cannot store changes right now; nothing was applied, try again",
            headers: [("Retry-After", "1")], cause: "\(error)")
    }

    /// Several nodes: this node cannot vouch for what it streams now — its LISTEN connection to
    /// PostgreSQL is down (it would miss other nodes' deletes), or it is not a member of the
    /// cluster this moment (its lease or liveness probe lapsed) — so it opens no event stream
    /// (``SessionManager/isFollowing``).
    static let notFollowing = APIError(
        status: 503, code: "storage_unavailable",
        message: "this node cannot follow changes made on other nodes right now; try again or another node",
        headers: [("Retry-After", "1")], cause: "not hearing other nodes' changes")

    /// Several nodes: the node that owns the session cannot be reached, or ownership is
    /// moving; nothing was applied.
    static func ownerUnavailable(_ message: String, misdirected: Bool = false) -> APIError {
        APIError(
            status: 503, code: "owner_unavailable", message: message + "; nothing was applied",
            headers: [("Retry-After", "1")] + (misdirected ? [("StateServer-Misdirected", "1")] : []))
    }

    static func internalError(_ error: any Error) -> APIError {
        APIError(status: 500, code: "internal_error", message: "the server failed to answer this request", cause: "\(error)")
    }

    static func store(_ error: StoreError) -> APIError {
        switch error.kind {
        case .versionConflict:
            APIError(status: 412, code: "version_conflict", message: error.message, headers: [Reply.etag(error.currentVersion)])
        case .actionRejected: APIError(status: 422, code: "action_rejected", message: error.message)
        case .forbidden: APIError(status: 403, code: "forbidden", message: error.message)
        case .invalidAction: APIError(status: 422, code: "invalid_action", message: error.message)
        case .invalidState: APIError(status: 422, code: "invalid_state", message: error.message)
        default: internalError(error)
        }
    }

    static func session(_ failure: SessionFailure) -> APIError {
        switch failure {
        case .store(let error): store(error)
        case .storage(let error): error.kind == .sessionGone ? sessionNotFound : storage(error)
        case .unknownFeature(let name): unknownFeature(name)
        case .sessionGone: sessionNotFound
        case .outcomeUnknown:
            APIError(
                status: 503, code: "outcome_unknown",
                message: "the connection to the database broke while the change was committed; it may have been applied: "
                    + "read the state, or retry with the same Idempotency-Key",
                headers: [("Retry-After", "1")])
        case .memoryFull:
            APIError(
                status: 503, code: "session_limit_reached",
                message: "the server holds as many sessions in memory as its budget allows; try again later",
                headers: [("Retry-After", "5")])
        }
    }
}
