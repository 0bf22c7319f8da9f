import MicroHTTP

/// Cross-origin requests from browsers (`cors.allowedOrigins`): off by default.
public struct CORSSettings: Sendable {
    /// Origins allowed to call the API, exactly as a browser sends them in `Origin`
    /// (`https://app.example.com`, `http://localhost:3000`), lower-cased.
    public var allowedOrigins: [String] = []
    /// `*`: any origin (answered `Access-Control-Allow-Origin: *`). Safe for this API's
    /// bearer tokens, which a page must hold to use: no cookie or other ambient credential is
    /// ever read, and `Access-Control-Allow-Credentials` is never sent.
    public var anyOrigin = false

    public var isEnabled: Bool { anyOrigin || !allowedOrigins.isEmpty }

    public init() {}
}

/// CORS for the API under `/v1/` (the pages, `/client.js`, health and metrics never need
/// it: a page on another origin loads `/client.js` with a plain `<script>` tag).
///
/// - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from an allowed
///   origin on a route is `204` with the route's methods, the request headers the API reads,
///   `Access-Control-Max-Age` and `Vary`; from any other origin (or with CORS off) `403
///   origin_not_allowed`, without CORS headers, so the browser refuses the request.
/// - Every other reply to an allowed origin carries `Access-Control-Allow-Origin` and
///   `Access-Control-Expose-Headers`; with a list of origins, every `/v1/` reply carries
///   `Vary: Origin` (a cache must not give one origin's reply to another).
/// - Nothing changes when `cors.allowedOrigins` is empty: no header is added, no lookup made.
struct CORSPolicy: Sendable {
    let settings: CORSSettings

    static let allowedHeaders = "Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, Last-Event-ID"
    static let exposedHeaders = "ETag, Location, Retry-After, Idempotent-Replayed"
    /// Seconds a browser may reuse a preflight's answer (Chromium keeps at most 7,200).
    static let maxAge = "600"

    static func isPreflight(_ request: HTTPRequest) -> Bool {
        request.method == "OPTIONS" && request.header("origin") != nil && request.header("access-control-request-method") != nil
    }

    /// What `Access-Control-Allow-Origin` says to `origin`, or nil when it is not allowed.
    func allowedOrigin(_ origin: String) -> String? {
        if settings.anyOrigin { return "*" }
        return settings.allowedOrigins.contains(origin.lowercased()) ? origin : nil
    }

    /// The answer to a preflight on `route`, a template whose rows allow `methods`.
    func preflight(_ request: HTTPRequest, route: String, methods: [String], _ log: APIErrorLog) -> HTTPResponse {
        let origin = request.header("origin") ?? ""
        guard request.path.hasPrefix("/v1/"), let allowed = allowedOrigin(origin) else {
            let why = !settings.isEnabled
                ? "cross-origin requests are off on this server (cors.allowedOrigins is empty)"
                : request.path.hasPrefix("/v1/")
                ? "the origin '\(origin)' is not in this server's cors.allowedOrigins"
                : "cross-origin requests are answered on /v1/ only"
            return APIError(status: 403, code: "origin_not_allowed", message: why).response(route: route, log)
        }
        var headers: [(name: String, value: String)] = [
            ("Access-Control-Allow-Origin", allowed),
            ("Access-Control-Allow-Methods", methods.joined(separator: ", ")),
            ("Access-Control-Allow-Headers", Self.allowedHeaders),
            ("Access-Control-Max-Age", Self.maxAge),
            Reply.noStore,
        ]
        if !settings.anyOrigin { headers.append(("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")) }
        return Reply.empty(204, route: route, headers: headers)
    }

    /// `result` with the CORS headers of an actual (not preflight) reply.
    func decorate(_ result: HTTPResult, for request: HTTPRequest) -> HTTPResult {
        guard settings.isEnabled, request.path.hasPrefix("/v1/") else { return result }
        var headers: [(name: String, value: String)] = []
        if !settings.anyOrigin { headers.append(("Vary", "Origin")) }
        if let origin = request.header("origin"), let allowed = allowedOrigin(origin) {
            headers.append(("Access-Control-Allow-Origin", allowed))
            headers.append(("Access-Control-Expose-Headers", Self.exposedHeaders))
        }
        guard !headers.isEmpty else { return result }
        let added = headers
        return result.map { Self.adding(added, to: $0) }
    }

    /// `response` with each of `headers` it does not have yet (a reply relayed from the node
    /// that owns the session already has them).
    private static func adding(_ headers: [(name: String, value: String)], to response: HTTPResponse) -> HTTPResponse {
        var response = response
        for header in headers {
            let name = header.name.lowercased()
            if !response.headers.contains(where: { $0.name.lowercased() == name }) { response.headers.append(header) }
        }
        return response
    }
}
