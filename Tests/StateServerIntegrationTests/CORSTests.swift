import Foundation
import StateServerHTTP
import TestSupport
import Testing

/// Issue 25 item 4: CORS (`cors.allowedOrigins`). The routes' preflights and headers, in
/// process; the binary reading the setting (a list, case, `*`), in `CORSSettingsTests`. The
/// browser side — a page on another origin using /client.js — is Tests/browser/test_cors.py.
@Suite("CORS: preflights and the headers of replies to other origins")
struct CORSTests {
    static let allowed = "http://app.example:8000"

    /// The routes' settings for `cors.allowedOrigins: http://app.example:8000, https://Other.Example`
    /// (the binary lower-cases the list: `CORSSettingsTests`).
    static func allowing(_ settings: inout InProcessServer.Settings) {
        settings.routes.cors.allowedOrigins = [allowed, "https://other.example"]
    }

    static func preflight(
        _ api: API, _ path: String, origin: String, method: String, headers: String? = nil
    ) async throws -> HTTPResponse {
        var fields: [Header] = [("Origin", origin), ("Access-Control-Request-Method", method)]
        if let headers { fields.append(("Access-Control-Request-Headers", headers)) }
        return try await api.request("OPTIONS", path, headers: fields)
    }

    static func names(_ list: String?) -> Set<String> {
        Set((list ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() })
    }

    @Test("a preflight from an allowed origin is 204 with the route's methods, the API's request headers, Max-Age and Vary")
    func preflightAllowed() async throws {
        try await withInProcessServer(Self.allowing) { server in
            let session = try await server.api.createSession()
            let dispatch = try await Self.preflight(
                server.api, "\(session.path)/dispatch", origin: Self.allowed, method: "POST",
                headers: "authorization, content-type, idempotency-key, if-match")
            #expect(dispatch.status == 204, "\(dispatch)")
            #expect(dispatch.body.isEmpty)
            #expect(dispatch.header("Access-Control-Allow-Origin") == Self.allowed, "\(dispatch.head)")
            #expect(Self.names(dispatch.header("Access-Control-Allow-Methods")) == ["post"], "\(dispatch.head)")
            let allowedHeaders = Self.names(dispatch.header("Access-Control-Allow-Headers"))
            for name in ["authorization", "content-type", "last-event-id", "idempotency-key", "if-match", "if-none-match"] {
                #expect(allowedHeaders.contains(name), "\(name) is not allowed: \(dispatch.head)")
            }
            #expect(Int(dispatch.header("Access-Control-Max-Age") ?? "") ?? 0 > 0, "\(dispatch.head)")
            #expect(Self.names(dispatch.header("Vary")).contains("origin"), "\(dispatch.head)")
            #expect(dispatch.header("Access-Control-Allow-Credentials") == nil, "never credentials: \(dispatch.head)")
            // The event stream (GET only), a state (GET, PUT, DELETE and HEAD), creating a session.
            let events = try await Self.preflight(server.api, "\(session.path)/events", origin: Self.allowed, method: "GET",
                headers: "authorization, last-event-id")
            #expect(events.status == 204 && Self.names(events.header("Access-Control-Allow-Methods")) == ["get"], "\(events)")
            let state = try await Self.preflight(server.api, "\(session.path)/state/counter", origin: Self.allowed, method: "PUT")
            #expect(Self.names(state.header("Access-Control-Allow-Methods")).isSuperset(of: ["get", "put", "delete"]), "\(state)")
            // Origins compare without case in scheme and host, as configured ("https://Other.Example").
            let create = try await Self.preflight(server.api, "/v1/sessions", origin: "https://other.example", method: "POST")
            #expect(create.status == 204 && create.header("Access-Control-Allow-Origin") == "https://other.example", "\(create)")
        }
    }

    @Test("a preflight from another origin, off /v1/, or with CORS off is 403 origin_not_allowed without CORS headers; OPTIONS that is no preflight stays 405")
    func preflightRefused() async throws {
        try await withInProcessServer(Self.allowing) { server in
            for (path, origin) in [("/v1/sessions", "https://evil.example"), ("/v1/sessions", "http://app.example:8001"),
                                   ("/v1/sessions", "null"), ("/healthz", Self.allowed)] {
                let response = try await Self.preflight(server.api, path, origin: origin, method: "POST")
                expectError(response, 403, "origin_not_allowed", "\(origin) on \(path)")
                #expect(response.header("Access-Control-Allow-Origin") == nil, "\(response.head)")
                #expect(response.header("Access-Control-Allow-Methods") == nil, "\(response.head)")
            }
            let plain = try await server.api.request("OPTIONS", "/v1/sessions", headers: [("Origin", Self.allowed)])
            expectError(plain, 405, "method_not_allowed", "OPTIONS without Access-Control-Request-Method")
            let unknown = try await Self.preflight(server.api, "/v1/nowhere", origin: Self.allowed, method: "GET")
            expectError(unknown, 404, "not_found")
        }
        try await withInProcessServer { server in
            let off = try await Self.preflight(server.api, "/v1/sessions", origin: Self.allowed, method: "POST")
            expectError(off, 403, "origin_not_allowed", messageContains: "cors.allowedOrigins")
            let created = try await server.api.request("POST", "/v1/sessions", headers: [("Origin", Self.allowed)])
            #expect(created.status == 201)
            #expect(created.header("Access-Control-Allow-Origin") == nil && created.header("Vary") == nil, "CORS off: \(created.head)")
        }
    }

