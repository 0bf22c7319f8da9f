import Foundation
import StateSchema
import StateStore
import TestSupport
import Testing

// MARK: Types of many shapes

struct Address: Codable, Sendable, Equatable {
    var street: String
    var zip: String?
}

enum Status: Codable, Sendable, Equatable {
    case active(since: Int)
    case suspended(String, Int)
    case closed
}

enum Colour: String, Codable, Sendable {
    case red, green, blue
}

enum Priority: Int, Codable, Sendable, CaseIterable {
    case low = 1, high = 10
}

struct Page<Element: Codable & Sendable & Equatable>: Codable, Sendable, Equatable {
    var items: [Element]
    var next: String?
}

struct Profile: Codable, Sendable, Equatable {
    var name: String
    var age: Int
    var score: Double
    var admin: Bool
    var nickname: String?
    var tags: [String]
    var counts: [String: Int]
    var address: Address
    var previous: [Address]
    var status: Status
    var colour: Colour
    var priority: Priority
    var created: Date
    var id: UUID
    var page: Page<Address>
    var small: UInt8
    var maybeList: [Int?]
}

enum ProfileAction: Codable, Sendable, Equatable {
    case rename(name: String)
    case move(Address)
    case tag(String, weight: Int?)
    case reset
}

enum PlantAction: Codable, Sendable, Equatable {
    case plant(tree: TreeNode, colour: Colour, priority: Priority)
}

/// A tree: a struct that holds itself.
struct TreeNode: Codable, Sendable, Equatable {
    var value: Int
    var children: [TreeNode]
    var label: String?
}

/// An enum that holds itself (its recursive case first).
indirect enum Expression: Codable, Sendable, Equatable {
    case add(left: Expression, right: Expression)
    case number(value: Int)
}

/// A custom `init(from:)` that refuses the decoder's sample values (an empty string).
struct Email: Codable, Sendable, Equatable {
    let address: String

    init(address: String) { self.address = address }

    init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard text.contains("@") else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an email address"))
        }
        address = text
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(address)
    }
}

struct Contact: Codable, Sendable, Equatable {
    var email: Email
    var name: String
}

enum Notice: Codable, Sendable, Equatable {
    case toast(message: String)
    case badge(count: Int)
}

/// A feature made of given types, to derive their schemas.
struct ProbeFeature<State: Codable & Sendable, Action: Codable & Sendable, Effect: Codable & Sendable>: Feature {
    let name: String
    let initialState: State
    var clientCases: Set<String>? = nil

    func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Effect> {
        StateContainer(state)
    }

    func acceptsFromClient(_ action: Action) -> Bool {
        guard let clientCases, let encoded = try? JSONCoding.encode(action), case .object(let outer)? = JSONCoding.parse(encoded)
        else { return true }
        return outer.keys.allSatisfy(clientCases.contains)
    }
}

// MARK: Helpers

/// The feature's components, as the assembler would add them.
private func components(_ schema: FeatureSchema) -> [String: OrderedJSON] {
    var out: [String: OrderedJSON] = [schema.stateComponent: schema.state]
    for type in schema.types { out[type.component] = type.schema }
    for action in schema.actions { out[action.component] = action.schema }
    for effect in schema.effects ?? [] { out[effect.component] = effect.schema }
    return out
}

private func json(_ value: some Encodable) throws -> JSONValue {
    try #require(JSONCoding.parse(try JSONCoding.encode(value)))
}

private func derive<S: Codable & Sendable, A: Codable & Sendable, E: Codable & Sendable>(
    _ feature: ProbeFeature<S, A, E>
) throws -> (FeatureSchema, SchemaCheck) {
    let schema = SchemaDeriver.derive(try AnyFeature(feature))
    return (schema, SchemaCheck(components: components(schema)))
}

/// A JSON value from its text.
private func v(_ text: String) -> JSONValue {
    JSONCoding.parse(Array(text.utf8)) ?? .null
}

private func reference(_ component: String) -> OrderedJSON { ["$ref": .string(FeatureSchema.reference(component))] }

