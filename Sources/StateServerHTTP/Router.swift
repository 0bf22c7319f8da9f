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
    /// The template split at `/`: literals as UTF-8 bytes, and `nil` for a parameter.
    let segments: [[UInt8]?]

    init(_ methods: [String], _ template: String, _ handler: @escaping Handler) {
        self.methods = methods.contains("GET") && !methods.contains("HEAD") ? methods + ["HEAD"] : methods
        self.template = template
        self.handler = handler
        self.segments = template.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { part in
            part.hasPrefix("{") && part.hasSuffix("}") ? nil : Array(part.utf8)
        }
    }

    /// The parameter values when the path matches the template. Literals are compared byte for
    /// byte.
    func match(_ path: PathSegments) -> [String]? {
        guard path.count == segments.count else { return nil }
        var parameterCount = 0
        for (index, segment) in segments.enumerated() {
            let bounds = path.bounds(index)
            if let literal = segment {
                guard path.bytes[bounds].elementsEqual(literal) else { return nil }
            } else {
                guard !bounds.isEmpty else { return nil }
                parameterCount += 1
            }
        }
        var parameters: [String] = []
        parameters.reserveCapacity(parameterCount)
        for (index, segment) in segments.enumerated() where segment == nil {
            parameters.append(String(decoding: path.bytes[path.bounds(index)], as: UTF8.self))
        }
        return parameters
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
}

/// The route table: what the server dispatches on, and what tests and the OpenAPI check
/// enumerate. The first matching template answers; a path no template matches is 404, a
/// method the template does not list is 405 with `Allow`. A handler's ``APIError`` becomes the
/// contract's error body here, in one place.
struct Router: Sendable {
    let routes: [Route]

    func respond(to request: HTTPRequest, _ responder: StateServerResponder) -> HTTPResult {
        let logger = responder.log
        let path = PathSegments(request.path)
        for route in routes {
            guard let parameters = route.match(path) else { continue }
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
}
