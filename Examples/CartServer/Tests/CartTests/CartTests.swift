import Cart
import StateStore
import StateStoreTesting
import Testing

@Suite("cart")
struct CartTests {
    @Test func addRemoveAndCheckout() async {
        let store = TestStore(CartFeature())
        store.send(.add(product: "apple", quantity: 2)) { $0.lines = [.init(product: "apple", quantity: 2)] }
        store.send(.add(product: "apple", quantity: nil)) { $0.lines[0].quantity = 3 }
        store.send(.add(product: "pear", quantity: 1)) { $0.lines.append(.init(product: "pear", quantity: 1)) }
        store.send(.remove(product: "pear")) { $0.lines.removeLast() }
        store.sendRejected(.remove(product: "kiwi"))
        store.sendRejected(.add(product: "plum", quantity: 100))
        store.send(.checkout) { $0.isCheckingOut = true }
        store.sendRejected(.checkout)
        await store.receive(.checkoutFinished, effect: .orderPlaced(number: 1)) {
            $0.isCheckingOut = false
            $0.lines = []
            $0.ordersPlaced = 1
        }
        store.sendRejected(.checkout)
        await store.finish()
    }

    @Test func theWireShape() throws {
        let store = TestStore(CartFeature())
        let added = store.send(json: #"{"type":"add","product":"apple"}"#) { $0.lines = [.init(product: "apple", quantity: 1)] }
        #expect(added.map { String(decoding: $0.state, as: UTF8.self) }
            == #"{"isCheckingOut":false,"lines":[{"product":"apple","quantity":1}],"ordersPlaced":0}"#)
        // The idle timer, as the server lists it: its action on the wire, due in 30 minutes.
        let timer = store.pendingTimers.first
        #expect(timer?.id == "cart-idle" && timer.map { String(decoding: $0.publicAction, as: UTF8.self) } == #"{"type":"expire"}"#)
        let idle: Int64 = 30 * 60 * 1000
        #expect(timer?.scheduledAt == 0 && timer?.due == idle)
        store.finish(pendingTimers: .expect(["cart-idle"]))
    }

    /// The store's test clock drives the idle timer: `advance(by:)` fires it when due, and every
    /// change of the cart pushes it back.
    @Test func anIdleCartIsEmptied() async {
        let store = TestStore(CartFeature())
        store.send(.add(product: "apple", quantity: 2)) { $0.lines = [.init(product: "apple", quantity: 2)] }
        store.advance(by: .seconds(29 * 60))
        store.send(.add(product: "pear", quantity: 1)) { $0.lines.append(.init(product: "pear", quantity: 1)) }
        store.advance(by: .seconds(29 * 60))  // 58 minutes in, 29 since the last change: not idle yet
        store.advance(by: .seconds(60))
        await store.receive(timer: CartFeature.idleTimer, action: .expire, effect: .expired) { $0.lines = [] }
        await store.finish()
    }

    @Test func aCheckoutCancelsTheIdleTimer() async {
        let store = TestStore(CartFeature(idlePeriod: .seconds(60)))
        store.send(.add(product: "apple", quantity: 2)) { $0.lines = [.init(product: "apple", quantity: 2)] }
        #expect(store.pendingTimers.map(\.id) == ["cart-idle"])
        store.send(.checkout) { $0.isCheckingOut = true }
        #expect(store.pendingTimers.isEmpty)
        await store.receive(.checkoutFinished, effect: .orderPlaced(number: 1)) {
            $0.isCheckingOut = false
            $0.lines = []
            $0.ordersPlaced = 1
        }
        store.advance(by: .seconds(3600))  // nothing fires
        await store.finish()
    }

    @Test func anEmptyCartHasNoIdleTimer() {
        let store = TestStore(CartFeature())
        store.send(.add(product: "apple", quantity: 2)) { $0.lines = [.init(product: "apple", quantity: 2)] }
        store.send(.remove(product: "apple")) { $0.lines = [] }
        #expect(store.pendingTimers.isEmpty)
        store.finish()
    }
}
