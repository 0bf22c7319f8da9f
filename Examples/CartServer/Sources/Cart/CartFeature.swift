import StateStore

/// A shopping cart with a simulated checkout.
///
/// Wire shape:
/// - state: `{"lines": [{"product": "apple", "quantity": 2}], "isCheckingOut": false, "ordersPlaced": 0}`
/// - actions: `{"type": "add", "product": "apple", "quantity": 2}` (`quantity` defaults to 1),
///   `{"type": "remove", "product": "apple"}`, `{"type": "checkout"}`,
///   and `{"type": "checkoutFinished"}`, sent by the checkout work
/// - effect: `{"type": "orderPlaced", "number": 1}` when a checkout is done
public struct CartFeature: Feature {
    public let name = "cart"
    public let initialState = State(lines: [], isCheckingOut: false, ordersPlaced: 0)

    public init() {}

    public struct Line: Codable, Sendable, Equatable {
        public var product: String
        public var quantity: Int

        public init(product: String, quantity: Int) {
            self.product = product
            self.quantity = quantity
        }
    }

    public struct State: Codable, Sendable, Equatable {
        public var lines: [Line]
        public var isCheckingOut: Bool
        public var ordersPlaced: Int
    }

    public enum Action: Codable, Sendable, Equatable {
        case add(product: String, quantity: Int?)
        case remove(product: String)
        case checkout
        case checkoutFinished
    }

    public enum Effect: Codable, Sendable, Equatable {
        case orderPlaced(number: Int)
    }

    public func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .add(let product, let quantity):
            let quantity = quantity ?? 1
            guard !state.isCheckingOut else { throw ActionRejected("the cart is being checked out") }
            guard (1...99).contains(quantity) else { throw ActionRejected("the quantity must be 1 to 99") }
            if let index = state.lines.firstIndex(where: { $0.product == product }) {
                state.lines[index].quantity = min(99, state.lines[index].quantity + quantity)
            } else {
                state.lines.append(Line(product: product, quantity: quantity))
            }

        case .remove(let product):
            guard let index = state.lines.firstIndex(where: { $0.product == product }) else {
                throw ActionRejected("'\(product)' is not in the cart")
            }
            state.lines.remove(at: index)

        case .checkout:
            guard !state.lines.isEmpty else { throw ActionRejected("the cart is empty") }
            guard !state.isCheckingOut else { throw ActionRejected("a checkout is already running") }
            state.isCheckingOut = true
            // Declared here, run by the store after this change, outside the store.
            dispatch.run { send in
                try? await Task.sleep(for: .milliseconds(500))  // call a payment service here
                await send(.checkoutFinished)
            }

        case .checkoutFinished:
            guard state.isCheckingOut else { throw ActionRejected("no checkout is running") }
            state.isCheckingOut = false
            state.lines = []
            state.ordersPlaced += 1
            return StateContainer(state, effect: .orderPlaced(number: state.ordersPlaced))
        }
        return StateContainer(state)
    }
}