    @Test("replies to an allowed origin carry Allow-Origin and Expose-Headers (errors, 429 and the event stream too); other origins get none, every /v1/ reply Vary: Origin")
    func actualReplies() async throws {
        let settings: (inout InProcessServer.Settings) -> Void = { settings in
            Self.allowing(&settings)
            settings.routes.limits.dispatchesPerSecond = 1
        }
        try await withInProcessServer(settings) { server in
            let origin: [Header] = [("Origin", Self.allowed)]
            let created = try await server.api.request("POST", "/v1/sessions", headers: origin)
            #expect(created.status == 201)
            #expect(created.header("Access-Control-Allow-Origin") == Self.allowed, "\(created.head)")
            let exposed = Self.names(created.header("Access-Control-Expose-Headers"))
            #expect(exposed.isSuperset(of: ["etag", "retry-after", "location"]), "\(created.head)")
            #expect(Self.names(created.header("Vary")).contains("origin"), "\(created.head)")
            let body = try #require(created.json)
            let session = Session(api: server.api, id: try #require(body["id"]?.string), token: try #require(body["token"]?.string))

            var statuses: [Int] = []
            var limited: HTTPResponse?
            for _ in 0..<30 {
                let response = try await session.dispatch("counter", ["type": "increment"], headers: origin)
                statuses.append(response.status)
                #expect(response.header("Access-Control-Allow-Origin") == Self.allowed, "\(response.head)")
                if response.status == 429 {
                    limited = response
                    break
                }
                #expect(response.header("ETag") != nil)
            }
            let refused = try #require(limited, "no 429 in \(statuses)")
            #expect(refused.header("Retry-After") != nil && refused.errorCode == "rate_limited", "\(refused)")

            let missing = try await server.api.request("GET", "/v1/sessions/nope/state", headers: origin + [("Authorization", "Bearer x")])
            #expect(missing.status == 404 && missing.header("Access-Control-Allow-Origin") == Self.allowed, "\(missing.head)")

            let stream = try await session.events(headers: origin)
            defer { stream.close() }
            #expect(stream.status == 200 && stream.header("Access-Control-Allow-Origin") == Self.allowed, "\(stream.head)")

            let foreign = try await session.request("GET", "/state/counter", headers: [("Origin", "https://evil.example")])
            #expect(foreign.status == 200)
            #expect(foreign.header("Access-Control-Allow-Origin") == nil && foreign.header("Access-Control-Expose-Headers") == nil, "\(foreign.head)")
            #expect(Self.names(foreign.header("Vary")).contains("origin"), "\(foreign.head)")
            let sameOrigin = try await session.request("GET", "/state/counter")
            #expect(Self.names(sameOrigin.header("Vary")).contains("origin"), "\(sameOrigin.head)")
            // Not the API: no CORS headers on the pages, health or metrics.
            let health = try await server.api.request("GET", "/healthz", headers: origin)
            #expect(health.header("Access-Control-Allow-Origin") == nil && health.header("Vary") == nil, "\(health.head)")
        }
    }
}

/// `cors.allowedOrigins` read by the binary: a list compared without case as configured, `*`.
@Suite("CORS settings")
struct CORSSettingsTests {
    @Test("a list: each origin allowed, compared lower-cased (https://Other.Example allows https://other.example); others refused")
    func list() async throws {
        let environment = ["STATE_SERVER_CORS_ALLOWED_ORIGINS": "\(CORSTests.allowed), https://Other.Example"]
        try await withServer(environment: environment) { server in
            for origin in [CORSTests.allowed, "https://other.example", "https://OTHER.example"] {
                let response = try await CORSTests.preflight(server.api, "/v1/sessions", origin: origin, method: "POST")
                #expect(response.status == 204 && response.header("Access-Control-Allow-Origin") == origin, "\(origin): \(response)")
            }
            let refused = try await CORSTests.preflight(server.api, "/v1/sessions", origin: "https://evil.example", method: "POST")
            expectError(refused, 403, "origin_not_allowed", "https://evil.example")
            let created = try await server.api.request("POST", "/v1/sessions", headers: [("Origin", CORSTests.allowed)])
            #expect(created.status == 201 && created.header("Access-Control-Allow-Origin") == CORSTests.allowed, "\(created.head)")
            #expect(CORSTests.names(created.header("Vary")).contains("origin"), "\(created.head)")
        }
    }

    @Test("cors.allowedOrigins: * allows any origin with Access-Control-Allow-Origin: * (never credentials)")
    func anyOrigin() async throws {
        try await withServer(environment: ["STATE_SERVER_CORS_ALLOWED_ORIGINS": "*"]) { server in
            let preflight = try await CORSTests.preflight(server.api, "/v1/sessions", origin: "https://anyone.example", method: "POST")
            #expect(preflight.status == 204 && preflight.header("Access-Control-Allow-Origin") == "*", "\(preflight)")
            #expect(preflight.header("Access-Control-Allow-Credentials") == nil)
            let created = try await server.api.request("POST", "/v1/sessions", headers: [("Origin", "https://anyone.example")])
            #expect(created.status == 201 && created.header("Access-Control-Allow-Origin") == "*", "\(created.head)")
            #expect(created.header("Vary") == nil, "one answer for every origin: \(created.head)")
        }
    }
}
