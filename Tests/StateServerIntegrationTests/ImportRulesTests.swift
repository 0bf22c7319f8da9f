import Foundation
import StatePersistence
import StateStore
import TestSupport
import Testing

private let importAdminToken = "import-rules-admin"
private let importAdminHash = SHA256.hash(importAdminToken).map { String(format: "%02x", $0) }.joined()

/// `POST /v1/recordings` from an attacker's side, over a socket to the real binary: a recording
/// may not crash the server, nor set what a client may not set. The body limit is raised
/// (4 MiB) so a state over the feature's ceiling (1 MiB) reaches the import; the audit log is on
/// so the import's dispatches can be seen going through the middleware.
@Suite(
    "Imports hold to a client's rules",
    // One at a time: the tests count the server's sessions.
    .serialized,
    .localServer(environment: [
        "STATE_SERVER_BODY_LIMIT": "4194304",
        "STATE_SERVER_LOG_AUDIT": "true",
        "STATE_SERVER_ADMIN_TOKEN_HASH": importAdminHash,
    ]))
struct ImportRulesTests {
    static let adminToken = importAdminToken

    static let loggedOut: JSONValue = .object([
        "username": .string(""), "isLoading": .bool(false), "isLoggedIn": .bool(false), "error": .null,
    ])

    static func login(username: String, isLoading: Bool = false, isLoggedIn: Bool) -> JSONValue {
        .object([
            "username": .string(username), "isLoading": .bool(isLoading), "isLoggedIn": .bool(isLoggedIn), "error": .null,
        ])
    }

    static func recording(_ starts: [Recording.Start], _ steps: [Recording.Step]) -> [UInt8] {
        Recording(server: "test", features: starts, changes: steps).json
    }

    static func counterStart(version: Int) -> Recording.Start {
        Recording.Start(name: "counter", stateVersion: 1, version: version, state: .object(["count": .int(0)]))
    }

    static func increment(seq: Int, version: Int) -> Recording.Step {
        Recording.Step(
            seq: seq, feature: "counter", version: version, cause: "dispatch",
            action: .object(["type": .string("increment")]), state: .object(["count": .int(1)]), effect: nil)
    }

