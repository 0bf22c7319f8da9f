import Synchronization

/// The result of applying one action: the next state and an optional one-shot effect
/// (for example a toast), delivered once to observers of that change.
public struct StateContainer<State: Sendable, Effect: Sendable>: Sendable {
    public var state: State
    public var effect: Effect?

    public init(_ state: State, effect: Effect? = nil) {
        self.state = state
        self.effect = effect
    }
}

/// A reducer refused an action because it breaks a rule of the feature (toggling a todo that
/// does not exist, a counter that would overflow). Nothing is applied.
public struct ActionRejected: Error, Sendable, Equatable {
    public var message: String

    public init(_ message: String) {
        self.message = message
    }
}

/// The deterministic heart of a feature: `(action, state) -> (state, effect)`.
///
/// A reducer does no I/O and reads no clock or random source: replaying the same actions gives
/// the same states. Asynchronous work (a network call, a timer) is *declared* through
/// `dispatch.run { send in ... }`; the store starts it after the change is applied, outside the
/// store, and the work reports back by sending follow-up actions.
public protocol StateReducer<State, Action, Effect>: Sendable {
    associatedtype State: Codable & Sendable
    associatedtype Action: Codable & Sendable
    associatedtype Effect: Codable & Sendable = Never

    func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect>
}

/// A named state machine: a reducer with a name and an initial state.
///
/// `Action` and `Effect` are enums with labeled associated values; on the wire they are tagged
/// objects (`{"type": "increment", "by": 2}`), see ``TaggedJSON``.
public protocol Feature: StateReducer {
    /// The feature's name in URLs and JSON (`counter`, `todos`).
    var name: String { get }
    /// The state a new store starts from, at version 0.
    var initialState: State { get }

    /// Checks (and may normalize) a state given to `rehydrate`. Throw to refuse a state that
    /// decodes but breaks a rule of the feature. The default accepts every state.
    func validated(_ state: State) throws(ActionRejected) -> State

    /// The action as observers see it (events, journals): mask secrets such as passwords here.
    /// Replaying the public form must give the same state as the original (keep secrets out of
    /// state). The default shows the action as it is.
    func publicAction(_ action: Action) -> Action

    /// The version of `State`'s shape in saved snapshots. Raise it when the shape changes and
    /// teach ``migrate(_:from:)`` the way from older versions. The default is 1.
    var stateVersion: Int { get }

    /// Turns a state saved at an older `stateVersion` (as JSON) into the current shape. Throw
    /// when there is no way; the store is then rebuilt from its journal, or reset as a last
    /// resort. The default has no migrations.
    func migrate(_ state: JSONValue, from version: Int) throws(ActionRejected) -> JSONValue

    /// Whether a client may send this action. Actions that only asynchronous work may send
    /// (the result of a check) answer `false`; a client sending one gets `action_rejected`.
    /// The default accepts every action.
    func acceptsFromClient(_ action: Action) -> Bool

    /// Decides what a *client* may restore (`PUT .../state/{feature}`): given the state the
    /// client proposes and the current one, returns the state to apply (it may keep server-owned
    /// parts of `current`), or throws to refuse (`invalid_state`). Only client rehydrates go
    /// through here (``AnyStateStore/rehydrate(json:ifVersion:)`` and
    /// ``AnyStateStore/prepareRehydrate(json:ifVersion:)``); the server's own restores (snapshots,
    /// journal replay, the typed ``StateStore/rehydrate(_:ifVersion:)``) do not. ``validated(_:)``
    /// is applied to the result either way. The default accepts the proposed state.
    func clientRehydrate(_ proposed: State, current: State) throws(ActionRejected) -> State

    /// The most bytes the state may take as JSON. A change whose new state encodes to more is
    /// refused (`action_rejected` for an action, `invalid_state` for a rehydrate), applying
    /// nothing; replaying history already accepted is exempt. The default is
    /// ``defaultMaxStateBytes`` (1 MiB).
    var maxStateBytes: Int { get }

    /// Whether a client's action may carry fields its case does not have
    /// (`{"type": "increment", "bye": 5}`). The default, `false`, refuses them as
    /// `invalid_action` naming the fields, so a typo cannot change state silently. Only the
    /// action's top-level fields are checked.
    var ignoresUnknownActionFields: Bool { get }

    /// After a restart, a store whose state waits for asynchronous work that will never come
    /// back (the work ran in the old process) can name an action that settles it; the server
    /// applies and journals it when the store is loaded. The default is `nil`.
    func recoveryAction(for state: State) -> Action?

    /// Refines the JSON Schemas `/openapi.json` shows for this feature, derived from its
    /// `Codable` types when the server starts: add descriptions, patterns, bounds and examples,
    /// rename components, or replace a schema the deriver could not make (see ``FeatureSchema``).
    /// The default changes nothing.
    func refineSchema(_ schema: inout FeatureSchema)
}

/// The default ``Feature/maxStateBytes``: 1 MiB.
public let defaultMaxStateBytes = 1 << 20

extension Feature {
    public var stateVersion: Int { 1 }
    public var maxStateBytes: Int { defaultMaxStateBytes }
    public var ignoresUnknownActionFields: Bool { false }
    public func clientRehydrate(_ proposed: State, current: State) throws(ActionRejected) -> State { proposed }
    public func acceptsFromClient(_ action: Action) -> Bool { true }
    public func recoveryAction(for state: State) -> Action? { nil }
    public func refineSchema(_ schema: inout FeatureSchema) {}

    public func migrate(_ state: JSONValue, from version: Int) throws(ActionRejected) -> JSONValue {
        throw ActionRejected("\(name) has no migration from state version \(version) to \(stateVersion)")
    }

