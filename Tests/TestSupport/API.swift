import Foundation
import Testing

/// The four example features and their initial states, as the contract gives them.
package enum Examples {
    package static let names: Set<String> = ["counter", "todos", "settings", "login"]
    package static let counter: JSON = ["count": 0]
    package static let settings: JSON = ["backgroundColor": "#FF0000", "textColor": "#FFFFFF"]
    package static let login: JSON = ["username": "", "isLoading": false, "isLoggedIn": false, "error": .null]
}

/// How requests reach a server: over sockets to a real `state-server` process
/// (``SocketTransport``), or straight to the responder of a server in the test process
/// (InProcessServer.swift's transport: no process, no socket).
package protocol HTTPTransport: Sendable {
    /// Sends one request and returns its whole response. `body` adds a `Content-Length`.
    func request(
        _ method: String, _ target: String, headers: [Header], body: [UInt8]?, timeout: Duration
    ) async throws -> HTTPResponse

    /// Sends `GET target` and returns the response head with its body to read incrementally.
    func openEvents(_ target: String, headers: [Header], receiveBufferSize: Int?) async throws -> EventStream

    /// The port of a server listening on a socket; `nil` in process.
    var port: Int? { get }
}

/// Requests to a real server over 127.0.0.1, each on a fresh connection (from `source`, a
/// local address of 127.0.0.0/8, when given: the server then sees another client).
package struct SocketTransport: HTTPTransport {
    package let socketPort: Int
    package let source: String?

    package init(port: Int, source: String? = nil) {
        self.socketPort = port
        self.source = source
    }

    package var port: Int? { socketPort }

    package func request(
        _ method: String, _ target: String, headers: [Header], body: [UInt8]?, timeout: Duration
    ) async throws -> HTTPResponse {
        let connection = try await HTTPConnection.open(port: socketPort, source: source)
        defer { connection.close() }
        return try await connection.request(
            method, target, headers: headers + [("Connection", "close")], body: body, timeout: timeout)
    }

    package func openEvents(_ target: String, headers: [Header], receiveBufferSize: Int?) async throws -> EventStream {
        try await EventStream.open(
            port: socketPort, target: target, headers: headers, receiveBufferSize: receiveBufferSize, source: source)
    }
}

/// Requests to one server, through its transport.
package struct API: Sendable {
    package let transport: any HTTPTransport

    /// A real server listening on `port`, reached from `source` (a local address of
    /// 127.0.0.0/8; nil: 127.0.0.1) — a test's other clients, for the per-address limits.
    package init(port: Int, source: String? = nil) { self.transport = SocketTransport(port: port, source: source) }

    package init(transport: any HTTPTransport) { self.transport = transport }

    /// The port of a real server. A test that opens its own connections needs one (a
    /// `.localServer` suite); asked of an in-process server it records an issue and gives 0.
    package var port: Int {
        guard let port = transport.port else {
            Issue.record("this test opens its own connections: it needs a real server (.localServer), not an in-process one")
            return 0
        }
        return port
    }

    package func request(
        _ method: String, _ target: String, headers: [Header] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) async throws -> HTTPResponse {
        try await transport.request(method, target, headers: headers, body: body, timeout: timeout)
    }

    package func request(_ method: String, _ target: String, headers: [Header] = [], json: JSON) async throws -> HTTPResponse {
        try await request(method, target, headers: headers, body: json.bytes)
    }

    package func createSession(sourceLocation: SourceLocation = #_sourceLocation) async throws -> Session {
        let response = try await request("POST", "/v1/sessions")
        try #require(response.status == 201, "create session: \(response)", sourceLocation: sourceLocation)
        let body = try #require(response.json, sourceLocation: sourceLocation)
        let id = try #require(body["id"]?.string, "session id in \(response)", sourceLocation: sourceLocation)
        let token = try #require(body["token"]?.string, "token in \(response)", sourceLocation: sourceLocation)
        return Session(api: self, id: id, token: token)
    }

    /// `GET /healthz` answers 200 `{"status":"ok"}`.
    package func isHealthy() async -> Bool {
        guard let response = try? await request("GET", "/healthz", timeout: .seconds(5)) else { return false }
        return response.status == 200 && response.json == ["status": "ok"]
    }

    package func openEvents(
        _ target: String, headers: [Header] = [], receiveBufferSize: Int? = nil
    ) async throws -> EventStream {
        try await transport.openEvents(target, headers: headers, receiveBufferSize: receiveBufferSize)
    }
}

/// A version and state of one feature's store, as `GET .../state` gives it.
///
/// (Not `StoreState`: StatePersistence, which DurabilityTests also import, has one.)
package struct StoreState: Sendable, Equatable, CustomStringConvertible {
    package var version: Int
    package var state: JSON
    package var description: String { "v\(version) \(state)" }

    package init(version: Int, state: JSON) {
        self.version = version
        self.state = state
    }
}

