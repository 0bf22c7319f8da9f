import StateStore

/// A session as stored: never its token, only the token's SHA-256.
public struct StoredSession: Sendable, Equatable {
    public let id: String
    public let tokenHash: [UInt8]
    /// Milliseconds since 1970.
    public let createdAt: Int64
    public var lastActiveAt: Int64

    public init(id: String, tokenHash: [UInt8], createdAt: Int64, lastActiveAt: Int64) {
        self.id = id
        self.tokenHash = tokenHash
        self.createdAt = createdAt
        self.lastActiveAt = lastActiveAt
    }
}

/// A token minted for a session (`POST /v1/sessions/{id}/tokens`): never the token, only its
/// SHA-256, with what it may do. The session's first token (its owner's) is not one of these:
/// it is ``StoredSession/tokenHash``.
public struct StoredGrant: Sendable, Equatable {
    public let session: String
    /// The token's public id (22 base64url characters), for listing and revoking.
    public let id: String
    public let tokenHash: [UInt8]
    /// What the token may do, as the JSON object the session layer writes (scope, features,
    /// action types, the token that minted it, its subject): opaque to storage.
    public let grant: [UInt8]
    /// Milliseconds since 1970.
    public let createdAt: Int64
    /// Milliseconds since 1970; nil: the token does not expire.
    public let expiresAt: Int64?

