import Foundation
import TestSupport
import Testing

/// Scoped tokens (`POST /v1/sessions/{id}/tokens`), in process: what each scope, feature list
/// and action list lets through, that a token never mints a wider one, and that revoking or
/// expiry refuses the token at once and ends its open streams. That tokens survive a restart
/// is the real binary's (DurableTokenTests).
@Suite("Scoped tokens", .inProcessServer())
struct ScopedTokenTests {
    /// Mints a token on `session` with `body`; requires 201 and returns it as a session handle
    /// and its id.
    static func mint(
        _ session: Session, _ body: JSON, by minter: Session? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (session: Session, id: String) {
        let response = try await (minter ?? session).request("POST", "/tokens", body: body.bytes)
        try #require(response.status == 201, "mint \(body): \(response)", sourceLocation: sourceLocation)
        let json = try #require(response.json, sourceLocation: sourceLocation)
        let token = try #require(json["token"]?.string, sourceLocation: sourceLocation)
        let id = try #require(json["id"]?.string, sourceLocation: sourceLocation)
        #expect(response.header("Location") == "\(session.path)/tokens/\(id)", sourceLocation: sourceLocation)
        #expect(response.header("Cache-Control") == "no-store", sourceLocation: sourceLocation)
        return (Session(api: session.api, id: session.id, token: token), id)
    }

    @Test("observe reads and streams, and nothing else")
    func observeScope() async throws {
        let owner = try await SharedServer.api().createSession()
        try await owner.dispatchOK("counter", ["type": "increment", "by": 2])
        let (viewer, _) = try await Self.mint(owner, ["scope": "observe"])
        #expect(try await viewer.store("counter").state == ["count": 2])
        #expect(try await viewer.allStores().count == 4)
        let (stream, snapshot) = try await viewer.subscribe()
        defer { stream.close() }
        #expect(snapshot.event == "snapshot")
        #expect(try await viewer.request("GET", "/history").status == 200)

        expectError(try await viewer.dispatch("counter", ["type": "increment"]), 403, "forbidden", messageContains: "'dispatch'")
        expectError(
            try await viewer.request("PUT", "/state/counter", body: JSON.object(["state": ["count": 9]]).bytes), 403, "forbidden")
        expectError(try await viewer.request("DELETE", "/state/counter"), 403, "forbidden")
        expectError(try await viewer.request("POST", "/state/counter/travel", body: JSON.object(["version": 0]).bytes), 403, "forbidden")
        expectError(try await viewer.request("POST", "/tokens", body: JSON.object(["scope": "observe"]).bytes), 403, "forbidden")
        expectError(try await viewer.request("GET", "/tokens"), 403, "forbidden")
        expectError(try await viewer.delete(), 403, "forbidden")
        // Nothing of that changed anything; the stream saw no change.
        #expect(try await owner.store("counter") == StoreState(version: 1, state: ["count": 2]))
        try await owner.dispatchOK("counter", ["type": "increment"])
        #expect(try await stream.nextEvent().json?["version"] == 2)
    }

    @Test("dispatch limited to features and action types: the rest is 403 and runs nothing")
    func featuresAndActions() async throws {
        let owner = try await SharedServer.api().createSession()
        let (kiosk, _) = try await Self.mint(
            owner, ["scope": "dispatch", "features": ["todos"], "actions": ["todos": ["add"]]])
        try await kiosk.dispatchOK("todos", ["type": "add", "title": "milk"])
        expectError(try await kiosk.dispatch("todos", ["type": "clearCompleted"]), 403, "forbidden", messageContains: "'add'")
        expectError(try await kiosk.dispatch("counter", ["type": "increment"]), 403, "forbidden", messageContains: "'counter'")
        expectError(try await kiosk.request("GET", "/state/counter"), 403, "forbidden")
        expectError(try await kiosk.events(query: "feature=counter").readErrorBody(), 403, "forbidden")
        // Reads cover only what it reaches.
        #expect(try await kiosk.allStores().keys.sorted() == ["todos"])
        let history = try await kiosk.request("GET", "/history")
        #expect(history.status == 200 && history.json?["changes"]?.array?.count == 1, "\(history)")
        expectError(try await kiosk.request("GET", "/recording"), 403, "forbidden")
        // Its stream carries only todos.
        let (stream, snapshot) = try await kiosk.subscribe()
        defer { stream.close() }
        #expect(snapshot.json?["features"]?.object?.keys.sorted() == ["todos"], "\(snapshot)")
        try await owner.dispatchOK("counter", ["type": "increment"])
        try await owner.dispatchOK("todos", ["type": "add", "title": "eggs"])
        let next = try await stream.nextEvent()
        #expect(next.json?["feature"] == "todos", "\(next)")
        // The refused dispatches ran nothing.
        #expect(try await owner.store("todos").version == 2)
        #expect(try await owner.store("counter").version == 1)
    }

    @Test("a token cannot mint a wider one; an admin token limited to a feature mints within it")
    func noWidening() async throws {
        let owner = try await SharedServer.api().createSession()
        let (dispatcher, dispatcherID) = try await Self.mint(owner, ["scope": "dispatch"])
        expectError(
            try await dispatcher.request("POST", "/tokens", body: JSON.object(["scope": "observe"]).bytes), 403, "forbidden")
        let (todosAdmin, adminID) = try await Self.mint(
            owner, ["scope": "admin", "features": ["todos"], "actions": ["todos": ["add", "toggle"]], "expiresIn": 3600])
        for wider: JSON in [
            ["scope": "observe"],  // every feature
            ["scope": "observe", "features": ["counter"]],
            ["scope": "dispatch", "features": ["todos"]],  // any action type
            ["scope": "dispatch", "features": ["todos"], "actions": ["todos": ["add", "clearCompleted"]]],
            ["scope": "observe", "features": ["todos"], "actions": ["todos": ["add"]], "expiresIn": 7200],  // outlives it
        ] {
            expectError(
                try await todosAdmin.request("POST", "/tokens", body: wider.bytes), 403, "forbidden",
                messageContains: "wider than itself", "\(wider)")
        }
        let (child, childID) = try await Self.mint(
            owner, ["scope": "dispatch", "features": ["todos"], "actions": ["todos": ["add"]]], by: todosAdmin)
        try await child.dispatchOK("todos", ["type": "add", "title": "a"])
        // Without expiresIn the child expires with its minter; the list shows both, never a secret.
        let list = try await owner.request("GET", "/tokens")
        #expect(list.status == 200, "\(list)")
        let tokens = try #require(list.json?["tokens"]?.array)
        #expect(Set(tokens.compactMap { $0["id"]?.string }) == [dispatcherID, adminID, childID], "\(list)")
        let listedChild = try #require(tokens.first { $0["id"]?.string == childID })
        let listedAdmin = try #require(tokens.first { $0["id"]?.string == adminID })
        #expect(listedChild["parent"]?.string == adminID && listedChild["expiresAt"] == listedAdmin["expiresAt"], "\(tokens)")
        #expect(listedChild["actions"] == ["todos": ["add"]] && listedChild["scope"] == "dispatch")
        #expect(!list.text.contains(child.token) && tokens.allSatisfy { $0["token"] == nil })
    }

    @Test("revoking refuses the token at once, ends its streams and revokes what it minted")
    func revoke() async throws {
        let owner = try await SharedServer.api().createSession()
        let (admin, adminID) = try await Self.mint(owner, ["scope": "admin"])
        let (viewer, viewerID) = try await Self.mint(owner, ["scope": "observe"], by: admin)
        let (stream, _) = try await viewer.subscribe()
        defer { stream.close() }
        let (ownStream, _) = try await owner.subscribe()
        defer { ownStream.close() }

        let revoked = try await owner.request("DELETE", "/tokens/\(adminID)")
        #expect(revoked.status == 204, "\(revoked)")
        // The stream of the token minted by the revoked one ends with a `revoked` event.
        let last = try await stream.nextEvent()
        #expect(last.event == "revoked" && last.json?["reason"] == "revoked", "\(last)")
        #expect(try await stream.waitForEnd())
        expectError(try await viewer.request("GET", "/state/counter"), 404, "session_not_found")
        expectError(try await admin.request("GET", "/tokens"), 404, "session_not_found")
        expectError(try await owner.request("DELETE", "/tokens/\(viewerID)"), 404, "token_not_found")
        #expect(try await owner.request("GET", "/tokens").json?["tokens"] == [])
        // The owner's stream goes on.
        try await owner.dispatchOK("counter", ["type": "increment"])
        #expect(try await ownStream.nextEvent().json?["version"] == 1)
    }

    @Test("an expired token is refused and its stream ends with reason expired")
    func expiry() async throws {
        let owner = try await SharedServer.api().createSession()
        let (brief, _) = try await Self.mint(owner, ["scope": "observe", "expiresIn": 2])
        let (stream, _) = try await brief.subscribe()
        defer { stream.close() }
        let last = try await stream.nextEvent(timeout: .seconds(60))
        #expect(last.event == "revoked" && last.json?["reason"] == "expired", "\(last)")
        #expect(try await stream.waitForEnd())
        expectError(try await brief.request("GET", "/state/counter"), 404, "session_not_found")
        #expect(try await owner.request("GET", "/tokens").json?["tokens"] == [])
    }

    @Test("bad mint bodies are 400 or 404 and mint nothing")
    func badBodies() async throws {
        let owner = try await SharedServer.api().createSession()
        for (body, status, code) in [
            ("[]", 400, "invalid_request"),
            ("{", 400, "malformed_json"),
            (#"{"scope": "root"}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "features": []}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "features": ["nope"]}"#, 404, "unknown_feature"),
            (#"{"scope": "observe", "features": ["todos"], "actions": {"counter": ["increment"]}}"#, 400, "invalid_request"),
            (#"{"scope": "dispatch", "actions": {"todos": []}}"#, 400, "invalid_request"),
            (#"{"scope": "dispatch", "actions": {"todos": [1]}}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "expiresIn": 0}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "expiresIn": 9223372036854775807}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "expiresIn": 1.5}"#, 400, "invalid_request"),
            (#"{"scope": "observe", "extra": 1}"#, 400, "invalid_request"),
        ] {
            expectError(try await owner.request("POST", "/tokens", body: Array(body.utf8)), status, code, "\(body)")
        }
        #expect(try await owner.request("GET", "/tokens").json?["tokens"] == [])
        expectError(try await owner.request("DELETE", "/tokens/nope"), 404, "token_not_found")
        // Another session's owner token reaches nothing here.
        let other = try await SharedServer.api().createSession()
        let stranger = Session(api: owner.api, id: owner.id, token: other.token)
        expectError(try await stranger.request("POST", "/tokens", body: JSON.object(["scope": "observe"]).bytes), 404, "session_not_found")
    }
}

/// Minted tokens are stored: they survive a restart on SQLite, and a revocation does too.
@Suite("Scoped tokens are durable")
struct DurableTokenTests {
    @Test("a minted token works after a restart; a revoked one stays revoked")
    func survivesRestart() async throws {
        let directory = try TemporaryDirectory("tokens")
        defer { directory.remove() }
        let arguments = ["--storage", "sqlite:\(directory.path("state.db"))"]
        let (owner, kept, gone) = try await withServer(arguments: arguments) { server in
            let owner = try await server.api.createSession()
            let (kept, _) = try await ScopedTokenTests.mint(owner, ["scope": "dispatch", "features": ["counter"]])
            let (gone, goneID) = try await ScopedTokenTests.mint(owner, ["scope": "observe"])
            try await kept.dispatchOK("counter", ["type": "increment"])
            #expect(try await owner.request("DELETE", "/tokens/\(goneID)").status == 204)
            return (owner, kept, gone)
        }
        try await withServer(arguments: arguments) { server in
            let api = server.api
            let keptHere = Session(api: api, id: owner.id, token: kept.token)
            try await keptHere.dispatchOK("counter", ["type": "increment"])
            expectError(try await keptHere.dispatch("todos", ["type": "add", "title": "x"]), 403, "forbidden")
            expectError(
                try await Session(api: api, id: owner.id, token: gone.token).request("GET", "/state/counter"), 404, "session_not_found")
            #expect(try await Session(api: api, id: owner.id, token: owner.token).request("GET", "/tokens").json?["tokens"]?.array?.count == 1)
        }
    }
}
