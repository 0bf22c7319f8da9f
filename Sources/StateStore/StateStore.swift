import Synchronization

/// What made a store change.
public enum ChangeCause<Action: Sendable>: Sendable {
    case dispatch(Action)
    case rehydrate
    case reset
    /// The state of an earlier version, set again as a new change (time travel).
    case travel
    /// A recording's starting state, set in the session it is imported into.
    case `import`
    /// A timer the store's reducer scheduled (``Dispatcher/schedule(_:after:id:)``) fired: its
    /// action, applied as the server's own.
    case timer(id: String, action: Action)

    /// `dispatch`, `rehydrate`, `reset`, `travel`, `import` or `timer`, as on the wire.
    public var name: String {
        switch self {
        case .dispatch: "dispatch"
        case .timer: "timer"
        case .rehydrate: "rehydrate"
        case .reset: "reset"
        case .travel: "travel"
        case .import: "import"
        }
    }
}

/// The causes as on the wire, for code that reads journaled or recorded changes.
public enum ChangeCauseName {
    /// Whether a change of cause `name` sets a state of its own (a rehydrate, a travel, an
    /// import): it is replayed from its state, where a dispatch is replayed from its action
    /// and a reset from nothing.
    public static func setsState(_ name: String) -> Bool {
        name == "rehydrate" || name == "travel" || name == "import"
    }
}

/// One applied change: the new state at its version, its cause and its one-shot effect.
public struct StoreChange<State: Sendable, Action: Sendable, Effect: Sendable>: Sendable {
    public let version: Int
    public let cause: ChangeCause<Action>
    public let state: State
    public let effect: Effect?
}

/// The bounds of versions and sequence numbers.
public enum StoreVersion {
    /// The largest version a store can reach, and the largest sequence number a session can
    /// number a change with: 2^53 − 1, the largest integer every JSON reader holds exactly
    /// (JavaScript's `Number.MAX_SAFE_INTEGER`). A version or sequence number read from input
    /// (a recording, a restore) is refused past it, and a store at it refuses every change, so
    /// `version + 1` can never overflow.
    public static let max = 9_007_199_254_740_991

    /// Whether `value` is a version a store can have (0 to ``max``).
    public static func isValid(_ value: Int) -> Bool { value >= 0 && value <= max }
}

/// Identifies an observer so it can be removed.
public struct ObserverToken: Hashable, Sendable {
    let id: UInt64
}

/// Holds one feature's current state, applies changes one at a time and tells observers.
///
/// Every change raises `version` by exactly one. Observers are called synchronously, in the
/// order changes are applied, while the store is locked: they must be quick and must not call
/// back into the same store.
public protocol StateStore<State, Action, Effect>: AnyObject, Sendable {
    associatedtype State: Sendable
    associatedtype Action: Sendable
    associatedtype Effect: Sendable
    typealias Change = StoreChange<State, Action, Effect>

    /// The current state and its version, read together.
    var current: (state: State, version: Int) { get }

    /// Applies `action`. With `ifVersion`, applies it only if the store is at that version.
    @discardableResult
    func dispatch(_ action: Action, ifVersion: Int?) throws(StoreError) -> Change

    /// Replaces the state without an action (restoring a saved state).
    @discardableResult
    func rehydrate(_ state: State, ifVersion: Int?) throws(StoreError) -> Change

    /// Returns to the initial state.
    @discardableResult
    func reset(ifVersion: Int?) throws(StoreError) -> Change

    func addObserver(_ observer: @escaping @Sendable (Change) -> Void) -> ObserverToken
    func removeObserver(_ token: ObserverToken)
}

extension StateStore {
    public var state: State { current.state }
    public var version: Int { current.version }

    @discardableResult
    public func dispatch(_ action: Action) throws(StoreError) -> Change {
        try dispatch(action, ifVersion: nil)
    }
}

/// A store's current state as JSON, when known, and its version (``DefaultStateStore/published``).
struct PublishedState: Sendable {
    var state: [UInt8]?
    var version: Int
}

