@_exported import NowOrLater

/// One HTTP request, with its whole (bounded) body.
public struct HTTPRequest: Sendable {
    public let method: String
    /// The path as sent, without the query, not percent-decoded: a router splits it at `/`
    /// first, then decodes each segment (so `%2F` cannot make a new segment).
    public let path: String
    /// Header fields in arrival order, names lower-cased.
    public let headers: [(name: String, value: String)]
    /// Query arguments in arrival order (`?a=1&a=2` gives two entries).
    public let query: [(name: String, value: String?)]
    public let body: [UInt8]
    /// The body was larger than the server's limit and was discarded.
    public let bodyTooLarge: Bool
    /// The address of the connection's other end (the client, or a proxy in front of it);
    /// nil when unknown (a request made in process).
    public let peer: IPAddress?

    public init(
        method: String, path: String, headers: [(name: String, value: String)] = [],
        query: [(name: String, value: String?)] = [], body: [UInt8] = [], bodyTooLarge: Bool = false,
        peer: IPAddress? = nil
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.query = query
        self.body = body
        self.bodyTooLarge = bodyTooLarge
        self.peer = peer
    }

    /// The first value of a header, by case-insensitive name.
    public func header(_ name: String) -> String? {
        // Names are almost always given lower-cased: lower-casing costs more than the search.
        let lower = name.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") } ? name.lowercased() : name
        return headers.first { $0.name == lower }?.value
    }

    /// Every value of a query argument.
    public func queryValues(_ name: String) -> [String] {
        query.compactMap { $0.name == name ? ($0.value ?? "") : nil }
    }
}

/// A response: a status, headers and either bytes or an event stream.
public struct HTTPResponse: Sendable {
    public enum Body: Sendable {
        case bytes([UInt8])
        /// A long-lived streaming body (server-sent events), sent chunked.
        case stream(EventStream)
    }

    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: Body
    /// The route template for the access log (`/v1/sessions/{id}/state`), never the raw path,
    /// so ids and tokens stay out of logs.
    public var route: String

    public init(status: Int, headers: [(name: String, value: String)] = [], body: Body = .bytes([]), route: String = "-") {
        self.status = status
        self.headers = headers
        self.body = body
        self.route = route
    }
}

/// What a responder returns: a response now (for quick, non-blocking work), or one given later
/// (by a task, or through a callback: ``NowOrLater``). libmicrohttpd's threads never wait for
/// the latter: the connection is suspended and resumed when the response is ready.
public typealias HTTPResult = NowOrLater<HTTPResponse, Never>

/// Answers requests. Called on libmicrohttpd's event threads: `respond` must not block.
public protocol HTTPResponder: Sendable {
    func respond(to request: HTTPRequest) -> HTTPResult

    /// A refusal decided from the head alone (unknown path, wrong method, missing credentials),
    /// asked before a request with `Expect: 100-continue` is invited to send its body; `nil`
    /// lets it send the body. The request has no body yet. Must not block.
    func refusalBeforeBody(_ request: HTTPRequest) -> HTTPResponse?
}

extension HTTPResponder {
    public func refusalBeforeBody(_ request: HTTPRequest) -> HTTPResponse? { nil }
}

/// One finished request, for the access log.
public struct HTTPAccessRecord: Sendable {
    public let method: String
    public let route: String
    public let status: Int
    /// From the request's arrival to its reply being queued, in nanoseconds.
    public let nanoseconds: Int64
    /// Why the request head was refused before routing (the framing check's reason), or nil.
    public var refusal: String? = nil
}
