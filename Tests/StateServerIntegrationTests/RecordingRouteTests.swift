import ExampleFeatures
import Foundation
import StatePersistence
import StateStore
import TestSupport
import Testing

/// `GET /v1/sessions/{id}/recording`, in process (memory, and SQLite in the second pass), and
/// `state-server replay` on what it exports.
@Suite("Recordings: exported by the server, replayed offline", .inProcessServer())
struct RecordingRouteTests {
    static func recording(_ session: Session, sourceLocation: SourceLocation = #_sourceLocation) async throws -> (Recording, [UInt8]) {
        let response = try await session.request("GET", "/recording")
        try #require(response.status == 200, "\(response)", sourceLocation: sourceLocation)
        #expect(response.header("Cache-Control") == "no-store", sourceLocation: sourceLocation)
        return (try Recording(json: response.body), response.body)
    }

    @Test("record on the server, replay offline: the same states, step by step, and the same final state")
    func roundTrip() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment", "by": 3])
        try await session.dispatchOK("todos", ["type": "add", "title": "milk"])
        try await session.dispatchOK("todos", ["type": "toggle", "id": "1"])
        try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "long enough"])
        let settled = try await eventually(timeout: .seconds(60)) { try await session.store("login").version == 2 }
        #expect(settled)
        _ = try await session.request("PUT", "/state/settings", body: JSON.object(["state": ["backgroundColor": "#000000", "textColor": "#ffffff"]]).bytes)
        _ = try await session.request("POST", "/state/counter/travel", body: JSON.object(["version": 0]).bytes)
        _ = try await session.request("DELETE", "/state/todos")

        let (recording, _) = try await Self.recording(session)
        #expect(recording.features.map(\.name) == ["counter", "todos", "settings", "login"])
        #expect(recording.features.allSatisfy { $0.version == 0 })
        #expect(recording.changes.map(\.cause) == ["dispatch", "dispatch", "dispatch", "dispatch", "dispatch", "rehydrate", "travel", "reset"])
        #expect(recording.changes.map(\.seq) == Array(1...8))
        #expect(recording.changes[3].action?.bytes == Array(#"{"password":"********","type":"submit","username":"ada"}"#.utf8))
        #expect(try recording.replay(with: try ExampleFeatures.registry()) == nil)
        // Each feature's last recorded state is its state now.
        let stores = try await session.allStores()
        let states = try recording.states()
        for name in ["counter", "todos", "settings", "login"] {
            let last = try #require(recording.changes.lastIndex { $0.feature == name })
            #expect(
                try JSON.parse(states[last].bytes) == stores[name]?.state && recording.changes[last].version == stores[name]?.version,
                "\(name)")
        }
    }

    @Test("past the kept history the recording starts where the journal does, and still replays")
    func truncated() async throws {
        let (server, session) = try await InProcessServer.twelveIncrementsThreeKept()
        let (recording, _) = try await Self.recording(session)
        let counter = try #require(recording.features.first { $0.name == "counter" })
        #expect(counter.version > 0 && counter.version < 12, "\(counter)")
        #expect(recording.changes.last?.version == 12)
        #expect(recording.changes.first?.version == counter.version + 1)
        #expect(try recording.replay(with: try ExampleFeatures.registry()) == nil)
        await server.stop()
    }

    @Test("state-server replay: 0 when the states agree, 1 with the first difference, 2 for a file that is no recording")
    func command() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("counter", ["type": "increment", "by": 5])
        let (_, bytes) = try await Self.recording(session)
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let good = directory.path("good.json")
        try Data(bytes).write(to: URL(fileURLWithPath: good))
        let bad = directory.path("bad.json")
        let tampered = String(decoding: bytes, as: UTF8.self).replacingOccurrences(of: #""state":{"count":6}"#, with: #""state":{"count":60}"#)
        try Data(tampered.utf8).write(to: URL(fileURLWithPath: bad))
        let garbage = directory.path("garbage.json")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: garbage))

        let ok = try await Self.run(["replay", good])
        #expect(ok.status == 0 && ok.output.contains("2 changes of 4 features, every state the same"), "\(ok)")
        let diverged = try await Self.run(["replay", bad])
        #expect(diverged.status == 1, "\(diverged)")
        #expect(diverged.output.contains("diverges at step 2 (seq 2), counter version 2"), "\(diverged)")
        #expect(diverged.output.contains(#"{"op":"replace","path":"/count","value":6}"#), "\(diverged)")
        let unreadable = try await Self.run(["replay", garbage])
        #expect(unreadable.status == 2 && unreadable.output.contains("'format'"), "\(unreadable)")
    }

    @Test("POST /v1/recordings: a new session with the recorded changes, exported again the same; a divergent or unreadable one creates nothing")
    func importRecording() async throws {
        // A server of its own, with an admin, so the test can count its sessions.
        var settings = InProcessServer.Settings()
        settings.routes.adminTokenHash = SHA256.hash(Self.adminToken)
        let server = try InProcessServer(settings: settings)
        defer { Task { await server.stop() } }
        let api = server.api
        let original = try await api.createSession()
        try await original.dispatchOK("todos", ["type": "add", "title": "milk"])
        try await original.dispatchOK("todos", ["type": "toggle", "id": "1"])
        try await original.dispatchOK("login", ["type": "submit", "username": "ada", "password": "long enough"])
        let settled = try await eventually(timeout: .seconds(60)) { try await original.store("login").version == 2 }
        #expect(settled)
        _ = try await original.request("POST", "/state/todos/travel", body: JSON.object(["version": 1]).bytes)
        let (recording, bytes) = try await Self.recording(original)

        let imported = try await api.request("POST", "/v1/recordings", body: bytes)
        #expect(imported.status == 201 && imported.header("Cache-Control") == "no-store", "\(imported)")
        let id = try #require(imported.json?["id"]?.string)
        let token = try #require(imported.json?["token"]?.string)
        // Four changes sent as a client would; login's result is left to the check, which runs again.
        #expect(imported.json?["changes"] == 4 && imported.json?["leftToServer"] == 1, "\(imported)")
        #expect(imported.header("Location") == "/v1/sessions/\(id)", "\(imported)")
        let copy = Session(api: api, id: id, token: token)
        // The same stores, versions and states: the check ran again and said the same.
        #expect(try await copy.allStores() == (try await original.allStores()))
        let (again, _) = try await Self.recording(copy)
        #expect(try again.states() == recording.states())
        #expect(again.changes.map(\.cause) == recording.changes.map(\.cause))

        // The toggle's recorded state says the item is still open: today's reducer disagrees.
        var tampered = recording.changes
        let toggle = tampered[1]
        tampered[1] = Recording.Step(
            seq: toggle.seq, feature: toggle.feature, version: toggle.version, cause: toggle.cause, action: toggle.action,
            state: try recording.states()[0], effect: toggle.effect)
        let diverging = Recording(server: recording.server, features: recording.features, changes: tampered)
        let before = try await Self.sessionCount(api)
        let refused = try await api.request("POST", "/v1/recordings", body: diverging.json)
        expectError(refused, 422, "recording_diverges")
        #expect(refused.json?["error"]?["message"]?.string?.contains("step 2 (seq 2), todos version 2, dispatch") == true, "\(refused)")
        expectError(try await api.request("POST", "/v1/recordings", body: Array("{".utf8)), 400, "malformed_json")
        expectError(try await api.request("POST", "/v1/recordings", body: Array(#"{"format":"x"}"#.utf8)), 400, "invalid_request")
        let unknown = #"{"format":"stateserver-recording","version":1,"server":"","features":[{"name":"nope","stateVersion":1,"version":0,"state":{}}],"changes":[]}"#
        expectError(try await api.request("POST", "/v1/recordings", body: Array(unknown.utf8)), 400, "invalid_request")
        #expect(try await Self.sessionCount(api) == before, "a refused import leaves no session")
    }

    /// A recording of `counter` whose one step is `patch` (make fuzz's seeds
    /// fuzz/seeds/recording/finding-copies-*).
    static func counterRecording(patch: String) -> [UInt8] {
        Array((#"{"format":"stateserver-recording","version":2,"server":"t","features":[{"name":"counter","stateVersion":1,"version":0,"#
            + #""state":{"count":0}}],"changes":[{"seq":1,"feature":"counter","version":1,"cause":"rehydrate","patch":"# + patch + "}]}").utf8)
    }

    @Test("a small recording whose patch copies the state into itself 40 times, or into ever deeper paths, is refused at once, over HTTP and by state-server replay")
    func copyingPatches() async throws {
        let api = try SharedServer.api()
        let doubling = "[" + (0..<40).map { #"{"op":"copy","from":"","path":"/k\#($0)"}"# }.joined(separator: ",") + "]"
        let deeper = "[" + (0..<14).map { #"{"op":"copy","from":"","path":""# + String(repeating: "/a", count: 1 << $0) + #""}"# }
            .joined(separator: ",") + "]"
        // Before: the first made a state of 2^40 bytes to write (the request never ended), the
        // second one 16,384 levels deep (writing or freeing it overflowed the stack).
        for (name, patch, reason) in [
            ("doubling", doubling, "carry more than 1048576 bytes"), ("deeper", deeper, "would nest deeper than 512 levels"),
        ] {
            let body = Self.counterRecording(patch: patch)
            let refused = try await api.request("POST", "/v1/recordings", body: body)
            expectError(refused, 400, "invalid_request")
            #expect(refused.json?["error"]?["message"]?.string?.contains(reason) == true, "\(name): \(refused)")
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let file = directory.path("\(name).json")
            try Data(body).write(to: URL(fileURLWithPath: file))
            let replayed = try await Self.run(["replay", file])
            #expect(replayed.status == 2 && replayed.output.contains(reason), "\(name): \(replayed)")
        }
        // The server still answers.
        #expect(try await api.request("GET", "/v1/features").status == 200)
    }

    static let adminToken = "import-test-admin"

    /// The sessions the server holds (the admin's list).
    static func sessionCount(_ api: API) async throws -> Int {
        let response = try await api.request("GET", "/v1/admin/sessions?limit=1000", headers: [("Authorization", "Bearer \(adminToken)")])
        try #require(response.status == 200, "\(response)")
        return try #require(response.json?["sessions"]?.array?.count)
    }

    /// The binary's exit status and what it printed (stdout, then stderr).
    static func run(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let binary = try #require(ServerBinary.locate())
        let result = try await runCommand(binary, arguments)
        return (result.status, result.stdout + result.stderr)
    }
}