/// The standard store: a lock around the feature's state, its version, its observers and its
/// running work.
///
/// Thread-safe. Changes are applied one at a time, in the order their calls take the lock.
/// Every change is encoded as JSON when it is computed: a state that does not encode, or that
/// is larger than ``Feature/maxStateBytes``, is refused and nothing is applied.
///
/// Work declared by the reducer starts when its change is applied, as a detached task whose
/// follow-up actions are dispatched to this store like any other (rejected follow-ups are
/// reported to `onFollowUpRejected`). Each piece of work is tracked until it returns: a reset or
/// a rehydrate cancels all of it, a reducer cancels work by id (``Dispatcher/cancel(id:)``), and
/// a follow-up from cancelled work is dropped — the check is made under the store's lock, both
/// when the follow-up is computed and when it is applied.
public final class DefaultStateStore<F: Feature>: StateStore, Sendable {
    public typealias State = F.State
    public typealias Action = F.Action
    public typealias Effect = F.Effect

    /// How a change's next state is computed from the current state and version.
    typealias Next = (F.State, Int) throws(StoreError) -> (F.State, F.Effect?, ChangeCause<F.Action>)

    /// Work that was started and neither returned nor was cancelled.
    struct LiveWork {
        let id: WorkID?
        let task: Task<Void, Never>
    }

    struct Inner {
        var state: F.State
        var version: Int
        var observers: [(token: ObserverToken, call: @Sendable (Change) -> Void)] = []
        var jsonObservers: [(token: ObserverToken, call: @Sendable (EncodedChange) -> Void)] = []
        var nextObserverID: UInt64 = 0
        /// Live work by token. A follow-up is applied only while its work's token is here.
        var works: [UInt64: LiveWork] = [:]
        var nextWorkToken: UInt64 = 0
        /// The change computed and handed to storage but not committed yet
        /// (``PreparedChange/advance()``): the next change is computed on top of it, while
        /// reads and observers still see `state` and `version`, the committed change.
        /// Its state (nil when no change is ahead) and version (0 when none is).
        var ahead: F.State?
        var aheadVersion = 0
        /// The pending timers (``PendingTimer``) by id, as committed; and, while a change is
        /// ahead, as that change leaves them (nil when it leaves them as committed).
        var timers: [String: PendingTimer] = [:]
        var aheadTimers: [String: PendingTimer]?

        /// The version the next change is computed on: the change ahead's, else the committed one's.
        var headVersion: Int { aheadVersion != 0 ? aheadVersion : version }
    }

    public let feature: F
    let inner: Mutex<Inner>
    private let runsSideEffects: Bool
    let onFollowUpRejected: @Sendable (StoreError) -> Void
    /// The limit of pending timers and the clock their due times are counted from.
    let timerPolicy: TimerPolicy
    let followUpRoute = Mutex<FollowUpRoute?>(nil)
    /// `inner.works.count`, updated under the lock with every change of it, so
    /// ``hasRunningWork`` can be read without the lock (owners ask it under their own locks).
    private let liveWorkCount = Atomic<Int>(0)
    /// `inner.version`, stored under the lock with every change of it, so the version alone is
    /// read without the lock (and without copying the state, as ``current`` does).
    private let versionNow: Atomic<Int>
    /// The current state's JSON (when known: set by every change, and by `currentJSON`) with its
    /// version, so reads do not encode the same state again; beside `inner`, in a lock of no
    /// generic type, so a read (the most frequent request) looks no generic metadata up.
    let published: Mutex<PublishedState>

    /// The current version (read without the lock: a change applied meanwhile may follow at
    /// once; every precondition is judged again under the lock when a change is computed).
    public var version: Int { versionNow.load(ordering: .acquiring) }

    /// Whether asynchronous work declared by the reducer is still live: started, not returned
    /// and not cancelled (a follow-up may still come).
    public var hasRunningWork: Bool { liveWorkCount.load(ordering: .acquiring) > 0 }

