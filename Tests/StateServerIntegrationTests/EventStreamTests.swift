import TestSupport
import Testing

/// The event stream's contract — snapshot, events, ids, filters, tokens, resuming — in process
/// (on SQLite too with STATE_SERVER_TEST_STORAGE=sqlite). Over a socket (`SocketContractTests`,
/// below): the stream's head and chunked framing as the wire carries them, and clients that
/// hang up their connection.
@Suite("Events (server-sent events)", .inProcessServer())
struct EventStreamTests {
    @Test("headers, and a snapshot first with id 0 for a new session")
    func snapshotFirst() async throws {
        let session = try await SharedServer.api().createSession()
        let stream = try await session.events()
        defer { stream.close() }
        expectEventStreamHead(stream)
        let snapshot = try await stream.nextEvent()
        #expect(snapshot.event == "snapshot")
        #expect(snapshot.id == "0")
        let features = try #require(snapshot.json?["features"]?.object, "\(snapshot)")
        #expect(Set(features.keys) == Examples.names)
        #expect(features["counter"] == ["version": 0, "state": Examples.counter])
        #expect(features["settings"] == ["version": 0, "state": Examples.settings])
        #expect(features["login"] == ["version": 0, "state": Examples.login])
        #expect(features["todos"]?["version"] == 0)
    }