    public init(session: String, id: String, tokenHash: [UInt8], grant: [UInt8], createdAt: Int64, expiresAt: Int64?) {
        self.session = session
        self.id = id
        self.tokenHash = tokenHash
        self.grant = grant
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// How a journal entry describes the state its change led to.
public enum StateDelta: Sendable, Equatable {
    /// An RFC 6902 JSON Patch from the store's previous version (``JSONPatch``).
    case patch([UInt8])
    /// The whole state: a store's first change, and any change whose patch would not be smaller.
    case state([UInt8])

    /// Bytes of the shortest patch that changes anything.
    static let smallestPatch = 29

    /// The stored bytes (the patch or the state).
    public var bytes: [UInt8] {
        switch self {
        case .patch(let bytes), .state(let bytes): bytes
        }
    }

    public var isPatch: Bool {
        if case .patch = self { return true }
        return false
    }

    /// The patch from `previous` to `state` when it is smaller than `state`, else the state.
    /// Without a previous state (a store's first change) the state itself.
    public static func between(_ previous: [UInt8]?, _ state: [UInt8]) -> StateDelta {
        // No patch is shorter than `[{"op":"remove","path":"/a"}]` (29 bytes): a state that
        // small is stored whole without computing one (a counter's every change).
        guard let previous, state.count > Self.smallestPatch, let patch = JSONPatch.diff(from: previous, to: state, limit: state.count - 1) else {
            return .state(state)
        }
        return .patch(patch)
    }

    /// The state this delta leads to from `previous` (the state at the version before).
    public func state(after previous: [UInt8]?) throws(StorageError) -> [UInt8] {
        switch self {
        case .state(let state): return state
        case .patch(let patch):
            guard let previous else {
                throw StorageError(.unusable, "a journal patch has no state before it")
            }
            do throws(JSONPatch.Failure) {
                return try JSONPatch.apply(patch: patch, to: previous)
            } catch {
                throw StorageError(.unusable, "a journal patch does not apply: \(error.message)")
            }
        }
    }
}

/// One applied change, as journaled: what caused it and what it changed, not a copy of the
/// whole state (see ``StateDelta``).
public struct JournalEntry: Sendable, Equatable {
    public let session: String
    /// The session's event sequence number of this change.
    public let seq: Int
    public let feature: String
    public let version: Int
    /// `dispatch`, `rehydrate`, `reset`, `travel` or `import`.
    public let cause: String
    /// The action of a dispatch as a tagged object, in its public form (secrets masked); nil
    /// for other causes.
    public let action: [UInt8]?
    /// The change's one-shot effect as a tagged object, if any.
    public let effect: [UInt8]?
    /// The state the change led to, as a patch from the previous version or whole.
    public let delta: StateDelta
    /// Milliseconds since 1970.
    public let time: Int64

    public init(
        session: String, seq: Int, feature: String, version: Int, cause: String, action: [UInt8]?,
        effect: [UInt8]?, delta: StateDelta, time: Int64
    ) {
        self.session = session
        self.seq = seq
        self.feature = feature
        self.version = version
        self.cause = cause
        self.action = action
        self.effect = effect
        self.delta = delta
        self.time = time
    }

    /// Bytes this entry stores (for budgets and reports).
    public var size: Int { delta.bytes.count + (action?.count ?? 0) + (effect?.count ?? 0) + 64 }
}

/// A store's state at a version, with the feature's state schema version.
public struct StoreSnapshot: Sendable, Equatable {
    public let session: String
    public let feature: String
    public let version: Int
    public let stateVersion: Int
    public let state: [UInt8]
    public let time: Int64

    public init(session: String, feature: String, version: Int, stateVersion: Int, state: [UInt8], time: Int64) {
        self.session = session
        self.feature = feature
        self.version = version
        self.stateVersion = stateVersion
        self.state = state
        self.time = time
    }
}

/// A reply to an `Idempotency-Key` (in memory, and as rebuilt from storage).
public struct StoredReply: Sendable, Equatable {
    public let status: Int
    public let body: [UInt8]
    public let version: Int

    public init(status: Int, body: [UInt8], version: Int) {
        self.status = status
        self.body = body
        self.version = version
    }
}

/// What storage remembers of an `Idempotency-Key`: the change it made (a reference into the
/// journal), not a copy of its reply. The reply is rebuilt from the journal when asked for.
public struct RememberedKey: Sendable, Equatable {
    public let feature: String
    public let version: Int
    /// Milliseconds since 1970 when the key was first used.
    public let time: Int64

    public init(feature: String, version: Int, time: Int64) {
        self.feature = feature
        self.version = version
        self.time = time
    }
}

/// One write; a batch of writes commits atomically.
///
/// Every write but `createSession` and `deleteSession` names a session that must exist when
/// the batch commits (it may be created earlier in the same batch): otherwise the batch fails
/// with ``StorageError/Kind/sessionGone`` and stores nothing. This check runs in the batch's
/// own transaction, so a write can never land after the session's `deleteSession`.
public enum StorageWrite: Sendable {
    case createSession(StoredSession)
    case deleteSession(id: String)
    /// A journal entry, fenced: it commits only if the session's last seq is `entry.seq - 1`
    /// and the store's last version is `entry.version - 1` (otherwise `.conflict`, nothing
    /// stored), so nothing is ever written behind a compaction or by a writer whose copy is
    /// stale. `idempotencyKey` remembers the key as a reference to this entry (a key already
    /// remembered is a `.conflict`). It also moves the session's last activity forward to the
    /// entry's time, as a `touch` would (a change never needs a touch of its own).
    case append(JournalEntry, idempotencyKey: String?)
    /// A store's state at a version: a base that loads start from. Written only at or below the
    /// store's last version (a stale writer cannot overwrite newer history); a snapshot at the
    /// same version replaces the earlier one (a state schema migrated on load).
    case snapshot(StoreSnapshot)
    /// Records activity; sessions inactive past the TTL are purged.
    case touch(session: String, at: Int64)
    /// Drops what loads, replays and remembered keys no longer need: the snapshots older than
    /// the newest snapshot at or below `upToVersion` that still precedes every entry kept, and
    /// the entries up to it. Kept: the session's last `keepLast` entries (event replay and
    /// history), and the entries that keys remembered since `keysSince` refer to; keys older
    /// than `keysSince`, or beyond the session's newest `maxKeys`, are forgotten.
    case compact(session: String, feature: String, upToVersion: Int, keepLast: Int, keysSince: Int64, maxKeys: Int)
    /// A token minted for the session (its id is new).
    case createGrant(StoredGrant)
    /// Revokes the session's tokens with these ids (ids not stored are ignored).
    case deleteGrants(session: String, ids: [String])
    /// What a change does to its store's pending timers (``StateStore/TimerChanges``): in the
    /// batch of the change's `append`, so a timer is stored with the change that scheduled it
    /// and removed with the change that fired it.
    case timers(session: String, feature: String, TimerChanges)
}

/// A pending timer of a session's store, as storage keeps it.
public struct StoredTimer: Sendable, Equatable {
    public let session: String
    public let feature: String
    public let timer: PendingTimer

    public init(session: String, feature: String, timer: PendingTimer) {
        self.session = session
        self.feature = feature
        self.timer = timer
    }

    public var reference: TimerReference {
        TimerReference(session: session, feature: feature, id: timer.id, due: timer.due)
    }
}

/// Which timer is due when: what a scheduler reads to fire timers in due order.
public struct TimerReference: Sendable, Hashable, Comparable {
    public let session: String
    public let feature: String
    public let id: String
    /// Milliseconds since 1970.
    public let due: Int64

    public init(session: String, feature: String, id: String, due: Int64) {
        self.session = session
        self.feature = feature
        self.id = id
        self.due = due
    }

    /// Due order, then session, feature and id (byte order): the order timers fire in.
    public static func < (a: TimerReference, b: TimerReference) -> Bool {
        if a.due != b.due { return a.due < b.due }
        if a.session != b.session { return a.session.utf8.lexicographicallyPrecedes(b.session.utf8) }
        if a.feature != b.feature { return a.feature.utf8.lexicographicallyPrecedes(b.feature.utf8) }
        return a.id.utf8.lexicographicallyPrecedes(b.id.utf8)
    }
}

/// Why storage failed. A struct so kinds can be added later.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private let raw: String
        private init(_ raw: String) { self.raw = raw }
        public var description: String { raw }
        /// The storage cannot be opened (path is a directory, no permission, not a database).
        public static let unusable = Kind("unusable")
        /// A write or read failed (disk full, I/O error); retry later.
        public static let unavailable = Kind("unavailable")
        /// A write does not follow what is stored: a journal entry whose seq or version is not
        /// the next (another writer, a compaction, a copy behind the journal), a key already
        /// remembered, a session id already taken. Nothing of the batch is stored. With owners,
        /// the node's copy is behind the journal (a commit whose outcome was lost): the copy
        /// goes, as for ``notOwner``. With storage of one process, a bug.
        public static let conflict = Kind("conflict")
        /// A write was sent and its connection broke before the answer: it may or may not have
        /// been committed (a network database). Read the journal to know.
        public static let uncertain = Kind("uncertain")
        /// A write (append, snapshot, touch, compact, idempotency reply) names a session that
        /// does not exist: it was deleted or purged, or never created. Nothing of the batch is
        /// stored; retrying cannot help. Answer as for an unknown session.
        public static let sessionGone = Kind("sessionGone")
        /// Several nodes: this node does not own the session (any more), so nothing was
        /// written. The session's copy on this node must go; the request goes to the owner.
        public static let notOwner = Kind("notOwner")
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}

/// How long what a storage keeps lives — the one thing the session layer asks of a storage.
public enum StorageLifetime: Sendable, Equatable {
    /// The process's memory (memory mode): sessions live in memory until their TTL, at most
    /// `sessions.maxSessions` of them; stores start empty on first use; the journal keeps whole
    /// states (no diff), answered at once, and remembers what history, recordings, travel and
    /// resumed streams read.
    case process
    /// Kept across restarts (SQLite, PostgreSQL, and the in-memory twin tests use for them): idle
    /// sessions leave memory and load again; the journal keeps patches and snapshots.
    case durable
}

/// Where sessions, journals, snapshots and idempotency replies live.
///
/// Writes are submitted in order and committed in that order; `commit` returns once the batch
/// is durable (for SQLite: in the WAL and fsynced). Concurrent batches share commits (group
/// commit). Reads may block on I/O: call them from tasks, never from an event thread.
///
/// The answer of `commit` is exact: when it returns, all of the batch is stored; when it
/// throws, none of it is (whatever happened to other batches of the same group commit).
/// Writes for a session that does not exist fail with `.sessionGone`; `deleteSession`
/// removes every row of the session in every table.
public protocol SessionStorage: Sendable {
    /// `memory` or `sqlite:PATH`, for logs and errors.
    var name: String { get }

