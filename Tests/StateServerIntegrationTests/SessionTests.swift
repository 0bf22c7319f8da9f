import Foundation
import TestSupport
import Testing

/// Every request on a session, for checks that must hold on all of them.
struct SessionRoute: Sendable, CustomStringConvertible {
    var method: String
    var subpath: String
    var body: JSON?

    var description: String { "\(method) \(subpath)" }

    static let all: [SessionRoute] = [
        SessionRoute(method: "GET", subpath: "/state"),
        SessionRoute(method: "GET", subpath: "/state/counter"),
        SessionRoute(method: "PUT", subpath: "/state/counter", body: ["state": ["count": 5]]),
        SessionRoute(method: "DELETE", subpath: "/state/counter"),
        SessionRoute(method: "POST", subpath: "/dispatch", body: ["feature": "counter", "action": ["type": "increment"]]),
        SessionRoute(method: "GET", subpath: "/events"),
        SessionRoute(method: "DELETE", subpath: ""),
    ]

    func send(_ api: API, sessionPath: String, headers: [Header]) async throws -> HTTPResponse {
        if method == "GET" && subpath == "/events" {
            // A stream that would be accepted stays open: read just the head (and an error body).
            let stream = try await api.openEvents(sessionPath + subpath, headers: headers)
            defer { stream.close() }
            if stream.status == 200 { return HTTPResponse(head: stream.head, body: []) }
            return try await stream.readErrorBody()
        }
        return try await api.request(method, sessionPath + subpath, headers: headers, body: body?.bytes)
    }
}

