// The session layer's retry policy, in one place. What is tried again, and how often:
// - A change that lost a race on shared storage without owners (`StorageError.conflict`):
//   caught up from the journal and computed again, up to `Session.conflictRetries` (8) times,
//   then `.contention` (Session+Execution.swift: the retry lives where the commit is judged).
//   A version conflict there is judged once more after a catch-up.
// - A change whose session left memory between the caller's lookup and its turn (`.retired`:
//   evicted idle, or another node owns it now): the session is looked up again (loaded, or
//   found elsewhere) and the change submitted there, up to `resubmitAttempts` times
//   (``SessionManager/submitAgain(_:id:token:admin:)``).
// - Reading every store of a session after a catch-up that met a gap (the store it could not
//   follow was dropped): loaded again, up to `loadAttempts` times
//   (``Session/loadEveryStore()``).
// The HTTP layer retries only what is its own: a request forwarded to a node that no longer
// owns the session (StateServerHTTP's Forwarding.swift, `forwardAttempts`).
import StatePersistence
import StateStore

extension SessionManager {
    /// Where a change submitted again went (``submitAgain(_:id:token:admin:)``).
    public enum Resubmitted: Sendable {
        /// Its outcome on this node.
        case outcome(ChangeOutcome)
        /// Another node owns the session now: send the request there.
        case elsewhere(url: String)
        /// No such session for this token (deleted meanwhile).
        case notFound
    }

    /// Times a retired session is looked up again for one change.
    static let resubmitAttempts = 3

    /// Submits `change` to session `id` after its copy in memory was retired (its outcome was
    /// `.retired`): looks the session up again — loading it, or learning that another node
    /// owns it — and submits the change there; a copy retired again meanwhile is looked up
    /// again, up to ``resubmitAttempts`` times. `admin`: the caller proved a credential other
    /// than the session's tokens (the admin token, a verified JWT).
    public func submitAgain(
        _ change: ChangeRequest, id: String, token: String, admin: Bool
    ) async throws(SessionFailure) -> Resubmitted {
        var outcome = ChangeOutcome.failed(.retired)
        for _ in 0..<Self.resubmitAttempts {
            let located: Located?
            do throws(StorageError) {
                located = try await locate(id: id, token: token, admin: admin)
            } catch {
                throw .storage(error)
            }
            switch located {
            case nil: return .notFound
            case .elsewhere(let url)?: return .elsewhere(url: url)
            case .here(let session)?:
                _ = try await session.store(change.feature)
                outcome = await session.submit(change).value()
                guard case .failed(.retired) = outcome else { return .outcome(outcome) }
            }
        }
        return .outcome(outcome)
    }
}

extension Session {
    /// Times every store is loaded again after a catch-up dropped one.
    static let loadAttempts = 3

    /// Loads the stores of `features` (nil: every feature's) and catches up with other nodes,
    /// so that they are in memory and current; a store a catch-up dropped (it met a gap) is
    /// loaded again, up to ``loadAttempts`` times. `false` when one still is not.
    public func loadEveryStore(_ features: [String]? = nil) async throws(SessionFailure) -> Bool {
        try await loadAll(features)
        try await refresh()
        var attempts = 0
        while !holdsStores(features), attempts < Self.loadAttempts {
            try await loadAll(features)
            attempts += 1
        }
        return holdsStores(features)
    }

    /// Whether the stores of `features` (nil: every feature's) are in memory.
    func holdsStores(_ features: [String]?) -> Bool {
        guard let features else { return holdsEveryStore }
        return stores.hold(features, of: registry)
    }
}
