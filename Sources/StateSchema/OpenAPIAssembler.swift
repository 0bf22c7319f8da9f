import Foundation
import StateStore

/// Assembles the OpenAPI description the server serves at `/openapi.json`: the contract (the
/// generic parts, a file written by hand) and, for each registered feature, its derived and
/// refined schemas (``SchemaDeriver``, ``Feature/refineSchema(_:)``).
///
/// Per feature (prefix `Todos`): the state `TodosState` and the structs and enums inside it,
/// the action's cases `TodosAdd`, ... and their union `TodosAction` (with `TodosClientAction`
/// when some cases are not for clients), effects, `TodosDispatch`, `TodosStoreSnapshot`; and
/// for all of them `ExampleFeatureDispatch` (the union of dispatches, by feature),
/// `FeatureStates`' properties, `RehydrateRequest`'s states, `FeatureName`'s examples and
/// `FeatureList`'s example, the
/// request examples of dispatch and rehydrate, and the texts `{{features}}`,
/// `{{stateSchemas}}`, `{{actionSchemas}}` and `{{effectSchemas}}` in the contract's strings.
public enum OpenAPIAssembler {
    public struct Result: Sendable {
        public let document: OrderedJSON
        /// What could not be derived, and components renamed to avoid a clash.
        public let warnings: [String]
    }

    /// The document for `features`; the contract must have the generic components
    /// (`AnyAction`, `GenericDispatch`, `FeatureStates`, `RehydrateRequest`, `DispatchRequest`,
    /// `FeatureName`).
    public static func assemble(contract: OrderedJSON, features: [AnyFeature]) -> Result {
        var warnings: [String] = []
        var taken = Set(contract["components"]["schemas"].keys)
        var schemas: [FeatureSchema] = []
        var prefixes: Set<String> = []
        for feature in features {
            // Two names may give one prefix (`todo-list`, `todo_list`): the second is numbered.
            let base = FeatureSchema.prefix(for: feature.name)
            var prefix = base
            var number = 2
            while prefixes.contains(prefix) || taken.contains(prefix + "State") || taken.contains(prefix + "Dispatch") {
                prefix = base + String(number)
                number += 1
            }
            if prefix != base {
                warnings.append("feature \(feature.name): the component prefix \(base) is taken; its components start with \(prefix)")
            }
            prefixes.insert(prefix)
            var schema = SchemaDeriver.derive(feature, prefix: prefix)
            feature.refineSchema(&schema)
            warnings += schema.warnings
            for name in componentNames(schema) where taken.contains(name) {
                var counter = 2
                while taken.contains(name + String(counter)) { counter += 1 }
                warnings.append("feature \(feature.name): the component \(name) is taken; it is named \(name + String(counter))")
                schema.renameComponent(name, to: name + String(counter))
            }
            taken.formUnion(componentNames(schema))
            schemas.append(schema)
        }

        var document = contract
        var components = document["components"]["schemas"]
        var types: [(String, OrderedJSON)] = []
        var cases: [(String, OrderedJSON)] = []
        var unions: [(String, OrderedJSON)] = []
        var dispatches: [(String, OrderedJSON)] = []
        var snapshots: [(String, OrderedJSON)] = []
        for (feature, schema) in zip(features, schemas) {
            for type in schema.types { types.append((type.component, type.schema)) }
            var state = schema.state
            if state["example"] == .null, let initial = JSONCoding.parse(feature.initialStateJSON) {
                state["example"] = OrderedJSON(initial)
            }
            types.append((schema.stateComponent, state))
            if let effects = schema.effects {
                for effect in effects { types.append((effect.component, effect.schema)) }
                if effects.count > 1 {
                    types.append((
                        schema.prefix + "Effect",
                        union(effects, description: "An effect of the feature `\(feature.name)`: a tagged object whose `type` names the case.")
                    ))
                }
            }
            for action in schema.actions { cases.append((action.component, action.schema)) }
            unions.append((actionComponent(schema), union(schema.actions, description: schema.actionDescription)))
            if schema.actions.contains(where: { !$0.fromClient }) {
                unions.append((
                    clientActionComponent(schema),
                    union(
                        schema.actions.filter(\.fromClient),
                        description: "An action a client may dispatch to the feature `\(feature.name)` (the other cases of "
                            + "`\(actionComponent(schema))` are sent by the server's own work only).")
                ))
            }
            dispatches.append((
                schema.prefix + "Dispatch",
                [
                    "type": "object", "description": .string("A dispatch to the feature `\(feature.name)`."),
                    "required": ["feature", "action"],
                    "properties": [
                        "feature": ["const": .string(feature.name), "type": "string"],
                        "action": reference(
                            schema.actions.contains(where: { !$0.fromClient }) ? clientActionComponent(schema) : actionComponent(schema)),
                    ],
                ]
            ))
            snapshots.append((
                schema.prefix + "StoreSnapshot",
                [
                    "type": "object", "required": ["version", "state"],
                    "properties": ["version": reference("Version"), "state": reference(schema.stateComponent)],
                ]
            ))
        }
        if !schemas.isEmpty {
            dispatches.append((
                "ExampleFeatureDispatch",
                [
                    "description": "A dispatch to one of the registered features, by feature.",
                    "oneOf": .array(schemas.map { reference($0.prefix + "Dispatch") }),
                    "discriminator": [
                        "propertyName": "feature",
                        "mapping": .object(schemas.map { ($0.feature, .string(FeatureSchema.reference($0.prefix + "Dispatch"))) }),
                    ],
                ]
            ))
        }
        components = inserting(types + cases + unions, before: "AnyAction", in: components)
        components = inserting(dispatches, before: "GenericDispatch", in: components)
        components = inserting(snapshots, before: "FeatureStates", in: components)
        components["FeatureStates"].insert(
            "properties", .object(schemas.map { ($0.feature, reference($0.prefix + "StoreSnapshot")) }), before: "propertyNames")
        if schemas.isEmpty { components["FeatureStates"]["properties"] = .null }
        components["RehydrateRequest"]["properties"]["state"]["anyOf"] = .array(
            schemas.map { reference($0.stateComponent) } + components["RehydrateRequest"]["properties"]["state"]["anyOf"].elements)
        if schemas.isEmpty {
            components["DispatchRequest"]["anyOf"] = .array(
                components["DispatchRequest"]["anyOf"].elements.filter { $0 != reference("ExampleFeatureDispatch") })
        }
        components["FeatureName"]["examples"] = .array(features.map { .string($0.name) })
        if components["FeatureList"]["example"] != .null {
            components["FeatureList"]["example"]["features"] = .array(features.map { feature in
                ["name": .string(feature.name), "initialState": JSONCoding.parse(feature.initialStateJSON).map(OrderedJSON.init) ?? [:]]
            })
        }
        document["components"]["schemas"] = components

        // Request examples: one dispatch and one rehydrate per feature.
        var dispatchExamples: [(String, OrderedJSON)] = []
        var rehydrateExamples: [(String, OrderedJSON)] = []
        for (feature, schema) in zip(features, schemas) {
            if let example = schema.dispatchExample {
                dispatchExamples.append((
                    feature.name,
                    ["summary": .string(example.summary), "value": ["feature": .string(feature.name), "action": example.action]]
                ))
            }
            if let state = schema.rehydrateExample ?? JSONCoding.parse(feature.initialStateJSON).map(OrderedJSON.init) {
                rehydrateExamples.append((feature.name, ["summary": .string(feature.name), "value": ["state": state]]))
            }
        }
        setExamples(dispatchExamples, path: "/v1/sessions/{id}/dispatch", method: "post", in: &document)
        setExamples(rehydrateExamples, path: "/v1/sessions/{id}/state/{feature}", method: "put", in: &document)

        let texts = [
            "{{features}}": list(features.map(\.name)),
            "{{stateSchemas}}": list(schemas.map(\.stateComponent)),
            "{{actionSchemas}}": list(schemas.map(actionComponent)),
            "{{effectSchemas}}": list(schemas.flatMap { schema in
                guard let effects = schema.effects, !effects.isEmpty else { return [String]() }
                return [effects.count == 1 ? effects[0].component : schema.prefix + "Effect"]
            }),
        ]
        document.transform { value in
            guard case .string(var text) = value, text.contains("{{") else { return }
            for (placeholder, replacement) in texts { text = text.replacingOccurrences(of: placeholder, with: replacement) }
            value = .string(text)
        }
        return Result(document: document, warnings: warnings)
    }

