import StateStore
import Synchronization
import Testing

// Test helpers. The same file is in Tests/StateStoreTests and Tests/ExampleFeaturesTests
// (test targets cannot share code without a library of their own); keep the copies in step.

/// Collects values (typically observed changes) and lets a test wait, with a bound, until
/// enough of them arrived. Thread-safe.
final class Recorder<Element: Sendable>: Sendable {
    private struct Inner {
        var values: [Element] = []
        var waiters: [UInt64: (count: Int, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var expired: Set<UInt64> = []
        var nextWaiter: UInt64 = 0
    }

    private let inner = Mutex(Inner())

    init() {}

    var values: [Element] { inner.withLock { $0.values } }
    var count: Int { inner.withLock { $0.values.count } }

    func append(_ value: Element) {
        let ready = inner.withLock { inner in
            inner.values.append(value)
            let count = inner.values.count
            let ready = inner.waiters.filter { $0.value.count <= count }
            for id in ready.keys { inner.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// Waits until at least `count` values have arrived. Returns `false` if `timeout` passes
    /// first. Returns at once when they are already there.
    func wait(forCount count: Int, timeout: Duration = .seconds(10)) async -> Bool {
        let id = inner.withLock { inner in
            inner.nextWaiter += 1
            return inner.nextWaiter
        }
        let timer = Task { [weak self] in
            try? await Task.sleep(for: timeout)
            guard !Task.isCancelled else { return }
            self?.expire(id)
        }
        defer { timer.cancel() }
        return await withCheckedContinuation { continuation in
            let answer: Bool? = inner.withLock { inner in
                if inner.values.count >= count { return true }
                if inner.expired.contains(id) { return false }
                inner.waiters[id] = (count, continuation)
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    private func expire(_ id: UInt64) {
        let waiter = inner.withLock { inner in
            let waiter = inner.waiters.removeValue(forKey: id)
            if waiter == nil { inner.expired.insert(id) }
            return waiter
        }
        waiter?.continuation.resume(returning: false)
    }
}

/// Parses a JSON literal written in a test.
func json(_ text: String) -> JSONValue {
    guard let value = JSONCoding.parse(Array(text.utf8)) else {
        Issue.record("not JSON: \(text)")
        return .null
    }
    return value
}

/// JSON bytes as text, for readable comparisons.
func text(_ bytes: [UInt8]?) -> String? {
    bytes.map { String(decoding: $0, as: UTF8.self) }
}

/// An exhaustive test store in the spirit of The Composable Architecture's `TestStore`.
///
/// Every change the store makes must be asserted: `send` dispatches an action and checks the
/// resulting state (described as a mutation of the previous one) and effect; `receive` waits
/// for a follow-up action sent by asynchronous work and checks it the same way; `finish`
/// fails the test if a change was left unchecked or a follow-up was rejected.
final class TestStore<F: Feature>: Sendable
where F.State: Equatable, F.Action: Equatable, F.Effect: Equatable {
    let store: DefaultStateStore<F>
    /// Follow-up actions the store rejected.
    let rejectedFollowUps: Recorder<StoreError>
    private let changes: Recorder<StoreChange<F.State, F.Action, F.Effect>>
    /// How many observed changes were checked, and the state and version after the last one.
    private let checked: Mutex<(count: Int, state: F.State, version: Int)>

    init(_ feature: F, state: F.State? = nil) {
        let rejected = Recorder<StoreError>()
        let changes = Recorder<StoreChange<F.State, F.Action, F.Effect>>()
        store = DefaultStateStore(feature: feature, state: state, onFollowUpRejected: { rejected.append($0) })
        _ = store.addObserver { changes.append($0) }
        rejectedFollowUps = rejected
        self.changes = changes
        checked = Mutex((0, state ?? feature.initialState, 0))
    }

    var state: F.State { store.state }

    /// Dispatches `action`; `update` turns the previous state into the expected one.
    @discardableResult
    func send(
        _ action: F.Action, effect: F.Effect? = nil, sourceLocation: SourceLocation = #_sourceLocation,
        _ update: (inout F.State) -> Void = { _ in }
    ) -> StoreChange<F.State, F.Action, F.Effect>? {
        expectNothingUnchecked(before: "send", sourceLocation: sourceLocation)
        do {
            let change = try store.dispatch(action)
            check(change, action: action, effect: effect, sourceLocation: sourceLocation, update)
            return change
        } catch {
            Issue.record("\(action) was not applied: \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }

    /// Dispatches a tagged action as JSON (`{"type": "increment", "by": 2}`), like the server.
    @discardableResult
    func send(
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
            check(change, action: nil, effect: effect, sourceLocation: sourceLocation, update)
            return encoded
        } catch {
            Issue.record("\(action) was not applied: \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }

    /// Dispatches `action` and expects the reducer to reject it, leaving everything unchanged.
    /// Returns the rejection message.
    @discardableResult
    func sendRejected(_ action: F.Action, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        expectRejected(sourceLocation: sourceLocation) { () throws(StoreError) in _ = try store.dispatch(action) }
    }

    /// Dispatches a tagged JSON action and expects the reducer to reject it. Returns the message.
    @discardableResult
    func sendRejected(json action: String, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        expectRejected(sourceLocation: sourceLocation) { () throws(StoreError) in
            _ = try store.dispatch(json: json(action), ifVersion: nil)
        }
    }

    /// Waits (at most `timeout`) for the next change and checks that it is the follow-up
    /// `action`; `update` turns the previous state into the expected one.
    func receive(
        _ action: F.Action, effect: F.Effect? = nil, timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation, _ update: (inout F.State) -> Void = { _ in }
    ) async {
        let next = checked.withLock { $0.count } + 1
        guard await changes.wait(forCount: next, timeout: timeout) else {
            Issue.record("timed out waiting for \(action)", sourceLocation: sourceLocation)
            return
        }
        check(changes.values[next - 1], action: action, effect: effect, sourceLocation: sourceLocation, update)
    }

    /// Fails the test if a change was left unchecked or a follow-up action was rejected.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) {
        expectNothingUnchecked(before: "finish", sourceLocation: sourceLocation)
        #expect(rejectedFollowUps.values.isEmpty, "rejected follow-ups", sourceLocation: sourceLocation)
    }

    private func check(
        _ change: StoreChange<F.State, F.Action, F.Effect>, action: F.Action?, effect: F.Effect?,
        sourceLocation: SourceLocation, _ update: (inout F.State) -> Void
    ) {
        let (count, previous, version) = checked.withLock { $0 }
        var expected = previous
        update(&expected)
        #expect(change.version == version + 1, "version", sourceLocation: sourceLocation)
        #expect(change.state == expected, "state", sourceLocation: sourceLocation)
        #expect(change.effect == effect, "effect", sourceLocation: sourceLocation)
        if case .dispatch(let applied) = change.cause {
            if let action { #expect(applied == action, "action", sourceLocation: sourceLocation) }
        } else {
            Issue.record("expected a dispatch, got \(change.cause.name)", sourceLocation: sourceLocation)
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

    private func expectNothingUnchecked(before step: String, sourceLocation: SourceLocation) {
        let observed = changes.values
        let count = checked.withLock { $0.count }
        if observed.count > count {
            let unchecked = observed[count...].map { "version \($0.version) (\($0.cause))" }
            Issue.record(
                "unchecked changes before \(step): \(unchecked.joined(separator: ", "))",
                sourceLocation: sourceLocation)
            let last = observed[observed.count - 1]
            checked.withLock { $0 = (observed.count, last.state, last.version) }
        }
    }
}
