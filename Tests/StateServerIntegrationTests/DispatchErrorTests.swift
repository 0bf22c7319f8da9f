import TestSupport
import Testing

/// A dispatch body that must be refused.
struct BadDispatch: Sendable, CustomTestStringConvertible {
    var name: String
    var body: [UInt8]
    var status: Int
    var code: String
    /// A word the error message must contain (the field that did not decode).
    var field: String?

    var testDescription: String { name }

    init(_ name: String, _ body: String, _ status: Int, _ code: String, field: String? = nil) {
        self.init(name, Array(body.utf8), status, code, field: field)
    }

    init(_ name: String, _ body: [UInt8], _ status: Int, _ code: String, field: String? = nil) {
        self.name = name
        self.body = body
        self.status = status
        self.code = code
        self.field = field
    }

    static func action(_ name: String, _ feature: String, _ action: String, field: String) -> BadDispatch {
        BadDispatch(name, "{\"feature\": \"\(feature)\", \"action\": \(action)}", 422, "invalid_action", field: field)
    }

    static let malformed: [BadDispatch] = [
        BadDispatch("empty body", "", 400, "malformed_json"),
        BadDispatch("lone brace", "{", 400, "malformed_json"),
        BadDispatch("plain text", "feature=counter&type=increment", 400, "malformed_json"),
        BadDispatch("truncated", "{\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}", 400, "malformed_json"),
        BadDispatch("trailing garbage", "{\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}} x", 400, "malformed_json"),
        BadDispatch("single quotes", "{'feature': 'counter', 'action': {'type': 'increment'}}", 400, "malformed_json"),
        BadDispatch("trailing comma", "{\"feature\": \"counter\", \"action\": {\"type\": \"increment\"},}", 400, "malformed_json"),
        BadDispatch("binary bytes", [0xFF, 0xFE, 0x00, 0x01, 0x80, 0x7B], 400, "malformed_json"),
        BadDispatch(
            "invalid UTF-8 inside a string",
            Array("{\"feature\": \"counter\", \"action\": {\"type\": \"incr".utf8) + [0xC3, 0x28] + Array("ement\"}}".utf8),
            400, "malformed_json"),
        BadDispatch(
            "invalid UTF-8 in a title",
            Array("{\"feature\": \"todos\", \"action\": {\"type\": \"add\", \"title\": \"".utf8) + [0xFF, 0xFE, 0xED, 0xA0, 0x80]
                + Array("\"}}".utf8),
            400, "malformed_json"),
        BadDispatch("NUL byte", Array("{\"feature\": \"counter\"".utf8) + [0] + Array(", \"action\": {\"type\": \"increment\"}}".utf8), 400, "malformed_json"),
    ]

    static let invalidRequest: [BadDispatch] = [
        BadDispatch("empty object", "{}", 400, "invalid_request"),
        BadDispatch("array", "[]", 400, "invalid_request"),
        BadDispatch("string", "\"counter\"", 400, "invalid_request"),
        BadDispatch("null", "null", 400, "invalid_request"),
        BadDispatch("number", "42", 400, "invalid_request"),
        BadDispatch("missing feature", "{\"action\": {\"type\": \"increment\"}}", 400, "invalid_request"),
        BadDispatch("feature is a number", "{\"feature\": 5, \"action\": {\"type\": \"increment\"}}", 400, "invalid_request"),
        BadDispatch("feature is null", "{\"feature\": null, \"action\": {\"type\": \"increment\"}}", 400, "invalid_request"),
        BadDispatch("feature is an object", "{\"feature\": {\"name\": \"counter\"}, \"action\": {\"type\": \"increment\"}}", 400, "invalid_request"),
        BadDispatch("missing action", "{\"feature\": \"counter\"}", 400, "invalid_request"),
        BadDispatch("action is a string", "{\"feature\": \"counter\", \"action\": \"increment\"}", 400, "invalid_request"),
        BadDispatch("action is an array", "{\"feature\": \"counter\", \"action\": [\"increment\"]}", 400, "invalid_request"),
        BadDispatch("action is null", "{\"feature\": \"counter\", \"action\": null}", 400, "invalid_request"),
    ]

    static let unknownFeature: [BadDispatch] = [
        BadDispatch("unknown feature", "{\"feature\": \"nope\", \"action\": {\"type\": \"increment\"}}", 404, "unknown_feature"),
        BadDispatch("empty feature name", "{\"feature\": \"\", \"action\": {\"type\": \"increment\"}}", 404, "unknown_feature"),
        BadDispatch("feature in another case", "{\"feature\": \"Counter\", \"action\": {\"type\": \"increment\"}}", 404, "unknown_feature"),
        BadDispatch("unknown feature wins over a bad action", "{\"feature\": \"nope\", \"action\": {\"type\": \"explode\"}}", 404, "unknown_feature"),
    ]

