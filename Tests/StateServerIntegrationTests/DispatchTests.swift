import TestSupport
import Testing

@Suite("Dispatch: every example action", .inProcessServer())
struct DispatchTests {
    @Test("a dispatch answers feature, version, state and effect (null)")
    func responseShape() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let response = try await session.dispatch("counter", ["type": "increment"])
        #expect(response.status == 200, "\(response)")
        let body = try #require(response.json?.object, "\(response)")
        #expect(Set(body.keys) == ["feature", "version", "state", "effect"])
        #expect(body["feature"] == "counter")
        #expect(body["version"] == 1)
        #expect(body["state"] == ["count": 1])
        #expect(body["effect"] == .null)
        #expect(response.header("Content-Type")?.lowercased().hasPrefix("application/json") == true)
    }

    @Test("counter: increment, decrement (with and without by), set")
    func counter() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let steps: [(JSON, Int)] = [
            (["type": "increment"], 1),
            (["type": "increment", "by": 5], 6),
            (["type": "decrement"], 5),
            (["type": "decrement", "by": 10], -5),
            (["type": "set", "value": 100], 100),
            (["type": "set", "value": -7], -7),
            (["type": "set", "value": .int(Int.max)], Int.max),
            (["type": "decrement", "by": .int(Int.max)], 0),
            (["type": "set", "value": .int(Int.min)], Int.min),
        ]
        for (index, (action, count)) in steps.enumerated() {
            let body = try await session.dispatchOK("counter", action)
            #expect(body["state"] == ["count": .int(count)], "\(action)")
            #expect(body["version"] == .int(index + 1), "\(action)")
            #expect(body["effect"] == .null)
        }
        #expect(try await session.store("counter") == StoreState(version: steps.count, state: ["count": .int(Int.min)]))
    }

    @Test("counter: overflow at Int.max / Int.min is action_rejected and changes nothing")
    func counterOverflow() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "set", "value": .int(Int.max)])
        let overflows: [JSON] = [
            ["type": "increment"],
            ["type": "increment", "by": .int(Int.max)],
            ["type": "decrement", "by": -1],
            ["type": "decrement", "by": .int(Int.min)],
        ]
        for action in overflows {
            expectError(try await session.dispatch("counter", action), 422, "action_rejected", "\(action) at Int.max")
        }
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": .int(Int.max)]))

        try await session.dispatchOK("counter", ["type": "set", "value": .int(Int.min)])
        let underflows: [JSON] = [
            ["type": "decrement"],
            ["type": "decrement", "by": .int(Int.max)],
            ["type": "increment", "by": .int(Int.min)],
        ]
        for action in underflows {
            expectError(try await session.dispatch("counter", action), 422, "action_rejected", "\(action) at Int.min")
        }
        #expect(try await session.store("counter") == StoreState(version: 2, state: ["count": .int(Int.min)]))

        try await session.dispatchOK("counter", ["type": "set", "value": 0])
        expectError(
            try await session.dispatch("counter", ["type": "decrement", "by": .int(Int.min)]), 422, "action_rejected",
            "0 - Int.min")
        #expect(try await session.store("counter") == StoreState(version: 3, state: ["count": 0]))
        #expect(await api.isHealthy())
    }

    @Test("todos: add, toggle, remove, clearCompleted with deterministic ids")
    func todos() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        var body = try await session.dispatchOK("todos", ["type": "add", "title": "Buy milk"])
        #expect(body["state"]?["items"] == [["id": "1", "title": "Buy milk", "done": false, "reminded": false]])
        body = try await session.dispatchOK("todos", ["type": "add", "title": "Walk the dog"])
        #expect(body["state"]?["items"]?[1] == ["id": "2", "title": "Walk the dog", "done": false, "reminded": false])
        body = try await session.dispatchOK("todos", ["type": "toggle", "id": "1"])
        #expect(body["state"]?["items"]?[0] == ["id": "1", "title": "Buy milk", "done": true, "reminded": false])
        body = try await session.dispatchOK("todos", ["type": "toggle", "id": "2"])
        body = try await session.dispatchOK("todos", ["type": "toggle", "id": "2"])
        #expect(body["state"]?["items"]?[1]?["done"] == false)
        body = try await session.dispatchOK("todos", ["type": "clearCompleted"])
        #expect(body["state"]?["items"] == [["id": "2", "title": "Walk the dog", "done": false, "reminded": false]])
        body = try await session.dispatchOK("todos", ["type": "add", "title": "Ünïcödé ✓ 🐕"])
        #expect(body["state"]?["items"]?[1] == ["id": "3", "title": "Ünïcödé ✓ 🐕", "done": false, "reminded": false])
        body = try await session.dispatchOK("todos", ["type": "remove", "id": "2"])
        #expect(body["state"]?["items"] == [["id": "3", "title": "Ünïcödé ✓ 🐕", "done": false, "reminded": false]])
        #expect(body["version"] == 8)
        #expect(body["effect"] == .null)
        let stored = try await session.store("todos")
        #expect(stored.version == 8)
        #expect(stored.state == body["state"])

        // Another session replaying the same actions gets the same ids.
        let other = try await api.createSession()
        try await other.dispatchOK("todos", ["type": "add", "title": "a"])
        let second = try await other.dispatchOK("todos", ["type": "add", "title": "b"])
        #expect(second["state"]?["items"]?[1]?["id"] == "2")
    }

    @Test("todos: a title of 1 to 500 characters after trimming")
    func todoTitles() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let longest = String(repeating: "é", count: 500)
        let body = try await session.dispatchOK("todos", ["type": "add", "title": .string(longest)])
        #expect(body["state"]?["items"]?[0]?["title"] == .string(longest))
        let padded = try await session.dispatchOK("todos", ["type": "add", "title": .string("  " + String(repeating: "x", count: 500) + "  ")])
        #expect(padded["version"] == 2, "500 characters after trimming are accepted")
        let single = try await session.dispatchOK("todos", ["type": "add", "title": " a "])
        #expect(single["version"] == 3)
    }

    @Test("todos: the rules are action_rejected and change nothing")
    func todoRules() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("todos", ["type": "add", "title": "keep"])
        let refused: [JSON] = [
            ["type": "add", "title": ""],
            ["type": "add", "title": "   "],
            ["type": "add", "title": "\n\t "],
            ["type": "add", "title": .string(String(repeating: "x", count: 501))],
            ["type": "add", "title": .string(" " + String(repeating: "x", count: 501) + " ")],
            ["type": "toggle", "id": "99"],
            ["type": "toggle", "id": ""],
            ["type": "remove", "id": "99"],
            ["type": "remove", "id": "2"],
        ]
        let before = try await session.allStores()
        for action in refused {
            expectError(try await session.dispatch("todos", action), 422, "action_rejected", "\(action)")
        }
        #expect(try await session.allStores() == before)
        #expect(before["todos"]?.version == 1)
    }

    @Test("settings: colours #RRGGBB in either case, stored upper-case")
    func settings() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        var body = try await session.dispatchOK("settings", ["type": "setBackgroundColor", "color": "#00ff00"])
        #expect(body["state"] == ["backgroundColor": "#00FF00", "textColor": "#FFFFFF"])
        body = try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#123abc"])
        #expect(body["state"] == ["backgroundColor": "#00FF00", "textColor": "#123ABC"])
        body = try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#A1b2C3"])
        #expect(body["state"]?["textColor"] == "#A1B2C3")
        #expect(body["version"] == 3)
    }

    @Test("settings: a colour that is not #RRGGBB is action_rejected")
    func settingsRules() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let before = try await session.allStores()
        for color in ["red", "#12345", "#1234567", "#GGGGGG", "00FF00", "", "#", " #00FF00", "#00FF0G", "##00FF0"] {
            expectError(
                try await session.dispatch("settings", ["type": "setBackgroundColor", "color": .string(color)]),
                422, "action_rejected", "background \(color.debugDescription)")
            expectError(
                try await session.dispatch("settings", ["type": "setTextColor", "color": .string(color)]),
                422, "action_rejected", "text \(color.debugDescription)")
        }
        #expect(try await session.allStores() == before)
    }

    @Test("dispatches to one feature leave the other stores alone")
    func storesAreIndependent() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("counter", ["type": "increment"])
        try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#000000"])
        let stores = try await session.allStores()
        #expect(stores["counter"] == StoreState(version: 2, state: ["count": 2]))
        #expect(stores["settings"]?.version == 1)
        #expect(stores["todos"]?.version == 0)
        #expect(stores["login"] == StoreState(version: 0, state: Examples.login))
    }
}
