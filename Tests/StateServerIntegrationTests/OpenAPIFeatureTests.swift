import Foundation
import Logging
import StateServerHTTP
import StateSessions
import StateStore
import TestSupport
import Testing

/// A feature defined here, outside ExampleFeatures: a cart with lines, a phase enum, a
/// dictionary, an optional and an effect of two cases, one action only the server sends.
struct CartFeature: Feature {
    let name = "cart"
    let initialState = State(lines: [], phase: .shopping, coupon: nil, notes: [:])

    struct Line: Codable, Sendable, Equatable {
        var sku: String
        var quantity: Int
        var unitCents: Int
    }

    enum Phase: Codable, Sendable, Equatable {
        case shopping
        case checkingOut(lines: Int)
        case paid(receipt: String)
    }

    struct State: Codable, Sendable, Equatable {
        var lines: [Line]
        var phase: Phase
        var coupon: String?
        var notes: [String: String]
    }

    enum Action: Codable, Sendable, Equatable {
        case add(sku: String, quantity: Int, unitCents: Int)
        case remove(sku: String)
        case note(String, text: String)
        case checkout
        /// Sent by the payment provider's callback only.
        case paymentConfirmed(receipt: String)
    }

    enum Effect: Codable, Sendable, Equatable {
        case toast(message: String)
        case receipt(id: String, totalCents: Int)
    }

    func acceptsFromClient(_ action: Action) -> Bool {
        if case .paymentConfirmed = action { return false }
        return true
    }

    func refineSchema(_ schema: inout FeatureSchema) {
        schema[Line.self][property: "quantity"]["minimum"] = 1
        schema[action: "checkout"].describe("Freezes the cart for payment.")
    }

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .add(let sku, let quantity, let unitCents):
            guard quantity >= 1 else { throw ActionRejected("quantity must be at least 1") }
            state.lines.append(Line(sku: sku, quantity: quantity, unitCents: unitCents))
            return StateContainer(state, effect: .toast(message: "added \(sku)"))
        case .remove(let sku):
            state.lines.removeAll { $0.sku == sku }
        case .note(let key, let text):
            state.notes[key] = text
        case .checkout:
            state.phase = .checkingOut(lines: state.lines.count)
        case .paymentConfirmed(let receipt):
            state.phase = .paid(receipt: receipt)
            let total = state.lines.reduce(0) { $0 + $1.quantity * $1.unitCents }
            return StateContainer(state, effect: .receipt(id: receipt, totalCents: total))
        }
        return StateContainer(state)
    }
}

/// A feature whose state has a custom `init(from:)` that refuses the deriver's samples.
struct StrictFeature: Feature {
    let name = "strict"
    let initialState = State(code: "X-1")

    struct State: Codable, Sendable, Equatable {
        var code: String
        init(code: String) { self.code = code }
        init(from decoder: any Decoder) throws {
            let code = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .code)
            guard code.hasPrefix("X-") else {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "a code starts with X-"))
            }
            self.code = code
        }
    }

    enum Action: Codable, Sendable { case touch }

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Never> {
        StateContainer(state)
    }
}

@Suite("OpenAPI from the registered features: a feature of the server's user is typed in /openapi.json")
struct OpenAPIFeatureTests {
    private static func served(_ server: InProcessServer) async throws -> OrderedJSON {
        let response = try await server.api.request("GET", "/openapi.json")
        try #require(response.status == 200, "\(response)")
        return try OrderedJSON.parse(response.body)
    }

    private static func value(_ bytes: [UInt8]) throws -> JSONValue {
        try #require(JSONCoding.parse(bytes), "not JSON: \(String(decoding: bytes, as: UTF8.self))")
    }

    @Test("the cart's state, actions, effects and dispatch are components; the example features are absent")
    func cartIsTyped() async throws {
        var registry = FeatureRegistry()
        try registry.register(CartFeature())
        let server = try InProcessServer(registry: registry)
        #expect(server.responder.openAPI.warnings.isEmpty, "\(server.responder.openAPI.warnings)")
        let document = try await Self.served(server)
        let schemas = document["components"]["schemas"]
        for name in [
            "CartLine", "CartPhase", "CartState", "CartToastEffect", "CartReceiptEffect", "CartEffect", "CartAdd", "CartRemove",
            "CartNote", "CartCheckout", "CartPaymentConfirmed", "CartAction", "CartClientAction", "CartDispatch", "CartStoreSnapshot",
        ] {
            #expect(schemas[name] != .null, "no component \(name)")
        }
        for name in ["CounterState", "TodoItem", "LoginClientAction", "CounterDispatch"] {
            #expect(schemas[name] == .null, "\(name) is served for a server without the example features")
        }
        #expect(schemas["CartAction"]["discriminator"]["mapping"].keys == ["add", "remove", "note", "checkout", "paymentConfirmed"])
        #expect(schemas["CartClientAction"]["discriminator"]["mapping"].keys == ["add", "remove", "note", "checkout"])
        #expect(schemas["CartDispatch"][property: "action"] == ["$ref": "#/components/schemas/CartClientAction"])
        #expect(schemas["ExampleFeatureDispatch"]["discriminator"]["mapping"].keys == ["cart"])
        #expect(schemas["FeatureStates"][property: "cart"] == ["$ref": "#/components/schemas/CartStoreSnapshot"])
        #expect(schemas["FeatureName"]["examples"] == ["cart"])
        #expect(schemas["CartLine"][property: "quantity"]["minimum"] == 1, "the refinement hook applies")
        #expect(schemas["CartCheckout"]["description"] == "Freezes the cart for payment.")
        #expect(schemas["CartNote"]["required"] == ["type", "_0", "text"])
        let text = String(decoding: try await server.api.request("GET", "/openapi.json").body, as: UTF8.self)
        #expect(!text.contains("{{"), "a placeholder of the contract is left")
        #expect(text.contains("This server registers `cart`."))
        await server.stop()
    }

