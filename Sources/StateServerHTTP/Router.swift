import MicroHTTP
import StateSessions
import StateStore

/// A route's answer: a response now, or later from asynchronous work; a contract error either
/// way (the router turns it into its response).
typealias Answer = NowOrLater<HTTPResponse, APIError>

/// A request matched to a route: the request and the path's `{parameter}` values, read by
/// name (`request["feature"]` for `/v1/sessions/{id}/state/{feature}`).
struct RouteRequest: Sendable {
    let http: HTTPRequest
    /// The values in the template's order (``Route/names`` holds their names).
    let parameters: [String]
    let names: [String]
    let template: String
    /// What this node believes of a peer's forwarding header (its MAC valid and new), verified
    /// once as the request arrived; nil for a client's request.
    let forwarded: PeerAuthentication.Forwarded?

    /// The value of the path parameter `{name}`; `nil` when the template has none of that name.
    subscript(_ name: String) -> String? {
        names.firstIndex(of: name).flatMap { parameters.indices.contains($0) ? parameters[$0] : nil }
    }
}

/// One row of the route table: a method set, a path template (`/v1/sessions/{id}/state`), who
/// may call it (``Access``, declared as data) and the handler that answers. GET rows answer HEAD
/// too. Rows of one template with different methods (reads and writes of one state) are one
/// path to the router, each row with its own access.
final class Route: Sendable {
    typealias Handler = @Sendable (StateServerResponder, RouteRequest) throws(APIError) -> Answer
    typealias CreatingHandler = @Sendable (StateServerResponder, RouteRequest, Creator) throws(APIError) -> Answer
    typealias SessionHandler = @Sendable (StateServerResponder, SessionRequest) throws(APIError) -> Answer

    /// The declaration and the handler, of one shape per kind of access: a session route's
    /// handler is given the session and the grant the router resolved.
    enum Endpoint: Sendable {
        case open(Handler)
        case admin(Handler)
        case creating(admin: Bool, CreatingHandler)
        case session(SessionAccess, SessionHandler)
    }

    let methods: [String]
    let template: String
    let endpoint: Endpoint
    /// The template split at `/`: literals as UTF-8 bytes, and `nil` for a parameter.
    let segments: [[UInt8]?]
    /// The parameters' names in the template's order (`["id", "feature"]`).
    let names: [String]

    /// - Parameter head: whether a GET route answers HEAD too (not the event stream: a HEAD
    ///   answer must have no body bytes, and a stream's is chunked).
    init(_ methods: [String], _ template: String, head: Bool = true, _ endpoint: Endpoint) {
        self.methods = head && methods.contains("GET") && !methods.contains("HEAD") ? methods + ["HEAD"] : methods
        self.template = template
        self.endpoint = endpoint
        let parts = template.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        self.segments = parts.map { part in part.hasPrefix("{") && part.hasSuffix("}") ? nil : Array(part.utf8) }
        self.names = parts.filter { $0.hasPrefix("{") && $0.hasSuffix("}") }.map { String($0.dropFirst().dropLast()) }
    }

    /// Who may call the route, as declared.
    var access: Access {
        switch endpoint {
        case .open: .open
        case .admin: .admin
        case .creating(let admin, _): .creating(admin: admin)
        case .session(let access, _): .session(access)
        }
    }

    /// The parameter values when the path matches the template. The path is split at `/` as
    /// sent, then each segment is percent-decoded (``PathSegments/decoded(_:)``) and literals
    /// are compared byte for byte: `ID%2Fstate` is one segment, `ID/state`.
    func match(_ path: PathSegments) -> [String]? {
        guard path.count == segments.count else { return nil }
        for index in segments.indices {
            let bounds = path.bounds(index)
            guard let literal = segments[index] else {
                guard !bounds.isEmpty else { return nil }
                continue
            }
            if path.isPlain(bounds) {
                guard bounds.count == literal.count, path.bytes[bounds].elementsEqual(literal) else { return nil }
            } else {
                guard path.decoded(bounds).elementsEqual(literal) else { return nil }
            }
        }
        var parameters: [String] = []
        parameters.reserveCapacity(names.count)
        for index in segments.indices where segments[index] == nil {
            let bounds = path.bounds(index)
            parameters.append(
                path.isPlain(bounds)
                    ? String(decoding: path.bytes[bounds], as: UTF8.self)
                    : String(decoding: path.decoded(bounds), as: UTF8.self))
        }
        return parameters
    }
}

extension Route {
    /// A route anyone may call.
    static func open(_ methods: [String], _ template: String, _ handler: @escaping Handler) -> Route {
        Route(methods, template, .open(handler))
    }

    /// A route for the server's admin credential only.
    static func admin(_ methods: [String], _ template: String, _ handler: @escaping Handler) -> Route {
        Route(methods, template, .admin(handler))
    }

    /// A `POST` that creates a session (``Access/creating(admin:)``).
    static func creating(_ template: String, admin: Bool = false, _ handler: @escaping CreatingHandler) -> Route {
        Route(["POST"], template, .creating(admin: admin, handler))
    }