private let profile = Profile(
    name: "Ada", age: 36, score: 9.5, admin: true, nickname: nil, tags: ["math", "engines"], counts: ["a": 1, "b": 2],
    address: Address(street: "1 Analytical Way", zip: "N1"), previous: [Address(street: "Old", zip: nil)],
    status: .suspended("audit", 3), colour: .green, priority: .high, created: Date(timeIntervalSince1970: 1_700_000_000),
    id: UUID(), page: Page(items: [Address(street: "x", zip: nil)], next: "2"), small: 200, maybeList: [1, nil, 3])

@Suite("Schema derivation: JSON Schemas from Codable types, checked against encoded values")
struct SchemaDerivationTests {
    @Test("a struct of many shapes: every field, optional, array, dictionary, nested struct and enum, Date, UUID, generic")
    func manyShapes() throws {
        let (schema, check) = try derive(ProbeFeature<Profile, ProfileAction, Never>(name: "people", initialState: profile))
        #expect(schema.warnings.isEmpty, "\(schema.warnings)")
        let state = schema.state
        #expect(schema.stateComponent == "PeopleState")
        #expect(state["type"] == "object")
        #expect(state["additionalProperties"] == false)
        let required = Set(state["required"].elements.compactMap(\.stringValue))
        #expect(required == ["name", "age", "score", "admin", "tags", "counts", "address", "previous", "status", "colour", "priority", "created", "id", "page", "small", "maybeList"])
        #expect(state[property: "nickname"]["type"] == ["string", "null"])
        #expect(state[property: "age"] == ["type": "integer", "format": "int64"])
        #expect(state[property: "tags"] == ["type": "array", "items": ["type": "string"]])
        #expect(state[property: "counts"] == ["type": "object", "additionalProperties": ["type": "integer", "format": "int64"]])
        #expect(state[property: "address"] == reference("PeopleAddress"))
        #expect(state[property: "previous"]["items"] == reference("PeopleAddress"))
        #expect(state[property: "status"] == reference("PeopleStatus"))
        #expect(state[property: "colour"] == ["type": "string", "enum": ["red", "green", "blue"]])
        #expect(state[property: "priority"] == ["type": "integer", "enum": [1, 10]])
        #expect(state[property: "id"]["format"] == "uuid")
        #expect(state[property: "created"]["type"] == "number")
        #expect(state[property: "small"]["maximum"] == 255)
        #expect(state[property: "maybeList"]["items"]["type"] == ["integer", "null"])
        #expect(state[property: "page"] == reference("PeoplePageAddress"))
        #expect(schema[Address.self]["required"] == ["street"])
        #expect(schema[Page<Address>.self][property: "items"]["items"] == reference("PeopleAddress"))

        // The nested enum keeps Swift's synthesized shape: {"case": {fields}}, `_0` for unlabeled values.
        let status = schema[Status.self]
        #expect(status["oneOf"].elements.count == 3)
        #expect(status["oneOf"][1][property: "suspended"]["required"] == ["_0", "_1"])
        #expect(status["oneOf"][2][property: "closed"] == ["type": "object", "additionalProperties": false, "properties": [:]])

        // Real values conform, values of the wrong shape do not.
        let value = try json(profile)
        #expect(check.problems(value, state) == [])
        for status in [Status.active(since: 3), .suspended("x", 1), .closed] {
            #expect(check.problems(try json(status), schema[Status.self]) == [], "\(status)")
        }
        guard case .object(var fields) = value else { throw Unexpected() }
        fields["age"] = .string("36")
        #expect(!check.problems(.object(fields), state).isEmpty)
        fields["age"] = .int(36)
        fields["colour"] = .string("purple")
        #expect(!check.problems(.object(fields), state).isEmpty)
        fields["colour"] = .string("red")
        fields["status"] = .object(["closed": .object([:]), "active": .object(["since": .int(1)])])
        #expect(!check.problems(.object(fields), state).isEmpty)
        fields["status"] = .object(["closed": .object([:])])
        fields["extra"] = .bool(true)
        #expect(!check.problems(.object(fields), state).isEmpty)
        fields["extra"] = nil
        fields["address"] = .object(["zip": .string("N1")])
        #expect(!check.problems(.object(fields), state).isEmpty)
        fields["address"] = .object(["street": .string("s")])
        #expect(check.problems(.object(fields), state) == [])
    }

