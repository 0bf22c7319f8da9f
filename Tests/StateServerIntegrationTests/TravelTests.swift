import TestSupport
import Testing

/// `POST /v1/sessions/{id}/state/{feature}/travel`, in process: memory storage, and SQLite in
/// the suite's second pass (STATE_SERVER_TEST_STORAGE=sqlite).
@Suite("Time travel: an earlier state set again as a new change", .inProcessServer())
struct TravelTests {
    static func travel(_ session: Session, _ feature: String, _ version: Int, headers: [Header] = []) async throws -> HTTPResponse {
        try await session.request("POST", "/state/\(feature)/travel", headers: headers, body: JSON.object(["version": .int(version)]).bytes)
    }

    @Test("travel to a version: its state as a new version with cause travel, in the history; to 0: the initial state")
    func travelsForward() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        for title in ["milk", "eggs", "bread"] { try await session.dispatchOK("todos", ["type": "add", "title": .string(title)]) }

        let back = try await Self.travel(session, "todos", 1)
        #expect(back.status == 200, "\(back)")
        #expect(back.header("ETag") == "\"4\"")
        #expect(back.json?["version"] == 4)
        let titles = back.json?["state"]?["items"]?.array?.compactMap { $0["title"]?.string }
        #expect(titles == ["milk"], "\(back)")
        let read = try await session.store("todos")
        #expect(read.version == 4 && read.state == back.json?["state"])

        let page = try await session.request("GET", "/history?after=3")
        let change = try #require(page.json?["changes"]?.array?.first)
        #expect(change["cause"] == "travel" && change["version"] == 4 && change["action"] == .null, "\(change)")

        // Forward again, to a version made before the travel: history stays append-only.
        let forward = try await Self.travel(session, "todos", 3)
        #expect(forward.json?["version"] == 5)
        #expect(forward.json?["state"]?["items"]?.array?.count == 3, "\(forward)")
        let initial = try await Self.travel(session, "todos", 0)
        #expect(initial.json?["version"] == 6)
        #expect(initial.json?["state"]?["items"] == [], "\(initial)")
    }

    @Test("If-Match works as for any change; a bad body is 400, a version never reached 422, an unknown feature 404")
    func refusals() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment", "by": 10])
        try await session.dispatchOK("counter", ["type": "increment", "by": 10])
        let stale = try await Self.travel(session, "counter", 1, headers: [("If-Match", "\"1\"")])
        expectError(stale, 412, "version_conflict")
        let ahead = try await Self.travel(session, "counter", 3)
        expectError(ahead, 422, "version_unreachable")
        #expect(ahead.json?["error"]?["message"]?.string?.contains("0 to 2") == true, "\(ahead)")
        for body in [#"{"version":-1}"#, #"{"version":1.5}"#, #"{"version":"1"}"#, #"{}"#, #"[1]"#] {
            expectError(try await session.request("POST", "/state/counter/travel", body: Array(body.utf8)), 400, "invalid_request")
        }
        expectError(try await session.request("POST", "/state/counter/travel", body: Array("{".utf8)), 400, "malformed_json")
        expectError(try await Self.travel(session, "nope", 0), 404, "unknown_feature")
        #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": 20]), "nothing changed")
        let matching = try await Self.travel(session, "counter", 1, headers: [("If-Match", "\"2\"")])
        #expect(matching.status == 200 && matching.json?["state"] == ["count": 10], "\(matching)")
    }

    @Test("server-owned state follows the rules of a PUT: login cannot travel to a check in progress")
    func serverOwnedState() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "long enough"])
        let settled = try await eventually(timeout: .seconds(60)) { try await session.store("login").version == 2 }
        #expect(settled)
        expectError(try await Self.travel(session, "login", 1), 422, "invalid_state")
        let out = try await Self.travel(session, "login", 0)
        #expect(out.status == 200 && out.json?["state"]?["isLoggedIn"] == false, "\(out)")
    }

    @Test("outside the kept history: 422 naming the versions that can be reached; inside it, the state")
    func outsideKeptHistory() async throws {
        let (server, session) = try await InProcessServer.twelveIncrementsThreeKept()
        let gone = try await Self.travel(session, "counter", 1)
        expectError(gone, 422, "version_unreachable")
        let message = try #require(gone.json?["error"]?["message"]?.string)
        #expect(message.contains("no longer kept") && message.contains("to 12"), "\(message)")
        let kept = try await Self.travel(session, "counter", 11)
        #expect(kept.status == 200 && kept.json?["state"] == ["count": 11] && kept.json?["version"] == 13, "\(kept)")
        let initial = try await Self.travel(session, "counter", 0)
        #expect(initial.json?["state"] == ["count": 0], "\(initial)")
        await server.stop()
    }
}
