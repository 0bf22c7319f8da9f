import Foundation
import StateStore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A session on a StateServer: its id and the secret token that opens it.
///
/// `Codable`, so an app can keep it (in the keychain: the token is a password) and come back to
/// the same session later, or hand it to another device to share the session.
public struct SessionCredentials: Codable, Sendable, Hashable, CustomStringConvertible {
    /// The session id, URL-safe.
    public var id: String
    /// The bearer token of the session. Never log it.
    public var token: String

    public init(id: String, token: String) {
        self.id = id
        self.token = token
    }

    /// The id only: the token is a secret and stays out of logs.
    public var description: String { "SessionCredentials(id: \(id))" }
}

/// A feature as the server lists it at `GET /v1/features`.
public struct FeatureDescription: Sendable, Equatable, Decodable {
    public var name: String
    /// The state a new store of this feature starts from, as JSON.
    public var initialState: JSONValue
}

/// A client of one StateServer (HTTP API v1): creates and deletes sessions, and makes the typed
/// ``RemoteStore``s of a session's features.
///
/// ```swift
/// let client = StateServerClient(baseURL: URL(string: "http://127.0.0.1:8080")!)
/// let credentials = try await client.createSession()
/// let counter = client.store(CounterFeature(), credentials: credentials)
/// let change = try await counter.dispatch(.increment(by: 2))
/// print(change.state.count, change.version)   // 2 1
/// ```
///
/// Foundation only (`URLSession`); works on Apple platforms and on Linux.
///
/// **Thread safety.** A client is `Sendable`: share one per server across tasks and threads.
/// It holds no mutable state of its own; requests run concurrently on its `URLSession`.
public final class StateServerClient: Sendable {
    /// The server's root, e.g. `http://127.0.0.1:8080` (a path prefix is kept: requests go to
    /// `<baseURL>/v1/...`).
    public let baseURL: URL
    let session: URLSession

    /// - Parameters:
    ///   - baseURL: the server's root URL.
    ///   - configuration: the `URLSession` settings for requests (timeouts, extra headers).
    ///     The client turns off `URLCache` and cookies: it does its own `ETag` caching.
    public init(baseURL: URL, configuration: URLSessionConfiguration = .default) {
        self.baseURL = baseURL
        let configuration = configuration.copy() as? URLSessionConfiguration ?? .default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpCookieStorage = nil
        configuration.httpShouldSetCookies = false
        self.session = URLSession(configuration: configuration)
    }

    deinit {
        session.finishTasksAndInvalidate()
    }

    // MARK: Sessions

    /// Creates a session (`POST /v1/sessions`). Its stores start at their initial states.
    public func createSession() async throws -> SessionCredentials {
        let reply = try await send("POST", ["v1", "sessions"], expecting: [201])
        return try WireCoding.decodeBody(SessionCredentials.self, from: reply.body, what: "new session")
    }

    /// Deletes a session (`DELETE /v1/sessions/{id}`). Its open event streams end, and every
    /// later request on it fails with ``StateClientError/Code/sessionNotFound``.
    public func deleteSession(_ credentials: SessionCredentials) async throws {
        _ = try await send("DELETE", ["v1", "sessions", credentials.id], credentials: credentials, expecting: [204])
    }

    /// The store of `feature` in the session `credentials`, typed by the feature's State,
    /// Action and Effect. No request is made until you use it.
    public func store<F: Feature>(_ feature: F, credentials: SessionCredentials) -> RemoteStore<F> {
        RemoteStore(client: self, credentials: credentials, feature: feature)
    }

    // MARK: Discovery

    /// The features the server has registered, with their initial states (`GET /v1/features`).
    public func features() async throws -> [FeatureDescription] {
        struct Body: Decodable { var features: [FeatureDescription] }
        let reply = try await send("GET", ["v1", "features"], expecting: [200])
        return try WireCoding.decodeBody(Body.self, from: reply.body, what: "feature list").features
    }

    // MARK: Requests

    /// An answer with an expected status.
    struct Reply: Sendable {
        var status: Int
        var body: Data
        var response: HTTPURLResponse

