/// The JSON Schemas of one feature's types, as the server's OpenAPI description (`/openapi.json`)
/// shows them: derived from the feature's `Codable` types when the server starts, then handed
/// to ``Feature/refineSchema(_:)`` to add what types cannot say (descriptions, patterns, bounds,
/// examples).
///
/// Every schema is an ``OrderedJSON`` object of the OpenAPI 3.1 (JSON Schema 2020-12) subset
/// the deriver writes: `type`, `properties`, `required`, `additionalProperties`, `items`,
/// `oneOf`, `enum`, `const`, `format` and `$ref` to `#/components/schemas/NAME`.
///
/// Component names start with ``prefix`` (the feature's name in UpperCamelCase: `todos` →
/// `Todos`): the state is `TodosState`, each action case `Todos` + the case's name
/// (`TodosAdd`), the union of cases `TodosAction`, an effect `TodosEffect` (one case) or
/// `Todos` + case + `Effect` (several), and every other struct or enum the state, actions and
/// effects contain `Todos` + its Swift name (`TodosItem`; ``rename(_:to:)`` changes it).
public struct FeatureSchema: Sendable {
    /// One case of the action or effect enum: on the wire a tagged object, `{"type": name, ...}`.
    public struct Case: Sendable {
        /// The case's name: the value of `type`.
        public let name: String
        /// Its component's name (`CounterIncrement`).
        public var component: String
        /// The tagged object's schema: `type` is a `const`, then the case's fields.
        public var schema: OrderedJSON
        /// Whether a client may send it (``Feature/acceptsFromClient(_:)`` asked with a value of
        /// the case); always `true` for effects.
        public var fromClient: Bool

        public init(name: String, component: String, schema: OrderedJSON, fromClient: Bool) {
            self.name = name
            self.component = component
            self.schema = schema
            self.fromClient = fromClient
        }
    }

    /// A struct or enum found inside the state, an action or an effect: a component of its own.
    public struct NamedType: Sendable {
        /// The Swift type, as `String(reflecting:)` writes it.
        public let swiftName: String
        public var component: String
        public var schema: OrderedJSON

        public init(swiftName: String, component: String, schema: OrderedJSON) {
            self.swiftName = swiftName
            self.component = component
            self.schema = schema
        }
    }

    /// The feature's name (`todos`).
    public let feature: String
    /// The start of every component name (`Todos`).
    public let prefix: String
    /// The state's component name (`TodosState`).
    public var stateComponent: String
    /// The state's schema.
    public var state: OrderedJSON
    /// The action's cases, in declaration order.
    public var actions: [Case]
    /// The effect's cases; `nil` when the feature has no effect (`Effect == Never`).
    public var effects: [Case]?
    /// Other structs and enums, in the order they were found.
    public var types: [NamedType]
    /// Describes the union of the action's cases (`TodosAction`).
    public var actionDescription: String
    /// An example body of `POST .../dispatch` for this feature: a summary and the action.
    public var dispatchExample: (summary: String, action: OrderedJSON)?
    /// An example state for `PUT .../state/{feature}`; `nil`: the initial state.
    public var rehydrateExample: OrderedJSON?
    /// What could not be derived, each naming the feature and the type: shown at start.
    public var warnings: [String]

    public init(
        feature: String, prefix: String, state: OrderedJSON, actions: [Case], effects: [Case]?,
        types: [NamedType], warnings: [String] = []
    ) {
        self.feature = feature
        self.prefix = prefix
        self.stateComponent = prefix + "State"
        self.state = state
        self.actions = actions
        self.effects = effects
        self.types = types
        self.actionDescription = "An action of the feature `\(feature)`: a tagged object whose `type` names the case."
        self.warnings = warnings
    }

    /// The prefix of a feature's component names: its name in UpperCamelCase (`shopping-cart`
    /// → `ShoppingCart`).
    public static func prefix(for feature: String) -> String {
        feature.split(whereSeparator: { $0 == "-" || $0 == "_" }).map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    /// The schema of the action case named `name` (`.null` when there is none; setting it on a
    /// missing case does nothing).
    public subscript(action name: String) -> OrderedJSON {
        get { actions.first { $0.name == name }?.schema ?? .null }
        set {
            guard let index = actions.firstIndex(where: { $0.name == name }) else { return }
            actions[index].schema = newValue
        }
    }

    /// The schema of the effect case named `name`.
    public subscript(effect name: String) -> OrderedJSON {
        get { effects?.first { $0.name == name }?.schema ?? .null }
        set {
            guard let index = effects?.firstIndex(where: { $0.name == name }) else { return }
            effects?[index].schema = newValue
        }
    }

    /// The schema of a struct or enum found inside the feature's types (`.null` when it is not
    /// one of ``types``).
    public subscript(type: Any.Type) -> OrderedJSON {
        get { types.first { $0.swiftName == String(reflecting: type) }?.schema ?? .null }
        set {
            guard let index = types.firstIndex(where: { $0.swiftName == String(reflecting: type) }) else { return }
            types[index].schema = newValue
        }
    }

    /// Names the component of `type` (one of ``types``) `name`, and every reference to it.
    public mutating func rename(_ type: Any.Type, to name: String) {
        guard let index = types.firstIndex(where: { $0.swiftName == String(reflecting: type) }) else { return }
        renameComponent(types[index].component, to: name)
    }

    /// Renames a component and every reference to it in this feature's schemas.
    public mutating func renameComponent(_ old: String, to new: String) {
        let (oldRef, newRef) = (Self.reference(old), Self.reference(new))
        func rewrite(_ schema: inout OrderedJSON) {
            schema.transform { value in
                if case .string(let text) = value, text == oldRef { value = .string(newRef) }
            }
        }
        if stateComponent == old { stateComponent = new }
        rewrite(&state)
        for index in types.indices {
            if types[index].component == old { types[index].component = new }
            rewrite(&types[index].schema)
        }
        for index in actions.indices {
            if actions[index].component == old { actions[index].component = new }
            rewrite(&actions[index].schema)
        }
        for index in (effects ?? []).indices {
            if effects?[index].component == old { effects?[index].component = new }
            if var schema = effects?[index].schema {
                rewrite(&schema)
                effects?[index].schema = schema
            }
        }
    }

    /// `#/components/schemas/NAME`.
    public static func reference(_ component: String) -> String { "#/components/schemas/" + component }
}