    static let invalidAction: [BadDispatch] = [
        .action("unknown type", "counter", "{\"type\": \"explode\"}", field: "type"),
        .action("missing type", "counter", "{\"by\": 1}", field: "type"),
        .action("type is a number", "counter", "{\"type\": 5}", field: "type"),
        .action("type is null", "counter", "{\"type\": null}", field: "type"),
        .action("set without value", "counter", "{\"type\": \"set\"}", field: "value"),
        .action("set with a string", "counter", "{\"type\": \"set\", \"value\": \"7\"}", field: "value"),
        .action("set with a fraction", "counter", "{\"type\": \"set\", \"value\": 1.5}", field: "value"),
        .action("set with a bool", "counter", "{\"type\": \"set\", \"value\": true}", field: "value"),
        .action("set beyond Int.max", "counter", "{\"type\": \"set\", \"value\": 9223372036854775808}", field: "value"),
        .action("set far beyond Int", "counter", "{\"type\": \"set\", \"value\": 99999999999999999999999999}", field: "value"),
        .action("set below Int.min", "counter", "{\"type\": \"set\", \"value\": -9223372036854775809}", field: "value"),
        .action("increment by a string", "counter", "{\"type\": \"increment\", \"by\": \"2\"}", field: "by"),
        .action("increment by a huge number", "counter", "{\"type\": \"increment\", \"by\": 18446744073709551616}", field: "by"),
        .action("decrement by an object", "counter", "{\"type\": \"decrement\", \"by\": {}}", field: "by"),
        .action("todos add without title", "todos", "{\"type\": \"add\"}", field: "title"),
        .action("todos add with a number", "todos", "{\"type\": \"add\", \"title\": 5}", field: "title"),
        .action("todos toggle with a numeric id", "todos", "{\"type\": \"toggle\", \"id\": 1}", field: "id"),
        .action("todos remove without id", "todos", "{\"type\": \"remove\"}", field: "id"),
        .action("todos unknown type", "todos", "{\"type\": \"increment\"}", field: "type"),
        .action("settings without color", "settings", "{\"type\": \"setBackgroundColor\"}", field: "color"),
        .action("settings color is a number", "settings", "{\"type\": \"setTextColor\", \"color\": 16711680}", field: "color"),
        .action("login submit without password", "login", "{\"type\": \"submit\", \"username\": \"a\"}", field: "password"),
        .action("login submit with a numeric username", "login", "{\"type\": \"submit\", \"username\": 5, \"password\": \"password1\"}", field: "username"),
        .action("login failed without reason", "login", "{\"type\": \"failed\"}", field: "reason"),
    ]

    static let all = malformed + invalidRequest + unknownFeature + invalidAction
}

@Suite("Dispatch errors change nothing", .inProcessServer())
struct DispatchErrorTests {
    /// A session whose stores are not at their initial state.
    func preparedSession() async throws -> Session {
        let session = try await SharedServer.api().createSession()
        for _ in 0..<3 { try await session.dispatchOK("counter", ["type": "increment"]) }
        try await session.dispatchOK("todos", ["type": "add", "title": "one"])
        try await session.dispatchOK("settings", ["type": "setTextColor", "color": "#101010"])
        return session
    }

    @Test("refused dispatch bodies", arguments: BadDispatch.all)
    func refused(_ bad: BadDispatch) async throws {
        let session = try await preparedSession()
        let before = try await session.allStores()
        let response = try await session.request("POST", "/dispatch", body: bad.body)
        expectError(response, bad.status, bad.code, messageContains: bad.field, Comment(rawValue: bad.name))
        #expect(try await session.allStores() == before)
        #expect(before["counter"] == StoreState(version: 3, state: ["count": 3]))
    }

    @Test("the Content-Type of a request does not matter: the body is parsed as JSON")
    func anyContentType() async throws {
        let session = try await preparedSession()
        let body = jsonBytes(["feature": "counter", "action": ["type": "increment"]])
        for contentType in ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"] {
            let response = try await session.request("POST", "/dispatch", headers: [("Content-Type", contentType)], body: body)
            #expect(response.status == 200, "\(contentType): \(response)")
        }
        #expect(try await session.store("counter") == StoreState(version: 6, state: ["count": 6]))
    }

    @Test("login: the rules are action_rejected when no check is in flight")
    func loginRulesWithoutCheck() async throws {
        let session = try await preparedSession()
        let before = try await session.allStores()
        let refused: [JSON] = [
            ["type": "succeeded"],
            ["type": "failed", "reason": "nope"],
        ]
        for action in refused {
            expectError(try await session.dispatch("login", action), 422, "action_rejected", "\(action)")
        }
        #expect(try await session.allStores() == before)
    }

    @Test("body over the default 64 KiB limit: 413 payload_too_large; exactly 64 KiB is accepted")
    func defaultBodyLimit() async throws {
        let session = try await preparedSession()
        let action: JSON = ["feature": "counter", "action": ["type": "increment"]]
        let before = try await session.allStores()
        let over = try await session.request("POST", "/dispatch", body: padded(action, to: 65537))
        expectError(over, 413, "payload_too_large")
        let title: JSON = ["feature": "todos", "action": ["type": "add", "title": .string(String(repeating: "t", count: 70_000))]]
        expectError(
            try await session.request("POST", "/dispatch", body: title.bytes), 413, "payload_too_large",
            "the size is checked before the action")
        let rehydrate = padded(["state": ["count": 1]], to: 65537)
        expectError(try await session.request("PUT", "/state/counter", body: rehydrate), 413, "payload_too_large", "PUT")
        #expect(try await session.allStores() == before)
        #expect(await session.api.isHealthy())

        let exact = try await session.request("POST", "/dispatch", body: padded(action, to: 65536))
        #expect(exact.status == 200, "\(exact)")
        #expect(try await session.store("counter") == StoreState(version: 4, state: ["count": 4]))
    }
}
