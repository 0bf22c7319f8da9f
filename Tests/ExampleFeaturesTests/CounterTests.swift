import ExampleFeatures
import StateStore
import StateStoreTesting
import Testing

@Suite("counter")
struct CounterTests {
    @Test func incrementDecrementAndSet() {
        let store = TestStore(CounterFeature())
        store.send(.increment(by: nil)) { $0.count = 1 }
        store.send(.increment(by: 5)) { $0.count = 6 }
        store.send(.decrement(by: nil)) { $0.count = 5 }
        store.send(.decrement(by: 10)) { $0.count = -5 }
        store.send(.increment(by: -2)) { $0.count = -7 }
        store.send(.set(value: 42)) { $0.count = 42 }
        store.send(.set(value: Int.min)) { $0.count = Int.min }
        store.finish()
    }

    @Test func theWireShape() throws {
        let store = TestStore(CounterFeature())
        #expect(text(try store.store.currentJSON().state) == #"{"count":0}"#)

        let change = store.send(json: #"{"type":"increment","by":2}"#) { $0.count = 2 }
        #expect(text(change?.action) == #"{"by":2,"type":"increment"}"#)
        #expect(text(change?.state) == #"{"count":2}"#)
        #expect(change?.effect == nil)

        store.send(json: #"{"type":"increment"}"#) { $0.count = 3 }
        store.send(json: #"{"type":"increment","by":null}"#) { $0.count = 4 }
        store.send(json: #"{"type":"decrement"}"#) { $0.count = 3 }
        store.send(json: #"{"type":"decrement","by":5}"#) { $0.count = -2 }
        let set = store.send(json: #"{"type":"set","value":7}"#) { $0.count = 7 }
        #expect(text(set?.action) == #"{"type":"set","value":7}"#)
        store.finish()
    }

    @Test(arguments: [
        (#"{"type":"set"}"#, "the action 'set' is missing the field 'value'"),
        (#"{"type":"set","value":"7"}"#, "the field 'value' of action 'set' must be an integer"),
        (#"{"type":"increment","by":"2"}"#, "the field 'by' of action 'increment' must be an integer"),
        (#"{"type":"multiply","by":2}"#, "unknown action type 'multiply'"),
        (#"{"by":2}"#, "the action is missing the field 'type'"),
        // Issue 10 item 2: a typo is refused, naming the field; a fraction is not a whole number.
        (#"{"type":"increment","bye":5}"#, "the action 'increment' has no field 'bye'"),
        (#"{"type":"increment","by":1.5}"#, "the field 'by' of action 'increment' must be a whole number"),
    ])
    func malformedActionsAreInvalid(action: String, message: String) {
        let store = DefaultStateStore(feature: CounterFeature())
        #expect {
            _ = try store.dispatch(json: json(action), ifVersion: nil)
        } throws: { error in
            let error = error as? StoreError
            return error?.kind == .invalidAction && error?.message.hasPrefix(message) == true
        }
        #expect(store.version == 0)
    }

    @Test func overflowIsRejectedNeverATrap() {
        let store = TestStore(CounterFeature(), state: .init(count: Int.max))
        let message = store.sendRejected(.increment(by: nil))
        #expect(message == "incrementing \(Int.max) by 1 would overflow the counter (the largest count is \(Int.max))")
        store.sendRejected(.increment(by: Int.max))
        store.sendRejected(.decrement(by: -1))
        store.sendRejected(json: #"{"type":"increment"}"#)
        store.send(.increment(by: 0))
        store.send(.decrement(by: Int.max)) { $0.count = 0 }
        store.finish()
    }

    @Test func underflowIsRejectedNeverATrap() {
        let store = TestStore(CounterFeature(), state: .init(count: Int.min))
        let message = store.sendRejected(.decrement(by: nil))
        #expect(message == "decrementing \(Int.min) by 1 would overflow the counter (the smallest count is \(Int.min))")
        store.sendRejected(.increment(by: -1))
        store.sendRejected(json: #"{"type":"decrement","by":1}"#)
        store.send(.increment(by: Int.max)) { $0.count = -1 }
        store.finish()
    }

    @Test func decrementByIntMin() {
        // 0 - Int.min is Int.max + 1: an overflow, not a trap from negating Int.min.
        let store = TestStore(CounterFeature())
        store.sendRejected(.decrement(by: Int.min))
        store.send(.set(value: -1)) { $0.count = -1 }
        store.send(.decrement(by: Int.min)) { $0.count = Int.max }
        store.send(.set(value: 0)) { $0.count = 0 }
        store.send(.increment(by: Int.min)) { $0.count = Int.min }
        store.finish()
    }

    @Test func extremeValuesTravelThroughJSON() {
        let store = TestStore(CounterFeature())
        store.send(json: #"{"type":"set","value":9223372036854775807}"#) { $0.count = Int.max }
        store.sendRejected(json: #"{"type":"increment","by":1}"#)
        store.send(json: #"{"type":"set","value":-9223372036854775808}"#) { $0.count = Int.min }
        store.sendRejected(json: #"{"type":"decrement"}"#)
        store.finish()
    }
}