    /// - Parameters:
    ///   - state: a restored state (defaults to the feature's initial state).
    ///   - version: the version of `state` (0 for a new store).
    ///   - runsSideEffects: `false` while replaying history: declared work is dropped.
    ///   - timers: the limit of pending timers and the clock they are due by.
    public init(
        feature: F, state: F.State? = nil, version: Int = 0, runsSideEffects: Bool = true,
        timers: TimerPolicy = .standard, onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) {
        self.timerPolicy = timers
        self.feature = feature
        self.inner = Mutex(Inner(state: state ?? feature.initialState, version: version))
        self.versionNow = Atomic(version)
        self.published = Mutex(PublishedState(state: nil, version: version))
        self.runsSideEffects = runsSideEffects
        self.onFollowUpRejected = onFollowUpRejected
    }

    public var current: (state: F.State, version: Int) {
        inner.withLock { ($0.state, $0.version) }
    }

    @discardableResult
    public func dispatch(_ action: F.Action, ifVersion: Int? = nil) throws(StoreError) -> Change {
        try dispatch(action, ifVersion: ifVersion, from: nil).change
    }

    /// Replaces the state without an action, after the feature's ``Feature/validated(_:)``
    /// check (a refused state throws `.invalidState`). This is the server's own restore: it
    /// does not ask ``Feature/clientRehydrate(_:current:)``. Cancels all running work.
    @discardableResult
    public func rehydrate(_ state: F.State, ifVersion: Int? = nil) throws(StoreError) -> Change {
        try apply(ifVersion: ifVersion) { _, version throws(StoreError) in
            (try validated(state, version: version), nil, .rehydrate)
        }.change
    }

    func validated(_ state: F.State, version: Int) throws(StoreError) -> F.State {
        do throws(ActionRejected) {
            return try feature.validated(state)
        } catch {
            throw StoreError(.invalidState, "the state breaks a rule of \(feature.name): \(error.message)", currentVersion: version)
        }
    }

    /// A client's rehydrate: ``Feature/clientRehydrate(_:current:)`` decides what of `proposed`
    /// is applied, then ``Feature/validated(_:)``. A travel is held to the same rules.
    func clientRehydrating(_ proposed: F.State, cause: ChangeCause<F.Action> = .rehydrate) -> Next {
        { [feature] current, version throws(StoreError) in
            let accepted: F.State
            do throws(ActionRejected) {
                accepted = try feature.clientRehydrate(proposed, current: current)
            } catch {
                throw StoreError(
                    .invalidState, "\(feature.name) does not accept this state from a client: \(error.message)",
                    currentVersion: version)
            }
            return (try self.validated(accepted, version: version), nil, cause)
        }
    }

    /// Returns to the initial state. Cancels all running work.
    @discardableResult
    public func reset(ifVersion: Int? = nil) throws(StoreError) -> Change {
        try apply(ifVersion: ifVersion) { _, _ in (feature.initialState, nil, .reset) }.change
    }