    @Test("state events for dispatch, rehydrate and reset, in order, with strictly increasing ids")
    func causes() async throws {
        let session = try await SharedServer.api().createSession()
        let (stream, snapshot) = try await session.subscribe()
        defer { stream.close() }
        try await session.dispatchOK("counter", ["type": "increment", "by": 2])
        try await session.dispatchOK("todos", ["type": "add", "title": "write tests"])
        try await session.dispatchOK("counter", ["type": "set", "value": 7])
        let put = try await session.request("PUT", "/state/counter", body: jsonBytes(["state": ["count": 40]]))
        #expect(put.status == 200)
        let reset = try await session.request("DELETE", "/state/counter")
        #expect(reset.status == 200)
        try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#abcdef"])

        var ids: [Int] = [try #require(snapshot.seq)]
        var events: [JSON] = []
        for _ in 0..<6 {
            let event = try await stream.nextEvent()
            #expect(event.event == "state", "\(event)")
            ids.append(try #require(event.seq, "\(event)"))
            events.append(try #require(event.json, "\(event)"))
        }
        #expect(ids == ids.sorted() && Set(ids).count == ids.count, "ids strictly increase: \(ids)")
        #expect(ids.first == 0)

        #expect(events[0]["feature"] == "counter")
        #expect(events[0]["cause"] == "dispatch")
        #expect(events[0]["action"]?["type"] == "increment")
        #expect(events[0]["action"]?["by"] == 2)
        #expect(events[0]["version"] == 1)
        #expect(events[0]["state"] == ["count": 2])
        #expect(events[0]["effect"] == .null)

        #expect(events[1]["feature"] == "todos")
        #expect(events[1]["action"]?["type"] == "add")
        #expect(events[1]["action"]?["title"] == "write tests")
        #expect(events[1]["state"]?["items"] == [["id": "1", "title": "write tests", "done": false, "reminded": false]])

        #expect(events[2]["action"] == ["type": "set", "value": 7])
        #expect(events[2]["version"] == 2)

        #expect(events[3]["cause"] == "rehydrate")
        #expect(events[3]["action"] == .null)
        #expect(events[3]["version"] == 3)
        #expect(events[3]["state"] == ["count": 40])
        #expect(events[3]["effect"] == .null)

        #expect(events[4]["cause"] == "reset")
        #expect(events[4]["action"] == .null)
        #expect(events[4]["version"] == 4)
        #expect(events[4]["state"] == Examples.counter)

        #expect(events[5]["feature"] == "settings")
        #expect(events[5]["state"]?["textColor"] == "#ABCDEF")
        for event in events {
            #expect(event.object.map { Set($0.keys) } == ["feature", "version", "cause", "action", "state", "effect"], "\(event)")
        }
    }

    @Test("refused requests produce no event")
    func noEventForErrors() async throws {
        let session = try await SharedServer.api().createSession()
        let (stream, _) = try await session.subscribe()
        defer { stream.close() }
        _ = try await session.dispatch("counter", ["type": "explode"])
        _ = try await session.dispatch("todos", ["type": "toggle", "id": "42"])
        _ = try await session.request("POST", "/dispatch", body: Array("{".utf8))
        _ = try await session.request("PUT", "/state/counter", body: jsonBytes(["state": ["count": "x"]]))
        _ = try await session.dispatch("counter", ["type": "increment"], headers: [("If-Match", "\"9\"")])
        try await session.dispatchOK("counter", ["type": "increment"], headers: [("Idempotency-Key", "k")])
        try await session.dispatchOK("counter", ["type": "increment"], headers: [("Idempotency-Key", "k")])
        try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#000000"])
        let first = try await stream.nextEvent()
        #expect(first.json?["feature"] == "counter")
        #expect(first.json?["version"] == 1)
        let second = try await stream.nextEvent()
        #expect(second.json?["feature"] == "settings", "a replayed or refused request made an event: \(second)")
    }

    @Test("the snapshot id is the session's current seq, and later ids are greater")
    func snapshotAfterChanges() async throws {
        let session = try await SharedServer.api().createSession()
        let (live, _) = try await session.subscribe()
        defer { live.close() }
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("todos", ["type": "add", "title": "a"])
        _ = try await live.nextEvent()
        let latest = try await live.nextEvent()
        let (late, snapshot) = try await session.subscribe()
        defer { late.close() }
        #expect(snapshot.id == latest.id, "snapshot \(snapshot) after \(latest)")
        #expect(snapshot.json?["features"]?["counter"] == ["version": 1, "state": ["count": 1]])
        #expect(snapshot.json?["features"]?["todos"]?["version"] == 1)
        try await session.dispatchOK("counter", ["type": "increment"])
        let next = try await late.nextEvent()
        #expect(try #require(next.seq) > (try #require(snapshot.seq)))
        #expect(next.json?["version"] == 2)
    }

    @Test("?feature=a&feature=b observes only those features")
    func featureFilter() async throws {
        let session = try await SharedServer.api().createSession()
        let (stream, snapshot) = try await session.subscribe(query: "feature=counter&feature=todos")
        defer { stream.close() }
        #expect(snapshot.json?["features"]?.object.map { Set($0.keys) } == ["counter", "todos"], "\(snapshot)")
        let (single, singleSnapshot) = try await session.subscribe(query: "feature=settings")
        defer { single.close() }
        #expect(singleSnapshot.json?["features"]?.object.map { Set($0.keys) } == ["settings"], "\(singleSnapshot)")

        try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#000000"])
        let login = try await session.request("PUT", "/state/login", body: jsonBytes(["state": Examples.login]))
        #expect(login.status == 200, "\(login)")
        try await session.dispatchOK("todos", ["type": "add", "title": "seen"])
        try await session.dispatchOK("settings", ["type": "setBackgroundColor", "color": "#000000"])
        try await session.dispatchOK("counter", ["type": "increment"])
        let first = try await stream.nextEvent()
        #expect(first.json?["feature"] == "todos", "\(first)")
        let second = try await stream.nextEvent()
        #expect(second.json?["feature"] == "counter", "\(second)")
        #expect(try #require(second.seq) > (try #require(first.seq)))

        let settingsOne = try await single.nextEvent()
        let settingsTwo = try await single.nextEvent()
        #expect(settingsOne.json?["state"]?["textColor"] == "#000000")
        #expect(settingsTwo.json?["state"]?["backgroundColor"] == "#000000")
        // seq is per session across all features: the filtered stream skips the others' ids.
        #expect(try #require(settingsTwo.seq) > (try #require(settingsOne.seq)) + 1)
    }

    @Test("?access_token= authenticates the stream (EventSource cannot set headers)")
    func accessToken() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let stream = try await api.openEvents(session.path + "/events?access_token=\(queryEncoded(session.token))")
        defer { stream.close() }
        let (_, snapshot) = try await stream.withSnapshot()
        #expect(snapshot.id == "0")
        let filtered = try await api.openEvents(
            session.path + "/events?feature=counter&access_token=\(queryEncoded(session.token))")
        defer { filtered.close() }
        let (_, filteredSnapshot) = try await filtered.withSnapshot()
        #expect(filteredSnapshot.json?["features"]?.object?.keys.sorted() == ["counter"])
        try await session.dispatchOK("counter", ["type": "increment"])
        #expect(try await stream.nextEvent().json?["version"] == 1)
        #expect(try await filtered.nextEvent().json?["version"] == 1)

        let wrong = try await api.openEvents(session.path + "/events?access_token=\(queryEncoded(other.token))")
        defer { wrong.close() }
        expectError(try await wrong.readErrorBody(), 404, "session_not_found")
        let none = try await api.openEvents(session.path + "/events")
        defer { none.close() }
        let unauthorized = try await none.readErrorBody()
        expectError(unauthorized, 401, "unauthorized")
        #expect(unauthorized.header("WWW-Authenticate")?.hasPrefix("Bearer") == true)
        // The query token is for the event stream only.
        let state = try await api.request("GET", session.path + "/state?access_token=\(queryEncoded(session.token))")
        expectError(state, 401, "unauthorized", "access_token on GET state")
    }

    @Test("Last-Event-ID replays exactly the missed changes, in order")
    func resume() async throws {
        let session = try await SharedServer.api().createSession()
        let (live, _) = try await session.subscribe()
        defer { live.close() }
        for value in 1...5 { try await session.dispatchOK("counter", ["type": "set", "value": .int(value)]) }
        var seen: [SSEEvent] = []
        for _ in 1...5 { seen.append(try await live.nextEvent()) }

        let resumed = try await session.events(headers: [("Last-Event-ID", try #require(seen[1].id))])
        defer { resumed.close() }
        #expect(resumed.status == 200)
        for expected in seen[2...] {
            let event = try await resumed.nextEvent()
            #expect(event.event == "state", "a resume within the buffer starts with the missed events: \(event)")
            #expect(event.id == expected.id)
            #expect(event.json == expected.json)
        }
        try await session.dispatchOK("counter", ["type": "set", "value": 6])
        let fresh = try await resumed.nextEvent()
        #expect(fresh.json?["state"] == ["count": 6], "then live changes follow: \(fresh)")
        #expect(try #require(fresh.seq) > (try #require(seen[4].seq)))

        // From 0: everything since the session began.
        let fromStart = try await session.events(headers: [("Last-Event-ID", "0")])
        defer { fromStart.close() }
        for expected in seen {
            let event = try await fromStart.nextEvent()
            #expect(event.id == expected.id, "\(event)")
        }
        #expect(try await fromStart.nextEvent().json?["state"] == ["count": 6])
    }

    @Test("Last-Event-ID of the latest change: no snapshot, nothing replayed, live changes follow")
    func resumeUpToDate() async throws {
        let session = try await SharedServer.api().createSession()
        let (live, _) = try await session.subscribe()
        defer { live.close() }
        try await session.dispatchOK("counter", ["type": "increment"])
        let latest = try await live.nextEvent()
        let resumed = try await session.events(headers: [("Last-Event-ID", try #require(latest.id))])
        defer { resumed.close() }
        #expect(resumed.status == 200)
        try await session.dispatchOK("todos", ["type": "add", "title": "next"])
        let first = try await resumed.nextEvent()
        #expect(first.event == "state", "\(first)")
        #expect(first.json?["feature"] == "todos", "\(first)")
    }

    @Test("resume with a feature filter replays only the filtered features")
    func resumeFiltered() async throws {
        let session = try await SharedServer.api().createSession()
        let (live, snapshot) = try await session.subscribe()
        defer { live.close() }
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("todos", ["type": "add", "title": "x"])
        try await session.dispatchOK("counter", ["type": "increment"])
        let resumed = try await session.events(query: "feature=counter", headers: [("Last-Event-ID", try #require(snapshot.id))])
        defer { resumed.close() }
        let one = try await resumed.nextEvent()
        let two = try await resumed.nextEvent()
        #expect(one.json?["feature"] == "counter" && one.json?["version"] == 1, "\(one)")
        #expect(two.json?["feature"] == "counter" && two.json?["version"] == 2, "\(two)")
    }

    @Test("several subscribers see the same events; other sessions' changes are not seen")
    func isolation() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let (a, _) = try await session.subscribe()
        let (b, _) = try await session.subscribe()
        defer { a.close(); b.close() }
        try await other.dispatchOK("counter", ["type": "set", "value": 666])
        try await session.dispatchOK("counter", ["type": "set", "value": 1])
        let fromA = try await a.nextEvent()
        let fromB = try await b.nextEvent()
        #expect(fromA.json?["state"] == ["count": 1], "\(fromA)")
        #expect(fromA.id == fromB.id)
        #expect(fromA.json == fromB.json)
    }
}

extension SocketContractTests {
    @Test("over a socket: a stream's head is 200 text/event-stream, no-cache, chunked; a snapshot, then a live event")
    func eventStreamOnTheWire() async throws {
        let session = try await SharedServer.api().createSession()
        let stream = try await session.events()
        defer { stream.close() }
        expectEventStreamHead(stream)
        #expect(stream.header("Transfer-Encoding")?.lowercased() == "chunked", "\(stream.head)")
        #expect(stream.header("Content-Length") == nil, "\(stream.head)")
        let snapshot = try await stream.nextEvent()
        #expect(snapshot.event == "snapshot" && snapshot.id == "0", "\(snapshot)")
        try await session.dispatchOK("counter", ["type": "increment"])
        let event = try await stream.nextEvent()
        #expect(event.event == "state" && event.json?["version"] == 1, "\(event)")
    }

    @Test("an event-stream client that hangs up does not disturb the session")
    func clientClosesEventStream() async throws {
        let session = try await SharedServer.api().createSession()
        for _ in 0..<5 {
            let (stream, _) = try await session.subscribe()
            stream.close()
        }
        for _ in 0..<3 { try await session.dispatchOK("counter", ["type": "increment"]) }
        let (stream, snapshot) = try await session.subscribe()
        defer { stream.close() }
        #expect(snapshot.json?["features"]?["counter"]?["version"] == 3)
        #expect(await session.api.isHealthy())
    }
}

/// A stream's head: 200, `text/event-stream`, not cached.
func expectEventStreamHead(_ stream: EventStream, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(stream.status == 200, sourceLocation: sourceLocation)
    #expect(stream.header("Content-Type")?.lowercased().hasPrefix("text/event-stream") == true, "\(stream.head)", sourceLocation: sourceLocation)
    #expect(stream.header("Cache-Control")?.lowercased().contains("no-cache") == true, "\(stream.head)", sourceLocation: sourceLocation)
}