/// A session and its token.
package struct Session: Sendable {
    package let api: API
    package let id: String
    package let token: String

    package init(api: API, id: String, token: String) {
        self.api = api
        self.id = id
        self.token = token
    }

    package var path: String { "/v1/sessions/\(id)" }
    package var auth: [Header] { [("Authorization", "Bearer \(token)")] }

    /// A request on `path + subpath` with the bearer token.
    package func request(
        _ method: String, _ subpath: String, headers: [Header] = [], body: [UInt8]? = nil
    ) async throws -> HTTPResponse {
        try await api.request(method, path + subpath, headers: auth + headers, body: body)
    }

    package func dispatch(_ feature: String, _ action: JSON, headers: [Header] = []) async throws -> HTTPResponse {
        try await request("POST", "/dispatch", headers: headers, body: JSON.object(["feature": .string(feature), "action": action]).bytes)
    }

    /// Dispatches and requires 200; returns the body.
    @discardableResult
    package func dispatchOK(
        _ feature: String, _ action: JSON, headers: [Header] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> JSON {
        let response = try await dispatch(feature, action, headers: headers)
        try #require(response.status == 200, "dispatch \(feature) \(action): \(response)", sourceLocation: sourceLocation)
        return try #require(response.json, sourceLocation: sourceLocation)
    }

    /// `GET .../state/{feature}`, required to be 200.
    package func store(_ feature: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> StoreState {
        let response = try await request("GET", "/state/\(feature)")
        try #require(response.status == 200, "GET state/\(feature): \(response)", sourceLocation: sourceLocation)
        let body = try #require(response.json, sourceLocation: sourceLocation)
        let version = try #require(body["version"]?.int, "version in \(response)", sourceLocation: sourceLocation)
        return StoreState(version: version, state: try #require(body["state"], sourceLocation: sourceLocation))
    }

    /// `GET .../state`, required to be 200: every feature's store.
    package func allStores(sourceLocation: SourceLocation = #_sourceLocation) async throws -> [String: StoreState] {
        let response = try await request("GET", "/state")
        try #require(response.status == 200, "GET state: \(response)", sourceLocation: sourceLocation)
        let features = try #require(response.json?["features"]?.object, "features in \(response)", sourceLocation: sourceLocation)
        var stores: [String: StoreState] = [:]
        for (name, value) in features {
            let version = try #require(value["version"]?.int, "version of \(name)", sourceLocation: sourceLocation)
            stores[name] = StoreState(version: version, state: try #require(value["state"], sourceLocation: sourceLocation))
        }
        return stores
    }

    /// Opens `GET .../events` (`query` without the `?`) with the bearer header.
    package func events(query: String = "", headers: [Header] = [], receiveBufferSize: Int? = nil) async throws -> EventStream {
        try await api.openEvents(
            path + "/events" + (query.isEmpty ? "" : "?" + query), headers: auth + headers,
            receiveBufferSize: receiveBufferSize)
    }

    /// Opens the event stream, requires 200 and reads the snapshot.
    package func subscribe(
        query: String = "", headers: [Header] = [], receiveBufferSize: Int? = nil,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (stream: EventStream, snapshot: SSEEvent) {
        let stream = try await events(query: query, headers: headers, receiveBufferSize: receiveBufferSize)
        try #require(stream.status == 200, "events: \(stream.head)", sourceLocation: sourceLocation)
        let snapshot = try await stream.nextEvent()
        try #require(snapshot.event == "snapshot", "first event: \(snapshot)", sourceLocation: sourceLocation)
        return (stream, snapshot)
    }

    package func delete() async throws -> HTTPResponse {
        try await request("DELETE", "")
    }
}

/// Checks an error response: status, `{"error": {"code", "message"}}` with a non-empty message.
package func expectError(
    _ response: HTTPResponse, _ status: Int, _ code: String, messageContains: String? = nil,
    _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation
) {
    let context = comment.map { "\($0): " } ?? ""
    #expect(response.status == status, "\(context)\(response)", sourceLocation: sourceLocation)
    #expect(response.errorCode == code, "\(context)\(response)", sourceLocation: sourceLocation)
    let message = response.errorMessage ?? ""
    #expect(!message.isEmpty, "\(context)error.message missing: \(response)", sourceLocation: sourceLocation)
    if let messageContains {
        #expect(message.contains(messageContains), "\(context)message should name \(messageContains): \(response)", sourceLocation: sourceLocation)
    }
}

/// How many times longer the tests wait in a sanitized build (`make test-sanitized` sets
/// STATESERVER_SANITIZER for the build and the tests): ThreadSanitizer runs the server 5 to 15
/// times slower, so waits sized for a plain build ran out before the server answered. 1 in
/// every other build.
package let sanitizedWaitScale: Int = ProcessInfo.processInfo.environment["STATESERVER_SANITIZER"] == nil ? 1 : 10

extension Duration {
    /// This wait, longer in a sanitized build (``sanitizedWaitScale``).
    package var scaledForSanitizers: Duration { self * sanitizedWaitScale }
}

/// The `Allow` header as a set of upper-cased methods.
package func allowedMethods(_ response: HTTPResponse) -> Set<String> {
    Set((response.header("Allow") ?? "").split(separator: ",").map {
        $0.trimmingCharacters(in: .whitespaces).uppercased()
    })
}

/// Percent-encodes a query value.
package func queryEncoded(_ value: String) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
}

/// JSON text padded with trailing spaces to exactly `size` bytes.
package func padded(_ json: JSON, to size: Int) -> [UInt8] {
    let bytes = json.bytes
    precondition(bytes.count <= size)
    return bytes + [UInt8](repeating: UInt8(ascii: " "), count: size - bytes.count)
}