    /// A route on the session of the path's `{id}`, as `access` declares. What it reads
    /// beforehand: nothing, or every store (``SessionAccess/Reads``).
    static func session(
        _ methods: [String], _ template: String, _ access: SessionAccess, head: Bool = true,
        _ handler: @escaping SessionHandler
    ) -> Route {
        Route(methods, template, head: head, .session(access, handler))
    }

    /// A session route that reads the store of the path's `{feature}`: loaded first (`404
    /// unknown_feature` when no feature has that name), and given to `handler`.
    static func session(
        _ methods: [String], _ template: String, _ access: SessionAccess,
        readingStore handler: @escaping @Sendable (StateServerResponder, SessionRequest, any AnyStateStore) throws(APIError) -> Answer
    ) -> Route {
        var access = access
        access.reads = .pathFeature
        return Route(methods, template, .session(access) { responder, request throws(APIError) in
            try responder.withStore(request, handler)
        })
    }

    /// A session route with a query of its own: parsed once (``SessionQuery``), after the
    /// credential checks; what it names is loaded, and `handler` is given it.
    static func session<Query: SessionQuery>(
        _ methods: [String], _ template: String, _ access: SessionAccess, head: Bool = true, query: Query.Type,
        _ handler: @escaping @Sendable (StateServerResponder, SessionRequest, Query) throws(APIError) -> Answer
    ) -> Route {
        var access = access
        access.reads = .query
        return Route(methods, template, head: head, .session(access) { responder, request throws(APIError) in
            let query = try Query(request, features: responder.sessions.registry)
            guard let needs = query.needs else { return try handler(responder, request, query) }
            return try responder.withLoaded(request.session, needs) { () throws(APIError) in
                try handler(responder, request, query)
            }
        })
    }
}

/// A path split at `/` after its leading `/`, keeping empty segments (`/` is one empty
/// segment), as byte ranges of its UTF-8: this runs on every request, and comparing bytes
/// costs a fraction of making and comparing `Substring`s.
struct PathSegments {
    let bytes: [UInt8]
    /// Where each segment ends (exclusive); a segment starts one byte after the previous end.
    private var ends: [Int] = []
    private let firstStart: Int

    init(_ path: String) {
        bytes = Array(path.utf8)
        guard bytes.first == UInt8(ascii: "/") else {
            // No leading `/`: the whole path, then an empty segment (matches no template).
            firstStart = 0
            ends = [bytes.count, bytes.count]
            return
        }
        firstStart = 1
        ends.reserveCapacity(8)
        for index in 1..<bytes.count where bytes[index] == UInt8(ascii: "/") {
            ends.append(index)
        }
        ends.append(bytes.count)
    }

    var count: Int { ends.count }

    func bounds(_ index: Int) -> Range<Int> {
        let start = index == 0 ? firstStart : Swift.min(ends[index - 1] + 1, ends[index])
        return start..<ends[index]
    }

    /// Whether the segment has no `%` (nothing to decode): the common case, compared in place.
    func isPlain(_ bounds: Range<Int>) -> Bool {
        !bytes[bounds].contains(UInt8(ascii: "%"))
    }

    /// The segment percent-decoded: `%XX` (hex, any case) becomes its byte, except `%00`, which
    /// stays the three characters (a NUL is no part of a name, id or token); an invalid escape
    /// stays as it is. `+` is not a space in a path.
    func decoded(_ bounds: Range<Int>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bounds.count)
        var index = bounds.lowerBound
        while index < bounds.upperBound {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bounds.upperBound,
                let high = Self.hex(bytes[index + 1]), let low = Self.hex(bytes[index + 2]), high | low != 0
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(byte)
                index += 1
            }
        }
        return out
    }

    private static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// The route table: what the server dispatches on, and what tests and the OpenAPI check
/// enumerate. The first matching template answers, with the row of the request's method; a path
/// no template matches is 404, a method no row of the template lists is 405 with `Allow`. Who may
/// call a row is its declaration (``Route/access``), checked here and by ``StateServerResponder``
/// before the handler runs. A handler's ``APIError`` becomes the contract's error body here, in
/// one place.
struct Router: Sendable {
    let routes: [Route]
    /// For each row, the rows of its template (those with other methods), in table order.
    private let rows: [[Int]]
    /// For each row, every method of its template (`Allow`, and a preflight's methods).
    private let allowed: [[String]]
    /// The first row of each template, by the number of its segments, in table order: a path is
    /// matched only against templates of its own length (matching every template in turn,
    /// copying each row, cost thousands of instructions a request).
    /// Indexed by the number of segments (an array, not a dictionary: no hashing).
    private let byLength: [[Int]]

    init(routes: [Route]) {
        self.routes = routes
        var rows = [[Int]](repeating: [], count: routes.count)
        var allowed = [[String]](repeating: [], count: routes.count)
        var byLength = [[Int]](repeating: [], count: (routes.map(\.segments.count).max() ?? 0) + 1)
        for index in routes.indices {
            let same = routes.indices.filter { routes[$0].template == routes[index].template }
            rows[index] = same
            allowed[index] = same.flatMap { routes[$0].methods }
            if same.first == index { byLength[routes[index].segments.count].append(index) }
        }
        self.rows = rows
        self.allowed = allowed
        self.byLength = byLength
    }

