import StateStore

/// A counter: the smallest useful feature.
///
/// Wire shape:
/// - state: `{"count": 0}`
/// - actions: `{"type": "increment", "by": 2}` (`by` defaults to 1),
///   `{"type": "decrement", "by": 2}` (`by` defaults to 1), `{"type": "set", "value": 7}`
///
/// A change that would overflow `Int` is rejected with ``ActionRejected``; the counter never traps.
public struct CounterFeature: Feature {
    public let name = "counter"
    public let initialState = State(count: 0)

    public init() {}

    public struct State: Codable, Sendable, Equatable {
        public var count: Int

        public init(count: Int) {
            self.count = count
        }
    }

    public enum Action: Codable, Sendable, Equatable {
        /// Adds `by` (1 when absent) to the count.
        case increment(by: Int?)
        /// Subtracts `by` (1 when absent) from the count.
        case decrement(by: Int?)
        /// Replaces the count.
        case set(value: Int)
    }

    public typealias Effect = Never

    /// The prose of `/openapi.json` for the counter (its schemas are derived from the types).
    public func refineSchema(_ schema: inout FeatureSchema) {
        schema.state.describe("State of the example feature `counter`.")
        schema.actionDescription = "An action of the example feature `counter`: a tagged object whose `type` names the case."
        for name in ["increment", "decrement"] {
            schema[action: name].describe(
                "\(name == "increment" ? "Adds" : "Subtracts") `by` (default 1); `action_rejected` on overflow.")
            schema[action: name][property: "by"].describe("Optional; 1 when absent or null.")
        }
        schema[action: "set"].describe("Sets the count.")
        schema.dispatchExample = ("counter: increment by 2", ["type": "increment", "by": 2])
        schema.rehydrateExample = ["count": 42]
    }

    public func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .increment(let by):
            let amount = by ?? 1
            let (sum, overflow) = state.count.addingReportingOverflow(amount)
            guard !overflow else {
                throw ActionRejected(
                    "incrementing \(state.count) by \(amount) would overflow the counter "
                        + "(the largest count is \(Int.max))")
            }
            state.count = sum
        case .decrement(let by):
            // Subtract directly rather than adding `-amount`: negating Int.min would trap.
            let amount = by ?? 1
            let (difference, overflow) = state.count.subtractingReportingOverflow(amount)
            guard !overflow else {
                throw ActionRejected(
                    "decrementing \(state.count) by \(amount) would overflow the counter "
                        + "(the smallest count is \(Int.min))")
            }
            state.count = difference
        case .set(let value):
            state.count = value
        }
        return StateContainer(state)
    }
}
