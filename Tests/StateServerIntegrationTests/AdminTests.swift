import StatePersistence
import TestSupport
import Testing

/// The admin credential, in process: memory storage, and SQLite in the suite's second pass.
@Suite("Admin: list sessions, read any session's history")
struct AdminTests {
    static let adminToken = "the-admin-token-of-this-test"

    static func server(admin: Bool = true) throws -> InProcessServer {
        var settings = InProcessServer.Settings()
        if admin { settings.routes.adminTokenHash = SHA256.hash(adminToken) }
        return try InProcessServer(settings: settings)
    }

    static func list(_ api: API, _ query: String = "", token: String = adminToken) async throws -> HTTPResponse {
        try await api.request("GET", "/v1/admin/sessions\(query)", headers: [("Authorization", "Bearer \(token)")])
    }

    @Test("the admin lists every session, in id order, paged by id")
    func listsSessions() async throws {
        let server = try Self.server()
        var ids: [String] = []
        for _ in 0..<5 { ids.append(try await server.api.createSession().id) }
        ids.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let all = try await Self.list(server.api)
        #expect(all.status == 200 && all.header("Cache-Control") == "no-store", "\(all)")
        #expect(all.json?["sessions"]?.array?.compactMap { $0["id"]?.string } == ids)
        #expect(all.json?["next"] == .null)
        #expect(all.json?["sessions"]?.array?.allSatisfy { ($0["lastActive"]?.int ?? 0) > 0 } == true)
        let first = try await Self.list(server.api, "?limit=2")
        #expect(first.json?["sessions"]?.array?.compactMap { $0["id"]?.string } == Array(ids.prefix(2)))
        #expect(first.json?["next"]?.string == ids[1])
        let rest = try await Self.list(server.api, "?after=\(ids[1])&limit=3")
        #expect(rest.json?["sessions"]?.array?.compactMap { $0["id"]?.string } == Array(ids.suffix(3)))
        expectError(try await Self.list(server.api, "?limit=0"), 400, "invalid_request")
        expectError(try await Self.list(server.api, "?after=a&after=b"), 400, "invalid_request")
        await server.stop()
    }

    @Test("without the admin credential: 401 with none, 403 with another token, also a session's; off by default")
    func refused() async throws {
        let server = try Self.server()
        let session = try await server.api.createSession()
        expectError(try await server.api.request("GET", "/v1/admin/sessions"), 401, "unauthorized")
        expectError(try await Self.list(server.api, token: "wrong"), 403, "forbidden")
        expectError(try await Self.list(server.api, token: session.token), 403, "forbidden")
        await server.stop()
        let off = try Self.server(admin: false)
        expectError(try await Self.list(off.api), 403, "forbidden")
        let other = try await off.api.createSession()
        let history = try await off.api.request(
            "GET", "/v1/sessions/\(other.id)/history", headers: [("Authorization", "Bearer \(Self.adminToken)")])
        expectError(history, 404, "session_not_found")
        await off.stop()
    }

    @Test("the admin reads any session's history, and nothing else of it: state, changes and deletes stay the session's")
    func readsOnly() async throws {
        let server = try Self.server()
        let session = try await server.api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        let admin: [Header] = [("Authorization", "Bearer \(Self.adminToken)")]
        let path = "/v1/sessions/\(session.id)"
        let history = try await server.api.request("GET", "\(path)/history", headers: admin)
        #expect(history.status == 200 && history.json?["changes"]?.array?.count == 1, "\(history)")
        expectError(try await server.api.request("GET", "\(path)/state", headers: admin), 404, "session_not_found")
        expectError(try await server.api.request("GET", "\(path)/state/counter", headers: admin), 404, "session_not_found")
        let dispatch = try await server.api.request(
            "POST", "\(path)/dispatch", headers: admin,
            body: Array(#"{"feature":"counter","action":{"type":"increment"}}"#.utf8))
        expectError(dispatch, 404, "session_not_found")
        let travel = try await server.api.request("POST", "\(path)/state/counter/travel", headers: admin, body: Array(#"{"version":0}"#.utf8))
        expectError(travel, 404, "session_not_found")
        expectError(try await server.api.request("DELETE", path, headers: admin), 404, "session_not_found")
        #expect(try await session.store("counter").version == 1, "nothing changed")
        // An unknown id stays unknown to the admin too.
        let unknown = try await server.api.request("GET", "/v1/sessions/AAAAAAAAAAAAAAAAAAAAAA/history", headers: admin)
        expectError(unknown, 404, "session_not_found")
        await server.stop()
    }
}
