import TestSupport
import Synchronization
import Testing

/// Event-stream behaviour that needs a server with special settings: each test starts its own.
@Suite("Events: replay buffer, heartbeat, slow subscribers, stream limits")
struct StreamLimitTests {
    @Test("resuming past the replay buffer (STATE_SERVER_REPLAY_BUFFER=5) starts with a fresh snapshot")
    func resumePastReplayBuffer() async throws {
        try await withServer(environment: ["STATE_SERVER_REPLAY_BUFFER": "5"]) { server in
            let session = try await server.api.createSession()
            let (live, snapshot) = try await session.subscribe()
            defer { live.close() }
            for value in 1...12 { try await session.dispatchOK("counter", ["type": "set", "value": .int(value)]) }
            var ids: [String] = []
            for _ in 1...12 { ids.append(try #require(try await live.nextEvent().id)) }

            var latest = ids[11]
            for lastSeen in [try #require(snapshot.id), ids[0], ids[5]] {
                let resumed = try await session.events(headers: [("Last-Event-ID", lastSeen)])
                defer { resumed.close() }
                #expect(resumed.status == 200)
                let first = try await resumed.nextEvent()
                #expect(first.event == "snapshot", "Last-Event-ID \(lastSeen) is out of the buffer: \(first)")
                #expect(first.id == latest, "the snapshot id is the current seq")
                #expect(first.json?["features"]?["counter"] == ["version": 12, "state": ["count": 12]])
                try await session.dispatchOK("todos", ["type": "add", "title": .string("after \(lastSeen)")])
                let next = try await resumed.nextEvent()
                #expect(next.event == "state")
                #expect(next.json?["feature"] == "todos", "\(next)")
                latest = try #require(try await live.nextEvent().id)
                #expect(next.id == latest)
            }

            // The last few are still held: they are replayed. The todos adds above were seqs 13...15.
            let recent = try await session.events(headers: [("Last-Event-ID", ids[10])])
            defer { recent.close() }
            let replayed = try await recent.nextEvent()
            #expect(replayed.event == "state", "\(replayed)")
            #expect(replayed.id == ids[11])
            #expect(replayed.json?["state"] == ["count": 12])
        }
    }

    @Test("--heartbeat 1 sends `: ping` comments on idle streams")
    func heartbeat() async throws {
        try await withServer(arguments: ["--heartbeat", "1"]) { server in
            let session = try await server.api.createSession()
            let (stream, _) = try await session.subscribe()
            defer { stream.close() }
            // Consecutive pings on an idle stream (that a ping does not postpone the next one is
            // checked without a clock in MicroHTTPTests).
            for index in 1...4 {
                let item = try await stream.next(timeout: .seconds(5))
                guard case .comment(let text) = item else {
                    Issue.record("expected a ping comment (\(index)), got \(item)")
                    return
                }
                #expect(text == "ping")
            }
            try await session.dispatchOK("counter", ["type": "increment"])
            let event = try await stream.nextEvent()
            #expect(event.json?["version"] == 1, "events still flow between pings: \(event)")
        }
    }

    @Test("a subscriber that stops reading is dropped; dispatches and other subscribers go on; it resumes")
    func slowSubscriber() async throws {
        try await withServer(environment: ["STATE_SERVER_STREAMS_BUFFER_LIMIT": "262144", "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0"]) { server in
            let session = try await server.api.createSession()
            let title = String(repeating: "long todo title ", count: 31)  // 496 characters
            for index in 1...50 {
                try await session.dispatchOK("todos", ["type": "add", "title": .string("\(index) " + title)])
            }
            let stateSize = try await session.request("GET", "/state/todos").body.count
            #expect(stateSize > 25_000)

            // The slow one: a tiny receive window, and it never reads.
            let (slow, slowSnapshot) = try await session.subscribe(query: "feature=todos", receiveBufferSize: 4096)
            defer { slow.close() }
            #expect(slowSnapshot.json?["features"]?["todos"]?["version"] == 50)
            let (fast, _) = try await session.subscribe(query: "feature=todos")
            defer { fast.close() }

            // The reading subscriber; the dispatcher never runs more than a few events ahead of
            // it, so a drop of this one is the server's doing, not a slow test client's.
            let changes = 400
            let fastCount = Mutex(0)
            let fastReader = Task { () -> (versions: [Int], problem: String?) in
                var versions: [Int] = []
                do {
                    while versions.count < changes {
                        let event = try await fast.nextEvent(timeout: .seconds(20))
                        guard let version = quickVersion(event.data) else {
                            return (versions, "event without version: \(event)")
                        }
                        versions.append(version)
                        fastCount.withLock { $0 = versions.count }
                    }
                } catch {
                    return (versions, "\(error)")
                }
                return (versions, nil)
            }
            let body = jsonBytes(["feature": "todos", "action": ["type": "toggle", "id": "1"]])
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            for index in 1...changes {
                let response = try await connection.request(
                    "POST", session.path + "/dispatch", headers: session.auth, body: body, timeout: .seconds(10))
                try #require(response.status == 200, "dispatch \(index) while a subscriber stalls: \(response.head)")
                let caughtUp = try await eventually(timeout: .seconds(10), every: .milliseconds(1)) {
                    fastCount.withLock { $0 } >= index - 4
                }
                if !caughtUp { break }  // the reader ended or stalled: reported below
            }
            let (fastVersions, problem) = await fastReader.value
            #expect(problem == nil, "the reading subscriber after \(fastVersions.count) of \(changes) changes: \(problem ?? "")")
            #expect(fastVersions.count == changes && fastVersions == Array(51...(50 + changes)), "the reading subscriber got every change, in order")
            #expect(try await session.store("todos").version == 50 + changes)

            // The slow stream was closed by the server: reading it now ends before all changes.
            var received: [SSEEvent] = []
            var ended = false
            let deadline = ContinuousClock.now + .seconds(30)
            while ContinuousClock.now < deadline {
                let item = try await slow.next(timeout: .seconds(10))
                if case .event(let event) = item { received.append(event) }
                if case .end = item { ended = true; break }
            }
            #expect(ended, "the stalled stream was not closed")
            #expect(received.count < changes, "the stalled stream got everything (\(received.count)): no limit applied")
            var lastVersion = 50
            for event in received {
                let version = quickVersion(event.data)
                #expect(version == lastVersion + 1, "the stalled stream got a prefix, in order")
                lastVersion = version ?? lastVersion
            }

            // It resumes with Last-Event-ID (again after each drop, like a client) and gets the
            // rest, in order. Every attempt must make progress.
            var lastId = try #require(received.last?.id ?? slowSnapshot.id)
            var attempts = 0
            while lastVersion < 50 + changes, attempts < 50 {
                attempts += 1
                let resumed = try await session.events(query: "feature=todos", headers: [("Last-Event-ID", lastId)])
                defer { resumed.close() }
                if resumed.status != 200 {
                    Issue.record("resume from \(lastId): \(try await resumed.readErrorBody())")
                    return
                }
                var progress = 0
                while lastVersion < 50 + changes {
                    let item = try await resumed.next(timeout: .seconds(10))
                    guard case .event(let event) = item else {
                        if case .end = item { break }
                        continue
                    }
                    try #require(event.event == "state", "a resume within the replay buffer replays: \(event.event)")
                    let version = quickVersion(event.data)
                    try #require(version == lastVersion + 1, "resumed events in order after version \(lastVersion)")
                    lastVersion += 1
                    lastId = try #require(event.id)
                    progress += 1
                }
                try #require(progress > 0, "resume attempt \(attempts) from version \(lastVersion) delivered nothing before the stream ended")
            }
            #expect(lastVersion == 50 + changes, "resumed up to version \(lastVersion) in \(attempts) attempts")
            #expect(await server.api.isHealthy())
        }
    }

    @Test("too many streams per session or in total: 429 too_many_streams; closing or deleting frees slots")
    func streamLimits() async throws {
        try await withServer(
            arguments: ["--heartbeat", "1"],
            environment: ["STATE_SERVER_STREAMS_PER_SESSION": "2", "STATE_SERVER_STREAMS_TOTAL": "3"]
        ) { server in
            let api = server.api
            let a = try await api.createSession()
            let b = try await api.createSession()
            let c = try await api.createSession()
            let (a1, _) = try await a.subscribe()
            let (a2, _) = try await a.subscribe(query: "feature=counter")
            defer { a1.close(); a2.close() }
            let a3 = try await a.events()
            defer { a3.close() }
            expectError(try await a3.readErrorBody(), 429, "too_many_streams", "third stream of a session")
            let viaQuery = try await api.openEvents(a.path + "/events?access_token=\(queryEncoded(a.token))")
            defer { viaQuery.close() }
            expectError(try await viaQuery.readErrorBody(), 429, "too_many_streams", "access_token stream")

            let (b1, _) = try await b.subscribe()
            defer { b1.close() }
            let b2 = try await b.events()
            defer { b2.close() }
            expectError(try await b2.readErrorBody(), 429, "too_many_streams", "fourth stream in total")

            // The JSON API is unaffected, and open streams still get events.
            try await b.dispatchOK("counter", ["type": "increment"])
            #expect(try await b1.nextEvent().json?["version"] == 1)

            // Closing a stream frees its slot (the server notices at the latest at the next ping).
            a1.close()
            var reopened: EventStream?
            // Generous: the machine may be loaded; this guards against never, not against slow.
            let freed = try await eventually(timeout: .seconds(30), every: .milliseconds(200)) {
                let attempt = try await b.events()
                if attempt.status == 200 {
                    reopened = attempt
                    return true
                }
                attempt.close()
                return false
            }
            #expect(freed, "a closed stream's slot was never freed")
            defer { reopened?.close() }

            // Deleting a session ends its streams and frees their slots.
            #expect(try await a.delete().status == 204)
            #expect(try await a2.waitForEnd(timeout: .seconds(5)))
            let freedByDelete = try await eventually(timeout: .seconds(30), every: .milliseconds(200)) {
                let attempt = try await c.events()
                defer { attempt.close() }
                return attempt.status == 200
            }
            #expect(freedByDelete, "a deleted session's streams still count")
            #expect(await api.isHealthy())
        }
    }
}

/// The `"version"` number of a state event's data, found without parsing the whole (large) JSON.
func quickVersion(_ data: String) -> Int? {
    guard let key = data.range(of: "\"version\"") else { return nil }
    let rest = data[key.upperBound...].drop { $0 == " " || $0 == ":" }
    return Int(rest.prefix { $0.isNumber })
}
