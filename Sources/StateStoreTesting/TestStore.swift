import StateStore
import Synchronization
import Testing

/// An exhaustive test store for a ``StateStore/Feature``, in the spirit of The Composable
/// Architecture's `TestStore`, for tests written with Swift Testing.
///
/// Every change the store makes must be asserted: `send` dispatches an action and checks the
/// resulting state (described as a mutation of the previous one) and effect; `receive` waits
/// for a follow-up action sent by asynchronous work and checks it the same way; `advance(by:)`
/// moves the store's test clock and fires the timers the reducer scheduled that are due, each
/// checked by `receive(timer:)`; `finish` fails the test if a change was left unchecked, a
/// follow-up was rejected, work is still running or timers are still pending.
///
/// ## Testing a feature
///
/// The feature's `State`, `Action` and `Effect` must be `Equatable`. Create a `TestStore` with
/// the feature (and, if you like, a starting state), then walk through the actions a user or the
/// feature's own work would send:
///
/// - `send(_:effect:_:)` dispatches an action. The trailing closure receives the state before
///   the action and changes it into the state you expect after it; leave it out when the state
///   must not change. Pass `effect:` when the change must carry a one-shot effect (a toast),
///   otherwise the change must have none.
/// - `sendRejected(_:)` dispatches an action the reducer must refuse (``StateStore/ActionRejected``)
///   and checks that nothing changed; it returns the rejection message.
/// - `await receive(_:effect:timeout:_:)` waits for the next follow-up action that the feature's
///   asynchronous work (`dispatch.run { send in ... }`) sends back, and checks it like `send`.
/// - `advance(by:)` moves the store's ``TestClock`` forward and fires, in due order, every timer
///   (``StateStore/Dispatcher/schedule(_:after:id:)``) due by then, each as a change of cause
///   `timer`; `await receive(timer:action:effect:timeout:_:)` checks each firing like `receive`.
/// - `finish()` at the end fails the test when a change was not asserted by `send` or
///   `receive`, when the store rejected a follow-up action, when declared work is still
///   running (it could still send something nobody checks), or when timers are still pending
///   (they would still fire): advance the clock to fire them, cancel them, or accept them with
///   `finish(pendingTimers: .ignore)` or `.expect(["id"])`. In an async test,
///   `await finish(timeout:)` first lets running work end (at most `timeout`); work that is
///   cancelled (``StateStore/Dispatcher/cancel(id:)``, a reset) counts as ended.
///
/// Timers are due by the store's ``clock`` (a ``TestClock``, a new one unless you pass one):
/// nothing fires until the test advances it. Work that waits (a delay) can be given the same
/// clock, so the test advances time instead of waiting for it; `advance(by:)` wakes it too.
///
/// The `send(json:)` and `sendRejected(json:)` forms take the tagged JSON a client sends
/// (`{"type": "increment", "by": 2}`), to test the wire shape of actions too.
///
/// A failed expectation is recorded as a test issue at the line of the step; the store then
/// carries on from its actual state, so one wrong step does not fail every later one.
///
/// ```swift
/// import StateStoreTesting
/// import Testing
///
/// @Test func counting() {
///     let store = TestStore(CounterFeature())
///     store.send(.increment(by: 2)) { $0.count = 2 }
///     store.send(.set(value: 7)) { $0.count = 7 }
///     store.sendRejected(.increment(by: .max))  // would overflow: refused, nothing changes
///     store.finish()
/// }
///
/// @Test func loggingIn() async {
///     let clock = TestClock()
///     let store = TestStore(LoginFeature(checkDelay: .seconds(1), clock: clock))
///     store.send(.submit(username: "ada", password: "correct horse")) {
///         $0.username = "ada"
///         $0.isLoading = true
///     }
///     // The password check runs asynchronously, waits a second on the clock, and sends
///     // `.succeeded` back.
///     #expect(await clock.waitForSleepers(count: 1))
///     clock.advance(by: .seconds(1))
///     await store.receive(.succeeded) {
///         $0.isLoading = false
///         $0.isLoggedIn = true
///     }
///     await store.finish()
/// }
///
/// @Test func remindingLater() async {
///     let store = TestStore(RemindersFeature())
///     // The reducer schedules `.remind(id: 1)` in an hour, under the id "remind-1".
///     store.send(.add(text: "call Ada", remindIn: .seconds(3600))) {
///         $0.items = [.init(id: 1, text: "call Ada")]
///     }
///     store.advance(by: .seconds(3600))
///     await store.receive(timer: "remind-1") { $0.items[0].reminded = true }
///     await store.finish()
/// }
/// ```
public final class TestStore<F: Feature>: Sendable
where F.State: Equatable, F.Action: Equatable, F.Effect: Equatable {
    /// The store under test, for checks the steps do not cover (its version, its JSON).
    public let store: DefaultStateStore<F>
    /// Follow-up actions the store rejected.
    public let rejectedFollowUps: Recorder<StoreError>
    /// The clock the store's timers are due by: it moves only with ``advance(by:sourceLocation:)``
    /// (or the test's own `clock.advance(by:)`, which fires nothing).
    public let clock: TestClock
    let changes: Recorder<StoreChange<F.State, F.Action, F.Effect>>
    /// How many observed changes were checked, and the state and version after the last one.
    let checked: Mutex<(count: Int, state: F.State, version: Int)>

    /// A store of `feature` at version 0, starting from `state` (the feature's initial state
    /// when `nil`), whose timers are due by `clock` (its offset counted as milliseconds since
    /// 1970, so a new clock starts at 0).
    public init(_ feature: F, state: F.State? = nil, clock: TestClock = TestClock()) {
        let rejected = Recorder<StoreError>()
        let changes = Recorder<StoreChange<F.State, F.Action, F.Effect>>()
        self.clock = clock
        store = DefaultStateStore(
            feature: feature, state: state, timers: TimerPolicy(now: { clock.now.milliseconds }),
            onFollowUpRejected: { rejected.append($0) })
        _ = store.addObserver { changes.append($0) }
        rejectedFollowUps = rejected
        self.changes = changes
        checked = Mutex((0, state ?? feature.initialState, 0))
    }

    /// The store's current state.
    public var state: F.State { store.state }

    /// Dispatches `action`; `update` turns the previous state into the expected one. Returns
    /// the change, or `nil` (after recording an issue) when the action was not applied.
    @discardableResult
    public func send(
        _ action: F.Action, effect: F.Effect? = nil, sourceLocation: SourceLocation = #_sourceLocation,
        _ update: (inout F.State) -> Void = { _ in }
    ) -> StoreChange<F.State, F.Action, F.Effect>? {
        expectNothingUnchecked(before: "send", sourceLocation: sourceLocation)
        do {
            let change = try store.dispatch(action)
            check(change, expected: .dispatch(action), effect: effect, sourceLocation: sourceLocation, update)
            return change
        } catch {
            Issue.record("\(action) was not applied: \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }

    /// Dispatches a tagged action as JSON (`{"type": "increment", "by": 2}`), like the server.
    /// Returns the change as JSON, or `nil` (after recording an issue) when it was not applied.
    @discardableResult
    public func send(
        json action: String, effect: F.Effect? = nil, sourceLocation: SourceLocation = #_sourceLocation,
        _ update: (inout F.State) -> Void = { _ in }
    ) -> EncodedChange? {
        expectNothingUnchecked(before: "send", sourceLocation: sourceLocation)
        do {
            let encoded = try store.dispatch(json: json(action), ifVersion: nil)
            guard let change = changes.values.last, change.version == encoded.version else {
                Issue.record("the change of \(action) was not observed", sourceLocation: sourceLocation)
                return nil
            }
            check(change, expected: .dispatch(nil), effect: effect, sourceLocation: sourceLocation, update)
            return encoded
        } catch {
            Issue.record("\(action) was not applied: \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }

    /// Dispatches `action` and expects the reducer to reject it, leaving everything unchanged.
    /// Returns the rejection message.
    @discardableResult
    public func sendRejected(_ action: F.Action, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        expectRejected(sourceLocation: sourceLocation) { () throws(StoreError) in _ = try store.dispatch(action) }
    }

    /// Dispatches a tagged JSON action and expects the reducer to reject it. Returns the message.
    @discardableResult
    public func sendRejected(json action: String, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        expectRejected(sourceLocation: sourceLocation) { () throws(StoreError) in
            _ = try store.dispatch(json: json(action), ifVersion: nil)
        }
    }

    /// Waits (at most `timeout`) for the next change and checks that it is the follow-up
    /// `action`; `update` turns the previous state into the expected one.
    public func receive(
        _ action: F.Action, effect: F.Effect? = nil, timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation, _ update: (inout F.State) -> Void = { _ in }
    ) async {
        let next = checked.withLock { $0.count } + 1
        guard await changes.wait(forCount: next, timeout: timeout) else {
            Issue.record("timed out waiting for \(action)", sourceLocation: sourceLocation)
            return
        }
        check(changes.values[next - 1], expected: .dispatch(action), effect: effect, sourceLocation: sourceLocation, update)
    }

    /// Fails the test if a change was left unchecked, a follow-up action was rejected,
    /// declared work is still running, or timers are still pending (unless `pendingTimers`
    /// accepts them).
    public func finish(pendingTimers: PendingTimersAtFinish = .fail, sourceLocation: SourceLocation = #_sourceLocation) {
        checkFinished(pendingTimers: pendingTimers, sourceLocation: sourceLocation)
    }

    private func checkFinished(pendingTimers: PendingTimersAtFinish, sourceLocation: SourceLocation) {
        expectNothingUnchecked(before: "finish", sourceLocation: sourceLocation)
        #expect(rejectedFollowUps.values.isEmpty, "rejected follow-ups", sourceLocation: sourceLocation)
        #expect(
            !store.hasRunningWork,
            "declared work is still running: let it finish (receive its follow-ups) or cancel it",
            sourceLocation: sourceLocation)
        checkPendingTimers(pendingTimers, sourceLocation: sourceLocation)
    }

    /// Lets running work end (at most `timeout` of real time, checked every millisecond), then
    /// does what ``finish(pendingTimers:sourceLocation:)`` does: fails on unchecked changes
    /// (including follow-ups that arrived meanwhile), rejected follow-ups, work still running,
    /// and timers still pending (unless `pendingTimers` accepts them).
    public func finish(
        timeout: Duration = .seconds(1), pendingTimers: PendingTimersAtFinish = .fail,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while store.hasRunningWork, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(1))
        }
        checkFinished(pendingTimers: pendingTimers, sourceLocation: sourceLocation)
    }

    /// The change a step expects: a dispatch of an action (any, when nil), or the firing of a
    /// timer (of any action, when nil).
    enum ExpectedCause {
        case dispatch(F.Action?)
        case timer(id: String, action: F.Action?)
    }

    func check(
        _ change: StoreChange<F.State, F.Action, F.Effect>, expected cause: ExpectedCause, effect: F.Effect?,
        sourceLocation: SourceLocation, _ update: (inout F.State) -> Void
    ) {
        let (count, previous, version) = checked.withLock { $0 }
        var expected = previous
        update(&expected)
        #expect(change.version == version + 1, "version", sourceLocation: sourceLocation)
        #expect(change.state == expected, "state", sourceLocation: sourceLocation)
        #expect(change.effect == effect, "effect", sourceLocation: sourceLocation)
        switch (cause, change.cause) {
        case (.dispatch(let action), .dispatch(let applied)):
            if let action { #expect(applied == action, "action", sourceLocation: sourceLocation) }
        case (.timer(let id, let action), .timer(let fired, let applied)):
            #expect(fired == id, "timer", sourceLocation: sourceLocation)
            if let action { #expect(applied == action, "the timer's action", sourceLocation: sourceLocation) }
        case (.dispatch, let other):
            Issue.record("expected a dispatch, got \(Self.describe(other))", sourceLocation: sourceLocation)
        case (.timer(let id, _), let other):
            Issue.record("expected timer '\(id)' to fire, got \(Self.describe(other))", sourceLocation: sourceLocation)
        }
        // Carry on from the store's actual state so one wrong expectation does not fail every
        // later step.
        checked.withLock { $0 = (count + 1, change.state, change.version) }
    }

    private func expectRejected(
        sourceLocation: SourceLocation, _ body: () throws(StoreError) -> Void
    ) -> String? {
        expectNothingUnchecked(before: "send", sourceLocation: sourceLocation)
        let before = store.current
        do throws(StoreError) {
            try body()
            Issue.record("the action was applied; expected a rejection", sourceLocation: sourceLocation)
            return nil
        } catch {
            #expect(error.kind == .actionRejected, "\(error)", sourceLocation: sourceLocation)
            #expect(error.currentVersion == before.version, sourceLocation: sourceLocation)
            #expect(store.current.version == before.version, "version", sourceLocation: sourceLocation)
            #expect(store.current.state == before.state, "state", sourceLocation: sourceLocation)
            expectNothingUnchecked(before: "continuing", sourceLocation: sourceLocation)
            return error.message
        }
    }

    /// A change's cause for a failure message: `a dispatch of <action>`, `timer 'id' (<action>)`.
    static func describe(_ cause: ChangeCause<F.Action>) -> String {
        switch cause {
        case .dispatch(let action): "a dispatch of \(action)"
        case .timer(let id, let action): "timer '\(id)' (\(action))"
        default: "a \(cause.name)"
        }
    }

    func expectNothingUnchecked(before step: String, sourceLocation: SourceLocation) {
        let observed = changes.values
        let count = checked.withLock { $0.count }
        if observed.count > count {
            let unchecked = observed[count...].map { "version \($0.version) (\(Self.describe($0.cause)))" }
            Issue.record(
                "unchecked changes before \(step): \(unchecked.joined(separator: ", "))",
                sourceLocation: sourceLocation)
            let last = observed[observed.count - 1]
            checked.withLock { $0 = (observed.count, last.state, last.version) }
        }
    }
}
