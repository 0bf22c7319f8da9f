import Synchronization

/// What made a store change.
public enum ChangeCause<Action: Sendable>: Sendable {
    case dispatch(Action)
    case rehydrate
    case reset

    /// `dispatch`, `rehydrate` or `reset`, as on the wire.
    public var name: String {
        switch self {
        case .dispatch: "dispatch"
        case .rehydrate: "rehydrate"
        case .reset: "reset"
        }
    }
}

/// One applied change: the new state at its version, its cause and its one-shot effect.
public struct StoreChange<State: Sendable, Action: Sendable, Effect: Sendable>: Sendable {
    public let version: Int
    public let cause: ChangeCause<Action>
    public let state: State
    public let effect: Effect?
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

/// The standard store: a lock around the feature's state, its version and its observers.
///
/// Thread-safe. Changes are applied one at a time, in the order their calls take the lock.
/// Work declared by the reducer starts after the change, as a detached task whose follow-up
/// actions are dispatched to this store like any other (rejected follow-ups are reported to
/// `onFollowUpRejected`).
public final class DefaultStateStore<F: Feature>: StateStore, Sendable {
    public typealias State = F.State
    public typealias Action = F.Action
    public typealias Effect = F.Effect

    struct Inner {
        var state: F.State
        var version: Int
        var observers: [(token: ObserverToken, call: @Sendable (Change) -> Void)] = []
        var jsonObservers: [(token: ObserverToken, call: @Sendable (EncodedChange) -> Void)] = []
        var nextObserverID: UInt64 = 0
        /// The current state's JSON, when known (set by changes that were encoded, and by
        /// `currentJSON`), so reads do not encode the same state again.
        var encodedState: [UInt8]?
    }

    public let feature: F
    let inner: Mutex<Inner>
    private let runsSideEffects: Bool
    let onFollowUpRejected: @Sendable (StoreError) -> Void
    let followUpRoute = Mutex<FollowUpRoute?>(nil)
    /// Declared work started and not finished yet.
    let runningWork = Atomic<Int>(0)

    /// Whether asynchronous work declared by the reducer is still running (a follow-up may
    /// still come).
    public var hasRunningWork: Bool { runningWork.load(ordering: .relaxed) > 0 }

    /// - Parameters:
    ///   - state: a restored state (defaults to the feature's initial state).
    ///   - version: the version of `state` (0 for a new store).
    ///   - runsSideEffects: `false` while replaying history: declared work is dropped.
    public init(
        feature: F, state: F.State? = nil, version: Int = 0, runsSideEffects: Bool = true,
        onFollowUpRejected: @escaping @Sendable (StoreError) -> Void = { _ in }
    ) {
        self.feature = feature
        self.inner = Mutex(Inner(state: state ?? feature.initialState, version: version))
        self.runsSideEffects = runsSideEffects
        self.onFollowUpRejected = onFollowUpRejected
    }

    public var current: (state: F.State, version: Int) {
        inner.withLock { ($0.state, $0.version) }
    }

    @discardableResult
    public func dispatch(_ action: F.Action, ifVersion: Int? = nil) throws(StoreError) -> Change {
        try dispatch(action, ifVersion: ifVersion, encode: false).change
    }

