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
    }
}
