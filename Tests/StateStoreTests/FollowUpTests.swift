import StateStore
import StateStoreTesting
import Testing

@Suite("Asynchronous work and follow-up actions")
struct FollowUpTests {
    @Test func workRunsOutsideTheStoreAndItsFollowUpIsObserved() async throws {
        let gate = Gate()
        let started = Recorder<Int>()
        let store = TestStore(Ledger(gate: gate, started: started))

        store.send(.startWork(id: 1))
        // The work is running and now waits at the gate...
        #expect(await started.wait(forCount: 1))
        // ...while the store keeps accepting dispatches.
        for expected in 1...10 {
            store.send(.add(amount: 1)) { $0.total = expected }
        }
        #expect(store.state.finished.isEmpty)

        gate.open()
        await store.receive(.finished(id: 1)) { $0.finished = [1] }
        #expect(store.store.version == 12)
        await store.finish()
    }

    @Test func eachDeclaredWorkSendsItsOwnFollowUp() async {
        let gate = Gate()
        let started = Recorder<Int>()
        let store = DefaultStateStore(feature: Ledger(gate: gate, started: started))
        let finished = Recorder<Int>()
        _ = store.addObserver { change in
            if case .dispatch(.finished(let id)) = change.cause { finished.append(id) }
        }
        for id in 1...5 { #expect(throws: Never.self) { try store.dispatch(.startWork(id: id)) } }
        #expect(await started.wait(forCount: 5))
        #expect(finished.values.isEmpty)
        gate.open()
        #expect(await finished.wait(forCount: 5))
        #expect(finished.values.sorted() == [1, 2, 3, 4, 5])
        #expect(store.state.finished.sorted() == [1, 2, 3, 4, 5])
        #expect(store.version == 10)
    }

    @Test func aRejectedFollowUpIsReportedAndAppliesNothing() async throws {
        let rejected = Recorder<StoreError>()
        let store = DefaultStateStore(feature: Ledger(), onFollowUpRejected: { rejected.append($0) })
        try store.dispatch(.startDoomedWork)
        #expect(await rejected.wait(forCount: 1))
        #expect(rejected.values == [StoreError(.actionRejected, "too late", currentVersion: 1)])
        #expect(store.version == 1)
    }

    @Test func withoutSideEffectsDeclaredWorkIsDropped() async throws {
        // The reducer does declare work for this action...
        let dispatcher = Dispatcher<Ledger.Action>()
        _ = try Ledger().reduce(.startWork(id: 1), state: Ledger().initialState, dispatch: dispatcher)
        #expect(dispatcher.take().works.count == 1)

        // ...but a replaying store drops it.
        let replayStarted = Recorder<Int>()
        let replay = DefaultStateStore(
            feature: Ledger(started: replayStarted), runsSideEffects: false)
        let change = try replay.dispatch(.startWork(id: 1))
        #expect(change.version == 1)

        // Control: the same action on a store that runs side effects starts its work and
        // gets its follow-up. Work started by the replaying store would be scheduled as early.
        let controlStarted = Recorder<Int>()
        let control = TestStore(Ledger(started: controlStarted))
        control.send(.startWork(id: 1))
        await control.receive(.finished(id: 1)) { $0.finished = [1] }
        await control.finish()

        #expect(controlStarted.values == [1])
        #expect(replayStarted.values.isEmpty)
        #expect(replay.version == 1)
        #expect(replay.state.finished.isEmpty)
    }

    @Test func workDeclaredByARejectedActionIsNotStarted() async throws {
        let started = Recorder<Int>()
        let store = DefaultStateStore(feature: Ledger(started: started))
        #expect(throws: StoreError(.actionRejected, "refused after declaring work", currentVersion: 0)) {
            try store.dispatch(.startWorkThenRefuse(id: 1))
        }
        // Control: work declared by an accepted action on the same store does start.
        let finished = Recorder<Int>()
        _ = store.addObserver { change in
            if case .dispatch(.finished(let id)) = change.cause { finished.append(id) }
        }
        try store.dispatch(.startWork(id: 2))
        #expect(await finished.wait(forCount: 1))
        #expect(started.values == [2])
        #expect(finished.values == [2])
    }
}
