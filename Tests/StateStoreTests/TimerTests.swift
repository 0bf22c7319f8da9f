import StateStore
import StateStoreTesting
import Testing

/// Timers in the store core: scheduling is part of the change, ids are unique per store, and a
/// timer fires once, through the change path, as a change of cause `timer`.
@Suite("Timers in the store")
struct TimerTests {
    let clock = ManualMilliseconds()

    func makeStore(maxPending: Int = TimerPolicy.defaultMaxPending) -> DefaultStateStore<Reminders> {
        DefaultStateStore(feature: Reminders(), timers: clock.policy(maxPending: maxPending))
    }

    /// Fires the pending timer `id` through the firing path and commits it.
    @discardableResult
    func fire(_ id: String, in store: DefaultStateStore<Reminders>) throws -> EncodedChange? {
        guard let timer = store.pendingTimers.first(where: { $0.id == id }),
            let prepared = try store.prepareTimer(id: id, due: timer.due)
        else { return nil }
        #expect(store.commit(prepared, startWork: true))
        return prepared.encoded
    }

    @Test func aScheduledTimerIsPendingWithItsDueTimeAndTheChangeSaysSo() throws {
        let store = makeStore()
        let encoded = try store.dispatch(json: json(#"{"type":"add","text":"call Ada","remindIn":60}"#), ifVersion: nil)
        let timer = try #require(store.pendingTimers.first)
        #expect(store.pendingTimers.count == 1)
        #expect(timer.id == "remind-1")
        #expect(timer.scheduledAt == clock.now)
        #expect(timer.due == clock.now + 60_000)
        #expect(text(timer.publicAction) == #"{"id":1,"type":"remind"}"#)
        #expect(encoded.timers == TimerChanges(set: [timer]))
    }

    @Test func schedulingAnIdAgainReplacesItsTimer() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "call Ada", remindIn: 60))
        clock.advance(by: 1_000)
        let change = try store.dispatch(json: json(#"{"type":"snooze","id":1,"seconds":600}"#), ifVersion: nil)
        #expect(store.pendingTimers.map(\.id) == ["remind-1"])
        #expect(store.pendingTimers.first?.due == clock.now + 600_000)
        #expect(change.timers?.set.map(\.id) == ["remind-1"])
        #expect(change.timers?.removed == [])
    }

    @Test func cancelByIdRemovesTheTimerAndCancellingNothingChangesNoTimers() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: 60))
        try store.dispatch(.add(text: "b", remindIn: 30))
        let dismissed = try store.dispatch(json: json(#"{"type":"dismiss","id":1}"#), ifVersion: nil)
        #expect(dismissed.timers == TimerChanges(removed: ["remind-1"]))
        #expect(store.pendingTimers.map(\.id) == ["remind-2"])
        let nothing = try store.dispatch(json: json(#"{"type":"cancel","id":"remind-9"}"#), ifVersion: nil)
        #expect(nothing.timers == nil)
        #expect(store.pendingTimers.map(\.id) == ["remind-2"])
    }

    @Test func timersAreListedDueFirstThenById() throws {
        let store = makeStore()
        try store.dispatch(.schedule(ids: ["b", "a"], milliseconds: 500))
        try store.dispatch(.schedule(ids: ["c"], milliseconds: 100))
        #expect(store.pendingTimers.map(\.id) == ["c", "a", "b"])
    }

    @Test func aRefusedOrUncommittedChangeSchedulesNothing() throws {
        let store = makeStore()
        #expect(throws: StoreError.self) { try store.dispatch(.scheduleThenRefuse(id: "x")) }
        #expect(store.pendingTimers.isEmpty)
        // Prepared and never committed (storage failed, say): nothing is scheduled.
        _ = try store.prepare(.add(text: "a", remindIn: 5), ifVersion: nil)
        #expect(store.pendingTimers.isEmpty)
        #expect(store.version == 0)
    }

    @Test("the limit of pending timers refuses the change that would pass it, naming the limit")
    func limit() throws {
        let store = makeStore()
        let thousand = (0..<TimerPolicy.defaultMaxPending).map { "t\($0)" }
        try store.dispatch(.schedule(ids: thousand, milliseconds: 1_000))
        #expect(store.pendingTimers.count == 1_000)
        do {
            try store.dispatch(.schedule(ids: ["one-more"], milliseconds: 1_000))
            Issue.record("the 1,001st timer was scheduled")
        } catch {
            #expect(error.kind == .actionRejected)
            #expect(error.message.contains("1001 timers pending in reminders, more than its limit of 1000"), "\(error.message)")
            #expect(error.currentVersion == 1)
        }
        #expect(store.version == 1 && store.pendingTimers.count == 1_000)
        // At the limit, replacing and cancelling still work.
        try store.dispatch(.schedule(ids: ["t0"], milliseconds: 5_000))
        try store.dispatch(.cancel(id: "t1"))
        try store.dispatch(.schedule(ids: ["one-more"], milliseconds: 1_000))
        #expect(store.pendingTimers.count == 1_000)
    }

    @Test func aLowerLimitFromThePolicy() throws {
        let store = makeStore(maxPending: 2)
        try store.dispatch(.schedule(ids: ["a", "b"], milliseconds: 10))
        #expect(throws: StoreError.self) { try store.dispatch(.schedule(ids: ["c"], milliseconds: 10)) }
        // Replacing a timer at the limit holds no more of them.
        #expect(throws: Never.self) { try store.dispatch(.schedule(ids: ["a"], milliseconds: 20)) }
    }

    @Test(
        "delays from 0 s to 366 days, ids of 1 to 256 bytes",
        arguments: [
            (0, "now", true), (366 * 86_400_000, "a-year", true), (-1, "past", false),
            (366 * 86_400_000 + 1, "too-late", false), (10, "", false),
            (10, String(repeating: "i", count: 256), true), (10, String(repeating: "i", count: 257), false),
        ])
    func bounds(milliseconds: Int, id: String, accepted: Bool) throws {
        let store = makeStore()
        do {
            try store.dispatch(.schedule(ids: [id], milliseconds: milliseconds))
            #expect(accepted, "scheduled")
            #expect(store.pendingTimers.first?.due == clock.now + Int64(milliseconds))
        } catch {
            #expect(!accepted, "\(error)")
            #expect(error.kind == .actionRejected)
            #expect(error.message.contains(id.isEmpty || id.count > 256 ? "id must be 1 to 256 bytes" : "0 s to 366 days"), "\(error.message)")
            #expect(store.version == 0 && store.pendingTimers.isEmpty)
        }
    }

    @Test func firingAppliesTheActionAsCauseTimerAndRemovesTheTimer() throws {
        let store = makeStore()
        let observed = Recorder<StoreChange<Reminders.State, Reminders.Action, Reminders.Effect>>()
        _ = store.addObserver { observed.append($0) }
        try store.dispatch(.add(text: "call Ada", remindIn: 60))
        let timer = try #require(store.pendingTimers.first)
        let fired = try #require(try fire("remind-1", in: store))
        #expect(fired.cause == "timer")
        #expect(fired.timers == TimerChanges(removed: ["remind-1"]))
        #expect(
            text(fired.action)
                == #"{"id":"remind-1","action":{"id":1,"type":"remind"},"due":\#(timer.due),"scheduledAt":\#(timer.scheduledAt)}"#)
        #expect(text(fired.effect) == #"{"text":"call Ada","type":"reminder"}"#)
        let change = try #require(observed.values.last)
        guard case .timer(let id, let action) = change.cause else {
            Issue.record("cause \(change.cause.name)")
            return
        }
        #expect(id == "remind-1" && action == .remind(id: 1))
        #expect(change.state.items.first?.reminded == true)
        #expect(store.pendingTimers.isEmpty)
        // It fires once: it is no longer pending.
        #expect(try store.prepareTimer(id: "remind-1", due: timer.due) == nil)
    }

    @Test func aFiringPreparedForAnOlderDueTimeIsNothingOnceTheTimerIsReplaced() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: 60))
        let old = try #require(store.pendingTimers.first)
        let stale = try #require(try store.prepareTimer(id: old.id, due: old.due))
        clock.advance(by: 1)
        try store.dispatch(.snooze(id: 1, seconds: 60))
        #expect(try store.prepareTimer(id: old.id, due: old.due) == nil)
        // Prepared before the replacement: its commit applies nothing (the store moved on).
        #expect(!store.commit(stale, startWork: true))
        #expect(store.pendingTimers.first?.due == old.due + 1)
    }

    @Test func aTimerWhoseActionIsRefusedIsConsumedKeepingTheState() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: 60))
        try store.dispatch(.dismiss(id: 1))
        try store.dispatch(.snooze(id: 1, seconds: 1))  // a reminder for an item that is gone
        let before = store.state
        let fired = try #require(try fire("remind-1", in: store))
        #expect(fired.version == 4 && fired.cause == "timer")
        #expect(store.state == before)
        #expect(store.pendingTimers.isEmpty)
    }

    @Test func aFiringThatReschedulesItsOwnIdKeepsItPending() throws {
        let store = makeStore()
        try store.dispatch(.tick(remaining: 2))
        clock.advance(by: 1_000)
        let fired = try #require(try fire("tick", in: store))
        #expect(fired.timers?.set.map(\.id) == ["tick"])
        #expect(fired.timers?.removed == [])
        #expect(store.pendingTimers.first?.due == clock.now + 1_000)
        #expect(store.state.ticks == 2)
    }

    @Test(arguments: ["reset", "rehydrate", "client rehydrate", "travel", "import"])
    func aChangeThatSetsAWholeStateCancelsEveryTimer(_ how: String) throws {
        let store = makeStore()
        let encoded = Recorder<EncodedChange>()
        _ = store.addJSONObserver { encoded.append($0) }
        try store.dispatch(.add(text: "a", remindIn: 60))
        try store.dispatch(.tick(remaining: 1))
        let state = json(#"{"items":[],"ticks":7}"#)
        switch how {
        case "reset": _ = try store.resetJSON(ifVersion: nil)
        case "rehydrate": try store.rehydrate(.init(items: [], ticks: 7))
        case "client rehydrate": _ = try store.rehydrate(json: state, ifVersion: nil)
        case "travel": #expect(store.commit(try store.prepareTravel(json: state, ifVersion: nil), startWork: true))
        default: #expect(store.commit(try store.prepareImport(json: state, asRecorded: true), startWork: true))
        }
        #expect(store.pendingTimers.isEmpty)
        #expect(encoded.values.last?.timers == TimerChanges(clearsAll: true))
        // With none pending, such a change changes no timers.
        _ = try store.resetJSON(ifVersion: nil)
        #expect(encoded.values.last?.timers == nil)
    }

    /// A change held ahead (handed to storage) and dropped after a failed commit: the store's
    /// timers are the committed ones again, so the timer it cancelled still fires and the next
    /// change is computed on them.
    @Test func droppingTheChangesAheadRestoresTheCommittedTimers() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: 60))
        let timer = try #require(store.pendingTimers.first)
        let cancelling = try store.prepare(.dismiss(id: 1), ifVersion: nil)
        #expect(cancelling.advance())
        #expect(try store.prepareTimer(id: timer.id, due: timer.due) == nil, "held ahead, the timer is cancelled")
        store.dropAhead()
        #expect(try store.prepareTimer(id: timer.id, due: timer.due) != nil, "the cancel was not committed")
        // The next change is computed on the committed timer: cancelling it removes it.
        let again = try store.dispatch(json: json(#"{"type":"dismiss","id":1}"#), ifVersion: nil)
        #expect(again.timers == TimerChanges(removed: ["remind-1"]))
        #expect(store.pendingTimers.isEmpty)
    }

    @Test func changesAheadAreComputedOnTheTimersAheadAndCommitInOrder() throws {
        let store = makeStore()
        let scheduling = try store.prepare(.add(text: "a", remindIn: 60), ifVersion: nil)
        #expect(scheduling.advance())
        let cancelling = try store.prepare(.dismiss(id: 1), ifVersion: nil)
        #expect(cancelling.encoded.timers == TimerChanges(removed: ["remind-1"]))
        #expect(cancelling.advance())
        #expect(store.pendingTimers.isEmpty, "nothing committed yet")
        #expect(store.commit(scheduling, startWork: true))
        #expect(store.pendingTimers.map(\.id) == ["remind-1"])
        #expect(store.commit(cancelling, startWork: true))
        #expect(store.pendingTimers.isEmpty)
    }

    @Test func restoredTimersFireLikeScheduledOnes() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: nil))
        let action = Array(#"{"type":"remind","id":1}"#.utf8)
        store.restoreTimers([PendingTimer(id: "remind-1", action: action, publicAction: action, due: 5, scheduledAt: 1)])
        #expect(store.pendingTimers.map(\.id) == ["remind-1"])
        #expect(try fire("remind-1", in: store)?.cause == "timer")
        #expect(store.state.items.first?.reminded == true)
    }

    @Test func aJournaledFiringReplaysThroughTheReducer() throws {
        let store = makeStore()
        try store.dispatch(.add(text: "a", remindIn: 60))
        let fired = try #require(try fire("remind-1", in: store))
        let replica = makeStore()
        try replica.dispatch(.add(text: "a", remindIn: 60))
        try replica.replay(cause: "timer", payload: fired.action)
        #expect(replica.state == store.state)
        #expect(replica.pendingTimers.isEmpty)
    }
}
