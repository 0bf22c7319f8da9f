/// The wire shape of actions and effects.
///
/// On the wire an action or effect is a *tagged* object: `{"type": "increment", "by": 2}`.
/// Swift's synthesized `Codable` for an enum writes `{"increment": {"by": 2}}`. These two
/// functions map between the shapes, so a feature declares plain enums with labeled associated
/// values and writes no coding code:
///
/// ```swift
/// enum Action: Codable, Sendable {
///     case increment(by: Int?)   // {"type": "increment"} or {"type": "increment", "by": 3}
///     case set(value: Int)       // {"type": "set", "value": 7}
///     case clear                 // {"type": "clear"}
/// }
/// ```
///
/// Associated values must be labeled (an unlabeled one would be named `_0` on the wire).
public enum TaggedJSON {
    /// `{"type": T, ...fields}` → `{T: {...fields}}`. Returns `nil` when `value` is not an object
    /// with a string `type`.
    public static func untag(_ value: JSONValue) -> (type: String, untagged: JSONValue)? {
        guard case .object(var fields) = value, case .string(let type)? = fields["type"] else {
            return nil
        }
        fields["type"] = nil
        return (type, .object([type: .object(fields)]))
    }

    /// `{T: {...fields}}` → `{"type": T, ...fields}`; any other value is returned unchanged.
    public static func tag(_ value: JSONValue) -> JSONValue {
        guard case .object(let outer) = value, outer.count == 1, let (type, inner) = outer.first,
            case .object(var fields) = inner
        else { return value }
        fields["type"] = .string(type)
        return .object(fields)
    }
}