    /// Cancels all running work without changing the state (for an owner that discards the
    /// store, such as a deleted session). Follow-ups it sends afterwards are dropped.
    public func cancelAllWork() {
        let tasks = inner.withLock { inner in
            defer {
                inner.works = [:]
                liveWorkCount.store(0, ordering: .releasing)
            }
            return inner.works.values.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    /// Applies `action`, sent by a client or the store's owner, or by the live work `work`.
    func dispatch(
        _ action: F.Action, ifVersion: Int?, from work: UInt64?
    ) throws(StoreError) -> (change: Change, encoded: EncodedChange) {
        let dispatcher = Dispatcher<F.Action>()
        return try apply(ifVersion: ifVersion, from: work, dispatcher: dispatcher, reducing(action, into: dispatcher))
    }

    /// The reducer as a ``Next``: work and cancellations it declares go to `dispatcher`.
    func reducing(_ action: F.Action, into dispatcher: Dispatcher<F.Action>) -> Next {
        { [feature] state, version throws(StoreError) in
            do throws(ActionRejected) {
                let next = try feature.reduce(action, state: state, dispatch: dispatcher)
                return (next.state, next.effect, .dispatch(action))
            } catch {
                throw StoreError(.actionRejected, error.message, currentVersion: version)
            }
        }
    }

    public func addObserver(_ observer: @escaping @Sendable (Change) -> Void) -> ObserverToken {
        register { inner, token in inner.observers.append((token, observer)) }
    }

    /// A new observer token, and `add` to put the observer in its list, under the lock.
    private func register(_ add: (inout Inner, ObserverToken) -> Void) -> ObserverToken {
        inner.withLock { inner in
            inner.nextObserverID += 1
            let token = ObserverToken(id: inner.nextObserverID)
            add(&inner, token)
            return token
        }
    }

    public func removeObserver(_ token: ObserverToken) {
        inner.withLock { inner in
            inner.observers.removeAll { $0.token == token }
            inner.jsonObservers.removeAll { $0.token == token }
        }
    }

    /// Adds an observer of changes as JSON bytes (see ``AnyStateStore``). Each change is encoded
    /// once, and the same bytes go to every observer and to the caller that made the change.
    public func addJSONObserver(_ observer: @escaping @Sendable (EncodedChange) -> Void) -> ObserverToken {
        register { inner, token in inner.jsonObservers.append((token, observer)) }
    }

    /// Applies one change under the lock: computes it (``compute(_:ifVersion:from:enforceCeiling:_:)``),
    /// then installs it, telling observers and starting and cancelling work; the Swift tasks of
    /// cancelled work are cancelled once the lock is released.
    func apply(
        ifVersion: Int?, from work: UInt64? = nil, dispatcher: Dispatcher<F.Action>? = nil, _ next: Next
    ) throws(StoreError) -> (change: Change, encoded: EncodedChange) {
        let (result, cancelled) = try inner.withLock {
            (inner: inout Inner) throws(StoreError) -> ((Change, EncodedChange), [Task<Void, Never>]) in
            let (change, encoded, declared) = try compute(
                &inner, ifVersion: ifVersion, from: work, enforceCeiling: true, dispatcher: dispatcher, next)
            let cancelled = install(&inner, change, encoded, declared: declared, startWork: true)
            return ((change, encoded), cancelled)
        }
        for task in cancelled { task.cancel() }
        return result
    }

    /// The next change against `inner`, changing nothing: the sending work still live (for a
    /// follow-up), the version precondition, `next` (the reducer, or a new state), what it does
    /// to the pending timers (``timerChanges(_:cause:firing:operations:version:)``), the JSON
    /// encoding and, with `enforceCeiling`, the feature's ``Feature/maxStateBytes``. Returns what
    /// the reducer declared to `dispatcher` too.
    func compute(
        _ inner: inout Inner, ifVersion: Int?, from work: UInt64?, enforceCeiling: Bool,
        dispatcher: Dispatcher<F.Action>? = nil, firing: Firing? = nil, _ next: Next
    ) throws(StoreError) -> (Change, EncodedChange, Declarations) {
        if let work, inner.works[work] == nil {
            throw StoreError(
                .workCancelled, "the work that sent this follow-up was cancelled or has returned",
                currentVersion: inner.headVersion)
        }
        let headVersion = inner.headVersion
        if let ifVersion, ifVersion != headVersion {
            throw StoreError(
                .versionConflict, "the store is at version \(headVersion), not \(ifVersion)",
                currentVersion: headVersion)
        }
        guard headVersion < StoreVersion.max else {
            throw StoreError(
                .invalidState, "the store is at version \(headVersion), the last a store can reach: it accepts no change",
                currentVersion: headVersion)
        }
        let baseTimers = inner.aheadTimers ?? inner.timers
        if let firing, firing.required, baseTimers[firing.timer.id]?.due != firing.timer.due {
            throw StoreError(.timerNotPending, "timer '\(firing.timer.id)' is no longer pending", currentVersion: headVersion)
        }
        let (state, effect, cause) =
            if inner.aheadVersion != 0, let ahead = inner.ahead { try next(ahead, headVersion) } else { try next(inner.state, headVersion) }
        let declared = dispatcher?.take() ?? Declarations()
        let timers = try timerChanges(baseTimers, cause: cause, firing: firing, operations: declared.timers, version: headVersion)
        let change = Change(version: headVersion + 1, cause: cause, state: state, effect: effect)
        let encoded = try EncodedChange(
            feature: feature.name, change: change, currentVersion: headVersion, publicAction: feature.publicAction,
            firing: firing?.timer, timers: timers)
        if enforceCeiling, encoded.state.count > feature.maxStateBytes {
            let kind: StoreError.Kind =
                switch cause {
                case .dispatch, .timer: .actionRejected
                case .rehydrate, .reset, .travel, .import: .invalidState
                }
            throw StoreError(
                kind,
                "the state of \(feature.name) would take \(encoded.state.count) bytes as JSON, "
                    + "more than its limit of \(feature.maxStateBytes)",
                currentVersion: headVersion)
        }
        return (change, encoded, declared)
    }

    /// Makes `change` current and tells the observers, in application order; then cancels the
    /// work the change cancels (all of it for a reset or a rehydrate) and, when `startWork`,
    /// starts the work it declared. Returns the tasks of cancelled work, for the caller to
    /// cancel once the lock is released (a task's cancellation handlers must not run under it).
    func install(
        _ inner: inout Inner, _ change: Change, _ encoded: EncodedChange,
        declared: Declarations, startWork: Bool
    ) -> [Task<Void, Never>] {
        inner.state = change.state
        inner.version = change.version
        if let timers = encoded.timers { inner.timers = timers.applied(to: inner.timers) }
        if inner.aheadVersion != 0, inner.aheadVersion <= change.version {
            inner.ahead = nil
            inner.aheadVersion = 0
            inner.aheadTimers = nil
        }
        versionNow.store(change.version, ordering: .releasing)
        published.withLock { $0 = PublishedState(state: encoded.state, version: change.version) }
        for observer in inner.observers { observer.call(change) }
        for observer in inner.jsonObservers { observer.call(encoded) }

        var cancelled: [Task<Void, Never>] = []
        func cancel(_ matches: (WorkID?) -> Bool) {
            for (token, work) in inner.works where matches(work.id) {
                inner.works[token] = nil
                cancelled.append(work.task)
            }
        }
        switch change.cause {
        case .reset, .rehydrate, .travel, .import: cancel { _ in true }
        case .dispatch, .timer: break
        }
        for id in declared.cancelled { cancel { $0 == id } }
        guard startWork, runsSideEffects, !declared.works.isEmpty else {
            if !cancelled.isEmpty { liveWorkCount.store(inner.works.count, ordering: .releasing) }
            return cancelled
        }
        for declaration in declared.works {
            if declaration.cancelInFlight, let id = declaration.id { cancel { $0 == id } }
            inner.nextWorkToken += 1
            let token = inner.nextWorkToken
            let send = sender(for: token)
            let work = declaration.work
            // Registered before the lock is released, so the task's end (which takes the lock)
            // always comes after.
            let task = Task.detached { [self] in
                await work(send)
                self.inner.withLock { inner in
                    inner.works[token] = nil
                    liveWorkCount.store(inner.works.count, ordering: .releasing)
                }
            }
            inner.works[token] = LiveWork(id: declaration.id, task: task)
        }
        liveWorkCount.store(inner.works.count, ordering: .releasing)
        return cancelled
    }

    /// The `send` handed to the work with `token`: applies a follow-up (or routes it to the
    /// owner), unless the work is no longer live.
    private func sender(for token: UInt64) -> Send<F.Action> {
        Send { [weak self] action in
            guard let self, inner.withLock({ $0.works[token] != nil }) else { return }
            if let route = followUpRoute.withLock({ $0 }) {
                await route { ifVersion throws(StoreError) in
                    try self.prepare(action, ifVersion: ifVersion, from: token, enforceCeiling: true)
                }
            } else {
                do throws(StoreError) {
                    _ = try dispatch(action, ifVersion: nil, from: token)
                } catch where error.kind == .workCancelled {
                    // Cancelled while it was sending: dropped, as intended.
                } catch {
                    onFollowUpRejected(error)
                }
            }
        }
    }
}