    private static func actionComponent(_ schema: FeatureSchema) -> String { schema.prefix + "Action" }
    private static func clientActionComponent(_ schema: FeatureSchema) -> String { schema.prefix + "ClientAction" }

    private static func reference(_ component: String) -> OrderedJSON {
        ["$ref": .string(FeatureSchema.reference(component))]
    }

    /// The names of every component a feature adds.
    private static func componentNames(_ schema: FeatureSchema) -> [String] {
        var names = schema.types.map(\.component) + [schema.stateComponent] + schema.actions.map(\.component)
        names += (schema.effects ?? []).map(\.component)
        names += [actionComponent(schema), clientActionComponent(schema), schema.prefix + "Effect", schema.prefix + "Dispatch", schema.prefix + "StoreSnapshot"]
        return Array(Set(names)).sorted()
    }

    /// The cases as a union told apart by `type`; with no cases (an action type the deriver
    /// could not read), any tagged object.
    private static func union(_ cases: [FeatureSchema.Case], description: String) -> OrderedJSON {
        guard !cases.isEmpty else {
            return [
                "type": "object", "description": .string(description), "required": ["type"],
                "properties": ["type": ["type": "string", "minLength": 1]], "additionalProperties": true,
            ]
        }
        return [
            "description": .string(description),
            "oneOf": .array(cases.map { reference($0.component) }),
            "discriminator": [
                "propertyName": "type",
                "mapping": .object(cases.map { ($0.name, .string(FeatureSchema.reference($0.component))) }),
            ],
        ]
    }

    private static func inserting(_ entries: [(String, OrderedJSON)], before anchor: String, in object: OrderedJSON) -> OrderedJSON {
        var object = object
        for (name, value) in entries { object.insert(name, value, before: anchor) }
        return object
    }

    private static func setExamples(_ examples: [(String, OrderedJSON)], path: String, method: String, in document: inout OrderedJSON) {
        var content = document["paths"][path][method]["requestBody"]["content"]["application/json"]
        guard content != .null else { return }
        content["examples"] = examples.isEmpty ? .null : .object(examples)
        document["paths"][path][method]["requestBody"]["content"]["application/json"] = content
    }

    /// "`a`, `b` and `c`" (or "none").
    private static func list(_ names: [String]) -> String {
        let quoted = names.map { "`\($0)`" }
        switch quoted.count {
        case 0: return "none"
        case 1: return quoted[0]
        default: return quoted.dropLast().joined(separator: ", ") + " and " + quoted.last!
        }
    }
}
