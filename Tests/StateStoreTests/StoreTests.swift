import StateStore
import StateStoreTesting
import Synchronization
import Testing

@Suite("DefaultStateStore")
struct StoreTests {
    @Test func startsAtTheInitialStateAndVersionZero() {
        let store = DefaultStateStore(feature: Ledger())
        #expect(store.version == 0)
        #expect(store.state == Ledger().initialState)
    }

    @Test func startsFromARestoredStateAndVersion() throws {
        let restored = Ledger.State(total: 5, finished: [], ratio: 0)
        let store = DefaultStateStore(feature: Ledger(), state: restored, version: 7)
        #expect(store.current.state == restored)
        #expect(store.current.version == 7)
        let change = try store.dispatch(.add(amount: 1))
        #expect(change.version == 8)
        #expect(change.state.total == 6)
    }

    @Test("a store at the last version refuses every change (no overflow trap); restores refuse versions out of range")
    func lastVersion() throws {
        let store = DefaultStateStore(feature: Ledger(), version: StoreVersion.max - 1)
        #expect(try store.dispatch(.add(amount: 1)).version == StoreVersion.max)
        #expect(throws: StoreError.self) { try store.reset() }
        #expect(throws: StoreError.self) { try store.rehydrate(Ledger().initialState) }
        do {
            try store.dispatch(.add(amount: 1))
        } catch {
            #expect(error.kind == .invalidState && error.currentVersion == StoreVersion.max && error.message.contains("the last"))
        }
        #expect(store.current.version == StoreVersion.max && store.state.total == 1)
        let feature = try AnyFeature(Ledger())
        for version in [-1, StoreVersion.max + 1, Int.max] {
            #expect(throws: StoreError.self, "\(version)") {
                try feature.restoreStore(state: nil, stateVersion: 1, version: version)
            }
        }
        #expect(try feature.restoreStore(state: nil, stateVersion: 1, version: StoreVersion.max).currentJSON().version == StoreVersion.max)
    }

    @Test func everyChangeRaisesTheVersionByOne() throws {
        let store = DefaultStateStore(feature: Ledger())
        #expect(try store.dispatch(.add(amount: 2)).version == 1)
        #expect(try store.dispatch(.add(amount: 3)).version == 2)
        #expect(try store.rehydrate(.init(total: 9, finished: [], ratio: 0)).version == 3)
        #expect(try store.reset().version == 4)
        #expect(store.version == 4)
    }

    @Test func theTestStoreChecksEachChange() {
        let store = TestStore(Ledger())
        store.send(.add(amount: 2)) { $0.total = 2 }
        store.send(.add(amount: -5)) { $0.total = -3 }
        store.send(.announce(message: "hi"), effect: .toast(message: "hi"))
        store.sendRejected(.refuse(reason: "no"))
        store.send(.setRatio(value: 0.5)) { $0.ratio = 0.5 }
        store.finish()
    }

    @Test func aRejectedActionAppliesNothingAndCallsNoObserver() throws {
        let store = DefaultStateStore(feature: Ledger())
        let observed = Recorder<Int>()
        _ = store.addObserver { observed.append($0.version) }
        try store.dispatch(.add(amount: 1))
        #expect(throws: StoreError(.actionRejected, "not today", currentVersion: 1)) {
            try store.dispatch(.refuse(reason: "not today"))
        }
        #expect(store.current.version == 1)
        #expect(store.current.state.total == 1)
        #expect(observed.values == [1])
    }

    @Test func ifVersionAppliesOnlyAtThatVersion() throws {
        let store = DefaultStateStore(feature: Ledger())
        let observed = Recorder<Int>()
        _ = store.addObserver { observed.append($0.version) }

        #expect(try store.dispatch(.add(amount: 1), ifVersion: 0).version == 1)
        let conflict = StoreError(.versionConflict, "the store is at version 1, not 0", currentVersion: 1)
        #expect(throws: conflict) { try store.dispatch(.add(amount: 1), ifVersion: 0) }
        #expect(throws: conflict) { try store.rehydrate(.init(total: 9, finished: [], ratio: 0), ifVersion: 0) }
        #expect(throws: conflict) { try store.reset(ifVersion: 0) }
        #expect(throws: conflict) { try store.dispatch(json: json(#"{"type":"add","amount":1}"#), ifVersion: 0) }
        #expect(throws: conflict) { try store.resetJSON(ifVersion: 0) }
        #expect(throws: conflict) {
            try store.rehydrate(json: json(#"{"total":1,"finished":[],"ratio":0}"#), ifVersion: 0)
        }

        // Nothing was applied and nobody was told.
        #expect(store.current.version == 1)
        #expect(store.current.state.total == 1)
        #expect(observed.values == [1])

        #expect(try store.dispatch(.add(amount: 1), ifVersion: 1).version == 2)
        #expect(try store.reset(ifVersion: 2).version == 3)
        #expect(observed.values == [1, 2, 3])
    }

    @Test func aVersionConflictDoesNotStartDeclaredWork() async throws {
        let started = Recorder<Int>()
        let store = DefaultStateStore(feature: Ledger(started: started))
        #expect(throws: StoreError.self) { try store.dispatch(.startWork(id: 1), ifVersion: 5) }
        // Control: the same action at the right version starts its work.
        try store.dispatch(.startWork(id: 2), ifVersion: 0)
        #expect(await started.wait(forCount: 1))
        #expect(started.values == [2])
    }

    @Test func concurrentDispatchesAreAppliedOneAtATime() async throws {
        let store = DefaultStateStore(feature: Ledger())
        let observed = Recorder<Int>()
        _ = store.addObserver { observed.append($0.version) }
        let jsonObserved = Recorder<Int>()
        _ = store.addJSONObserver { jsonObserved.append($0.version) }

        let versions = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<1000 {
                group.addTask {
                    // Half typed, half JSON: both paths take the same lock.
                    if index.isMultiple(of: 2) {
                        return try store.dispatch(.add(amount: 1)).version
                    } else {
                        return try store.dispatch(json: json(#"{"type":"add","amount":1}"#), ifVersion: nil).version
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }

        #expect(versions.sorted() == Array(1...1000))
        #expect(observed.values == Array(1...1000))
        #expect(jsonObserved.values == Array(1...1000))
        #expect(store.current.version == 1000)
        #expect(store.current.state.total == 1000)
    }

    @Test func rehydrateReplacesTheStateWithCauseRehydrate() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.dispatch(.add(amount: 1))
        let saved = Ledger.State(total: 42, finished: [7], ratio: 0.25)
        let change = try store.rehydrate(saved)
        #expect(change.version == 2)
        #expect(change.state == saved)
        #expect(change.effect == nil)
        #expect(change.cause.name == "rehydrate")
        #expect(store.state == saved)
    }

    @Test func resetReturnsToTheInitialStateWithCauseReset() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.dispatch(.add(amount: 5))
        try store.dispatch(.add(amount: 5))
        let change = try store.reset()
        #expect(change.version == 3)
        #expect(change.state == Ledger().initialState)
        #expect(change.cause.name == "reset")
        #expect(store.state == Ledger().initialState)
    }

    @Test func theCauseCarriesTheDispatchedAction() throws {
        let store = DefaultStateStore(feature: Ledger())
        let change = try store.dispatch(.add(amount: 4))
        guard case .dispatch(let action) = change.cause else {
            Issue.record("expected a dispatch, got \(change.cause.name)")
            return
        }
        #expect(action == .add(amount: 4))
        #expect(change.cause.name == "dispatch")
    }

    @Test func anEffectIsDeliveredOnlyWithTheChangeThatProducedIt() throws {
        let store = DefaultStateStore(feature: Ledger())
        let effects = Recorder<Ledger.Effect?>()
        _ = store.addObserver { effects.append($0.effect) }

        let announced = try store.dispatch(.announce(message: "saved"))
        #expect(announced.effect == .toast(message: "saved"))
        let next = try store.dispatch(.add(amount: 1))
        #expect(next.effect == nil)
        try store.rehydrate(store.state)
        try store.reset()

        #expect(effects.values == [.toast(message: "saved"), nil, nil, nil])
    }

    @Test func observersAreCalledInTheOrderTheyWereAdded() throws {
        let store = DefaultStateStore(feature: Ledger())
        let log = Recorder<String>()
        let first = store.addObserver { log.append("first \($0.version)") }
        let second = store.addObserver { log.append("second \($0.version)") }
        let json = store.addJSONObserver { log.append("json \($0.version)") }
        let third = store.addObserver { log.append("third \($0.version)") }
        #expect(Set([first, second, json, third]).count == 4)

        try store.dispatch(.add(amount: 1))
        #expect(log.values == ["first 1", "second 1", "third 1", "json 1"])

        store.removeObserver(second)
        store.removeObserver(json)
        try store.dispatch(.add(amount: 1))
        #expect(log.values.dropFirst(4) == ["first 2", "third 2"])

        store.removeObserver(first)
        store.removeObserver(third)
        store.removeObserver(third)  // removing twice is harmless
        try store.dispatch(.add(amount: 1))
        #expect(log.count == 6)
    }

    @Test func observersSeeChangesOfEveryCause() throws {
        let store = DefaultStateStore(feature: Ledger())
        let causes = Recorder<String>()
        _ = store.addObserver { causes.append("\($0.version) \($0.cause.name)") }
        try store.dispatch(.add(amount: 1))
        try store.rehydrate(.init(total: 3, finished: [], ratio: 0))
        try store.reset()
        _ = try store.dispatch(json: json(#"{"type":"add","amount":1}"#), ifVersion: nil)
        _ = try store.rehydrate(json: json(#"{"total":2,"finished":[],"ratio":0}"#), ifVersion: nil)
        _ = try store.resetJSON(ifVersion: nil)
        #expect(causes.values == ["1 dispatch", "2 rehydrate", "3 reset", "4 dispatch", "5 rehydrate", "6 reset"])
    }

    @Test func aStateThatCannotBeEncodedIsNotApplied() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.dispatch(.setRatio(value: 0.5))
        // Every change is encoded (the size ceiling is checked on the JSON), observed or not.
        #expect(throws: StoreError.self) { try store.dispatch(.setRatio(value: .nan)) }
        #expect(store.current.version == 1)
        try store.dispatch(.setRatio(value: 0))

        let encoded = Recorder<Int>()
        _ = store.addJSONObserver { encoded.append($0.version) }
        #expect {
            try store.dispatch(.setRatio(value: .infinity))
        } throws: { error in
            (error as? StoreError)?.kind == .encodingFailed && (error as? StoreError)?.currentVersion == 2
        }
        #expect(store.current.version == 2)
        #expect(store.current.state.ratio == 0)
        #expect(encoded.values.isEmpty)
    }
}

@Suite("State size ceiling and client rehydrate")
struct LimitTests {
    @Test func aChangeOverTheCeilingIsRefusedAndAppliesNothing() throws {
        // {"notes":["..."]} is 13 bytes plus the text.
        let store = DefaultStateStore(feature: Notes(maxStateBytes: 40))
        try store.dispatch(.add(text: String(repeating: "a", count: 26)))  // exactly 40 bytes
        #expect(try store.currentJSON().state.count == 40)
        #expect {
            try store.dispatch(.add(text: ""))
        } throws: { error in
            let error = error as? StoreError
            return error?.kind == .actionRejected && error?.currentVersion == 1
                && error?.message == "the state of notes would take 43 bytes as JSON, more than its limit of 40"
        }
        #expect(store.version == 1)
        // A rehydrate over it is an invalid state; the same through a prepared change.
        let big = json(#"{"notes":["\#(String(repeating: "b", count: 40))"]}"#)
        #expect(throws: StoreError.self) { try store.rehydrate(json: big, ifVersion: nil) }
        #expect((try? store.prepareRehydrate(json: big, ifVersion: nil)) == nil)
        do { _ = try store.prepareDispatch(json: json(#"{"type":"add","text":"x"}"#), ifVersion: nil) } catch {
            #expect(error.kind == .actionRejected)
        }
        do { _ = try store.rehydrate(json: big, ifVersion: nil) } catch {
            #expect(error.kind == .invalidState)
        }
        #expect(store.version == 1)
    }

    @Test func replayedHistoryIsNotHeldToTheCeiling() throws {
        let store = DefaultStateStore(feature: Notes(maxStateBytes: 20))
        try store.replay(cause: "dispatch", payload: Array(#"{"type":"add","text":"over twenty bytes of state"}"#.utf8))
        #expect(store.version == 1)
    }

    @Test func theDefaultCeilingIsOneMebibyte() throws {
        #expect(Ledger().maxStateBytes == 1 << 20)
        #expect(defaultMaxStateBytes == 1_048_576)
    }

    @Test func aClientRehydrateGoesThroughTheFeaturesRuleButTheServersOwnDoesNot() throws {
        let store = DefaultStateStore(feature: Ledger())
        try store.dispatch(.finished(id: 7))
        // The client's: `finished` is server-owned and kept; a refused state is invalid_state.
        let change = try store.rehydrate(json: json(#"{"total":3,"finished":[1,2],"ratio":0.5}"#), ifVersion: nil)
        #expect(store.state == .init(total: 3, finished: [7], ratio: 0.5))
        #expect(text(change.state) == #"{"finished":[7],"ratio":0.5,"total":3}"#)
        let prepared = try store.prepareRehydrate(json: json(#"{"total":4,"finished":[],"ratio":0}"#), ifVersion: nil)
        #expect(store.commit(prepared, startWork: true))
        #expect(store.state == .init(total: 4, finished: [7], ratio: 0))
        do { _ = try store.rehydrate(json: json(#"{"total":-1,"finished":[],"ratio":0}"#), ifVersion: nil) } catch {
            #expect(error.kind == .invalidState)
            #expect(error.message == "ledger does not accept this state from a client: total must not be negative")
        }
        #expect(store.version == 3)
        // The server's own: the typed rehydrate and journal replay restore the state as given.
        try store.rehydrate(.init(total: -1, finished: [1], ratio: 0))
        #expect(store.state == .init(total: -1, finished: [1], ratio: 0))
        try store.replay(cause: "rehydrate", payload: Array(#"{"total":-2,"finished":[2],"ratio":0}"#.utf8))
        #expect(store.state == .init(total: -2, finished: [2], ratio: 0))
    }
}
