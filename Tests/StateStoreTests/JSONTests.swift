import StateStore
import StateStoreTesting
import Testing

@Suite("The store seen through JSON")
struct JSONTests {
    /// Dispatches `action` and returns the error, expecting nothing to be applied.
    private func rejection(_ action: String) -> StoreError? {
        let store = DefaultStateStore(feature: Ledger())
        do {
            _ = try store.dispatch(json: json(action), ifVersion: nil)
            Issue.record("\(action) was applied")
            return nil
        } catch {
            #expect(store.version == 0)
            return error
        }
    }

    @Test(arguments: [
        (#"{"type":"nope"}"#, "unknown action type 'nope'"),
        (#"{"type":"add"}"#, "the action 'add' is missing the field 'amount'"),
        (#"{"type":"add","amount":"two"}"#, "the field 'amount' of action 'add' must be an integer"),
        (#"{"type":"add","amount":null}"#, "the field 'amount' of action 'add' must be an integer, not null"),
        (#"{"type":"label","text":5}"#, "the field 'text' of action 'label' must be a string"),
        (#"[{"type":"add","amount":1}]"#, "the action must be a JSON object, not array"),
        (#""add""#, "the action must be a JSON object, not string"),
        (#"{"amount":1}"#, "the action is missing the field 'type'"),
        (#"{"type":3,"amount":1}"#, "the action's field 'type' must be a string, not number"),
    ])
    func anActionThatDoesNotDecodeIsInvalid(action: String, message: String) throws {
        let error = try #require(rejection(action))
        #expect(error.kind == .invalidAction)
        #expect(error.message.hasPrefix(message), "\(error.message)")
        #expect(error.currentVersion == 0)
    }

    @Test func aFractionalNumberForAnIntegerFieldIsInvalid() throws {
        let error = try #require(rejection(#"{"type":"add","amount":1.5}"#))
        #expect(error.kind == .invalidAction)
        // On Linux, Foundation's JSONDecoder reports a non-integer number for an Int without
        // the field's key; the core names the action's non-integer numbers instead.
        #expect(error.message.contains("'amount'"), "\(error.message)")
    }

    @Test func optionalFieldsMayBeMissingOrNull() throws {
        let store = DefaultStateStore(feature: Ledger())
        _ = try store.dispatch(json: json(#"{"type":"label"}"#), ifVersion: nil)
        _ = try store.dispatch(json: json(#"{"type":"label","text":null}"#), ifVersion: nil)
        _ = try store.dispatch(json: json(#"{"type":"add","amount":3}"#), ifVersion: nil)
        #expect(store.version == 3)
        #expect(store.state.total == 3)
    }

    /// Issue 10 item 2: a typo must not change state silently.
    @Test(arguments: [
        (#"{"type":"add","amount":3,"extra":true}"#, "the action 'add' has no field 'extra'"),
        (#"{"type":"add","amonut":3,"amount":1,"bye":0}"#, "the action 'add' has no fields 'amonut', 'bye'"),
        (#"{"type":"label","txt":"x"}"#, "the action 'label' has no field 'txt'"),
    ])
    func unknownFieldsAreInvalidAndNamed(action: String, message: String) throws {
        let error = try #require(rejection(action))
        #expect(error == StoreError(.invalidAction, message, currentVersion: 0))
        let prepared = Result { () throws(StoreError) in
            try DefaultStateStore(feature: Ledger()).prepareDispatch(json: json(action), ifVersion: nil)
        }
        if case .failure(let error) = prepared { #expect(error.message == message) } else { Issue.record("prepared") }
    }

    @Test func aLenientFeatureIgnoresUnknownFields() throws {
        struct Lenient: Feature {
            let name = "lenient"
            let initialState = 0
            var ignoresUnknownActionFields: Bool { true }
            enum Action: Codable, Sendable { case add(amount: Int) }
            func reduce(_ action: Action, state: Int, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<Int, Never> {
                switch action { case .add(let amount): StateContainer(state + amount) }
            }
        }
        let store = DefaultStateStore(feature: Lenient())
        _ = try store.dispatch(json: json(#"{"type":"add","amount":3,"extra":true}"#), ifVersion: nil)
        #expect(store.state == 3)
    }

    @Test func journalReplayIsNotHeldToTheUnknownFieldRule() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.replay(cause: "dispatch", payload: Array(#"{"type":"add","amount":2,"old":1}"#.utf8))
        #expect(store.state.total == 2)
    }

    /// Issue 10 item 2: `1.5` for an integer is "must be a whole number", not "does not fit".
    @Test(arguments: [
        (#"{"type":"add","amount":1.5}"#, "the field 'amount' of action 'add' must be a whole number"),
        (#"{"type":"add","amount":-0.25}"#, "the field 'amount' of action 'add' must be a whole number"),
        (#"{"type":"add","amount":1e30}"#, "the field 'amount' of action 'add' must be a whole number that fits in 64 bits"),
    ])
    func numbersThatAreNotIntegersSayWhy(action: String, message: String) throws {
        let error = try #require(rejection(action))
        #expect(error == StoreError(.invalidAction, message, currentVersion: 0))
    }

    @Test func aRejectionThroughJSONKeepsTheReducersMessage() {
        let error = rejection(#"{"type":"refuse","reason":"closed on Sundays"}"#)
        #expect(error == StoreError(.actionRejected, "closed on Sundays", currentVersion: 0))
    }

    @Test func anEncodedChangeHasTaggedActionAndEffect() throws {
        let store = DefaultStateStore(feature: Ledger(name: "books"))
        let change = try store.dispatch(json: json(#"{"type":"announce","message":"hi"}"#), ifVersion: nil)
        #expect(change.feature == "books")
        #expect(change.version == 1)
        #expect(change.cause == "dispatch")
        #expect(text(change.action) == #"{"message":"hi","type":"announce"}"#)
        #expect(text(change.effect) == #"{"message":"hi","type":"toast"}"#)
        #expect(text(change.state) == #"{"finished":[],"ratio":0,"total":0}"#)

        let next = try store.dispatch(json: json(#"{"type":"add","amount":2}"#), ifVersion: nil)
        #expect(text(next.action) == #"{"amount":2,"type":"add"}"#)
        #expect(next.effect == nil)
        #expect(text(next.state) == #"{"finished":[],"ratio":0,"total":2}"#)

        // A case without associated values is a bare tag.
        let bare = try store.dispatch(json: json(#"{"type":"startDoomedWork"}"#), ifVersion: nil)
        #expect(text(bare.action) == #"{"type":"startDoomedWork"}"#)
    }

    @Test func jsonObserversGetTheSameBytesAsTheCaller() throws {
        let store = DefaultStateStore(feature: Ledger())
        let observed = Recorder<EncodedChange>()
        _ = store.addJSONObserver { observed.append($0) }

        let change = try store.dispatch(json: json(#"{"type":"announce","message":"hi"}"#), ifVersion: nil)
        // A typed dispatch is encoded for JSON observers too.
        try store.dispatch(.add(amount: 5))

        let values = observed.values
        try #require(values.count == 2)
        #expect(values[0].state == change.state)
        #expect(values[0].action == change.action)
        #expect(values[0].effect == change.effect)
        #expect(values[0].version == 1)
        #expect(values[1].version == 2)
        #expect(values[1].cause == "dispatch")
        #expect(text(values[1].action) == #"{"amount":5,"type":"add"}"#)
        #expect(values[1].effect == nil)
        #expect(text(values[1].state) == #"{"finished":[],"ratio":0,"total":5}"#)
    }

    @Test func currentJSONIsTheStateAndVersion() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.dispatch(.add(amount: 3))
        let current = try store.currentJSON()
        #expect(text(current.state) == #"{"finished":[],"ratio":0,"total":3}"#)
        #expect(current.version == 1)
    }

    @Test func rehydrateAndResetThroughJSON() throws {
        let store = DefaultStateStore(feature: Ledger())
        let rehydrated = try store.rehydrate(json: json(#"{"total":8,"finished":[1,2],"ratio":0.5}"#), ifVersion: 0)
        #expect(rehydrated.cause == "rehydrate")
        #expect(rehydrated.version == 1)
        #expect(rehydrated.action == nil)
        #expect(rehydrated.effect == nil)
        // `finished` is server-owned in Ledger (its client rehydrate rule keeps the current one).
        #expect(text(rehydrated.state) == #"{"finished":[],"ratio":0.5,"total":8}"#)
        #expect(store.state == Ledger.State(total: 8, finished: [], ratio: 0.5))

        let reset = try store.resetJSON(ifVersion: 1)
        #expect(reset.cause == "reset")
        #expect(reset.version == 2)
        #expect(reset.action == nil)
        #expect(text(reset.state) == #"{"finished":[],"ratio":0,"total":0}"#)
    }

    @Test(arguments: [
        (#"{"total":"eight","finished":[],"ratio":0}"#, "total"),
        (#"{"finished":[],"ratio":0}"#, "total"),
        (#"{"total":1,"finished":["x"],"ratio":0}"#, "finished[0]"),
        (#"[1,2]"#, "state"),
        (#"null"#, "state"),
    ])
    func aStateThatDoesNotDecodeIsInvalid(state: String, field: String) throws {
        let store = DefaultStateStore(feature: Ledger())
        let observed = Recorder<Int>()
        _ = store.addObserver { observed.append($0.version) }
        do {
            _ = try store.rehydrate(json: json(state), ifVersion: nil)
            Issue.record("\(state) was accepted")
        } catch {
            #expect(error.kind == .invalidState)
            #expect(error.message.contains(field), "\(error.message)")
            #expect(error.currentVersion == 0)
        }
        #expect(store.version == 0)
        #expect(store.state == Ledger().initialState)
        #expect(observed.values.isEmpty)
    }
}