        func header(_ name: String) -> String? { response.value(forHTTPHeaderField: name) }
        /// The version in the `ETag` header (`"7"`, `W/"7"`).
        var etagVersion: Int? { header("ETag").flatMap(Self.version(ofEntityTag:)) }

        static func version(ofEntityTag tag: String) -> Int? {
            var tag = Substring(tag.trimmingCharacters(in: .whitespaces))
            if tag.hasPrefix("W/") { tag = tag.dropFirst(2) }
            if tag.count >= 2, tag.hasPrefix("\""), tag.hasSuffix("\"") { tag = tag.dropFirst().dropLast() }
            return Int(tag)
        }
    }

    /// The URL of `path` under ``baseURL``, with `query`.
    func url(_ path: [String], query: [URLQueryItem] = []) -> URL {
        var url = baseURL
        for component in path { url.appendPathComponent(component) }
        guard !query.isEmpty, var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
        components.queryItems = query
        return components.url ?? url
    }

    /// A request with the bearer token of `credentials`.
    func request(
        _ method: String, _ path: [String], query: [URLQueryItem] = [], credentials: SessionCredentials? = nil,
        headers: [String: String] = [:]
    ) -> URLRequest {
        var request = URLRequest(url: url(path, query: query))
        request.httpMethod = method
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        if let credentials { request.setValue("Bearer \(credentials.token)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        return request
    }

    /// Sends a request and returns the answer when its status is one of `expecting`; throws the
    /// server's error otherwise.
    func send(
        _ method: String, _ path: [String], query: [URLQueryItem] = [], credentials: SessionCredentials? = nil,
        headers: [String: String] = [:], json body: JSONValue? = nil, expecting: Set<Int>
    ) async throws -> Reply {
        var request = request(method, path, query: query, credentials: credentials, headers: headers)
        if let body {
            do {
                request.httpBody = try JSONEncoder().encode(body)
            } catch {
                throw StateClientError(kind: .encoding, message: "the request body could not be encoded", underlyingError: error)
            }
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        let reply = try await perform(request)
        guard expecting.contains(reply.status) else { throw Self.error(of: reply) }
        return reply
    }

    /// Runs `request`, mapping transport failures to ``StateClientError``.
    func perform(_ request: URLRequest) async throws -> Reply {
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await session.data(for: request)
        } catch {
            try Task.checkCancellation()
            throw StateClientError(
                kind: .transport,
                message: "\(request.httpMethod ?? "GET") \(request.url?.path ?? "") did not complete",
                underlyingError: error)
        }
        guard let http = response as? HTTPURLResponse else {
            throw StateClientError(kind: .invalidResponse, message: "the answer is not an HTTP response")
        }
        return Reply(status: http.statusCode, body: data, response: http)
    }

    /// The error an unexpected answer stands for.
    static func error(of reply: Reply) -> StateClientError {
        let retryAfter = reply.header("Retry-After").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            .map { Duration.seconds($0) }
        let currentVersion = reply.status == 412 ? reply.etagVersion : nil
        return error(
            status: reply.status, body: reply.body, currentVersion: currentVersion, retryAfter: retryAfter)
    }

    /// The error of a status and its body (the contract's error body when it is one).
    static func error(status: Int, body: Data, currentVersion: Int? = nil, retryAfter: Duration? = nil) -> StateClientError {
        if let body = try? JSONDecoder().decode(ErrorBody.self, from: body) {
            return StateClientError(
                kind: .server, status: status, code: StateClientError.Code(rawValue: body.error.code),
                message: body.error.message, currentVersion: currentVersion, retryAfter: retryAfter)
        }
        let kind: StateClientError.Kind = (200..<300).contains(status) ? .invalidResponse : .server
        return StateClientError(
            kind: kind, status: status,
            message: "unexpected HTTP status \(status) (\(HTTPURLResponse.localizedString(forStatusCode: status)))",
            currentVersion: currentVersion, retryAfter: retryAfter)
    }
}
