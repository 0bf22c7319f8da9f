import StateStore

/// Two colours of a user interface, as `#RRGGBB` strings.
///
/// Wire shape:
/// - state: `{"backgroundColor": "#FF0000", "textColor": "#FFFFFF"}`
/// - actions: `{"type": "setBackgroundColor", "color": "#00ff00"}`,
///   `{"type": "setTextColor", "color": "#000000"}`
///
/// A colour is accepted with hex digits in either case and stored upper-case; anything that is
/// not exactly `#` and six hex digits is rejected with ``ActionRejected``.
public struct SettingsFeature: Feature {
    public let name = "settings"
    public let initialState = State(backgroundColor: "#FF0000", textColor: "#FFFFFF")

    public init() {}

    public struct State: Codable, Sendable, Equatable {
        public var backgroundColor: String
        public var textColor: String

        public init(backgroundColor: String, textColor: String) {
            self.backgroundColor = backgroundColor
            self.textColor = textColor
        }
    }

    public enum Action: Codable, Sendable, Equatable {
        case setBackgroundColor(color: String)
        case setTextColor(color: String)
    }

    public typealias Effect = Never

    /// The prose and the colour patterns of `/openapi.json` (its schemas are derived from the
    /// types).
    public func refineSchema(_ schema: inout FeatureSchema) {
        schema.state.describe("State of the example feature `settings`.")
        for property in ["backgroundColor", "textColor"] {
            schema.state[property: property]["pattern"] = "^#[0-9A-F]{6}$"
            schema.state[property: property].describe("`#RRGGBB`, stored upper-case.")
        }
        schema.actionDescription = "An action of the example feature `settings`: a tagged object whose `type` names the case."
        for (name, text) in [("setBackgroundColor", "Sets the background colour."), ("setTextColor", "Sets the text colour.")] {
            schema[action: name].describe(text)
            schema[action: name][property: "color"]["pattern"] = "^#[0-9A-Fa-f]{6}$"
            schema[action: name][property: "color"].describe(
                "`#RRGGBB`, hex digits in either case (stored upper-case); anything else is `action_rejected`.")
        }
        schema.dispatchExample = ("settings: background colour", ["type": "setBackgroundColor", "color": "#00ff00"])
        schema.rehydrateExample = ["backgroundColor": "#00ff00", "textColor": "#000000"]
    }

    public func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .setBackgroundColor(let color):
            state.backgroundColor = try Self.normalizedColor(color)
        case .setTextColor(let color):
            state.textColor = try Self.normalizedColor(color)
        }
        return StateContainer(state)
    }

    /// A restored state must hold two `#RRGGBB` colours; they are stored upper-case.
    public func validated(_ state: State) throws(ActionRejected) -> State {
        State(
            backgroundColor: try Self.normalizedColor(state.backgroundColor),
            textColor: try Self.normalizedColor(state.textColor))
    }

    /// `color` upper-cased when it is `#RRGGBB`; otherwise the action is rejected.
    static func normalizedColor(_ color: String) throws(ActionRejected) -> String {
        // Check the UTF-8 bytes: a valid colour is exactly seven ASCII bytes, so any other
        // character (a combining accent, a full-width digit) is rejected.
        let bytes = Array(color.utf8)
        guard bytes.count == 7, bytes[0] == UInt8(ascii: "#"), bytes.dropFirst().allSatisfy(isHexDigit) else {
            // Quote at most a few characters of the input, so a huge string is not echoed back.
            let shown = color.count <= 16 ? color : color.prefix(16) + "…"
            throw ActionRejected(
                "the colour '\(shown)' is not of the form #RRGGBB (a '#' and six hex digits, like #1A2B3C)")
        }
        return color.uppercased()
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            true
        default: false
        }
    }
}
