import StateStore

/// A shopping cart with a simulated checkout, emptied when it is left idle.
///
/// Wire shape:
/// - state: `{"lines": [{"product": "apple", "quantity": 2}], "isCheckingOut": false, "ordersPlaced": 0}`
/// - actions: `{"type": "add", "product": "apple", "quantity": 2}` (`quantity` defaults to 1),
///   `{"type": "remove", "product": "apple"}`, `{"type": "checkout"}`;
///   `{"type": "checkoutFinished"}`, sent by the checkout work, and `{"type": "expire"}`, sent
///   by the idle timer
/// - effects: `{"type": "orderPlaced", "number": 1}` when a checkout is done,
///   `{"type": "expired"}` when the idle timer emptied the cart
///
/// The idle timer: every change that leaves lines in the cart (re)schedules `expire` after
/// ``idlePeriod`` under the id ``idleTimer`` (scheduling an id again replaces its timer); one
/// that leaves it empty cancels it, and so does a checkout. The server keeps the timer with the
/// cart's state and fires it once, as a change of cause `timer`, even across a restart.
public struct CartFeature: Feature {
    public let name = "cart"
    public let initialState = State(lines: [], isCheckingOut: false, ordersPlaced: 0)
    /// How long a cart may sit unchanged before it is emptied.
    public let idlePeriod: Duration

    /// The id of the idle timer, one per cart (per session's store).
    public static let idleTimer = "cart-idle"

    public init(idlePeriod: Duration = .seconds(30 * 60)) {
        self.idlePeriod = idlePeriod
    }

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
        /// The idle timer fired: the cart was left unchanged for ``idlePeriod``.
        case expire
    }

    public enum Effect: Codable, Sendable, Equatable {
        case orderPlaced(number: Int)
        case expired
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
            scheduleExpiry(state, dispatch)

        case .remove(let product):
            guard let index = state.lines.firstIndex(where: { $0.product == product }) else {
                throw ActionRejected("'\(product)' is not in the cart")
            }
            state.lines.remove(at: index)
            scheduleExpiry(state, dispatch)

        case .checkout:
            guard !state.lines.isEmpty else { throw ActionRejected("the cart is empty") }
            guard !state.isCheckingOut else { throw ActionRejected("a checkout is already running") }
            state.isCheckingOut = true
            dispatch.cancel(id: Self.idleTimer)
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
            scheduleExpiry(state, dispatch)
            return StateContainer(state, effect: .orderPlaced(number: state.ordersPlaced))

        case .expire:
            // Only the idle timer sends it (the server's middleware refuses it from clients),
            // and a checkout cancels the timer: a cart being checked out is never emptied.
            guard !state.isCheckingOut else { throw ActionRejected("the cart is being checked out") }
            state.lines = []
            return StateContainer(state, effect: .expired)
        }
        return StateContainer(state)
    }

    /// The idle timer after a change that leaves `state`: due ``idlePeriod`` from now while the
    /// cart has lines (replacing the one pending), cancelled when it is empty or checking out.
    private func scheduleExpiry(_ state: State, _ dispatch: Dispatcher<Action>) {
        if state.lines.isEmpty || state.isCheckingOut {
            dispatch.cancel(id: Self.idleTimer)
        } else {
            dispatch.schedule(.expire, after: idlePeriod, id: Self.idleTimer)
        }
    }
}