    @Test("what the server answers for the cart conforms to the served schemas, and a wrong shape does not")
    func answersConform() async throws {
        var registry = FeatureRegistry()
        try registry.register(CartFeature())
        let server = try InProcessServer(registry: registry)
        let check = SchemaCheck(document: try await Self.served(server))
        let session = try await server.api.createSession()
        let actions: [JSON] = [
            ["type": "add", "sku": "A1", "quantity": 2, "unitCents": 250],
            ["type": "note", "_0": "gift", "text": "wrap it"],
            ["type": "checkout"],
        ]
        for action in actions {
            let body: JSON = ["feature": "cart", "action": action]
            #expect(check.problems(try Self.value(body.bytes), ["$ref": "#/components/schemas/DispatchRequest"]) == [])
            let response = try await session.dispatch("cart", action)
            try #require(response.status == 200, "\(response)")
            let result = try Self.value(response.body)
            #expect(check.problems(result, ["$ref": "#/components/schemas/DispatchResult"]) == [])
            #expect(check.problems(result["state"] ?? .null, ["$ref": "#/components/schemas/CartState"]) == [], "\(result)")
            if let effect = result["effect"], effect != .null {
                #expect(check.problems(effect, ["$ref": "#/components/schemas/CartEffect"]) == [], "\(effect)")
            }
        }
        let state = try Self.value(try await session.request("GET", "/state/cart").body)["state"] ?? .null
        #expect(check.problems(state, ["$ref": "#/components/schemas/CartState"]) == [])
        guard case .object(var fields) = state else { throw Unexpected() }
        #expect(fields["phase"] == .object(["checkingOut": .object(["lines": .int(1)])]))
        fields["phase"] = .object(["checkingOut": .object(["lines": .string("one")])])
        #expect(!check.problems(.object(fields), ["$ref": "#/components/schemas/CartState"]).isEmpty)
        // The server's own action is not in what a client may dispatch.
        let confirm = try Self.value(Array(#"{"feature": "cart", "action": {"type": "paymentConfirmed", "receipt": "r1"}}"#.utf8))
        #expect(!check.problems(confirm, ["$ref": "#/components/schemas/CartDispatch"]).isEmpty)
        await server.stop()
    }

    @Test("a type the deriver cannot read gets a permissive schema and a warning naming the feature and type")
    func warnings() async throws {
        var registry = FeatureRegistry()
        try registry.register(StrictFeature())
        let server = try InProcessServer(registry: registry)
        let warnings = server.responder.openAPI.warnings
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.contains("feature strict") == true && warnings.first?.contains("StrictFeature.State") == true, "\(warnings)")
        let document = try await Self.served(server)
        #expect(document["components"]["schemas"]["StrictState"]["properties"] == .null)
        #expect(document["components"]["schemas"]["StrictTouch"]["required"] == ["type"])
        await server.stop()
    }

    @Test("the application logs each warning once, where it starts")
    func warningsLogged() throws {
        var registry = FeatureRegistry()
        try registry.register(StrictFeature())
        try registry.register(CartFeature())
        let lines = MiddlewareTests.Log()
        let logger = Logger(label: "start") { _ in MiddlewareTests.LineHandler(lines: lines) }
        let application = StateServerApplication(
            registry: registry, sessions: SessionSettings(), routes: RouteSettings(), storage: SessionManager.memoryStorage(registry, SessionSettings()),
            logger: logger)
        let logged = lines.all.filter { $0.hasPrefix("a feature's schema is not fully derived") }
        #expect(logged.count == 1, "\(lines.all)")
        #expect(logged.first?.contains("feature strict") == true, "\(logged)")
        #expect(application.responder.openAPI.warnings.count == 1)
    }
}

private struct Unexpected: Error {}
