@testable import MicroHTTP
import StatePersistence
import StateSessions
import TestSupport
import Testing

@testable import StateServerHTTP

/// Who may call each route is declared on its row of the table (``Access``): these tests read
/// the table, and ask the router (in process) what the declarations make of requests, before the
/// body (`Expect: 100-continue`) and with it. A wrong declaration fails here, not only in the
/// suites of the route it belongs to.
@Suite("Route access: declared on each row, resolved by the router")
struct RouteAccessTests {
    static let adminToken = "route-access-admin-token"

    /// What docs/API.md says each route needs, by its methods (without HEAD) and template.
    static let contract: [String: Access] = [
        "GET /": .open,
        "GET /healthz": .open,
        "GET /readyz": .open,
        "GET /metrics": .open,
        "GET /openapi.json": .open,
        "GET /devtools": .open,
        "GET /client.js": .open,
        "GET /app.js": .open,
        "GET /devtools.js": .open,
        "GET /v1/features": .open,
        "POST /v1/sessions": .creating(admin: false),
        "POST /v1/recordings": .creating(admin: true),
        "GET /v1/admin/sessions": .admin,
        "GET /v1/admin/cluster": .admin,
        "DELETE /v1/sessions/{id}": .session(SessionAccess(scope: .admin)),
        "GET /v1/sessions/{id}/tokens": .session(SessionAccess(scope: .admin)),
        "POST /v1/sessions/{id}/tokens": .session(SessionAccess(scope: .admin, bodyLimit: StateServerResponder.maxMintBody)),
        "DELETE /v1/sessions/{id}/tokens/{tokenId}": .session(SessionAccess(scope: .admin)),
        "GET /v1/sessions/{id}/state": .session(SessionAccess(scope: .observe, reads: .everyStore)),
        "GET /v1/sessions/{id}/state/{feature}": .session(SessionAccess(scope: .observe, reads: .pathFeature)),
        "PUT /v1/sessions/{id}/state/{feature}": .session(SessionAccess(scope: .admin)),
        "DELETE /v1/sessions/{id}/state/{feature}": .session(SessionAccess(scope: .admin)),
        "POST /v1/sessions/{id}/state/{feature}/travel": .session(SessionAccess(scope: .admin)),
        "POST /v1/sessions/{id}/dispatch": .session(SessionAccess(scope: .dispatch)),
        "GET /v1/sessions/{id}/events": .session(
            SessionAccess(scope: .observe, queryToken: true, admin: true, eventStream: true, reads: .query)),
        "GET /v1/sessions/{id}/history": .session(SessionAccess(scope: .observe, admin: true, reads: .query)),
        "GET /v1/sessions/{id}/recording": .session(SessionAccess(scope: .observe, admin: true)),
        "GET /v1/sessions/{id}/timers": .session(SessionAccess(scope: .observe, admin: true)),
        "GET /v1/sessions/{id}/presence": .session(SessionAccess(scope: .observe, admin: true)),
    ]

    static var rows: [Route] { StateServerResponder.router.routes }

    static func key(_ route: Route) -> String {
        route.methods.filter { $0 != "HEAD" }.joined(separator: ",") + " " + route.template
    }

    /// The session routes of the table, each with a path for session `id`.
    static func sessionRows(_ id: String) -> [(route: Route, access: SessionAccess, method: String, path: String)] {
        rows.compactMap { route in
            guard case .session(let access) = route.access, let method = route.methods.first else { return nil }
            let path = route.template.replacingOccurrences(of: "{id}", with: id)
                .replacingOccurrences(of: "{feature}", with: "counter")
                .replacingOccurrences(of: "{tokenId}", with: "no-such-token")
            return (route, access, method, path)
        }
    }

    @Test("every route of the table declares the access the contract gives it, and the contract has no route the table lacks")
    func everyRouteDeclaresItsAccess() {
        var seen = Set<String>()
        for route in Self.rows {
            let key = Self.key(route)
            #expect(seen.insert(key).inserted, "\(key) is in the table twice")
            guard let expected = Self.contract[key] else {
                Issue.record("\(key) is not in this test's contract: add what docs/API.md says it needs")
                continue
            }
            #expect(route.access == expected, "\(key): declared \(route.access), the contract says \(expected)")
        }
        for key in Self.contract.keys.sorted() where !seen.contains(key) {
            Issue.record("the contract has \(key), which the table does not")
        }
    }

