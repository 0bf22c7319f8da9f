import Foundation
import TestSupport
import Testing

/// Issue 36: the defects an abuse test found in scoped tokens, imports, replays and early
/// refusals, each against the real binary over HTTP.
@Suite("Abuse of tokens, imports, replays and early refusals")
struct TokenAbuseTests {
    /// `POST .../tokens` by `minter` with `body`.
    static func mint(_ minter: Session, _ body: JSON) async throws -> HTTPResponse {
        try await minter.request("POST", "/tokens", body: body.bytes)
    }

    /// The minted token as a session handle, and its id (requires 201).
    static func minted(
        _ minter: Session, _ body: JSON, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (session: Session, id: String) {
        let response = try await mint(minter, body)
        try #require(response.status == 201, "mint \(body): \(response)", sourceLocation: sourceLocation)
        let token = try #require(response.json?["token"]?.string, sourceLocation: sourceLocation)
        let id = try #require(response.json?["id"]?.string, sourceLocation: sourceLocation)
        return (Session(api: minter.api, id: minter.id, token: token), id)
    }

    /// The ids `caller` lists with `GET .../tokens` (requires 200).
    static func listed(_ caller: Session, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Set<String> {
        let response = try await caller.request("GET", "/tokens")
        try #require(response.status == 200, "list: \(response)", sourceLocation: sourceLocation)
        let tokens = try #require(response.json?["tokens"]?.array, sourceLocation: sourceLocation)
        return Set(tokens.compactMap { $0["id"]?.string })
    }

    @Test("item 1: a grant is bounded: the mint body (413), and what a session's tokens hold together (409), so a listing stays small")
    func grantsAreBounded() async throws {
        try await withServer { server in
            let owner = try await server.api.createSession()
            // 100 action types of 60 bytes: within the per-list bounds, over the mint body's 4 KiB.
            let long = (0..<100).map { JSON.string("type-\($0)-" + String(repeating: "x", count: 52)) }
            let tooLarge = try await Self.mint(owner, ["scope": "dispatch", "actions": ["todos": .array(long)]])
            expectError(tooLarge, 413, "payload_too_large", messageContains: "4096")
            // Grants of about 3.6 KB each: the session's 128 KiB of grants run out long before
            // its 1,000 tokens do.
            let types = (0..<100).map { JSON.string("t\($0)-" + String(repeating: "y", count: 28)) }
            let big: JSON = ["scope": "dispatch", "actions": ["todos": .array(types)]]
            var mintedCount = 0
            var refusal: HTTPResponse?
            for _ in 0..<120 {
                let response = try await Self.mint(owner, big)
                if response.status != 201 {
                    refusal = response
                    break
                }
                mintedCount += 1
            }
            let refused = try #require(refusal, "120 grants of 3.6 KB were all minted")
            expectError(refused, 409, "too_many_tokens", messageContains: "131072")
            #expect((30...40).contains(mintedCount), "\(mintedCount) minted before the refusal")
            // A small token still fits, and the listing of them all is bounded by the budget.
            _ = try await Self.minted(owner, ["scope": "observe", "features": ["counter"]])
            let listing = try await owner.request("GET", "/tokens")
            #expect(listing.status == 200)
            #expect(listing.body.count < 192 * 1024, "a listing of \(listing.body.count) bytes")
            // A wrong token is refused as before.
            let stranger = Session(api: owner.api, id: owner.id, token: String(repeating: "A", count: 43))
            expectError(try await stranger.request("GET", "/state/counter"), 404, "session_not_found")
        }
    }

    @Test("item 2: a token minted while its parent is revoked does not outlive the revocation, here or after a restart")
    func revocationCannotBeEscaped() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("token-race-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let storage = ["--storage", "sqlite:\(directory.path)/state.db"]
        var children: [Session] = []
        var ownerToken: (id: String, token: String)?
        try await withServer(arguments: storage) { server in
            let owner = try await server.api.createSession()
            ownerToken = (owner.id, owner.token)
            for _ in 0..<12 {
                let (parent, parentID) = try await Self.minted(owner, ["scope": "admin"])
                // The parent mints as fast as it can while the owner revokes it.
                async let minting: [Session] = {
                    var made: [Session] = []
                    for _ in 0..<20 {
                        let response = try await Self.mint(parent, ["scope": "admin"])
                        guard response.status == 201, let token = response.json?["token"]?.string else { break }
                        made.append(Session(api: parent.api, id: parent.id, token: token))
                    }
                    return made
                }()
                async let stream = parent.events()
                let revoked = try await owner.request("DELETE", "/tokens/\(parentID)")
                #expect(revoked.status == 204, "\(revoked)")
                // Once the revocation has answered, no descendant works, and none is listed.
                let made = try await minting
                for child in made {
                    expectError(try await child.request("GET", "/state/counter"), 404, "session_not_found")
                    expectError(try await Self.mint(child, ["scope": "observe"]), 404, "session_not_found")
                }
                #expect(try await Self.listed(owner).isEmpty, "tokens listed after the revocation")
                children += made
                // A stream opened across the revocation ends (with `revoked`, or refused).
                let opened = try await stream
                defer { opened.close() }
                if opened.status == 200 {
                    #expect(try await opened.waitForEnd(timeout: .seconds(30)), "a stream of the revoked token is still open")
                } else {
                    #expect(opened.status == 404)
                }
            }
        }
        // After a restart on the same storage, none works either.
        let (id, token) = try #require(ownerToken)
        try await withServer(arguments: storage) { server in
            let owner = Session(api: server.api, id: id, token: token)
            #expect(try await Self.listed(owner).isEmpty)
            for child in children {
                let again = Session(api: server.api, id: child.id, token: child.token)
                expectError(try await again.request("GET", "/state/counter"), 404, "session_not_found")
            }
        }
    }

    @Test("item 3: an admin token limited to a feature cannot delete the session, and lists only the tokens minted from it")
    func narrowAdminStaysNarrow() async throws {
        try await withServer { server in
            let owner = try await server.api.createSession()
            try await owner.dispatchOK("todos", ["type": "add", "title": "milk"])
            let (narrow, narrowID) = try await Self.minted(owner, ["scope": "admin", "features": ["counter"]])
            let (_, siblingID) = try await Self.minted(owner, ["scope": "observe"])
            let (_, childID) = try await Self.minted(narrow, ["scope": "observe", "features": ["counter"]])
            expectError(try await narrow.delete(), 403, "forbidden", messageContains: "whole session")
            // Nothing was deleted.
            #expect(try await owner.store("todos").version == 1)
            #expect(try await Self.listed(narrow) == [childID])
            #expect(try await Self.listed(owner) == [narrowID, siblingID, childID])
            // A token limited to some action types is narrower too.
            let (typed, _) = try await Self.minted(owner, ["scope": "admin", "actions": ["todos": ["add"]]])
            expectError(try await typed.delete(), 403, "forbidden")
            #expect(try await Self.listed(typed).isEmpty)
            // The owner's token deletes it.
            #expect(try await owner.delete().status == 204)
        }
    }

    @Test("item 4: with auth.createSessions: jwt an import needs a JWT of scope create, as creating a session does")
    func importNeedsWhatCreationNeeds() async throws {
        let secret = "the-app-backend-shares-this-secret-0123456789"
        let environment = ["STATE_SERVER_AUTH_JWT_SECRET": secret, "STATE_SERVER_AUTH_CREATE_SESSIONS": "jwt"]
        try await withServer(environment: environment) { server in
            let backend = await Backend.hmac(secret)
            let create = try await backend.sign(
                BackendClaims(exp: .init(value: Date().addingTimeInterval(300)), scope: "create"))
            let created = try await server.api.request("POST", "/v1/sessions", headers: [("Authorization", "Bearer \(create)")])
            try #require(created.status == 201, "\(created)")
            let owner = Session(
                api: server.api, id: try #require(created.json?["id"]?.string), token: try #require(created.json?["token"]?.string))
            try await owner.dispatchOK("counter", ["type": "increment"])
            let recording = try await owner.request("GET", "/recording")
            try #require(recording.status == 200, "\(recording)")
            // Anonymous, or with the owner token of a session (not a JWT): refused, nothing made.
            expectError(try await server.api.request("POST", "/v1/recordings", body: recording.body), 401, "unauthorized")
            expectError(
                try await server.api.request("POST", "/v1/recordings", headers: owner.auth, body: recording.body), 401, "unauthorized")
            let session = try await backend.sign(BackendClaims.session(owner.id, scope: "admin", audience: nil))
            expectError(
                try await server.api.request("POST", "/v1/recordings", headers: [("Authorization", "Bearer \(session)")], body: recording.body),
                401, "unauthorized", messageContains: "'create'")
            // With a JWT of scope create: imported.
            let imported = try await server.api.request(
                "POST", "/v1/recordings", headers: [("Authorization", "Bearer \(create)")], body: recording.body)
            #expect(imported.status == 201, "\(imported)")
        }
    }

    @Test("item 6: an Idempotency-Key replay is judged against the grant of the token that asks")
    func replayJudgedByTheAskingGrant() async throws {
        try await withServer { server in
            let owner = try await server.api.createSession()
            try await owner.dispatchOK("todos", ["type": "add", "title": "secret plans"], headers: [("Idempotency-Key", "k-1")])
            let (counterOnly, _) = try await Self.minted(owner, ["scope": "dispatch", "features": ["counter"]])
            let replay = try await counterOnly.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", "k-1")])
            expectError(replay, 403, "forbidden", messageContains: "todos")
            #expect(!replay.text.contains("secret plans"), "\(replay)")
            // Nothing was applied to counter either.
            #expect(try await owner.store("counter").version == 0)
            // The owner's replay is still the first reply.
            let again = try await owner.dispatch("todos", ["type": "add", "title": "other"], headers: [("Idempotency-Key", "k-1")])
            #expect(again.status == 200 && again.header("Idempotent-Replayed") == "true", "\(again)")
            // A token that reaches todos but only some of its types, replaying a key of another feature: refused.
            try await owner.dispatchOK("counter", ["type": "increment"], headers: [("Idempotency-Key", "k-2")])
            let (setOnly, _) = try await Self.minted(owner, ["scope": "dispatch", "actions": ["counter": ["set"]]])
            expectError(
                try await setOnly.dispatch("todos", ["type": "add", "title": "x"], headers: [("Idempotency-Key", "k-2")]), 403, "forbidden")
            #expect(try await owner.store("todos").version == 1)
        }
    }

    @Test("item 7: a revoked token's stream that does not read ends and frees its slot")
    func revokedNonReaderEnds() async throws {
        let environment = [
            "STATE_SERVER_STREAMS_PER_SESSION": "1", "STATE_SERVER_STREAMS_BUFFER_LIMIT": "67108864",
            "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0",
        ]
        try await withServer(arguments: ["--heartbeat", "0.5"], environment: environment) { server in
            let owner = try await server.api.createSession()
            let (viewer, viewerID) = try await Self.minted(owner, ["scope": "observe"])
            // It never reads, with a small receive window.
            let (stuck, _) = try await viewer.subscribe(receiveBufferSize: 4096)
            defer { stuck.close() }
            // Enough events (about 23 MB: each carries the whole list) that the socket's buffers
            // are full and more wait in the server, within its buffer limit.
            let title = String(repeating: "a long title to fill buffers ", count: 16)
            for index in 0..<300 {
                try await owner.dispatchOK("todos", ["type": "add", "title": .string("\(index) \(title)")])
            }
            expectError(try await owner.events().readErrorBody(), 429, "too_many_streams")
            #expect(try await owner.request("DELETE", "/tokens/\(viewerID)").status == 204)
            // Its slot comes back although its client never read.
            try await waitUntil("the revoked stream's slot is free") {
                let stream = try await owner.events()
                defer { stream.close() }
                return stream.status == 200
            }
        }
    }

    /// Sends a `POST` head announcing a JSON body of `length` bytes with `Expect: 100-continue`
    /// (and `authorization`, when given) on `socket`; returns the status line of the answer.
    static func expectContinue(
        _ socket: BlockingSocket, _ target: String, authorization: String?, length: Int, deadline: ContinuousClock.Instant
    ) throws -> String {
        let head = "POST \(target) HTTP/1.1\r\nHost: x\r\n" + (authorization.map { "Authorization: Bearer \($0)\r\n" } ?? "")
            + "Content-Type: application/json\r\nContent-Length: \(length)\r\nExpect: 100-continue\r\n\r\n"
        try socket.send(Array(head.utf8), deadline: deadline)
        return String(decoding: try socket.readLine(deadline: deadline, what: "the status line"), as: UTF8.self)
    }

    @Test("item 8: requests refused before their body count toward limits.requestsPerSecond")
    func earlyRefusalsAreRateLimited() async throws {
        try await withServer(environment: ["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "5"]) { server in
            var statuses: [Int] = []
            for _ in 0..<40 {
                let socket = try BlockingSocket(port: server.port)
                defer { socket.close() }
                // No credentials: refused from the head, whatever the storage.
                let text = try Self.expectContinue(
                    socket, "/v1/sessions/nosuchsession/dispatch", authorization: nil, length: 40,
                    deadline: ContinuousClock.now + .seconds(30))
                statuses.append(Int(text.split(separator: " ").dropFirst().first ?? "") ?? 0)
                if statuses.last == 429 { break }
            }
            #expect(statuses.last == 429, "\(statuses)")
            #expect(statuses.first == 401, "\(statuses)")
        }
    }

    @Test("item 9: a valid JWT with Expect: 100-continue is served (memory storage), not judged as an opaque token")
    func jwtWithExpect() async throws {
        let secret = "the-app-backend-shares-this-secret-0123456789"
        try await withServer(environment: ["STATE_SERVER_AUTH_JWT_SECRET": secret]) { server in
            let owner = try await server.api.createSession()
            let backend = await Backend.hmac(secret)
            let jwt = try await backend.sign(BackendClaims.session(owner.id, scope: "dispatch", audience: nil))
            let body = Array(#"{"feature": "counter", "action": {"type": "increment"}}"#.utf8)
            let socket = try BlockingSocket(port: server.port)
            defer { socket.close() }
            let deadline = ContinuousClock.now + .seconds(30)
            let first = try Self.expectContinue(socket, owner.path + "/dispatch", authorization: jwt, length: body.count, deadline: deadline)
            #expect(first.hasPrefix("HTTP/1.1 100"), "\(first)")
            _ = try socket.readLine(deadline: deadline, what: "the blank line after 100")
            try socket.send(body, deadline: deadline)
            let status = String(decoding: try socket.readLine(deadline: deadline, what: "the status line"), as: UTF8.self)
            #expect(status.hasPrefix("HTTP/1.1 200"), "\(status)")
            #expect(try await owner.store("counter").version == 1)
        }
    }
}