    public func validated(_ state: State) throws(ActionRejected) -> State { state }
    public func publicAction(_ action: Action) -> Action { action }
}

/// Follow-up actions sent back to the store by asynchronous work.
///
/// A follow-up sent by work that was cancelled (``Dispatcher/cancel(id:)``, a reset or a
/// rehydrate of the store) or that has already returned is dropped: it is never applied.
public struct Send<Action: Sendable>: Sendable {
    private let body: @Sendable (Action) async -> Void

    public init(_ body: @escaping @Sendable (Action) async -> Void) {
        self.body = body
    }

    public func callAsFunction(_ action: Action) async {
        await body(action)
    }
}

/// The identity of a piece of asynchronous work, for ``Dispatcher/cancel(id:)``: any
/// `Hashable & Sendable` value (a string, an enum case, a type).
public struct WorkID: Hashable, Sendable {
    // Kept as a `Sendable` existential (`AnyHashable` is not `Sendable`); compared and hashed
    // through `AnyHashable`, which gives values of different types as different ids.
    private let base: any Hashable & Sendable

    public init(_ id: some Hashable & Sendable) {
        base = id
    }

    public static func == (lhs: WorkID, rhs: WorkID) -> Bool { AnyHashable(lhs.base) == AnyHashable(rhs.base) }
    public func hash(into hasher: inout Hasher) { hasher.combine(AnyHashable(base)) }
}

/// Handed to a reducer so it can declare asynchronous work and timers, and cancel work and
/// timers declared earlier.
/// The work runs after the change is applied, never inside the reducer, and not at all when the
/// store replays history with side effects off. Cancellations also take effect when the change
/// is applied (a change that is refused, or prepared and never committed, cancels nothing).
///
/// Work is cancelled by ``cancel(id:)``, by `run(id:cancelInFlight: true)`, and all of a store's
/// work by a reset or a rehydrate. Cancelled work has its Swift `Task` cancelled, and anything it
/// sends afterwards is dropped, never applied (checked under the store's lock, so a cancel racing
/// a send cannot let the follow-up through).
public final class Dispatcher<Action: Sendable>: Sendable {
    public typealias Work = @Sendable (_ send: Send<Action>) async -> Void

    /// Not generic (``Declarations``): a generic type's metadata is looked up in a table each
    /// time it is made, read and dropped, which cost more than the rest of a reducer's call.
    private let declarations = Mutex(Declarations())

    public init() {}

    /// Declares asynchronous work that may send follow-up actions.
    public func run(_ work: @escaping Work) {
        declarations.withLock { $0.works.append(Declared(id: nil, cancelInFlight: false, work: Self.erased(work))) }
    }

    /// Declares asynchronous work with an identity, so a later change can cancel it with
    /// ``cancel(id:)``. With `cancelInFlight`, work already running under the same id is
    /// cancelled first.
    public func run(id: some Hashable & Sendable, cancelInFlight: Bool = false, _ work: @escaping Work) {
        declarations.withLock {
            $0.works.append(Declared(id: WorkID(id), cancelInFlight: cancelInFlight, work: Self.erased(work)))
        }
    }

    /// `work`, given its `send` as a ``Declared/Sender`` (the store gives it its own
    /// `Send<Action>`, which is what comes back).
    private static func erased(_ work: @escaping Work) -> Declared.Start {
        { sender in
            guard let send = sender as? Send<Action> else { return }
            await work(send)
        }
    }

    /// Cancels the running work declared with `id` (by earlier changes) when this change is
    /// applied, and the pending timer of that id when `id` is a `String`. Anything the work
    /// sends afterwards is dropped.
    public func cancel(id: some Hashable & Sendable) {
        declarations.withLock {
            $0.cancelled.append(WorkID(id))
            if let name = id as? String { $0.timers.append(.cancel(id: name)) }
        }
    }

    /// Schedules `action` to be applied to this store after `delay` (0 s to 366 days), as a
    /// change of cause `timer`, under `id` (unique per store: scheduling an id again replaces
    /// its timer; ``cancel(id:)`` cancels it). Scheduling is part of the change: stored in the
    /// same commit as its state, and nothing is scheduled when the change is refused or not
    /// committed. The timer survives restarts and eviction on durable storage, and fires exactly
    /// once: its firing and its removal commit together. A change that would leave more timers
    /// pending than the store's limit (1,000 by default) is refused, like a bad delay or an
    /// empty id. Reset, rehydrate, travel and deleting the session cancel a store's timers.
    public func schedule(_ action: Action, after delay: Duration, id: String) {
        declarations.withLock { $0.timers.append(.schedule(id: id, after: delay, action: action)) }
    }

    /// What was declared so far, emptied.
    package func take() -> Declarations {
        declarations.withLock { list in
            guard !list.isEmpty else { return Declarations() }
            defer { list = Declarations() }
            return list
        }
    }
}

/// One piece of work a reducer declared (``Dispatcher/run(_:)``).
package struct Declared: Sendable {
    /// The work's `Send<Action>`, as a value of no generic type.
    package typealias Sender = any Sendable
    package typealias Start = @Sendable (_ send: Sender) async -> Void
    package let id: WorkID?
    package let cancelInFlight: Bool
    /// Runs the work with its `Send<Action>`.
    package let work: Start
}

/// What a reducer declared: work to start and ids of work to cancel.
package struct Declarations: Sendable {
    package var works: [Declared] = []
    package var cancelled: [WorkID] = []
    /// Timers scheduled and cancelled, in the order they were declared.
    package var timers: [TimerOperation] = []
    package var isEmpty: Bool { works.isEmpty && cancelled.isEmpty && timers.isEmpty }
    package init() {}
}