    @Test("the action is tagged by `type`: labeled, unlabeled (`_0`), optional and payload-less cases")
    func taggedActions() throws {
        let (schema, check) = try derive(ProbeFeature<Profile, ProfileAction, Never>(name: "people", initialState: profile))
        #expect(schema.actions.map(\.name) == ["rename", "move", "tag", "reset"])
        #expect(schema.actions.map(\.component) == ["PeopleRename", "PeopleMove", "PeopleTag", "PeopleReset"])
        #expect(schema[action: "rename"]["required"] == ["type", "name"])
        #expect(schema[action: "rename"][property: "type"] == ["const": "rename", "type": "string"])
        #expect(schema[action: "move"][property: "_0"] == reference("PeopleAddress"))
        #expect(schema[action: "tag"]["required"] == ["type", "_0"])
        #expect(schema[action: "tag"][property: "weight"]["type"] == ["integer", "null"])
        #expect(schema[action: "reset"]["required"] == ["type"])
        #expect(schema.effects == nil, "an effect of Never has no schema")

        let actions: [ProfileAction] = [.rename(name: "Bo"), .move(Address(street: "s", zip: nil)), .tag("t", weight: 2), .tag("t", weight: nil), .reset]
        for action in actions {
            let tagged = TaggedJSON.tag(try json(action))
            let name = try #require(tagged["type"].flatMap { if case .string(let s) = $0 { s } else { nil } })
            #expect(check.problems(tagged, schema[action: name]) == [], "\(action)")
        }
        #expect(!check.problems(v(#"{"type": "rename", "name": 3}"#), schema[action: "rename"]).isEmpty)
        #expect(!check.problems(v(#"{"type": "rename"}"#), schema[action: "rename"]).isEmpty)
        #expect(!check.problems(v(#"{"type": "reset"}"#), schema[action: "rename"]).isEmpty)
    }

    @Test("an effect enum gives one schema per case; acceptsFromClient marks the cases clients may send")
    func effectsAndClientCases() throws {
        var feature = ProbeFeature<Address, ProfileAction, Notice>(name: "shop-cart", initialState: Address(street: "", zip: nil))
        feature.clientCases = ["rename", "reset"]
        let (schema, check) = try derive(feature)
        #expect(schema.prefix == "ShopCart")
        let effects = try #require(schema.effects)
        #expect(effects.map(\.component) == ["ShopCartToastEffect", "ShopCartBadgeEffect"])
        #expect(check.problems(TaggedJSON.tag(try json(Notice.badge(count: 2))), schema[effect: "badge"]) == [])
        #expect(!check.problems(v(#"{"type": "badge", "count": "2"}"#), schema[effect: "badge"]).isEmpty)
        #expect(schema.actions.filter(\.fromClient).map(\.name) == ["rename", "reset"])
    }

    @Test("a recursive struct and a recursive enum refer to themselves")
    func recursiveTypes() throws {
        let tree = TreeNode(value: 1, children: [TreeNode(value: 2, children: [TreeNode(value: 3, children: [])])])
        let (schema, check) = try derive(ProbeFeature<TreeNode, Expression, Never>(name: "tree", initialState: tree))
        #expect(schema.warnings.isEmpty, "\(schema.warnings)")
        #expect(schema.state[property: "children"]["items"] == reference("TreeState"))
        #expect(check.problems(try json(tree), schema.state) == [])
        #expect(!check.problems(v(#"{"value": 1, "children": [{"value": "x", "children": []}]}"#), schema.state).isEmpty)

        let expression = Expression.add(left: .number(value: 1), right: .add(left: .number(value: 2), right: .number(value: 3)))
        #expect(schema[action: "add"][property: "left"] == reference("TreeExpression"))
        #expect(check.problems(TaggedJSON.tag(try json(expression)), schema[action: "add"]) == [])
        #expect(check.problems(v(#"{"type": "add", "left": {"number": {"value": 1}}, "right": {"number": {}}}"#), schema[action: "add"]) != [])
    }