    @Test("a route under a session's path is a session route (the router finds the session by {id}), and only those are")
    func sessionRoutesNameTheSession() {
        for route in Self.rows {
            let isSession = if case .session = route.access { true } else { false }
            #expect(isSession == route.names.contains("id"), "\(Self.key(route)): \(route.access)")
        }
    }

    @Test("the event stream is the one route whose token may come in the query, and the one relayed as a stream")
    func onlyTheEventStreamTakesAQueryToken() {
        var queryToken: [String] = []
        var streams: [String] = []
        for route in Self.rows {
            guard case .session(let access) = route.access else { continue }
            if access.queryToken { queryToken.append(Self.key(route)) }
            if access.eventStream { streams.append(Self.key(route)) }
            // A stream has no HEAD (its reply is chunked).
            if access.eventStream { #expect(!route.methods.contains("HEAD"), "\(Self.key(route))") }
        }
        #expect(queryToken == ["GET /v1/sessions/{id}/events"])
        #expect(streams == queryToken)
    }

    @Test("a token in the query opens the event stream and is 401 on every other session route")
    func queryTokenAcceptedOnTheStreamOnly() async throws {
        try await withInProcessServer { server in
            let session = try await server.api.createSession()
            let query = "?access_token=" + queryEncoded(session.token)
            for row in Self.sessionRows(session.id) {
                let body: [UInt8]? = row.method == "POST" || row.method == "PUT" ? Array("{}".utf8) : nil
                let request = server.request(row.method, row.path + query, headers: [], body: body)
                let response = await server.responder.respond(to: request).value()
                if case .stream(let stream) = response.body { stream.finish() }
                if row.access.queryToken {
                    #expect(response.status == 200, "\(row.method) \(row.path): \(response.status)")
                } else {
                    #expect(response.status == 401, "\(row.method) \(row.path): \(response.status)")
                }
            }
        }
    }

    @Test("a credential below a route's scope is 403 on it, before its body is judged")
    func scopeBelowTheRoute() async throws {
        try await withInProcessServer { server in
            let owner = try await server.api.createSession()
            let observer = try await Self.mint(owner, scope: "observe")
            let dispatcher = try await Self.mint(owner, scope: "dispatch")
            for row in Self.sessionRows(owner.id) {
                for (name, token, scope) in [("observe", observer, Grant.Scope.observe), ("dispatch", dispatcher, .dispatch)]
                where scope < row.access.scope {
                    // A body the route would refuse with 400: the scope is judged first.
                    let request = server.request(
                        row.method, row.path, headers: [("Authorization", "Bearer \(token)")], body: Array("not json".utf8))
                    let response = await server.responder.respond(to: request).value()
                    #expect(response.status == 403, "\(name) on \(row.method) \(row.path): \(response.status)")
                }
            }
        }
    }

    @Test("the refusal before the body answers 401, 404, 403 and 413 as each route's declaration says, and lets the rest through")
    func refusalBeforeTheBody() async throws {
        try await withInProcessServer({ $0.routes.adminTokenHash = SHA256.hash(Self.adminToken) }) { server in
            let owner = try await server.api.createSession()
            let observer = try await Self.mint(owner, scope: "observe")
            let bearer = { (token: String) -> [Header] in [("Authorization", "Bearer \(token)")] }
            func refusal(_ method: String, _ path: String, _ headers: [Header], length: Int = 2) -> Int? {
                let request = server.request(
                    method, path, headers: headers + [("Content-Length", String(length)), ("Expect", "100-continue")], body: nil)
                return server.responder.refusalBeforeBody(request)?.status
            }
            for row in Self.sessionRows(owner.id) {
                let what = "\(row.method) \(row.path)"
                #expect(refusal(row.method, row.path, []) == 401, "\(what) without a credential")
                // In memory mode no session is anywhere else: an unknown one is known at once.
                let unknown = row.path.replacingOccurrences(of: owner.id, with: "no-such-session")
                let expectedUnknown: Int? = server.sessions.holdsEverySession ? 404 : nil
                #expect(refusal(row.method, unknown, bearer(owner.token)) == expectedUnknown, "\(what) on an unknown session")
                #expect(refusal(row.method, row.path, bearer(observer)) == (row.access.scope > .observe ? 403 : nil), "\(what) observe")
                // The owner's token: let through, unless the body announced is over the route's own limit.
                #expect(refusal(row.method, row.path, bearer(owner.token)) == nil, "\(what) with the owner's token")
                if let limit = row.access.bodyLimit {
                    #expect(refusal(row.method, row.path, bearer(owner.token), length: limit) == nil, "\(what) at its limit")
                    #expect(refusal(row.method, row.path, bearer(owner.token), length: limit + 1) == 413, "\(what) over its limit")
                }
                // The token in the query: the stream's only.
                let query = row.path + "?access_token=" + queryEncoded(owner.token)
                #expect(refusal(row.method, query, []) == (row.access.queryToken ? nil : 401), "\(what) with the token in the query")
                // The admin credential: a reader where the route lets it read, else a stranger.
                let asAdmin = refusal(row.method, row.path, bearer(Self.adminToken))
                if row.access.admin {
                    #expect(asAdmin == nil, "\(what) as the admin")
                } else {
                    #expect(asAdmin == (server.sessions.holdsEverySession ? 404 : nil), "\(what) as the admin")
                }
            }
            for route in Self.rows {
                let path = route.template.replacingOccurrences(of: "{id}", with: owner.id)
                    .replacingOccurrences(of: "{feature}", with: "counter")
                    .replacingOccurrences(of: "{tokenId}", with: "x")
                let method = route.methods[0]
                switch route.access {
                case .open, .creating:
                    #expect(refusal(method, path, []) == nil, "\(method) \(path)")
                case .admin:
                    #expect(refusal(method, path, []) == 401, "\(method) \(path) without a credential")
                    #expect(refusal(method, path, bearer(owner.token)) == 403, "\(method) \(path) with a session's token")
                    #expect(refusal(method, path, bearer(Self.adminToken)) == nil, "\(method) \(path) as the admin")
                case .session:
                    break
                }
            }
            // What no declaration decides: the path and the method.
            #expect(refusal("POST", "/v1/nope", []) == 404)
            #expect(refusal("PATCH", owner.path + "/dispatch", []) == 405)
        }
    }

    @Test("a read, and (memory mode) a dispatch, on a session and store in memory are answered at once, without a task")
    func answeredNowInMemory() async throws {
        try await withInProcessServer { server in
            let session = try await server.api.createSession()
            try await session.dispatchOK("counter", ["type": "increment"])
            let read = server.request("GET", session.path + "/state/counter", headers: session.auth, body: nil)
            #expect(server.responder.respond(to: read).now?.status == 200)
            // Every store in memory (SQLite loads them on the first read).
            _ = try await session.allStores()
            let all = server.request("GET", session.path + "/state", headers: session.auth, body: nil)
            #expect(server.responder.respond(to: all).now?.status == 200)
            // SQLite commits on its writer thread: the answer comes from there, later.
            guard server.sessions.holdsEverySession else { return }
            let body = JSON.object(["feature": "counter", "action": ["type": "increment"]]).bytes
            let dispatch = server.request("POST", session.path + "/dispatch", headers: session.auth, body: body)
            #expect(server.responder.respond(to: dispatch).now?.status == 200)
        }
    }

    /// A token of `scope` minted on `owner`.
    static func mint(_ owner: TestSupport.Session, scope: String) async throws -> String {
        let response = try await owner.request("POST", "/tokens", body: JSON.object(["scope": .string(scope)]).bytes)
        try #require(response.status == 201, "mint \(scope): \(response)")
        return try #require(response.json?["token"]?.string)
    }
}