    /// How long what it keeps lives: the one policy the session layer reads from storage
    /// (``StorageLifetime``).
    var lifetime: StorageLifetime { get }

    /// Commits a batch atomically: all of it or none of it.
    func commit(_ batch: [StorageWrite]) async throws(StorageError)

    /// Commits `batch` like ``commit(_:)`` and calls `done` once with the answer: every
    /// session's batches are committed in the order they were submitted and answered in that
    /// order, so a session may hand over change N+1, computed on top of N, while N commits (its
    /// appends are fenced, so when N fails N+1 fails too, and nothing is stored out of order).
    /// Takes no task and no thread of the caller's. Memory mode's journal answers before
    /// `commit` returns; SQLite answers from its writer's queue; PostgreSQL runs one commit per
    /// session at a time and commits the batches that waited behind it together. The one
    /// commit of the change path (the session layer calls nothing else for a change).
    func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void)

    func session(id: String) async throws(StorageError) -> StoredSession?
    /// The store's newest snapshot at or below `version`.
    func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot?
    /// A store's entries with `afterVersion` < version <= `through`, in version order.
    func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry]
    /// The session's entries with seq > `afterSeq`, in seq order, at most `limit`.
    func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry]
    /// The tokens minted for the session, in the order they were minted (expired ones too).
    func grants(session: String) async throws(StorageError) -> [StoredGrant]
    /// Whether the session has a live (unexpired at `now`) minted token with this SHA-256: one
    /// lookup that reads no other token, so a wrong token never costs reading every grant.
    func hasToken(session: String, tokenHash: [UInt8], now: Int64) async throws(StorageError) -> Bool
    /// The last seq used by the session (0 if none).
    func lastSeq(session: String) async throws(StorageError) -> Int
    /// The change an `Idempotency-Key` made, if the key is remembered.
    func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey?
    /// Ids of sessions last active before `time`, at most `limit`.
    func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String]
    /// Number of stored sessions.
    func sessionCount() async throws(StorageError) -> Int
    /// Stored sessions with an id after `id` (byte order), in id order, at most `limit`: the
    /// admin's list, paged by id.
    func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession]
    /// Stops the writer after pending commits.
    func close() async

    // MARK: Timers (indexed by due time)

    /// The session's pending timers, every store's, in due order.
    func timers(session: String) async throws(StorageError) -> [StoredTimer]
    /// Timers due at or before `time`, in due order (``TimerReference``), at most `limit`.
    /// Shared storage with owners: only timers of sessions this node owns or that no live node
    /// owns (their owner's lease ran out), which this node may take over to fire them.
    func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference]
    /// When the next timer is due (of those ``dueTimers(through:limit:)`` would give), or nil.
    func nextTimerDue() async throws(StorageError) -> Int64?
    /// How many timers are pending, in every session.
    func timerCount() async throws(StorageError) -> Int

    /// Whether other processes (other nodes) share the storage: then each session has one owner
    /// node (``ownership``), and a node serves no session before it joined. `false` for storage
    /// owned by one process (SQLite, memory).
    var isShared: Bool { get }

    /// Commits and deletes made by any process, as they happen (shared storage). `.listening`
    /// comes first once notices flow; a `.lost` notice means some may have been missed (the
    /// channel to the storage broke), and `.listening` follows when it is back. The stream ends
    /// when the storage closes. Storage owned by one process has nothing to tell: the stream
    /// ends at once.
    func notices() -> AsyncStream<StorageNotice>

    /// Runs `body` unless another process runs a job of the same name now (shared storage: an
    /// advisory lock), and returns its result; `nil` when another process had the turn. For
    /// housekeeping that one node at a time is enough for (the TTL sweep).
    func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T?

    /// Answers when the storage can be reached (for readiness checks); cheap.
    func ping() async throws(StorageError)

    /// Shared storage that gives each session one owner node at a time (``SessionOwnership``);
    /// `nil` for storage of one process, and for shared storage without owners.
    var ownership: (any SessionOwnership)? { get }
}

