// The session layer's retry policy, in one place. What is tried again, and how often:
// - A change computed on top of one still committing, whose store went back to its committed
//   state meanwhile (a commit ahead failed): computed again on that, up to twice
//   (Session+Execution.swift, `apply`; it was never handed to storage).
// - A change whose session left memory between the caller's lookup and its turn (`.retired`:
//   evicted idle, or another node owns it now): the session is looked up again (loaded, or
//   found elsewhere) and the change submitted there, up to `resubmitAttempts` times
//   (``SessionManager/submit(_:to:token:admin:)``, through `submitAgain`). Callers never see
//   `.retired`: they get an outcome, `notFound`, or the node that serves the session now.
// - A lookup that raced a delete of the same session: storage is read again (``locate``).
// The HTTP layer retries only what is its own: a request forwarded to a node that no longer
// owns the session (StateServerHTTP's Forwarding.swift, `forwardAttempts`).
import NowOrLater
import StatePersistence
import StateStore
import Synchronization

extension SessionManager {
    /// Where a change ended (``submit(_:to:token:admin:)``).
    public enum Submitted: Sendable {
        /// Its outcome on this node.
        case outcome(ChangeOutcome)
        /// Another node serves the session now: send the request there.
        case elsewhere(url: String)
        /// No such session for this token (deleted meanwhile).
        case notFound
    }

    /// Times a retired session is looked up again for one change.
    static let resubmitAttempts = 3

    /// Submits `change` to `session`, which the caller looked up with `token` (`admin`: the
    /// caller proved a credential other than the session's tokens: the admin token, a verified
    /// JWT). Its outcome now when the change path finished before this returns (a loaded
    /// store, memory mode's journal, nothing waiting before it), else from the thread that
    /// gives it. A copy that left service before the change's turn (`.retired`) is the session
    /// layer's to deal with: the session is looked up again and the change submitted there
    /// (``submitAgain(_:id:token:admin:)``, on a task), or the node that serves it now is named.
    public func submit(_ change: ChangeRequest, to session: Session, token: String, admin: Bool) -> NowOrLater<Submitted, Never> {
        // As ``Session/submit(_:)`` does, with the look-up again at the fill: no closure or
        // promise more than a change submitted to the session takes.
        let submitted = SubmittedPromise()
        let id = session.id
        session.enqueue(.change(change) { [self] outcome in
            guard outcome.isRetired else { return submitted.fill(.outcome(outcome)) }
            Task { submitted.fill(await resubmit(change, id: id, token: token, admin: admin)) }
        })
        return submitted.outcome
    }

    /// ``submitAgain(_:id:token:admin:)``, its failure to look the session up as the change's.
    private func resubmit(_ change: ChangeRequest, id: String, token: String, admin: Bool) async -> Submitted {
        do throws(SessionFailure) {
            return try await submitAgain(change, id: id, token: token, admin: admin)
        } catch {
            return .outcome(.failed(error))
        }
    }

    /// Submits `change` to session `id` after its copy in memory was retired (its outcome was
    /// `.retired`): looks the session up again — loading it, or learning that another node
    /// owns it — and submits the change there; a copy retired again meanwhile is looked up
    /// again, up to ``resubmitAttempts`` times. `admin`: the caller proved a credential other
    /// than the session's tokens (the admin token, a verified JWT).
    public func submitAgain(
        _ change: ChangeRequest, id: String, token: String, admin: Bool
    ) async throws(SessionFailure) -> Submitted {
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
                guard outcome.isRetired else { return .outcome(outcome) }
            }
        }
        return .outcome(outcome)
    }
}

extension ChangeOutcome {
    /// Refused because the copy of the session left service (``SessionFailure/retired``).
    var isRetired: Bool {
        if case .failed(let failure) = self { return failure.isRetired }
        return false
    }
}

extension Session {
    /// Loads the stores of `features` (nil: every feature's), so that they are in memory.
    /// `false` when one still is not (it left memory again meanwhile).
    public func loadEveryStore(_ features: [String]? = nil) async throws(SessionFailure) -> Bool {
        try await loadAll(features)
        return holdsStores(features)
    }

    /// Whether the stores of `features` (nil: every feature's) are in memory.
    func holdsStores(_ features: [String]?) -> Bool {
        guard let features else { return holdsEveryStore }
        return stores.hold(features, of: registry)
    }
}

/// Where a change went (``SessionManager/submit(_:to:token:admin:)``), given once (``fill(_:)``,
/// from any thread) and read once (``outcome``): `now` when it was given before it is read, else
/// `promised`, the thread that fills it calling the waiter (no task). ``OutcomePromise`` for
/// ``SessionManager/Submitted``, not generic for the same reason.
final class SubmittedPromise: Sendable {
    typealias Value = SessionManager.Submitted
    typealias Waiter = @Sendable (Result<Value, Never>) -> Void

    private enum State {
        case empty
        case filled(Value)
        case waiting(Waiter)
        case taken
    }

    private let state = Mutex(State.empty)

    /// Gives the value; only the first call counts.
    func fill(_ value: Value) {
        let waiter = state.withLock { state -> Waiter? in
            switch state {
            case .empty: state = .filled(value)
            case .waiting(let done):
                state = .taken
                return done
            case .filled, .taken: break
            }
            return nil
        }
        waiter?(.success(value))
    }

    /// The value now if it was given already, else later. Read it once.
    var outcome: NowOrLater<Value, Never> {
        if let value = take(orWait: nil) { return .now(value) }
        return .promised { [self] done in
            if let value = take(orWait: done) { done(.success(value)) }
        }
    }

    /// The value if it was given (taken), else nil, and `done` waits for it.
    private func take(orWait done: Waiter?) -> Value? {
        state.withLock { state -> Value? in
            if case .filled(let value) = state {
                state = .taken
                return value
            }
            if let done { state = .waiting(done) }
            return nil
        }
    }
}

extension SessionManager {
    /// Fires one due timer through the change path: its session looked up (loaded, or taken
    /// over from a node that is gone) and a `.timer` change submitted there.
    func fireTimer(_ reference: TimerReference) async -> TimerScheduler.FiringResult {
        let change = ChangeRequest(feature: reference.feature, kind: .timer(id: reference.id, due: reference.due))
        let submitted: Submitted
        do throws(SessionFailure) {
            submitted = try await submitAgain(change, id: reference.session, token: "", admin: true)
        } catch {
            return .failed
        }
        switch submitted {
        case .notFound: return .nothingToFire
        case .elsewhere: return .elsewhere
        case .outcome(.applied), .outcome(.replayed): return .fired
        case .outcome(.failed(.store(let error))) where error.kind == .timerNotPending: return .nothingToFire
        case .outcome(.failed(.sessionGone)), .outcome(.failed(.unknownFeature)): return .nothingToFire
        case .outcome(.failed): return .failed
        }
    }
}
