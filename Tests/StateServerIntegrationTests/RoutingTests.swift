import TestSupport
import Testing

/// A route of the contract, the methods it allows and wrong ones to try.
struct RouteCase: Sendable, CustomTestStringConvertible {
    /// Path with `{id}` for the session id.
    var path: String
    var allowed: Set<String>
    var wrong: [String]

    var testDescription: String { path }

    static let all: [RouteCase] = [
        RouteCase(path: "/healthz", allowed: ["GET"], wrong: ["POST", "PUT", "DELETE", "PATCH"]),
        RouteCase(path: "/v1/features", allowed: ["GET"], wrong: ["POST", "PUT", "DELETE", "PATCH"]),
        RouteCase(path: "/v1/sessions", allowed: ["POST"], wrong: ["GET", "PUT", "DELETE", "PATCH"]),
        RouteCase(path: "/v1/sessions/{id}", allowed: ["DELETE"], wrong: ["GET", "POST", "PUT", "PATCH"]),
        RouteCase(path: "/v1/sessions/{id}/state", allowed: ["GET"], wrong: ["POST", "PUT", "DELETE", "PATCH"]),
        RouteCase(path: "/v1/sessions/{id}/state/counter", allowed: ["GET", "PUT", "DELETE"], wrong: ["POST", "PATCH"]),
        RouteCase(path: "/v1/sessions/{id}/dispatch", allowed: ["POST"], wrong: ["GET", "PUT", "DELETE", "PATCH"]),
        RouteCase(path: "/v1/sessions/{id}/events", allowed: ["GET"], wrong: ["POST", "PUT", "DELETE", "PATCH"]),
    ]
}

@Suite("Routing: 404 not_found and 405 method_not_allowed", .inProcessServer())
struct RoutingTests {
    /// (`/` itself may serve a page for people: it is not part of the API.)
    @Test("unknown paths are 404 not_found")
    func unknownPaths() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let paths = [
            "/nope", "/index.html.bak", "/v1", "/v1/", "/v2/features", "/v1/nope", "/healthz/extra", "/v1/features/counter/x",
            session.path + "/nope", session.path + "/state/counter/extra", session.path + "/dispatch/counter",
            session.path + "/events/x",
        ]
        for path in paths {
            let response = try await api.request("GET", path, headers: session.auth)
            expectError(response, 404, "not_found", "GET \(path)")
        }
        let post = try await api.request("POST", "/v1/nope", body: Array("{}".utf8))
        expectError(post, 404, "not_found", "POST /v1/nope")
        // An unknown sub-route stays 404 not_found, even without credentials.
        let bare = try await api.request("GET", "/v1/sessions/unknown-session/nope")
        expectError(bare, 404, "not_found", "unknown sub-route without credentials")
    }

    @Test("a wrong method is 405 method_not_allowed with an Allow header", arguments: RouteCase.all)
    func wrongMethod(route: RouteCase) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let path = route.path.replacingOccurrences(of: "{id}", with: session.id)
        for method in route.wrong {
            let body: [UInt8]? = ["POST", "PUT", "PATCH"].contains(method) ? Array("{}".utf8) : nil
            let response = try await api.request(method, path, headers: session.auth, body: body)
            expectError(response, 405, "method_not_allowed", "\(method) \(route.path)")
            let allow = allowedMethods(response)
            #expect(allow.isSuperset(of: route.allowed), "\(method) \(route.path): Allow \(response.header("Allow") ?? "missing")")
            #expect(!allow.contains(method), "\(method) \(route.path): Allow \(response.header("Allow") ?? "missing")")
        }
        // Nothing was applied by the refused requests.
        #expect(try await session.allStores().values.allSatisfy { $0.version == 0 })
    }

    @Test("405 comes before credentials and the session check")
    func methodBeforeCredentials() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("PATCH", "/v1/sessions/no-such-session/state/counter", body: Array("{}".utf8))
        expectError(response, 405, "method_not_allowed")
        #expect(allowedMethods(response).isSuperset(of: ["GET", "PUT", "DELETE"]))
        let dispatch = try await api.request("GET", "/v1/sessions/no-such-session/dispatch")
        expectError(dispatch, 405, "method_not_allowed")
    }
}

/// Routing: what only a real connection shows (no body after a HEAD answer on a keep-alive connection).
extension SocketContractTests {
    @Test("HEAD works on the session's GET JSON routes")
    func headOnSessionRoutes() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let all = try await connection.request("HEAD", session.path + "/state", headers: session.auth)
        #expect(all.status == 200, "\(all)")
        let one = try await connection.request("HEAD", session.path + "/state/counter", headers: session.auth)
        #expect(one.status == 200, "\(one)")
        #expect(one.header("ETag") == "\"0\"", "\(one)")
        // The connection is still in sync: no body followed the HEAD answers.
        let get = try await connection.request("GET", session.path + "/state/counter", headers: session.auth)
        #expect(get.json?["version"] == 0, "\(get)")
        let unauthorized = try await connection.request("HEAD", session.path + "/state")
        #expect(unauthorized.status == 401, "\(unauthorized)")
    }

    @Test("HEAD on the recording (a streamed reply): the GET's head, then the connection ends, so no stray byte is read as the next reply")
    func headOnStreamedReply() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let head = try await connection.request("HEAD", session.path + "/recording", headers: session.auth)
        #expect(head.status == 200, "\(head)")
        #expect(head.header("Content-Type") == "application/json", "\(head)")
        #expect(head.header("Connection")?.lowercased() == "close", "\(head)")
        // libmicrohttpd writes a chunked terminator after a HEAD reply: schemathesis saw
        // "Connection aborted" on its next request over the same connection. Whatever follows
        // the head now comes before the end of the connection, never as a reply.
        let (rest, closed) = try await connection.readUntilClosed()
        #expect(closed, "the server closes the connection after a HEAD on a streamed reply")
        #expect(!String(decoding: rest, as: UTF8.self).contains("HTTP/1.1"), "\(rest)")
        // The GET still streams the whole document.
        let get = try await api.request("GET", session.path + "/recording", headers: session.auth)
        #expect(get.status == 200 && get.json?["format"] == "stateserver-recording", "\(get.text.prefix(300))")
    }
}
