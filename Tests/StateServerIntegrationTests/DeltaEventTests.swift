import TestSupport
import Testing

/// `GET .../events?delta=json-patch`, in process: the events' contents, not the socket, are the
/// subject (on memory storage in `swift test`, on SQLite with STATE_SERVER_TEST_STORAGE=sqlite:
/// memory computes each patch in the hub, SQLite reuses the journal's). Patches are applied
/// with the tests' own RFC 6902 code, not the server's.
@Suite("Events as JSON Patch deltas", .inProcessServer())
struct DeltaEventTests {
    /// A title long enough that one item's patch is much smaller than the list.
    static func title(_ number: Int) -> String {
        "todo \(number): " + String(repeating: "a calm and readable title ", count: 6)
    }

    @Test("a delta stream's state events patch the version before; applied in order they give every state a full stream shows")
    func patchesFollowTheFullStream() async throws {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("todos", ["type": "add", "title": .string(Self.title(0))])
        let (full, _) = try await session.subscribe()
        defer { full.close() }
        let (delta, snapshot) = try await session.subscribe(query: "delta=json-patch")
        defer { delta.close() }
        var states: [String: (version: Int, state: JSON)] = [:]
        for (name, entry) in try #require(snapshot.json?["features"]?.object) {
            states[name] = (try #require(entry["version"]?.int), try #require(entry["state"]))
        }
        #expect(states["todos"]?.version == 1)

        for number in 1...4 { try await session.dispatchOK("todos", ["type": "add", "title": .string(Self.title(number))]) }
        let listed = try await session.store("todos")
        let second = try #require(listed.state["items"]?[1]?["id"])
        try await session.dispatchOK("todos", ["type": "toggle", "id": second])
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("todos", ["type": "remove", "id": second])
        let put = try await session.request("PUT", "/state/counter", body: jsonBytes(["state": ["count": 9]]))
        #expect(put.status == 200, "\(put)")
        let reset = try await session.request("DELETE", "/state/todos")
        #expect(reset.status == 200, "\(reset)")

        var patched = 0
        for _ in 0..<9 {
            let expected = try await full.nextEvent()
            let event = try await delta.nextEvent()
            #expect(event.event == "state" && event.id == expected.id, "\(event) vs \(expected)")
            let data = try #require(event.json, "\(event)")
            let feature = try #require(data["feature"]?.string)
            let version = try #require(data["version"]?.int)
            if let patch = data["patch"] {
                patched += 1
                #expect(data.object.map { Set($0.keys) } == ["feature", "version", "cause", "action", "baseVersion", "patch", "effect"], "\(event)")
                #expect(data["baseVersion"]?.int == version - 1, "\(event)")
                let base = try #require(states[feature])
                #expect(base.version == version - 1, "the client holds the base version: \(event)")
                states[feature] = (version, try base.state.applying(patch: patch))
                #expect(event.data.utf8.count < expected.data.utf8.count, "a patch is sent only when smaller: \(event)")
            } else {
                #expect(data["state"] != nil && data["baseVersion"] == nil, "\(event)")
                states[feature] = (version, try #require(data["state"]))
            }
            // The same change as the full stream's, but for the state's form.
            #expect(states[feature]?.state == expected.json?["state"], "\(event) vs \(expected)")
            for key in ["feature", "version", "cause", "action", "effect"] {
                #expect(data[key] == expected.json?[key], "\(key): \(event) vs \(expected)")
            }
        }
        // The four adds, the toggle and the remove are small patches of a long list; the counter
        // (smaller than any patch) and the reset to an empty list come whole.
        #expect(patched == 6, "patched events: \(patched)")
        let stores = try await session.allStores()
        for (name, store) in stores {
            #expect(states[name]?.version == store.version && states[name]?.state == store.state, "\(name)")
        }
    }

    @Test("a state changed throughout comes whole: the patch would not be smaller")
    func wholeWhenThePatchIsNotSmaller() async throws {
        let session = try await SharedServer.api().createSession()
        for number in 0..<3 { try await session.dispatchOK("todos", ["type": "add", "title": .string(Self.title(number))]) }
        let (delta, _) = try await session.subscribe(query: "delta=json-patch&feature=todos")
        defer { delta.close() }
        let other: JSON = [
            "items": .array((0..<3).map { number in ["id": .string("x\(number)"), "title": .string("other \(number)"), "done": true, "reminded": false] }),
            "nextId": 50,
        ]
        let put = try await session.request("PUT", "/state/todos", body: jsonBytes(["state": other]))
        #expect(put.status == 200, "\(put)")
        let event = try await delta.nextEvent()
        #expect(event.json?["state"] == other, "\(event)")
        #expect(event.json?["patch"] == nil && event.json?["cause"] == "rehydrate", "\(event)")
    }

    @Test("resuming with Last-Event-ID replays patches from where the client stopped; an id from the future gets a snapshot")
    func resume() async throws {
        let session = try await SharedServer.api().createSession()
        let (watching, snapshot) = try await session.subscribe(query: "delta=json-patch&feature=todos")
        defer { watching.close() }
        for number in 0..<2 { try await session.dispatchOK("todos", ["type": "add", "title": .string(Self.title(number))]) }
        let first = try await watching.nextEvent()
        let second = try await watching.nextEvent()
        #expect(second.json?["patch"] != nil, "\(second)")
        for number in 2..<5 { try await session.dispatchOK("todos", ["type": "add", "title": .string(Self.title(number))]) }

        // The client saw `second` and held the state it led to.
        var state = try #require(snapshot.json?["features"]?["todos"]?["state"])
        for event in [first, second] {
            state = try event.json?["patch"].map { try state.applying(patch: $0) } ?? #require(event.json?["state"])
        }
        let resumed = try await session.events(query: "delta=json-patch&feature=todos", headers: [("Last-Event-ID", try #require(second.id))])
        defer { resumed.close() }
        #expect(resumed.status == 200)
        var version = try #require(second.json?["version"]?.int)
        for _ in 2..<5 {
            let event = try await resumed.nextEvent()
            #expect(event.event == "state", "no snapshot on a resume without a gap: \(event)")
            let patch = try #require(event.json?["patch"], "replayed as a patch: \(event)")
            #expect(event.json?["baseVersion"]?.int == version, "\(event)")
            state = try state.applying(patch: patch)
            version += 1
        }
        let stored = try await session.store("todos")
        #expect(stored.version == version && stored.state == state)

        let future = try await session.events(query: "delta=json-patch", headers: [("Last-Event-ID", "999999")])
        defer { future.close() }
        let fresh = try await future.nextEvent()
        #expect(fresh.event == "snapshot" && fresh.json?["features"]?["todos"]?["state"] == state, "\(fresh)")
    }

    @Test("delta must be json-patch, given once: anything else is 400 invalid_request and opens no stream")
    func invalidDelta() async throws {
        let session = try await SharedServer.api().createSession()
        for query in ["delta=merge-patch", "delta=", "delta=json-patch&delta=json-patch", "delta=JSON-PATCH"] {
            let stream = try await session.events(query: query)
            defer { stream.close() }
            #expect(stream.status == 400, "\(query): \(stream.head)")
            let reply = try await stream.readErrorBody()
            expectError(reply, 400, "invalid_request", messageContains: "delta", "\(query)")
        }
        let stream = try await session.events(query: "delta=json-patch")
        defer { stream.close() }
        #expect(stream.status == 200)
    }
}