@Suite("Sessions and access", .inProcessServer())
struct SessionTests {
    @Test("POST /v1/sessions: 201, Location, URL-safe id of 128+ bits, token of 256+ bits")
    func create() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("POST", "/v1/sessions")
        #expect(response.status == 201, "\(response)")
        let id = try #require(response.json?["id"]?.string, "\(response)")
        let token = try #require(response.json?["token"]?.string, "\(response)")
        #expect(response.header("Location") == "/v1/sessions/\(id)", "\(response)")
        let urlSafe = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        #expect(id.count >= 22, "id \(id) is shorter than 22 characters")
        #expect(id.unicodeScalars.allSatisfy { urlSafe.contains($0) }, "id \(id) is not URL-safe")
        #expect(token.count >= 43, "token is shorter than 43 characters")
        #expect(token.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F }, "token has spaces or non-ASCII")
        #expect(token != id)
    }

    @Test("POST /v1/sessions accepts an optional JSON body")
    func createWithBody() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("POST", "/v1/sessions", body: Array("{}".utf8))
        #expect(response.status == 201, "\(response)")
        #expect(response.json?["id"]?.string != nil)
    }

    @Test("ids and tokens differ between sessions, and sessions are isolated")
    func distinct() async throws {
        let api = try SharedServer.api()
        var sessions: [Session] = []
        for _ in 0..<20 { sessions.append(try await api.createSession()) }
        #expect(Set(sessions.map(\.id)).count == 20)
        #expect(Set(sessions.map(\.token)).count == 20)
        try await sessions[0].dispatchOK("counter", ["type": "increment", "by": 7])
        #expect(try await sessions[0].store("counter") == StoreState(version: 1, state: ["count": 7]))
        #expect(try await sessions[1].store("counter") == StoreState(version: 0, state: ["count": 0]))
    }

    @Test("DELETE /v1/sessions/{id}: 204, then 404 session_not_found on every route")
    func delete() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let response = try await session.delete()
        #expect(response.status == 204, "\(response)")
        #expect(response.body.isEmpty)
        for route in SessionRoute.all {
            let after = try await route.send(api, sessionPath: session.path, headers: session.auth)
            expectError(after, 404, "session_not_found", "\(route) after delete")
        }
        // The other sessions are unaffected.
        let other = try await api.createSession()
        #expect(try await other.store("counter").version == 0)
    }

    @Test("deleting a session ends its open event streams")
    func deleteEndsStreams() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let (all, _) = try await session.subscribe()
        let (filtered, _) = try await session.subscribe(query: "feature=counter")
        let (byQuery, _) = try await api.openEvents(session.path + "/events?access_token=\(queryEncoded(session.token))")
            .withSnapshot()
        defer { all.close(); filtered.close(); byQuery.close() }
        let response = try await session.delete()
        #expect(response.status == 204)
        #expect(try await all.waitForEnd(timeout: .seconds(5)), "stream without filter still open")
        #expect(try await filtered.waitForEnd(timeout: .seconds(5)), "filtered stream still open")
        #expect(try await byQuery.waitForEnd(timeout: .seconds(5)), "access_token stream still open")
        #expect(await api.isHealthy())
    }

    @Test("DELETE of a session needs its token")
    func deleteNeedsToken() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let anonymous = try await api.request("DELETE", session.path)
        expectError(anonymous, 401, "unauthorized")
        let wrong = try await api.request("DELETE", session.path, headers: other.auth)
        expectError(wrong, 404, "session_not_found")
        #expect(try await session.store("counter").version == 0, "the session must survive")
    }

    @Test("no credentials, or a scheme other than Bearer: 401 unauthorized with WWW-Authenticate: Bearer")
    func unauthorized() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let variants: [(String, [Header])] = [
            ("no Authorization", []),
            ("Basic scheme", [("Authorization", "Basic dXNlcjpwYXNzd29yZA==")]),
            ("token without scheme", [("Authorization", session.token)]),
            ("Digest scheme", [("Authorization", "Digest username=\"x\"")]),
        ]
        for (name, headers) in variants {
            for route in SessionRoute.all {
                let response = try await route.send(api, sessionPath: session.path, headers: headers)
                expectError(response, 401, "unauthorized", "\(name), \(route)")
                let challenge = response.header("WWW-Authenticate") ?? ""
                #expect(challenge.hasPrefix("Bearer"), "\(name), \(route): WWW-Authenticate \(challenge)")
            }
        }
        // Nothing applied, session intact.
        #expect(try await session.store("counter") == StoreState(version: 0, state: ["count": 0]))
    }

    @Test("the Bearer scheme is case-insensitive and spaces around the token are ignored")
    func bearerSpellings() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        for header in ["bearer \(session.token)", "BEARER \(session.token)", "Bearer   \(session.token)  ", "  Bearer \(session.token)"] {
            let response = try await api.request("GET", session.path + "/state/counter", headers: [("Authorization", header)])
            #expect(response.status == 200, "\(header.debugDescription): \(response.status)")
        }
        for header in ["Bearer", "Bearer ", "Bearers \(session.token)", "Bearer\(session.token)"] {
            let response = try await api.request("GET", session.path + "/state/counter", headers: [("Authorization", header)])
            expectError(response, 401, "unauthorized", "\(header.debugDescription)")
        }
    }

    @Test("a wrong token, another session's token or an unknown session: 404 session_not_found")
    func sessionNotFound() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let wrongToken = String(session.token.dropLast()) + (session.token.hasSuffix("A") ? "B" : "A")
        let cases: [(String, String, [Header])] = [
            ("wrong token", session.path, [("Authorization", "Bearer \(wrongToken)")]),
            ("other session's token", session.path, other.auth),
            ("unknown session", "/v1/sessions/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", session.auth),
            ("unknown session, its own-looking token", "/v1/sessions/nope", [("Authorization", "Bearer nope")]),
        ]
        var messages: Set<String> = []
        for (name, path, headers) in cases {
            for route in SessionRoute.all {
                let response = try await route.send(api, sessionPath: path, headers: headers)
                expectError(response, 404, "session_not_found", "\(name), \(route)")
                if let message = response.errorMessage { messages.insert(message) }
            }
        }
        // A caller can't tell an unknown session from a wrong token.
        #expect(messages.count == 1, "different messages: \(messages)")
        #expect(try await session.store("counter") == StoreState(version: 0, state: ["count": 0]))
        #expect(try await other.store("counter") == StoreState(version: 0, state: ["count": 0]))
    }

    @Test("credentials are checked before the session exists")
    func credentialsBeforeSession() async throws {
        let api = try SharedServer.api()
        let response = try await api.request("GET", "/v1/sessions/no-such-session/state")
        expectError(response, 401, "unauthorized")
        #expect(response.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
    }
}

extension EventStream {
    /// Requires a 200 stream and reads its snapshot.
    func withSnapshot(sourceLocation: SourceLocation = #_sourceLocation) async throws -> (EventStream, SSEEvent) {
        try #require(status == 200, "events: \(head)", sourceLocation: sourceLocation)
        let snapshot = try await nextEvent()
        try #require(snapshot.event == "snapshot", "first event: \(snapshot)", sourceLocation: sourceLocation)
        return (self, snapshot)
    }
}