    @Test("types only an action holds (no sample from the initial state): a recursive struct, raw-value enums")
    func unseededTypes() throws {
        let (schema, check) = try derive(ProbeFeature<Address, PlantAction, Never>(name: "garden", initialState: Address(street: "", zip: nil)))
        #expect(schema.warnings.isEmpty, "\(schema.warnings)")
        #expect(schema[action: "plant"][property: "tree"] == reference("GardenTreeNode"))
        #expect(schema[TreeNode.self][property: "children"]["items"] == reference("GardenTreeNode"))
        #expect(schema[action: "plant"][property: "colour"]["enum"] == ["red", "green", "blue"])
        let tree = TreeNode(value: 1, children: [TreeNode(value: 2, children: [], label: "leaf")], label: nil)
        let check2 = SchemaCheck(components: check.components)
        #expect(check2.problems(TaggedJSON.tag(try json(PlantAction.plant(tree: tree, colour: .blue, priority: .low))), schema[action: "plant"]) == [])
        #expect(!check2.problems(v(#"{"type": "plant", "tree": {"value": 1, "children": [{"value": 2}]}, "colour": "red", "priority": 1}"#), schema[action: "plant"]).isEmpty)
        #expect(!check2.problems(v(#"{"type": "plant", "tree": {"value": 1, "children": []}, "colour": "red", "priority": 2}"#), schema[action: "plant"]).isEmpty)
    }

    @Test("a custom init(from:) that refuses the sample values gets a permissive schema and a warning naming it")
    func refusingInit() throws {
        let (schema, check) = try derive(
            ProbeFeature<Contact, ProfileAction, Never>(name: "contacts", initialState: Contact(email: Email(address: "a@b"), name: "A")))
        #expect(schema.warnings.count == 1)
        let warning = try #require(schema.warnings.first)
        #expect(warning.contains("feature contacts") && warning.contains("Email"), "\(warning)")
        #expect(schema.state[property: "email"] == [:])
        #expect(schema.state[property: "name"] == ["type": "string"])
        #expect(check.problems(try json(Contact(email: Email(address: "x@y"), name: "N")), schema.state) == [])
        #expect(!check.problems(v(#"{"email": "x@y"}"#), schema.state).isEmpty)
    }

    @Test("an action that is not an enum is a permissive tagged object, with a warning")
    func actionNotAnEnum() throws {
        let (schema, _) = try derive(ProbeFeature<Address, Address, Never>(name: "odd", initialState: Address(street: "", zip: nil)))
        #expect(schema.actions.isEmpty)
        #expect(schema.warnings.contains { $0.contains("feature odd") && $0.contains("action type") }, "\(schema.warnings)")
    }

    @Test("the refinement hook's edits: rename a component and every reference to it")
    func rename() throws {
        var (schema, _) = try derive(ProbeFeature<Profile, ProfileAction, Never>(name: "people", initialState: profile))
        schema.rename(Address.self, to: "PostalAddress")
        #expect(schema.types.contains { $0.component == "PostalAddress" })
        #expect(schema.state[property: "address"] == reference("PostalAddress"))
        #expect(schema[action: "move"][property: "_0"] == reference("PostalAddress"))
        #expect(schema[Page<Address>.self][property: "items"]["items"] == reference("PostalAddress"))
    }

    @Test("an optional a custom encoder writes as null is required and nullable")
    func optionalWrittenAsNull() throws {
        struct Form: Codable, Sendable {
            var error: String?
            var hint: String?
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                try container.encode(error, forKey: .error)
                try container.encodeIfPresent(hint, forKey: .hint)
            }
        }
        let (schema, _) = try derive(ProbeFeature<Form, ProfileAction, Never>(name: "form", initialState: Form()))
        #expect(schema.state["required"] == ["error"])
        #expect(schema.state[property: "error"]["type"] == ["string", "null"])
    }
}