    /// The first route whose template matches `path`, with the parameter values.
    func find(_ path: PathSegments) -> (route: Int, parameters: [String])? {
        guard path.count < byLength.count else { return nil }
        for index in byLength[path.count] {
            if let parameters = routes[index].match(path) { return (index, parameters) }
        }
        return nil
    }

    /// The row of `method` among the rows of `route`'s template.
    func row(_ route: Int, method: String) -> Int? {
        rows[route].first { routes[$0].methods.contains(method) }
    }

    /// Every method of `route`'s template, as `Allow` lists them.
    func methods(_ route: Int) -> [String] { allowed[route] }

    /// The answer to `request`: the handler of the first route that matches it (404 when none
    /// does, 405 when the route lists another method), its ``APIError`` turned into the
    /// contract's response. Also the abuse limits (docs/API.md, "Order of checks": requests per
    /// address before the path, session creation after the method) and CORS (a preflight
    /// instead of the 405, the headers of every reply to an allowed origin).
    func respond(to request: HTTPRequest, _ responder: StateServerResponder) -> HTTPResult {
        responder.cors.decorate(route(request, responder), for: request)
    }

    private func route(_ request: HTTPRequest, _ responder: StateServerResponder) -> HTTPResult {
        let logger = responder.log
        // A forwarding MAC is good for one request: verified (and remembered) here, once.
        let forwarded = responder.forwardedBy(request)
        do throws(APIError) {
            try responder.limits.checkRequest(request, forwarded: forwarded)
        } catch {
            return .now(error.response(route: "-", logger))
        }
        guard let (matched, parameters) = find(PathSegments(request.path)) else {
            return .now(APIError.notFound.response(route: "-", logger))
        }
        guard let index = row(matched, method: request.method) else {
            let template = routes[matched].template
            if CORSPolicy.isPreflight(request) {
                return .now(responder.cors.preflight(request, route: template, methods: methods(matched), logger))
            }
            return .now(APIError.methodNotAllowed(request.method, methods(matched)).response(route: template, logger))
        }
        let route = routes[index]
        let routed = RouteRequest(
            http: request, parameters: parameters, names: route.names, template: route.template, forwarded: forwarded)
        do throws(APIError) {
            let answer = try responder.answer(route.endpoint, routed)
            // Now: as it is, without making the closure for a failure that cannot come.
            if let response = answer.now { return .now(response) }
            return answer.recover { $0.response(route: route.template, logger) }
        } catch {
            return .now(error.response(route: route.template, logger))
        }
    }

    /// What can be refused before the body of a request with `Expect: 100-continue` is read,
    /// in the order of checks: the path (404), the method (405), then what the route's
    /// declaration asks that the head can answer: the admin credential (401, 403); on session
    /// routes missing credentials (401) and, when the answer is known without waiting (memory
    /// mode, or the session already in memory), an unknown session or wrong token (404), a scope
    /// below the route's (403), and a `Content-Length` over the route's own body limit (413). A
    /// JWT is verified with the body, as every JWT is. A request refused here (or, with a
    /// `Content-Length` over the server's body limit, by the transport next) counts toward
    /// `limits.requestsPerSecond` as every request does: past it, the answer is `429`. One
    /// let through counts once, when it is routed with its body.
    func refusalBeforeBody(_ request: HTTPRequest, _ responder: StateServerResponder) -> HTTPResponse? {
        let logger = responder.log
        var route = "-"
        let length = request.header("content-length").flatMap { UInt64($0.trimmingWhitespace()) }
        let refusal = refusalFromHead(request, length: length, responder, route: &route)
        let tooLarge = length.map { $0 > UInt64(max(0, responder.settings.bodyLimit)) } ?? false
        guard refusal != nil || tooLarge else { return nil }
        do throws(APIError) {
            // Counted for the connection's client: a forwarding MAC is verified once, with the body.
            try responder.limits.checkRequest(request, forwarded: nil)
        } catch {
            return error.response(route: route, logger)
        }
        return refusal?.response(route: route, logger)
    }

    private func refusalFromHead(
        _ request: HTTPRequest, length: UInt64?, _ responder: StateServerResponder, route template: inout String
    ) -> APIError? {
        guard let (matched, parameters) = find(PathSegments(request.path)) else { return .notFound }
        template = routes[matched].template
        guard let index = row(matched, method: request.method) else {
            return .methodNotAllowed(request.method, methods(matched))
        }
        let route = routes[index]
        let routed = RouteRequest(http: request, parameters: parameters, names: route.names, template: route.template, forwarded: nil)
        do throws(APIError) {
            try responder.refuseFromHead(route.endpoint, routed, length: length)
        } catch {
            return error
        }
        return nil
    }
}
