/// A change computed against a store's current version but not applied yet, so a durable
/// server can write it to disk first and apply it only once it is stored (in-memory state never
/// runs ahead of the disk). Apply it with ``AnyStateStore/commit(_:startWork:)``.
public struct PreparedChange: Sendable {
    /// The change as it will be observed once applied.
    public let encoded: EncodedChange
    /// The version the change was computed on (`encoded.version - 1`).
    public var baseVersion: Int { encoded.version - 1 }
    let apply: @Sendable (_ startWork: Bool) -> Bool

    /// What replays the change from a journal: the public action for a dispatch, the state
    /// for a rehydrate, nothing for a reset.
    public var payload: [UInt8]? {
        switch encoded.cause {
        case "dispatch": encoded.action
        case "rehydrate": encoded.state
        default: nil
        }
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
        let dispatcher = Dispatcher<F.Action>()
        return try prepare(ifVersion: ifVersion, works: { dispatcher.take() }) { state, version throws(StoreError) in
            do throws(ActionRejected) {
                let next = try feature.reduce(action, state: state, dispatch: dispatcher)
                return (next.state, next.effect, .dispatch(action))
            } catch {
                throw StoreError(.actionRejected, error.message, currentVersion: version)
            }
        }
    }

    /// Builds a prepared change under the lock, changing nothing.
    func prepare(
        ifVersion: Int?, works: @escaping () -> [Dispatcher<F.Action>.Work],
        _ next: (F.State, Int) throws(StoreError) -> (F.State, F.Effect?, ChangeCause<F.Action>)
    ) throws(StoreError) -> PreparedChange {
        let (change, maybeEncoded) = try inner.withLock { (inner: inout Inner) throws(StoreError) -> (Change, EncodedChange?) in
            try compute(&inner, ifVersion: ifVersion, encode: true, next)
        }
        guard let encoded = maybeEncoded else {
            throw StoreError(.encodingFailed, "the change was not encoded", currentVersion: change.version - 1)
        }
        let pending = works()
        return PreparedChange(encoded: encoded) { [self] startWork in
            let applied = inner.withLock { inner -> Bool in
                guard inner.version == change.version - 1 else { return false }
                install(&inner, change, encoded)
                return true
            }
            if applied && startWork { start(pending) }
            return applied
        }
    }
}
