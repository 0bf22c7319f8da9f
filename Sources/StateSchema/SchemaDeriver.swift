import StateStore

/// Derives a feature's JSON Schemas (``FeatureSchema``) from its `Codable` types, without
/// annotations: structs (each key, its type, `decodeIfPresent` as optional), enums with
/// synthesized `Codable` (one schema per case), arrays, sets, `[String: Value]`, optionals,
/// numbers, strings, booleans, `Date`, `UUID`, `URL`, `Data`, raw-value and `CaseIterable`
/// enums. The action and effect are tagged objects (`{"type": "case", ...fields}`, see
/// `TaggedJSON`); values nested inside keep Swift's synthesized shapes.
///
/// What cannot be derived (a custom `init(from:)` that refuses sample values, a type that
/// contains itself where no value can be made) gets a schema that accepts any JSON and a
/// warning naming the feature and the type.
public enum SchemaDeriver {
    /// The derived schemas of `feature`, before its ``Feature/refineSchema(_:)``, with component
    /// names starting with `prefix` (default: the feature's name in UpperCamelCase).
    public static func derive(_ feature: AnyFeature, prefix: String? = nil) -> FeatureSchema {
        let derivation = Derivation()
        if let initial = JSONCoding.parse(feature.initialStateJSON), let state = decoded(feature.stateType, initial) {
            derivation.seed(state)
        }
        let prefix = prefix ?? FeatureSchema.prefix(for: feature.name)
        let stateShape = derivation.shape(of: feature.stateType)
        let actionShape = derivation.shape(of: feature.actionType)
        let effectShape = feature.effectType.map { derivation.shape(of: $0) }

        // Component names: the state is PrefixState; other structs and enums Prefix + their name.
        var names: [ObjectIdentifier: String] = [:]
        let stateID: ObjectIdentifier? = if case .named(let id) = stateShape { id } else { nil }
        if let stateID { names[stateID] = prefix + "State" }
        let roots = Set([actionShape, effectShape].compactMap { shape -> ObjectIdentifier? in
            if case .named(let id)? = shape { return id }
            return nil
        })
        var reserved: Set<String> = [prefix + "State", prefix + "Action", prefix + "ClientAction", prefix + "Effect", prefix + "Dispatch"]
        for id in derivation.namedOrder where names[id] == nil {
            let base = prefix + Self.typeName(derivation.named[id]!.type)
            var name = base
            var counter = 2
            while reserved.contains(name) {
                name = base + String(counter)
                counter += 1
            }
            reserved.insert(name)
            names[id] = name
        }
        let emitter = Emitter(derivation: derivation, names: names)
        var warnings = derivation.warnings.map { "feature \(feature.name): \($0)" }

        func cases(of shape: Shape?, role: String, type: Any.Type) -> [(EnumCase, OrderedJSON)]? {
            guard let shape else { return nil }
            guard case .named(let id) = shape, case .cases(let cases)? = derivation.named[id]?.shape else {
                warnings.append(
                    "feature \(feature.name): its \(role) type \(String(reflecting: type)) is not an enum with synthesized Codable: "
                        + "its schema accepts any tagged object")
                return []
            }
            return cases.map { ($0, emitter.tagged($0)) }
        }

        let actionCases = cases(of: actionShape, role: "action", type: feature.actionType) ?? []
        let samples = derivation.caseSamples(of: feature.actionType)
        let actions = actionCases.map { enumCase, schema in
            FeatureSchema.Case(
                name: enumCase.name, component: prefix + Self.upperFirst(enumCase.name), schema: schema,
                fromClient: samples[enumCase.name].flatMap(feature.acceptsFromClient) ?? true)
        }
        let effects = feature.effectType.flatMap { type in cases(of: effectShape, role: "effect", type: type) }.map { list in
            list.map { enumCase, schema in
                FeatureSchema.Case(
                    name: enumCase.name,
                    component: list.count == 1 ? prefix + "Effect" : prefix + Self.upperFirst(enumCase.name) + "Effect",
                    schema: schema, fromClient: true)
            }
        }

        // Every struct and enum the state, actions and effects refer to, but the roots.
        var types: [FeatureSchema.NamedType] = []
        // The action and effect enums are components only when something holds them (in their
        // synthesized shape): the wire's tagged form is the union of their cases.
        let allShapes = [stateShape] + derivation.namedOrder.map { derivation.named[$0]!.shape }
        for id in derivation.namedOrder where id != stateID && (!roots.contains(id) || emitter.isReferenced(id, from: allShapes)) {
            types.append(
                FeatureSchema.NamedType(
                    swiftName: String(reflecting: derivation.named[id]!.type), component: names[id]!,
                    schema: emitter.schema(derivation.named[id]!.shape, describing: id)))
        }
        var state = stateID.map { emitter.schema(derivation.named[$0]!.shape, describing: $0) } ?? emitter.schema(stateShape)
        if state["description"] == .null { state.describe("State of the feature `\(feature.name)`.") }
        return FeatureSchema(
            feature: feature.name, prefix: prefix, state: state, actions: actions, effects: effects, types: types,
            warnings: warnings)
    }