/// One owner per session among the nodes sharing a storage (Orleans' membership table and
/// grain directory): each node holds a membership with an epoch that only grows, renewed
/// while it runs; a session belongs to the node that claimed it for as long as that
/// membership lives, and only its owner may append to it (every append is fenced on it). A
/// node whose membership lapsed stops serving before another may take over.
public protocol SessionOwnership: Sendable {
    /// Whether this node's membership is valid now by its own clock, with a safety margin
    /// (it renews before; another node may take over only after PostgreSQL's clock says it
    /// expired, later still), and its liveness was confirmed moments ago. Only while it is may
    /// the node answer from its copies.
    var isMember: Bool { get }
    /// When the membership holds but its liveness was not confirmed moments ago (the node was
    /// paused, or starved of CPU), waits a moment for the next confirmation; at once otherwise.
    func confirmLiveness() async
    /// This node's epoch (0 before it joined, or after its membership lapsed).
    var epoch: Int64 { get }
    /// Whether ``join(advertising:)`` was called: from then on the ownership rules apply
    /// (before, as in tests of the storage alone, sessions have no owners).
    var hasJoined: Bool { get }
    /// Joins the cluster advertising `url` (where the other nodes reach this one) and keeps the
    /// membership renewed until ``leave()``; returns once joined.
    func join(advertising url: String) async throws(StorageError)
    /// Ends the membership: every session this node owned is free at once (graceful shutdown).
    func leave() async
    /// The session for this node: `.mine` once claimed (it was free, this node's already, or
    /// its owner's membership lapsed), `.elsewhere` with the owner's URL while another live
    /// node owns it, `.gone` when no such session exists.
    func claim(session: String) async throws(StorageError) -> OwnershipClaim
    /// The URL of the live node with `epoch` (nil when it is not a member).
    func url(ofNode epoch: Int64) async throws(StorageError) -> String?
    /// Gives a session this node owns to the live node with `epoch` (which asks for it by
    /// forwarding its requests); `false` when this node did not own it or that node is gone.
    /// The caller has dropped its copy first.
    func handOver(session: String, to epoch: Int64) async throws(StorageError) -> Bool
    /// Membership changes of this node: `.lost` when it lapsed (every copy this node holds
    /// must go: another node may own those sessions now), `.joined` when it holds one again.
    func changes() -> AsyncStream<MembershipChange>
    /// The live members of the cluster as the storage has them now, this node included while it
    /// is one (for the operators' status).
    func members() async throws(StorageError) -> [ClusterMember]
}

