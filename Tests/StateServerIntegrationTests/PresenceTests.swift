import Foundation
import TestSupport
import Testing

/// Presence (`GET .../events?presence=LABEL`, `GET .../presence`), in process: who joins and
/// leaves, the events the joined streams get, labels, the limit, and a revoked token leaving at
/// once. What only a socket shows (a client that vanishes) is PresenceSocketTests'; several
/// nodes are PostgresTests'.
@Suite("Presence", .inProcessServer { $0.routes.maxPresencePerSession = 3 })
struct PresenceTests {
    /// `GET .../presence`'s entries, oldest first.
    static func present(_ session: Session, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [JSON] {
        let response = try await session.request("GET", "/presence")
        try #require(response.status == 200, "\(response)", sourceLocation: sourceLocation)
        #expect(response.header("Cache-Control") == "no-store", sourceLocation: sourceLocation)
        return try #require(response.json?["present"]?.array, "\(response)", sourceLocation: sourceLocation)
    }

    /// Opens a stream joining as `label`; returns it with the `joined` events it got first (one
    /// per stream present, itself last).
    static func join(
        _ session: Session, _ label: String, count: Int, query: String = "", sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> (stream: EventStream, joined: [JSON]) {
        let extra = query.isEmpty ? "" : "&" + query
        let (stream, _) = try await session.subscribe(query: "presence=\(queryEncoded(label))" + extra, sourceLocation: sourceLocation)
        var joined: [JSON] = []
        for _ in 0..<count {
            let event = try await stream.nextEvent()
            try #require(event.event == "presence" && event.id == nil, "\(event)", sourceLocation: sourceLocation)
            joined.append(try #require(event.json?["joined"], "\(event)", sourceLocation: sourceLocation))
        }
        return (stream, joined)
    }

    @Test("two streams: each is listed, each hears of the other, and one that closes leaves")
    func twoStreams() async throws {
        let owner = try await SharedServer.api().createSession()
        #expect(try await Self.present(owner) == [])
        let before = Int(Date().timeIntervalSince1970 * 1000)
        let (laptop, first) = try await Self.join(owner, "Ada's laptop", count: 1)
        defer { laptop.close() }
        let me = try #require(first.first)
        #expect(me["label"] == "Ada's laptop" && me["sub"] == JSON.null, "\(me)")
        let since = try #require(me["since"]?.int)
        #expect(since >= before && since <= Int(Date().timeIntervalSince1970 * 1000) + 1, "\(me)")
        #expect(me["id"]?.string?.isEmpty == false)

        // The second stream hears of both, oldest first, itself last; the first hears of it.
        let (phone, both) = try await Self.join(owner, "phone", count: 2)
        #expect(both.map { $0["label"] } == ["Ada's laptop", "phone"], "\(both)")
        #expect(both.first == me)
        let joined = try await laptop.nextEvent()
        #expect(joined.event == "presence" && joined.id == nil && joined.json?["joined"] == both.last, "\(joined)")
        #expect(try await Self.present(owner) == both)

        // A stream without `presence` is neither listed nor told.
        let (quiet, _) = try await owner.subscribe()
        defer { quiet.close() }
        #expect(try await Self.present(owner).count == 2)

        phone.close()
        let left = try await laptop.nextEvent()
        #expect(left.event == "presence" && left.json?["left"] == both.last, "\(left)")
        #expect(try await Self.present(owner) == [me])
        // Presence events take no sequence number: the next change is 1, and the quiet stream
        // got only it.
        try await owner.dispatchOK("counter", ["type": "increment"])
        #expect(try await laptop.nextEvent().seq == 1)
        let change = try await quiet.nextEvent()
        #expect(change.event == "state" && change.seq == 1, "\(change)")
    }

    @Test("a resumed stream gets the present list again, after its replay; presence is not replayed")
    func resume() async throws {
        let owner = try await SharedServer.api().createSession()
        let (watcher, _) = try await Self.join(owner, "wall", count: 1)
        defer { watcher.close() }
        try await owner.dispatchOK("counter", ["type": "increment"])
        let stream = try await owner.events(query: "presence=tablet", headers: [("Last-Event-ID", "0")])
        defer { stream.close() }
        #expect(stream.status == 200)
        let replayed = try await stream.nextEvent()
        #expect(replayed.event == "state" && replayed.seq == 1, "\(replayed)")
        let labels = [try await stream.nextEvent(), try await stream.nextEvent()].map { $0.json?["joined"]?["label"] }
        #expect(labels == ["wall", "tablet"])
    }

    @Test("scoped tokens and JWT subjects: sub is the token's id")
    func subject() async throws {
        let owner = try await SharedServer.api().createSession()
        let (viewer, viewerID) = try await ScopedTokenTests.mint(owner, ["scope": "observe", "features": ["counter"]])
        let (stream, joined) = try await Self.join(viewer, "kiosk", count: 1)
        defer { stream.close() }
        #expect(joined.first?["sub"]?.string == viewerID, "\(joined)")
        // A token limited to some features still sees the session's presence.
        #expect(try await Self.present(viewer).map { $0["label"] } == ["kiosk"])
    }

    @Test("a revoked token's stream leaves at once; the others hear it")
    func revoked() async throws {
        let owner = try await SharedServer.api().createSession()
        let (watcher, _) = try await Self.join(owner, "owner", count: 1)
        defer { watcher.close() }
        let (viewer, viewerID) = try await ScopedTokenTests.mint(owner, ["scope": "observe"])
        // A client that reads nothing more: its stream stays open on the server until the
        // heartbeat after next, but its entry leaves with the revocation.
        let (stream, joined) = try await Self.join(viewer, "viewer", count: 2)
        defer { stream.close() }
        let entry = try #require(joined.last)
        #expect(try await watcher.nextEvent().json?["joined"] == entry)

        let revoked = try await owner.request("DELETE", "/tokens/\(viewerID)")
        #expect(revoked.status == 204, "\(revoked)")
        // Gone from the list as soon as the revocation answered.
        #expect(try await Self.present(owner).map { $0["label"] } == ["owner"])
        let left = try await watcher.nextEvent()
        #expect(left.event == "presence" && left.json?["left"] == entry, "\(left)")
        let last = try await stream.nextEvent()
        #expect(last.event == "revoked", "\(last)")
    }

    @Test("labels: 1 to 64 characters, given once; else 400 and nothing joins")
    func labels() async throws {
        let owner = try await SharedServer.api().createSession()
        let longest = String(repeating: "é", count: 64)
        let (stream, joined) = try await Self.join(owner, longest, count: 1)
        stream.close()
        #expect(joined.first?["label"]?.string == longest)
        for query in ["presence=", "presence=" + String(repeating: "a", count: 65), "presence=a&presence=b"] {
            let refused = try await owner.events(query: query)
            expectError(try await refused.readErrorBody(), 400, "invalid_request", messageContains: "presence", "\(query)")
        }
        try await waitUntil("the first stream left") { try await Self.present(owner).isEmpty }
    }

    @Test("past streams.presencePerSession: 429 presence_full, and the stream is not opened")
    func limit() async throws {
        let owner = try await SharedServer.api().createSession()
        var streams: [EventStream] = []
        defer { for stream in streams { stream.close() } }
        for index in 0..<3 {
            streams.append(try await Self.join(owner, "n\(index)", count: index + 1).stream)
        }
        let refused = try await owner.events(query: "presence=one-more")
        let error = try await refused.readErrorBody()
        expectError(error, 429, "presence_full")
        #expect(error.header("Retry-After") == "5")
        // A stream that does not join is still welcome.
        let (plain, _) = try await owner.subscribe()
        plain.close()
        // One leaves: one more may join.
        streams.removeFirst().close()
        try await waitUntil("a place came free") { try await Self.present(owner).count == 2 }
        streams.append(try await Self.join(owner, "again", count: 3).stream)
    }

    @Test("deleting the session ends the present streams")
    func delete() async throws {
        let owner = try await SharedServer.api().createSession()
        let (stream, _) = try await Self.join(owner, "x", count: 1)
        defer { stream.close() }
        #expect(try await owner.delete().status == 204)
        #expect(try await stream.waitForEnd())
        expectError(try await owner.request("GET", "/presence"), 404, "session_not_found")
    }
}

/// In the JWT suite (its server verifies the backend's JWTs).
extension JWTTests {
    @Test("presence: a JWT's stream is listed with its sub, and so is a token the JWT minted")
    func presenceSubject() async throws {
        let owner = try await SharedServer.api().createSession()
        let backend = await Backend.hmac()
        let ada = owner.with(token: try await backend.sign(.session(owner.id, scope: "admin", sub: "ada")))
        let (stream, joined) = try await PresenceTests.join(ada, "laptop", count: 1)
        defer { stream.close() }
        #expect(joined.first?["sub"] == "ada", "\(joined)")
        let (minted, _) = try await ScopedTokenTests.mint(owner, ["scope": "observe"], by: ada)
        let (second, both) = try await PresenceTests.join(minted, "phone", count: 2)
        defer { second.close() }
        #expect(both.map { $0["sub"] } == ["ada", "ada"], "\(both)")
    }
}
