import MicroHTTP

/// What a handler gives back: a response now (quick work on the event thread), or work that
/// finishes later on a task (storage, or a change waiting for its turn).
enum Answer: Sendable {
    case now(HTTPResponse)
    case later(@Sendable () async throws(APIError) -> HTTPResponse)
}

/// A request matched to a route: the request and the path's `{parameter}` values in order.
struct RouteRequest: Sendable {
    let http: HTTPRequest
    let parameters: [String]
    let template: String
}

/// One row of the route table: a method set and a path template (`/v1/sessions/{id}/state`)
/// with the handler that answers it. GET routes answer HEAD too.
struct Route: Sendable {
    typealias Handler = @Sendable (StateServerResponder, RouteRequest) throws(APIError) -> Answer

    let methods: [String]
    let template: String
    let handler: Handler
    /// The template split at `/`: literals, and `nil` for a parameter.
    let segments: [String?]

    init(_ methods: [String], _ template: String, _ handler: @escaping Handler) {
        self.methods = methods.contains("GET") && !methods.contains("HEAD") ? methods + ["HEAD"] : methods
        self.template = template
        self.handler = handler
        self.segments = template.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { part in
            part.hasPrefix("{") && part.hasSuffix("}") ? nil : String(part)
        }
    }

    /// The parameter values when `path` (split) matches the template.
    func match(_ parts: [Substring]) -> [String]? {
        guard parts.count == segments.count else { return nil }
        var parameters: [String] = []
        for (part, segment) in zip(parts, segments) {
            if let literal = segment {
                guard part == literal else { return nil }
            } else {
                guard !part.isEmpty else { return nil }
                parameters.append(String(part))
            }
        }
        return parameters
    }
}

/// The route table: what the server dispatches on, and what tests and the OpenAPI check
/// enumerate. The first matching template answers; a path no template matches is 404, a
/// method the template does not list is 405 with `Allow`. A handler's ``APIError`` becomes the
/// contract's error body here, in one place.
struct Router: Sendable {
    let routes: [Route]

    func respond(to request: HTTPRequest, _ responder: StateServerResponder) -> HTTPResult {
        let logger = responder.log
        let parts = Self.segments(request.path)
        for route in routes {
            guard let parameters = route.match(parts) else { continue }
            guard route.methods.contains(request.method) else {
                return .now(APIError.methodNotAllowed(request.method, route.methods).response(route: route.template, logger))
            }
            let routed = RouteRequest(http: request, parameters: parameters, template: route.template)
            do throws(APIError) {
                switch try route.handler(responder, routed) {
                case .now(let response): return .now(response)
                case .later(let work):
                    return .later {
                        do throws(APIError) {
                            return try await work()
                        } catch {
                            return error.response(route: route.template, logger)
                        }
                    }
                }
            } catch {
                return .now(error.response(route: route.template, logger))
            }
        }
        return .now(APIError.notFound.response(route: "-", logger))
    }

    /// The path after its leading `/`, split at `/`, keeping empty segments (split by UTF-8
    /// byte: this runs on every request, and Character-based splitting cost an eighth of a
    /// dispatch). `/` is one empty segment.
    static func segments(_ path: String) -> [Substring] {
        var parts: [Substring] = []
        let utf8 = path.utf8
        guard let first = utf8.first, first == UInt8(ascii: "/") else { return [Substring(path)] + [""] }
        var start = utf8.index(after: utf8.startIndex)
        var index = start
        while index != utf8.endIndex {
            if utf8[index] == UInt8(ascii: "/") {
                parts.append(path[start..<index])
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        parts.append(path[start..<utf8.endIndex])
        return parts
    }
}