    private static func decoded<T: Decodable>(_ type: T.Type, _ value: JSONValue) -> Any? {
        try? JSONCoding.decode(type, from: value)
    }

    /// A type's name for a component: its own name, generic arguments run together
    /// (`Page<Item>` → `PageItem`).
    static func typeName(_ type: Any.Type) -> String {
        String(describing: type).filter { $0.isLetter || $0.isNumber || $0 == "_" }
    }

    static func upperFirst(_ text: String) -> String {
        text.prefix(1).uppercased() + text.dropFirst()
    }
}

/// Writes shapes as JSON Schema.
struct Emitter {
    let derivation: Derivation
    let names: [ObjectIdentifier: String]

    func schema(_ shape: Shape, describing id: ObjectIdentifier? = nil) -> OrderedJSON {
        switch shape {
        case .schema(let schema): return schema
        case .object(let fields): return object(fields)
        case .dictionary(let value): return ["type": "object", "additionalProperties": schema(value)]
        case .array(let element): return ["type": "array", "items": schema(element)]
        case .nullable(let inner): return Self.nullable(schema(inner))
        case .named(let other):
            if other == id, let shape = derivation.named[other]?.shape { return schema(shape) }
            guard let name = names[other] else { return [:] }
            return ["$ref": .string(FeatureSchema.reference(name))]
        case .cases(let cases):
            return [
                "oneOf": .array(cases.map { enumCase in
                    [
                        "type": "object", "required": [.string(enumCase.name)], "additionalProperties": false,
                        "properties": [enumCase.name: enumCase.fields.map(object) ?? ["type": "object"]],
                    ]
                })
            ]
        case .any, .node: return [:]
        }
    }

    /// A struct: its keys, required unless read with `decodeIfPresent` (and not written as
    /// `null` when absent), no others.
    private func object(_ fields: [Field]) -> OrderedJSON {
        var schema: OrderedJSON = ["type": "object"]
        let required = fields.filter { !$0.optional || $0.alwaysWritten }.map { OrderedJSON.string($0.name) }
        if !required.isEmpty { schema["required"] = .array(required) }
        schema["additionalProperties"] = false
        schema["properties"] = .object(fields.map { ($0.name, property($0)) })
        return schema
    }

    private func property(_ field: Field) -> OrderedJSON {
        let value = schema(field.shape)
        return field.optional || field.nullable ? Self.nullable(value) : value
    }

    /// A case of the action or effect: `{"type": name, ...fields}`.
    func tagged(_ enumCase: EnumCase) -> OrderedJSON {
        var schema: OrderedJSON = ["type": "object"]
        let fields = enumCase.fields ?? []
        schema["required"] = .array(["type"] + fields.filter { !$0.optional || $0.alwaysWritten }.map { .string($0.name) })
        schema["properties"] = .object([("type", ["const": .string(enumCase.name), "type": "string"])] + fields.map { ($0.name, property($0)) })
        if enumCase.fields == nil { schema["additionalProperties"] = true }
        return schema
    }

    /// `null` allowed beside the schema's type (`"type": [T, "null"]`). A reference or a union
    /// has no type to widen and is left as it is: `null` is accepted there but not declared.
    static func nullable(_ schema: OrderedJSON) -> OrderedJSON {
        var schema = schema
        switch schema["type"] {
        case .string(let type): schema["type"] = [.string(type), "null"]
        case .array(let types) where !types.contains("null"): schema["type"] = .array(types + ["null"])
        default: break
        }
        return schema
    }

    /// Whether any of `shapes` refers to `id`.
    func isReferenced(_ id: ObjectIdentifier, from shapes: [Shape]) -> Bool {
        func visit(_ shape: Shape) -> Bool {
            switch shape {
            case .named(let other): other == id
            case .object(let fields): fields.contains { visit($0.shape) }
            case .dictionary(let inner), .array(let inner), .nullable(let inner): visit(inner)
            case .cases(let cases): cases.contains { ($0.fields ?? []).contains { visit($0.shape) } }
            case .schema, .any, .node: false
            }
        }
        return shapes.contains(where: visit)
    }
}