@Suite("OpenAPI assembler: the contract and each feature's components")
struct OpenAPIAssemblerTests {
    static let contract: OrderedJSON = [
        "openapi": "3.1.0",
        "info": ["title": "T", "version": "1", "description": "Features: {{features}}; states {{stateSchemas}}; effects {{effectSchemas}}."],
        "paths": [:],
        "components": [
            "schemas": [
                "Version": ["type": "integer"],
                "FeatureName": ["type": "string"],
                "AnyAction": ["type": "object"],
                "GenericDispatch": ["type": "object"],
                "DispatchRequest": ["anyOf": [["$ref": "#/components/schemas/ExampleFeatureDispatch"], ["$ref": "#/components/schemas/GenericDispatch"]]],
                "FeatureStates": ["type": "object", "propertyNames": ["$ref": "#/components/schemas/FeatureName"]],
                "RehydrateRequest": ["type": "object", "properties": ["state": ["anyOf": [["type": "object"]]]]],
            ]
        ],
    ]

    /// Every `$ref` of `document`, and whether it resolves.
    static func unresolved(_ document: OrderedJSON) -> [String] {
        var missing: [String] = []
        var copy = document
        copy.transform { value in
            guard case .string(let ref) = value["$ref"] else { return }
            let name = String(ref.dropFirst("#/components/schemas/".count))
            if document["components"]["schemas"][name] == .null { missing.append(ref) }
        }
        return missing
    }

    @Test("two features whose prefixes clash: the second one's components are renamed, with a warning; every $ref resolves")
    func clash() throws {
        let first = try AnyFeature(ProbeFeature<Address, ProfileAction, Notice>(name: "todo-list", initialState: Address(street: "", zip: nil)))
        let second = try AnyFeature(ProbeFeature<Address, ProfileAction, Never>(name: "todo_list", initialState: Address(street: "a", zip: nil)))
        let result = OpenAPIAssembler.assemble(contract: Self.contract, features: [first, second])
        let schemas = result.document["components"]["schemas"]
        #expect(schemas["TodoListState"] != .null && schemas["TodoList2State"] != .null)
        #expect(result.warnings == ["feature todo_list: the component prefix TodoList is taken; its components start with TodoList2"])
        #expect(Self.unresolved(result.document) == [])
        #expect(schemas["TodoListDispatch"][property: "feature"]["const"] == "todo-list")
        #expect(schemas["TodoList2Dispatch"][property: "feature"]["const"] == "todo_list")
        #expect(schemas["TodoList2Dispatch"][property: "action"] == ["$ref": "#/components/schemas/TodoList2Action"])
        #expect(schemas["TodoList2StoreSnapshot"][property: "state"] == ["$ref": "#/components/schemas/TodoList2State"])
        #expect(result.document["info"]["description"] == "Features: `todo-list` and `todo_list`; states `TodoListState` and `TodoList2State`; effects `TodoListEffect`.")
        #expect(schemas["RehydrateRequest"][property: "state"]["anyOf"].elements.count == 3)
        #expect(schemas["FeatureStates"]["properties"].keys == ["todo-list", "todo_list"])
        #expect(schemas.keys.firstIndex(of: "TodoListState")! < schemas.keys.firstIndex(of: "AnyAction")!)
    }

    @Test("no features: no ExampleFeatureDispatch, and nothing refers to it")
    func none() {
        let result = OpenAPIAssembler.assemble(contract: Self.contract, features: [])
        #expect(result.document["components"]["schemas"]["ExampleFeatureDispatch"] == .null)
        #expect(Self.unresolved(result.document) == [])
        #expect(result.document["info"]["description"] == "Features: none; states none; effects none.")
    }
}

private struct Unexpected: Error {}
