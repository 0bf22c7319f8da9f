/// A change computed against a store's current version but not applied yet, so a durable
/// server can write it to disk first and apply it only once it is stored (in-memory state never
/// runs ahead of the disk). Apply it with ``AnyStateStore/commit(_:startWork:)``.
public struct PreparedChange: Sendable {
    /// The change as it will be observed once applied.
    public let encoded: EncodedChange
    /// The version the change was computed on (`encoded.version - 1`).
    public var baseVersion: Int { encoded.version - 1 }
    let apply: @Sendable (_ startWork: Bool) -> Bool
    let holdAhead: @Sendable () -> Bool

    /// Holds the change as the store's change ahead: handed to storage, not committed. The
    /// store's next change is computed on top of it, while reads and observers still see the
    /// committed state until ``AnyStateStore/commit(_:startWork:)`` applies it (in order), or
    /// ``AnyStateStore/dropAhead()`` returns the store to its committed state after a failed
    /// commit. Returns `false`, holding nothing, when the store's head is no longer the change's
    /// base version. For owners that commit changes to storage in the order they were computed.
    @discardableResult
    public func advance() -> Bool { holdAhead() }

    /// What replays the change from a journal: the public action for a dispatch, the timer
    /// (with its public action) for a timer, the state for a rehydrate, a travel or an import,
    /// nothing for a reset.
    public var payload: [UInt8]? {
        if encoded.cause == "dispatch" || encoded.cause == "timer" { return encoded.action }
        return ChangeCauseName.setsState(encoded.cause) ? encoded.state : nil
    }
}

/// Where a store sends the follow-up actions of asynchronous work when its owner wants them to
/// go through its own pipeline (a durable server journals them first). The closure prepares
/// the follow-up against the store at the time it is called.
public typealias FollowUpRoute = @Sendable (
    _ prepare: @escaping @Sendable (_ ifVersion: Int?) throws(StoreError) -> PreparedChange
) async -> Void

extension DefaultStateStore {
    /// Computes `action` against the current state without applying it.
    public func prepare(_ action: F.Action, ifVersion: Int?) throws(StoreError) -> PreparedChange {
        try prepare(action, ifVersion: ifVersion, from: nil, enforceCeiling: true)
    }

    /// Computes `action`, sent by the live work `work` when not nil, without applying it.
    func prepare(
        _ action: F.Action, ifVersion: Int?, from work: UInt64?, enforceCeiling: Bool
    ) throws(StoreError) -> PreparedChange {
        let dispatcher = Dispatcher<F.Action>()
        return try prepare(
            ifVersion: ifVersion, from: work, enforceCeiling: enforceCeiling, dispatcher: dispatcher,
            reducing(action, into: dispatcher))
    }

    /// Builds a prepared change under the lock, changing nothing. Committing it applies it only
    /// if the store is still at its base version and, for a follow-up, its work is still live
    /// (checked under the lock, together with applying).
    func prepare(
        ifVersion: Int?, from work: UInt64? = nil, enforceCeiling: Bool = true,
        dispatcher: Dispatcher<F.Action>? = nil, firing: Firing? = nil, _ next: Next
    ) throws(StoreError) -> PreparedChange {
        let (change, encoded, declared) = try inner.withLock {
            (inner: inout Inner) throws(StoreError) -> (Change, EncodedChange, Declarations) in
            try compute(
                &inner, ifVersion: ifVersion, from: work, enforceCeiling: enforceCeiling, dispatcher: dispatcher,
                firing: firing, next)
        }
        return PreparedChange(
            encoded: encoded,
            apply: { [self] startWork in
                let (applied, cancelled) = inner.withLock { inner -> (Bool, [Task<Void, Never>]) in
                    guard inner.version == change.version - 1 else { return (false, []) }
                    if let work, inner.works[work] == nil { return (false, []) }
                    return (true, install(&inner, change, encoded, declared: declared, startWork: startWork))
                }
                for task in cancelled { task.cancel() }
                return applied
            },
            holdAhead: { [self] in
                inner.withLock { inner in
                    guard inner.headVersion == change.version - 1 else { return false }
                    if let timers = encoded.timers { inner.aheadTimers = timers.applied(to: inner.aheadTimers ?? inner.timers) }
                    inner.ahead = change.state
                    inner.aheadVersion = change.version
                    return true
                }
            })
    }
}