    /// The server still answers, and a bystander's state is untouched.
    func expectAlive(_ bystander: Session, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(await bystander.api.isHealthy(), "healthz after the import", sourceLocation: sourceLocation)
        #expect(
            try await bystander.store("counter") == StoreState(version: 1, state: ["count": 1]),
            sourceLocation: sourceLocation)
    }

    @Test("versions past 2^53 - 1 are refused as unreadable (400); a store at the last version refuses its next change (422); the server lives on")
    func versionsAtTheEdge() async throws {
        let api = try SharedServer.api()
        let bystander = try await api.createSession()
        try await bystander.dispatchOK("counter", ["type": "increment"])

        // The reported crash: Int.max, then one change (version + 1 overflowed and killed the process).
        let overflow = Self.recording([Self.counterStart(version: Int.max)], [Self.increment(seq: 1, version: Int.min)])
        let refused = try await api.request("POST", "/v1/recordings", body: overflow)
        expectError(refused, 400, "invalid_request")
        #expect(refused.json?["error"]?["message"]?.string?.contains("9007199254740991") == true, "\(refused)")
        try await expectAlive(bystander)

        // A seq past the bound is refused the same way.
        let bigSeq = Self.recording([Self.counterStart(version: 0)], [Self.increment(seq: Int.max, version: 1)])
        expectError(try await api.request("POST", "/v1/recordings", body: bigSeq), 400, "invalid_request")

        // At the last version a store can have, a change is refused, not trapped on.
        let last = StoreVersion.max
        let atEdge = Self.recording([Self.counterStart(version: last)], [Self.increment(seq: 1, version: last)])
        let diverged = try await api.request("POST", "/v1/recordings", body: atEdge)
        expectError(diverged, 422, "recording_diverges")
        #expect(diverged.json?["error"]?["message"]?.string?.contains("the last a store can reach") == true, "\(diverged)")
        try await expectAlive(bystander)
    }

    @Test("state-server replay exits 2 on a recording whose version overflows, with a message")
    func replayCommand() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let file = directory.path("overflow.json")
        try Data(Self.recording([Self.counterStart(version: Int.max)], [Self.increment(seq: 1, version: Int.min)]))
            .write(to: URL(fileURLWithPath: file))
        let result = try await RecordingRouteTests.run(["replay", file])
        #expect(result.status == 2, "\(result)")
        #expect(result.output.contains("from 0 to 9007199254740991"), "\(result)")
    }

    @Test("a starting state a client may not set (logged in as root) is 422 invalid_state, and no session is left")
    func forgedStart() async throws {
        let api = try SharedServer.api()
        let before = try await Self.sessionCount(api)
        let forged = Self.recording(
            [Recording.Start(name: "login", stateVersion: 1, version: 0, state: Self.login(username: "root", isLoggedIn: true))], [])
        let refused = try await api.request("POST", "/v1/recordings", body: forged)
        expectError(refused, 422, "invalid_state")
        #expect(try await Self.sessionCount(api) == before, "a refused import leaves no session")

        // The admin imports it as recorded: the operator's word, cause `import`.
        let admin = try await api.request(
            "POST", "/v1/recordings", headers: [("Authorization", "Bearer \(Self.adminToken)")], body: forged)
        #expect(admin.status == 201 && admin.json?["asRecorded"] == true, "\(admin)")
        let copy = Session(api: api, id: try #require(admin.json?["id"]?.string), token: try #require(admin.json?["token"]?.string))
        #expect(try await copy.store("login").state["isLoggedIn"] == true)
        let history = try await copy.request("GET", "/history")
        #expect(history.json?["changes"]?[0]?["cause"] == "import", "\(history)")

        // Another session's token is no admin: that import is a client's, and refused.
        let other = try await api.createSession()
        let notAdmin = try await api.request(
            "POST", "/v1/recordings", headers: [("Authorization", "Bearer \(other.token)")], body: forged)
        expectError(notAdmin, 422, "invalid_state")
    }

    @Test("a server-only step is not copied: the server's own check runs again and fails a short password")
    func forgedFollowUp() async throws {
        let api = try SharedServer.api()
        let submit = Recording.Step(
            seq: 1, feature: "login", version: 1, cause: "dispatch",
            action: .object(["type": .string("submit"), "username": .string("root"), "password": .string("x")]),
            state: Self.login(username: "root", isLoading: true, isLoggedIn: false), effect: nil)
        let succeeded = Recording.Step(
            seq: 2, feature: "login", version: 2, cause: "dispatch", action: .object(["type": .string("succeeded")]),
            state: Self.login(username: "root", isLoggedIn: true), effect: nil)
        let body = Self.recording([Recording.Start(name: "login", stateVersion: 1, version: 0, state: Self.loggedOut)], [submit, succeeded])

        let imported = try await api.request("POST", "/v1/recordings", body: body)
        #expect(imported.status == 201, "\(imported)")
        #expect(imported.json?["changes"] == 1 && imported.json?["leftToServer"] == 1 && imported.json?["asRecorded"] == false, "\(imported)")
        let copy = Session(api: api, id: try #require(imported.json?["id"]?.string), token: try #require(imported.json?["token"]?.string))
        // The import waited for the check: its result is already there.
        let login = try await copy.store("login")
        #expect(login.version == 2, "\(login)")
        #expect(login.state["isLoggedIn"] == false && login.state["error"] != nil && login.state["error"] != .null, "\(login)")

        // The server's audit log saw the imported dispatch as any client dispatch.
        let audited = try await eventually(timeout: .seconds(10)) {
            SharedServer.current.map { $0.output.stderrText.contains("session=\(copy.id)") && $0.output.stderrText.contains("action=submit") } ?? false
        }
        #expect(audited, "no audit line for the imported submit")

        // With the admin credential both steps are applied as recorded.
        let admin = try await api.request(
            "POST", "/v1/recordings", headers: [("Authorization", "Bearer \(Self.adminToken)")], body: body)
        #expect(admin.status == 201 && admin.json?["changes"] == 2 && admin.json?["leftToServer"] == 0, "\(admin)")
        let recorded = Session(api: api, id: try #require(admin.json?["id"]?.string), token: try #require(admin.json?["token"]?.string))
        #expect(try await recorded.store("login").state["isLoggedIn"] == true)
    }

    @Test("a starting state over the feature's ceiling (1 MiB) is refused even as recorded")
    func ceiling() async throws {
        let api = try SharedServer.api()
        let items: [JSONValue] = (0..<1600).map { index in
            .object(["id": .string(String(index)), "title": .string(String(repeating: "x", count: 1000)), "done": .bool(false)])
        }
        let big = Self.recording([Recording.Start(name: "todos", stateVersion: 1, version: 0, state: .object(["items": .array(items), "nextId": .int(1601)]))], [])
        #expect(big.count > 1_600_000)
        let before = try await Self.sessionCount(api)
        expectError(try await api.request("POST", "/v1/recordings", body: big), 422, "invalid_state")
        expectError(
            try await api.request("POST", "/v1/recordings", headers: [("Authorization", "Bearer \(Self.adminToken)")], body: big),
            422, "invalid_state")
        #expect(try await Self.sessionCount(api) == before, "a refused import leaves no session")
    }

    static func sessionCount(_ api: API) async throws -> Int {
        let response = try await api.request("GET", "/v1/admin/sessions?limit=1000", headers: [("Authorization", "Bearer \(adminToken)")])
        try #require(response.status == 200, "\(response)")
        return try #require(response.json?["sessions"]?.array?.count)
    }
}
