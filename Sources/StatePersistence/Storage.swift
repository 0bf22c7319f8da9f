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

/// One applied change, as journaled.
public struct JournalEntry: Sendable, Equatable {
    public let session: String
    /// The session's event sequence number of this change.
    public let seq: Int
    public let feature: String
    public let version: Int
    /// `dispatch`, `rehydrate` or `reset`.
    public let cause: String
    /// What replays the change: the action (dispatch) or the state (rehydrate); nil for reset.
    public let payload: [UInt8]?
    /// The change's event `data` JSON, for `Last-Event-ID` replay after a restart.
    public let event: [UInt8]
    /// Milliseconds since 1970.
    public let time: Int64

    public init(
        session: String, seq: Int, feature: String, version: Int, cause: String, payload: [UInt8]?,
        event: [UInt8], time: Int64
    ) {
        self.session = session
        self.seq = seq
        self.feature = feature
        self.version = version
        self.cause = cause
        self.payload = payload
        self.event = event
        self.time = time
    }
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

/// A remembered reply to an `Idempotency-Key`.
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

/// One write; a batch of writes commits atomically.
///
/// Every write but `createSession` and `deleteSession` names a session that must exist when
/// the batch commits (it may be created earlier in the same batch): otherwise the batch fails
/// with ``StorageError/Kind/sessionGone`` and stores nothing. This check runs in the batch's
/// own transaction, so a write can never land after the session's `deleteSession`.
public enum StorageWrite: Sendable {
    case createSession(StoredSession)
    case deleteSession(id: String)
    case append(JournalEntry, idempotency: (key: String, reply: StoredReply)?)
    case snapshot(StoreSnapshot)
    /// Records activity; sessions inactive past the TTL are purged.
    case touch(session: String, at: Int64)
    /// Drops journal entries of a store up to `version` (covered by a snapshot), keeping the
    /// session's last `keepLast` entries for event replay.
    case compact(session: String, feature: String, upToVersion: Int, keepLast: Int)
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
        /// A write broke a rule of the schema (a duplicate version): a bug, never retried.
        public static let conflict = Kind("conflict")
        /// A write (append, snapshot, touch, compact, idempotency reply) names a session that
        /// does not exist: it was deleted or purged, or never created. Nothing of the batch is
        /// stored; retrying cannot help. Answer as for an unknown session.
        public static let sessionGone = Kind("sessionGone")
    }

    public let kind: Kind
    public let message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
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

    /// Commits a batch atomically: all of it or none of it.
    func commit(_ batch: [StorageWrite]) async throws(StorageError)

    func session(id: String) async throws(StorageError) -> StoredSession?
    func latestSnapshot(session: String, feature: String) async throws(StorageError) -> StoreSnapshot?
    /// A store's entries with version > `afterVersion`, in version order.
    func journal(session: String, feature: String, afterVersion: Int) async throws(StorageError) -> [JournalEntry]
    /// The session's entries with seq > `afterSeq`, in seq order, at most `limit`.
    func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry]
    /// The last seq used by the session (0 if none).
    func lastSeq(session: String) async throws(StorageError) -> Int
    func reply(session: String, key: String) async throws(StorageError) -> StoredReply?
    /// Ids of sessions last active before `time`, at most `limit`.
    func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String]
    /// Number of stored sessions.
    func sessionCount() async throws(StorageError) -> Int
    /// Stops the writer after pending commits.
    func close() async

    /// Whether other processes (other nodes) write the same storage, so what one process holds
    /// in memory may be behind: it catches up from the journal before reads and after a
    /// conflicting commit. `false` for storage owned by one process (SQLite, memory).
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
    public var isShared: Bool { false }

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