/// One live member of the cluster.
public struct ClusterMember: Sendable, Equatable {
    public var epoch: Int64
    /// Where the other nodes reach it.
    public var url: String
    public var isThisNode: Bool
    /// Whether its process is known alive (its liveness lock held); `nil` when it cannot be told
    /// (a node of an older build). A node without it is declared dead within a second.
    public var holdsLock: Bool?
    /// How long its membership lasts without another renewal.
    public var leaseLeft: Duration

    public init(epoch: Int64, url: String, isThisNode: Bool, holdsLock: Bool?, leaseLeft: Duration) {
        self.epoch = epoch
        self.url = url
        self.isThisNode = isThisNode
        self.holdsLock = holdsLock
        self.leaseLeft = leaseLeft
    }
}

public enum OwnershipClaim: Sendable, Equatable {
    /// This node owns the session; `tookOver` when another node had it before.
    case mine(tookOver: Bool)
    case elsewhere(url: String)
    case gone
}

public enum MembershipChange: Sendable, Equatable {
    case joined(epoch: Int64)
    case lost
}

/// What a shared storage tells every process about changes made by any of them.
public enum StorageNotice: Sendable, Equatable {
    /// Notices flow: from now on every commit and delete is told.
    case listening
    /// The session's journal reached `seq`.
    case committed(session: String, seq: Int)
    case deleted(session: String)
    /// The notification channel broke: anything may have been missed.
    case lost
}

extension SessionStorage {
    /// Reads every grant of the session (storage in memory: nothing to spare).
    public func hasToken(session: String, tokenHash: [UInt8], now: Int64) async throws(StorageError) -> Bool {
        try await grants(session: session).contains { $0.tokenHash == tokenHash && ($0.expiresAt ?? .max) > now }
    }

    public var lifetime: StorageLifetime { .durable }
    public var isShared: Bool { false }
    public var ownership: (any SessionOwnership)? { nil }

    /// The store's newest snapshot.
    public func latestSnapshot(session: String, feature: String) async throws(StorageError) -> StoreSnapshot? {
        try await snapshot(session: session, feature: feature, atOrBefore: .max)
    }

    /// A store's entries after `afterVersion`, in version order.
    public func journal(session: String, feature: String, afterVersion: Int) async throws(StorageError) -> [JournalEntry] {
        try await journal(session: session, feature: feature, afterVersion: afterVersion, through: .max)
    }

    /// The store's state at `version` (its newest snapshot at or below it, then the patches
    /// after), or nil when the journal no longer reaches back that far. Version 0 is `initial`.
    public func state(
        session: String, feature: String, at version: Int, initial: [UInt8]
    ) async throws(StorageError) -> [UInt8]? {
        if version == 0 { return initial }
        let base = try await snapshot(session: session, feature: feature, atOrBefore: version)
        if let base, base.version == version { return base.state }
        let entries = try await journal(session: session, feature: feature, afterVersion: base?.version ?? 0, through: version)
        var state = base?.state
        var expected = (base?.version ?? 0) + 1
        for entry in entries {
            guard entry.version == expected else { return nil }
            state = try entry.delta.state(after: state ?? (expected == 1 ? initial : nil))
            expected += 1
        }
        return expected == version + 1 ? state : nil
    }

    /// No other process writes this storage: nothing to hear.
    public func notices() -> AsyncStream<StorageNotice> {
        AsyncStream { $0.finish() }
    }

    public func ping() async throws(StorageError) {
        _ = try await lastSeq(session: "")
    }

    /// One process: always its turn.
    public func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        await body()
    }
}
