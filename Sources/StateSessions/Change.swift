import StatePersistence
import StateStore

/// A change a session is asked to make. Every change goes through ``Session/submit(_:)``.
public struct ChangeRequest: Sendable {
    public enum Kind: Sendable {
        /// A client's action (a tagged object), checked by the feature's client rule.
        case dispatch(JSONValue)
        /// A client's state, checked by the feature's rehydrate rule.
        case rehydrate(JSONValue)
        case reset
        /// The store's state at an earlier version, set again as a new change (cause
        /// `travel`), checked by the rehydrate rule (``Session/stateForTravel(_:to:)``).
        case travel(JSONValue)
        /// A follow-up action of asynchronous work, prepared against the store when its turn
        /// comes.
        case followUp(@Sendable (_ ifVersion: Int?) throws(StoreError) -> PreparedChange)
        /// Settles a state left waiting by work lost in a restart (``Feature/recoveryAction(for:)``).
        case recovery
        /// Fires the store's pending timer `id` due at `due` (cause `timer`): a server action,
        /// seen by middleware with cause `timer`, held to no client rule. Refused with
        /// `.timerNotPending` when it is no longer pending (fired, cancelled or replaced).
        case timer(id: String, due: Int64)
        /// A recorded change applied as the server's own (no client rule, no asynchronous work,
        /// the size ceiling held): the admin's import of a recording as recorded
        /// (``StateStore/AnyStateStore/prepareReplay(cause:payload:enforceCeiling:)``).
        case replay(cause: String, payload: [UInt8]?)
        /// A recording's starting state set in the session it is imported into (cause
        /// `import`), held to a client's rehydrate rules unless `asRecorded`
        /// (``StateStore/AnyStateStore/prepareImport(json:asRecorded:)``).
        case importStart(JSONValue, asRecorded: Bool)
    }

    public var feature: String
    public var kind: Kind
    public var precondition: VersionPrecondition
    /// Repeats of a key are answered with the first reply, applying nothing.
    public var idempotencyKey: String?
    /// Who sent it (a JWT's `sub`), for middleware and the audit log.
    public var subject: String?
    /// The id of the minted token it came with (nil: the owner's token, a JWT).
    public var tokenID: String?
    /// A store a load rebuilt as a last resort (``Session/load(_:from:)``): the change (a reset)
    /// is made on it, and it is in memory once the change is committed.
    var installing: (any AnyStateStore)?

    public init(
        feature: String, kind: Kind, precondition: VersionPrecondition = .none, idempotencyKey: String? = nil
    ) {
        self.feature = feature
        self.kind = kind
        self.precondition = precondition
        self.idempotencyKey = idempotencyKey
    }

    /// Dispatch (and timer) replies carry the change's effect; rehydrate and reset replies do not.
    var replyHasEffect: Bool {
        switch kind {
        case .dispatch, .timer: true
        default: false
        }
    }
}

/// The version a change requires (from `If-Match`): none, one version, or a condition that can
/// never hold atomically (a list of several versions), which is a conflict.
public enum VersionPrecondition: Sendable, Equatable {
    case none
    case version(Int)
    case never

    /// The version to require, or a version conflict for `.never`.
    func resolve(_ store: any AnyStateStore) throws(StoreError) -> Int? {
        switch self {
        case .none: return nil
        case .version(let version): return version
        case .never:
            let current = (try? store.currentJSON().version) ?? 0
            throw StoreError(.versionConflict, "If-Match does not name the store's version \(current)", currentVersion: current)
        }
    }
}

/// How a change ended.
public enum ChangeOutcome: Sendable {
    /// Applied (and journaled first, in durable mode); `reply` is the body to answer with.
    case applied(EncodedChange, reply: StoredReply)
    /// The idempotency key was seen before: its first reply, nothing applied.
    case replayed(StoredReply)
    case failed(SessionFailure)
}

/// Why a session could not do what was asked. Nothing was applied (but for `outcomeUnknown`).
public enum SessionFailure: Error, Sendable {
    /// The store refused the change.
    case store(StoreError)
    /// Storage failed (nothing applied, nothing acknowledged).
    case storage(StorageError)
    /// No feature of this name is registered.
    case unknownFeature(String)
    /// The session was deleted (before or while the request waited for its turn).
    case sessionGone
    /// Loaded sessions hold the server's memory budget for states (`sessions.memoryBytes`) and
    /// none is idle enough to leave memory; nothing was loaded or applied.
    case memoryFull
    /// The commit was sent and the connection to the storage broke before its answer, and the
    /// journal could not tell yet whether it landed: the change may have been applied.
    case outcomeUnknown
}

extension SessionFailure {
    /// The session layer's own control flow, never a public failure: the copy of the session
    /// a caller looked up left service before the change's turn (evicted idle, or another node
    /// owns the session now). ``SessionManager/submit(_:to:token:admin:)`` looks the session up
    /// again and submits the change there (``SessionManager/submitAgain(_:id:token:admin:)``).
    ///
    /// Spelled as the storage's answer that means the same (``StorageError/Kind/notOwner``:
    /// this copy does not serve the session; the request goes where it is served now), so that
    /// it is no case of its own: the rare one that outlives the lookups again reads, outside the
    /// session layer, as what it is, a session being served elsewhere (`503
    /// owner_unavailable`). Matched with `case .retired` through ``~=(_:_:)``.
    static let retired = SessionFailure.storage(
        StorageError(.notOwner, "this copy of the session left service after it was looked up; look it up again"))

    /// Whether this is ``retired`` (or storage's `.notOwner`, which means the same).
    var isRetired: Bool {
        if case .storage(let error) = self { return error.kind == .notOwner }
        return false
    }

    /// `case .retired` in a pattern: matches a failure that means the copy left service.
    static func ~= (pattern: SessionFailure, value: SessionFailure) -> Bool {
        pattern.isRetired && value.isRetired
    }
}

extension SessionFailure: CustomStringConvertible {
    /// The case's name (and what it carries): `sessionGone`, `store(...)`; `retired` for a copy
    /// that left service.
    public var description: String {
        switch self {
        case .store(let error): "store(\(error))"
        case .storage(let error): isRetired ? "retired" : "storage(\(error))"
        case .unknownFeature(let name): "unknownFeature(\(name))"
        case .sessionGone: "sessionGone"
        case .memoryFull: "memoryFull"
        case .outcomeUnknown: "outcomeUnknown"
        }
    }
}

/// The reply body of a change: `{"feature", "version", "state"}`, plus `"effect"` for dispatches.
public enum ChangeReply {
    /// With its final newline (the reply's bytes as sent: not copied again to add it).
    public static func body(_ change: EncodedChange, withEffect: Bool) -> [UInt8] {
        var body = ChangeJSON.object(change, parts: withEffect ? .effect : [])
        body.append(0x0A)
        return body
    }
}
