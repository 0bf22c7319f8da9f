import TestSupport
import Testing

@Suite("State: GET, ETag, rehydrate, reset", .inProcessServer())
struct StateTests {
    @Test("GET state: every feature at version 0 with its initial state")
    func initialState() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let response = try await session.request("GET", "/state")
        #expect(response.status == 200, "\(response)")
        let body = try #require(response.json)
        #expect(body["session"] == .string(session.id))
        let features = try #require(body["features"]?.object)
        #expect(Set(features.keys) == Examples.names)
        for (name, store) in features {
            #expect(store["version"] == 0, "\(name)")
            #expect(store["effect"] == nil, "GET state never shows effects: \(name)")
        }
        #expect(features["counter"]?["state"] == Examples.counter)
        #expect(features["settings"]?["state"] == Examples.settings)
        #expect(features["login"]?["state"] == Examples.login)
        #expect(features["todos"]?["state"]?["items"] == [])

        // And they match the initial states that /v1/features advertises.
        let advertised = try #require(try await api.request("GET", "/v1/features").json?["features"]?.array)
        for feature in advertised {
            let name = try #require(feature["name"]?.string)
            #expect(features[name]?["state"] == feature["initialState"], "\(name)")
        }
    }

    @Test("GET state/{feature}: feature, version, state and ETag", arguments: ["counter", "todos", "settings", "login"])
    func oneFeature(feature: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let response = try await session.request("GET", "/state/\(feature)")
        #expect(response.status == 200, "\(response)")
        let body = try #require(response.json)
        #expect(body["feature"] == .string(feature))
        #expect(body["version"] == 0)
        #expect(body["state"] != nil)
        #expect(body["effect"] == nil, "GET state never shows effects")
        #expect(response.header("ETag") == "\"0\"", "\(response)")
    }

    @Test("ETag follows the version; a matching If-None-Match is 304 without a body")
    func conditionalGet() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let notModified = try await session.request("GET", "/state/counter", headers: [("If-None-Match", "\"0\"")])
        #expect(notModified.status == 304, "\(notModified)")
        #expect(notModified.body.isEmpty)

        try await session.dispatchOK("counter", ["type": "increment"])
        let changed = try await session.request("GET", "/state/counter", headers: [("If-None-Match", "\"0\"")])
        #expect(changed.status == 200, "\(changed)")
        #expect(changed.header("ETag") == "\"1\"")
        #expect(changed.json?["state"] == ["count": 1])
        let again = try await session.request("GET", "/state/counter", headers: [("If-None-Match", "\"1\"")])
        #expect(again.status == 304, "\(again)")
        let otherFeature = try await session.request("GET", "/state/todos", headers: [("If-None-Match", "\"1\"")])
        #expect(otherFeature.status == 200, "todos is still at version 0: \(otherFeature)")
    }

    @Test("PUT state/{feature} rehydrates: version + 1, the given state")
    func rehydrate() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let response = try await session.request("PUT", "/state/counter", body: jsonBytes(["state": ["count": 42]]))
        #expect(response.status == 200, "\(response)")
        #expect(response.json?["feature"] == "counter")
        #expect(response.json?["version"] == 1)
        #expect(response.json?["state"] == ["count": 42])
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 42]))
        try await session.dispatchOK("counter", ["type": "increment"])
        #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": 43]))

        let colours: JSON = ["backgroundColor": "#000000", "textColor": "#ABCDEF"]
        let settings = try await session.request("PUT", "/state/settings", body: jsonBytes(["state": colours]))
        #expect(settings.status == 200, "\(settings)")
        #expect(try await session.store("settings") == StoreState(version: 1, state: colours))

        // Login's state is server-owned: a client may restore only the current or initial state
        // (LoginTests.putCannotLogIn covers the refusals).
        let login = try await session.request("PUT", "/state/login", body: jsonBytes(["state": Examples.login]))
        #expect(login.status == 200, "\(login)")
        #expect(try await session.store("login") == StoreState(version: 1, state: Examples.login))
        // Other stores are untouched.
        #expect(try await session.store("todos").version == 0)
    }

    @Test("PUT state/todos rehydrates a list")
    func rehydrateTodos() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let added = try await session.dispatchOK("todos", ["type": "add", "title": "first"])
        var state = try #require(added["state"])
        guard case .object(var fields) = state else { Issue.record("todos state \(state)"); return }
        fields["items"] = [["id": "1", "title": "first", "done": true], ["id": "2", "title": "second", "done": false]]
        fields["nextId"] = 3
        state = .object(fields)
        let response = try await session.request("PUT", "/state/todos", body: jsonBytes(["state": state]))
        #expect(response.status == 200, "\(response)")
        #expect(response.json?["version"] == 2)
        // `reminded` may be left out of a PUT: it is then false.
        #expect(try await session.store("todos").state["items"] == [
            ["id": "1", "title": "first", "done": true, "reminded": false], ["id": "2", "title": "second", "done": false, "reminded": false]])
        let cleared = try await session.dispatchOK("todos", ["type": "clearCompleted"])
        #expect(cleared["state"]?["items"] == [["id": "2", "title": "second", "done": false, "reminded": false]])
    }

    @Test("PUT with a state that does not decode: 422 invalid_state, nothing changes")
    func invalidState() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "set", "value": 9])
        let bad: [(String, JSON)] = [
            ("counter", ["state": ["count": "many"]]),
            ("counter", ["state": [:]]),
            ("counter", ["state": ["count": 1.5]]),
            ("counter", ["state": 5]),
            ("counter", ["state": []]),
            ("counter", ["state": .null]),
            ("settings", ["state": ["backgroundColor": 1, "textColor": "#FFFFFF"]]),
            ("login", ["state": ["username": "x"]]),
            ("todos", ["state": ["items": "none"]]),
            ("todos", ["state": ["items": [["id": 1, "title": "x", "done": false]]]]),
        ]
        let before = try await session.allStores()
        for (feature, body) in bad {
            let response = try await session.request("PUT", "/state/\(feature)", body: body.bytes)
            expectError(response, 422, "invalid_state", "PUT \(feature) \(body)")
        }
        #expect(try await session.allStores() == before)
        #expect(before["counter"] == StoreState(version: 1, state: ["count": 9]))
    }

    @Test("PUT with a body that is not JSON: 400 malformed_json; without `state`: refused")
    func rehydrateBadBody() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let before = try await session.allStores()
        for body in ["", "{", "state=1", "{\"state\": {\"count\": 1}"] {
            let response = try await session.request("PUT", "/state/counter", body: Array(body.utf8))
            expectError(response, 400, "malformed_json", "PUT \(body.debugDescription)")
        }
        let missing = try await session.request("PUT", "/state/counter", body: Array("{}".utf8))
        #expect([400, 422].contains(missing.status), "\(missing)")
        let array = try await session.request("PUT", "/state/counter", body: Array("[]".utf8))
        #expect([400, 422].contains(array.status), "\(array)")
        #expect(try await session.allStores() == before)
    }

    @Test("DELETE state/{feature} resets to the initial state with version + 1")
    func reset() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        for _ in 0..<3 { try await session.dispatchOK("counter", ["type": "increment", "by": 2]) }
        let response = try await session.request("DELETE", "/state/counter")
        #expect(response.status == 200, "\(response)")
        #expect(response.json?["feature"] == "counter")
        #expect(response.json?["version"] == 4)
        #expect(response.json?["state"] == Examples.counter)
        #expect(try await session.store("counter") == StoreState(version: 4, state: Examples.counter))

        let fresh = try await session.request("DELETE", "/state/settings")
        #expect(fresh.status == 200, "\(fresh)")
        #expect(fresh.json?["version"] == 1)
        #expect(fresh.json?["state"] == Examples.settings)
    }

    @Test("unknown feature: 404 unknown_feature on GET, PUT, DELETE, dispatch and events")
    func unknownFeature() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        for feature in ["nope", "Counter", "counter2"] {
            expectError(try await session.request("GET", "/state/\(feature)"), 404, "unknown_feature", "GET \(feature)")
            expectError(
                try await session.request("PUT", "/state/\(feature)", body: jsonBytes(["state": ["count": 1]])),
                404, "unknown_feature", "PUT \(feature)")
            expectError(try await session.request("DELETE", "/state/\(feature)"), 404, "unknown_feature", "DELETE \(feature)")
            expectError(
                try await session.dispatch(feature, ["type": "increment"]), 404, "unknown_feature", "dispatch \(feature)")
        }
        for query in ["feature=nope", "feature=counter&feature=nope"] {
            let stream = try await session.events(query: query)
            defer { stream.close() }
            expectError(try await stream.readErrorBody(), 404, "unknown_feature", "events?\(query)")
        }
        #expect(try await session.allStores().values.allSatisfy { $0.version == 0 })
    }

    @Test("PUT with malformed JSON to an unknown feature is 400 (JSON is checked before the feature)")
    func jsonBeforeFeature() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        expectError(try await session.request("PUT", "/state/nope", body: Array("{".utf8)), 400, "malformed_json")
        expectError(
            try await session.request("PUT", "/state/nope", body: jsonBytes(["state": "bad"])), 404, "unknown_feature")
    }
}