    /// Replaces the state without an action, after the feature's ``Feature/validated(_:)``
    /// check (a refused state throws `.invalidState`).
    @discardableResult
    public func rehydrate(_ state: F.State, ifVersion: Int? = nil) throws(StoreError) -> Change {
        try apply(ifVersion: ifVersion, encode: false) { _, version throws(StoreError) in
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

    @discardableResult
    public func reset(ifVersion: Int? = nil) throws(StoreError) -> Change {
        try apply(ifVersion: ifVersion, encode: false) { _, _ in (feature.initialState, nil, .reset) }
            .change
    }

    func dispatch(
        _ action: F.Action, ifVersion: Int?, encode: Bool
    ) throws(StoreError) -> (change: Change, encoded: EncodedChange?) {
        let dispatcher = Dispatcher<F.Action>()
        let result = try apply(ifVersion: ifVersion, encode: encode) { state, version throws(StoreError) in
            do throws(ActionRejected) {
                let next = try feature.reduce(action, state: state, dispatch: dispatcher)
                return (next.state, next.effect, .dispatch(action))
            } catch {
                throw StoreError(.actionRejected, error.message, currentVersion: version)
            }
        }
        start(dispatcher.take())
        return result
    }

    public func addObserver(_ observer: @escaping @Sendable (Change) -> Void) -> ObserverToken {
        inner.withLock { inner in
            inner.nextObserverID += 1
            let token = ObserverToken(id: inner.nextObserverID)
            inner.observers.append((token, observer))
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
        inner.withLock { inner in
            inner.nextObserverID += 1
            let token = ObserverToken(id: inner.nextObserverID)
            inner.jsonObservers.append((token, observer))
            return token
        }
    }

    /// Applies one change under the lock: checks the version, computes the next state, encodes
    /// it when asked or observed as JSON (an encoding failure applies nothing), bumps the version
    /// and tells the observers, in that order.
    func apply(
        ifVersion: Int?, encode: Bool,
        _ next: (F.State, Int) throws(StoreError) -> (F.State, F.Effect?, ChangeCause<F.Action>)
    ) throws(StoreError) -> (change: Change, encoded: EncodedChange?) {
        try inner.withLock { (inner: inout Inner) throws(StoreError) -> (Change, EncodedChange?) in
            let (change, encoded) = try compute(&inner, ifVersion: ifVersion, encode: encode || !inner.jsonObservers.isEmpty, next)
            install(&inner, change, encoded)
            return (change, encoded)
        }
    }

    /// The next change against `inner`, changing nothing: the version precondition, the
    /// reducer (or other `next`), and the JSON encoding when `encode`.
    func compute(
        _ inner: inout Inner, ifVersion: Int?, encode: Bool,
        _ next: (F.State, Int) throws(StoreError) -> (F.State, F.Effect?, ChangeCause<F.Action>)
    ) throws(StoreError) -> (Change, EncodedChange?) {
        if let ifVersion, ifVersion != inner.version {
            throw StoreError(
                .versionConflict, "the store is at version \(inner.version), not \(ifVersion)",
                currentVersion: inner.version)
        }
        let (state, effect, cause) = try next(inner.state, inner.version)
        let change = Change(version: inner.version + 1, cause: cause, state: state, effect: effect)
        guard encode else { return (change, nil) }
        let encoded = try EncodedChange(
            feature: feature.name, change: change, currentVersion: inner.version, publicAction: feature.publicAction)
        return (change, encoded)
    }

    /// Makes `change` current and tells the observers, in application order.
    func install(_ inner: inout Inner, _ change: Change, _ encoded: EncodedChange?) {
        inner.state = change.state
        inner.version = change.version
        inner.encodedState = encoded?.state
        for observer in inner.observers { observer.call(change) }
        if let encoded {
            for observer in inner.jsonObservers { observer.call(encoded) }
        }
    }

    func start(_ works: [Dispatcher<F.Action>.Work]) {
        guard runsSideEffects, !works.isEmpty else { return }
        let route = followUpRoute.withLock { $0 }
        let send = Send<F.Action> { [weak self] action in
            guard let self else { return }
            if let route {
                await route { ifVersion throws(StoreError) in try self.prepare(action, ifVersion: ifVersion) }
            } else {
                do throws(StoreError) { try self.dispatch(action) } catch { self.onFollowUpRejected(error) }
            }
        }
        for work in works {
            runningWork.add(1, ordering: .relaxed)
            Task.detached { [self] in
                await work(send)
                runningWork.subtract(1, ordering: .relaxed)
            }
        }
    }
}
