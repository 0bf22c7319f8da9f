/// Why a request of the client failed.
///
/// Every error the client throws is a `StateClientError`, except `CancellationError` when the
/// calling task is cancelled. A struct rather than an enum, so that kinds and codes can be added
/// without breaking users:
///
/// ```swift
/// do {
///     try await todos.dispatch(.toggle(id: "42"))
/// } catch let error as StateClientError where error.code == .actionRejected {
///     print(error.message)   // "there is no todo with id '42'"
/// }
/// ```
public struct StateClientError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, broadly.
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let raw: String
        private init(_ raw: String) { self.raw = raw }
        public var description: String { raw }

        /// The server answered with an error status; see ``StateClientError/status``,
        /// ``StateClientError/code`` and ``StateClientError/message``.
        public static let server = Kind("server")
        /// The request did not reach the server, or its answer did not arrive (connection
        /// refused or lost, timeout); see ``StateClientError/underlyingError``.
        public static let transport = Kind("transport")
        /// The answer is not what the contract says (not HTTP, an unexpected status, a body that
        /// is not the documented JSON).
        public static let invalidResponse = Kind("invalid_response")
        /// A state, action or effect from the server does not decode as the feature's Swift type:
        /// the client's and the server's definitions of the feature differ.
        public static let decoding = Kind("decoding")
        /// An action or state could not be encoded as JSON (for example a non-finite `Double`).
        public static let encoding = Kind("encoding")
    }

    /// The `code` of the contract's error body (`{"error": {"code": ..., "message": ...}}`),
    /// stable and meant for programs. Compare with the constants: `error.code == .versionConflict`.
    public struct Code: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }
        public var description: String { rawValue }

        /// 400: the body is not strict JSON.
        public static let malformedJSON: Code = "malformed_json"
        /// 400: the JSON has the wrong shape, or the `Idempotency-Key` is empty or too long.
        public static let invalidRequest: Code = "invalid_request"
        /// 401: no credentials.
        public static let unauthorized: Code = "unauthorized"
        /// 404: no route has this path.
        public static let notFound: Code = "not_found"
        /// 404: no session with this id, or the token is not the session's (deleted sessions too).
        public static let sessionNotFound: Code = "session_not_found"
        /// 404: the server has no feature of this name.
        public static let unknownFeature: Code = "unknown_feature"
        /// 405: the path exists but not with this method.
        public static let methodNotAllowed: Code = "method_not_allowed"
        /// 412: the store is not at the version the request named (`ifVersion`); nothing applied.
        public static let versionConflict: Code = "version_conflict"
        /// 413: the body is larger than the server's limit.
        public static let payloadTooLarge: Code = "payload_too_large"
        /// 422: the action does not decode as the server's action type; the message names the field.
        public static let invalidAction: Code = "invalid_action"
        /// 422: the state does not decode as the server's state type, or breaks a rule of the feature.
        public static let invalidState: Code = "invalid_state"
        /// 422: the reducer refused the action (a rule of the feature); nothing applied.
        public static let actionRejected: Code = "action_rejected"
        /// 429: too many open event streams.
        public static let tooManyStreams: Code = "too_many_streams"
        /// 500: a bug in the server or a feature.
        public static let internalError: Code = "internal_error"
        /// 503: the server holds as many sessions as it may.
        public static let sessionLimitReached: Code = "session_limit_reached"
        /// 503: durable storage could not record the change; nothing applied, try again.
        public static let storageUnavailable: Code = "storage_unavailable"
        /// 503 (several nodes): the session's owner could not be reached; nothing applied, try again.
        public static let ownerUnavailable: Code = "owner_unavailable"
        /// 503 (several nodes): the change may have been applied; read the state, or retry with
        /// the same idempotency key.
        public static let outcomeUnknown: Code = "outcome_unknown"
        /// 403: the token's grant does not reach this (a verb, feature or action type outside its
        /// scope), or a middleware of the server refused the action for this client.
        public static let forbidden: Code = "forbidden"
        /// 422: a travel to a version whose state is not kept (the message names those that are).
        public static let versionUnreachable: Code = "version_unreachable"
        /// 422: this server's reducers do not follow an imported recording; nothing was created.
        public static let recordingDiverges: Code = "recording_diverges"
        /// 429: an abuse limit of the server (requests or sessions per address, dispatches per
        /// session); nothing was done. `retryAfter` says when to try again.
        public static let rateLimited: Code = "rate_limited"
        /// 404: the session has no live token with this id (revoking a token).
        public static let tokenNotFound: Code = "token_not_found"
        /// 409: the session already holds as many live tokens as it may; nothing was minted.
        public static let tooManyTokens: Code = "too_many_tokens"
        /// 403: a CORS preflight from an origin the server does not allow.
        public static let originNotAllowed: Code = "origin_not_allowed"
        /// 503 (kept for older servers): several nodes lost a race to write one store; retry.
        public static let writeContention: Code = "write_contention"
    }

    public let kind: Kind
    /// The HTTP status of the server's answer, when there was one.
    public let status: Int?
    /// The contract's error code, when the server sent the error body.
    public let code: Code?
    /// One sentence for people: the server's message, or what the client saw.
    public let message: String
    /// The store's version when the server said so: the `ETag` of a `412 version_conflict`.
    public let currentVersion: Int?
    /// How long the server asked to wait before trying again (`Retry-After`), if it did.
    public let retryAfter: Duration?
    /// The error of the layer below (a `URLError`, a `DecodingError`), if any.
    public let underlyingError: (any Error)?

    public init(
        kind: Kind, status: Int? = nil, code: Code? = nil, message: String, currentVersion: Int? = nil,
        retryAfter: Duration? = nil, underlyingError: (any Error)? = nil
    ) {
        self.kind = kind
        self.status = status
        self.code = code
        self.message = message
        self.currentVersion = currentVersion
        self.retryAfter = retryAfter
        self.underlyingError = underlyingError
    }

    public var description: String {
        var text = "StateClientError.\(kind)"
        if let status { text += " \(status)" }
        if let code { text += " \(code)" }
        text += ": \(message)"
        if let underlyingError { text += " (\(underlyingError))" }
        return text
    }

    /// Whether trying the same request again later may succeed: transport errors, `408`, `429`
    /// and `5xx` (other than `500 internal_error`, a bug that will not go away by itself).
    public var isTransient: Bool {
        switch kind {
        case .transport: return true
        case .server:
            guard let status else { return false }
            if status == 408 || status == 429 { return true }
            return status >= 500 && code != .internalError
        default: return false
        }
    }
}
