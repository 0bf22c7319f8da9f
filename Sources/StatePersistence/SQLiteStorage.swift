import CSQLite
import CoreMetrics
import DequeModule
import Dispatch
import Foundation
import StateStore
import Synchronization

/// Sessions, journals, snapshots and idempotency replies in one SQLite file (WAL mode).
///
/// Durability: one writer thread takes every batch waiting, writes them in one transaction
/// (a savepoint each, so one bad batch fails alone) and commits with `synchronous=FULL`, which
/// fsyncs the WAL. A batch's `commit` returns only after that. Batches that arrive while a
/// commit runs share the next one (group commit), so durability costs one fsync per group,
/// not per request. When the group's transaction is lost (SQLite rolls back the whole
/// transaction, not the savepoint, on SQLITE_FULL and I/O errors) or its COMMIT fails, nothing
/// of the group is stored, and each batch is committed again alone: every answer is exact.
/// Reads use a second connection on their own queue (WAL readers do not wait for the writer).
///
/// One owner: the storage holds an exclusive lock on `<path>.lock` (see ``ProcessLock``) from
/// `init` to `close()`; a second process opening the same database fails with `.unusable`.
///
/// Schema versions (`PRAGMA user_version`): 0 is the schema before versions; 1 purges rows
/// left behind by deleted sessions (writes now check that their session exists); 2 keeps
/// changes instead of states: the journal (`changes`) holds each change's action, effect and a
/// patch from the previous state, snapshots (`bases`) are kept per version as the bases loads
/// and replays start from, the heads (`sessions.head_seq`, and each store's newest change or
/// base, kept in the writer's memory once known: ``SQLiteHeads``) fence every append
/// (`stores`, written by the conversion, is not kept per change), and
/// idempotency keys (`remembered_keys`) refer to their change instead of copying its reply.
/// Opening a version 0 or 1 database converts it in one transaction, losing nothing.
public final class SQLiteStorage: SessionStorage {
    public let name: String
    private let writer: Writer
    private let reader: Reader
    private let lock: ProcessLock
    /// The open file is still the one at the path, and writable (SQLiteStorage+Health.swift).
    let health: SQLiteHealth

    /// A session's last seq, in a query over `sessions` with the session's id as `?1`: the row
    /// keeps a lower bound (the writer updates it at most once a minute, and before compaction
    /// may delete the newest changes), the journal the rest.
    static let headSeqColumn =
        "max(head_seq, coalesce((SELECT max(seq) FROM changes WHERE changes.session = ?1), 0))"

    /// The schema version this code writes (`PRAGMA user_version`).
    static let schemaVersion = 2

    /// Opens (creating if needed) the database at `path`. Fails with `.unusable` and a clear
    /// reason when the path is a directory, not writable, or not a SQLite database.
    /// How much a commit waits for the disk.
    public enum Durability: String, Sendable {
        /// `synchronous=FULL`: every commit is fsynced before it returns; an acknowledged change
        /// survives a crash of the process, the kernel or the power. The default.
        case full
        /// `synchronous=NORMAL`: a commit returns once the WAL is written; the WAL is fsynced at
        /// checkpoints. An acknowledged change survives a crash of the process, but the last
        /// commits may be lost if the machine itself goes down. Much faster on slow fsyncs.
        case normal
    }

    /// - Parameter durability: `.full` (fsync every commit) or `.normal` (see ``Durability``).
    /// - Parameter maxBytes: an upper bound on the file size (`PRAGMA max_page_count`); writes
    ///   past it fail like a full disk. `nil`: no bound but the disk's.
    public init(path: String, maxBytes: Int? = nil, durability: Durability = .full) throws(StorageError) {
        name = "sqlite:\(path)"
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw StorageError(.unusable, "storage \(name) is unusable: \(path) is a directory")
        }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, !FileManager.default.fileExists(atPath: parent) {
            do {
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            } catch {
                throw StorageError(.unusable, "storage \(name) is unusable: cannot create directory \(parent): \(error.localizedDescription)")
            }
        }
        do {
            lock = try ProcessLock(lockPath: path + ".lock", database: path)
        } catch {
            throw StorageError(.unusable, "storage \(name) is unusable: \(error.message)")
        }
        let connection: SQLiteConnection
        do {
            connection = try SQLiteConnection(path: path, readOnly: false)
            try connection.exec(Self.schema)
            try Self.migrate(connection)
            if durability == .normal {
                try connection.exec("PRAGMA synchronous = NORMAL;")
            }
            if let maxBytes {
                try connection.exec("PRAGMA max_page_count = \(max(16, maxBytes / 4096));")
            }
        } catch {
            throw StorageError(.unusable, "storage \(name) is unusable: \(error.message)")
        }
        let readConnection: SQLiteConnection
        do {
            readConnection = try SQLiteConnection(path: path, readOnly: true)
            try readConnection.exec("PRAGMA query_only = 1;")
        } catch {
            throw StorageError(.unusable, "storage \(name) is unusable: \(error.message)")
        }
        writer = Writer(connection: connection)
        reader = Reader(connection: readConnection)
        health = SQLiteHealth(path: path)
    }

    static let schema = """
        PRAGMA page_size = 4096;
        PRAGMA journal_mode = WAL;
        PRAGMA synchronous = FULL;
        PRAGMA cache_size = -65536;
        PRAGMA mmap_size = 268435456;
        PRAGMA temp_store = MEMORY;
        CREATE TABLE IF NOT EXISTS sessions (
            id TEXT PRIMARY KEY,
            token_hash BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            last_active INTEGER NOT NULL,
            head_seq INTEGER NOT NULL DEFAULT 0
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (last_active);
        CREATE TABLE IF NOT EXISTS changes (
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            cause TEXT NOT NULL,
            action BLOB,
            effect BLOB,
            is_patch INTEGER NOT NULL,
            delta BLOB NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, seq)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX IF NOT EXISTS changes_by_store ON changes (session, feature, version);
        CREATE TABLE IF NOT EXISTS stores (
            session TEXT NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            PRIMARY KEY (session, feature)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS bases (
            session TEXT NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            state_version INTEGER NOT NULL,
            state BLOB NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, feature, version)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS remembered_keys (
            session TEXT NOT NULL,
            key TEXT NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, key)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS tokens (
            session TEXT NOT NULL,
            id TEXT NOT NULL,
            token_hash BLOB NOT NULL,
            grant_json BLOB NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER,
            PRIMARY KEY (session, id)
        ) WITHOUT ROWID;
        SELECT count(*) FROM sqlite_master;
        """

    /// Brings a database from its `user_version` to ``schemaVersion``, in one transaction.
    static func migrate(_ db: SQLiteConnection) throws(StorageError) {
        let version = try db.query("PRAGMA user_version", []) { Int($0.int(0)) }.first ?? 0
        guard version <= schemaVersion else {
            throw StorageError(.unusable, "its schema version \(version) is newer than this server's (\(schemaVersion))")
        }
        guard version < schemaVersion else { return }
        try db.exec("BEGIN IMMEDIATE")
        do throws(StorageError) {
            let old = try db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'journal'", []) { _ in true }
            if !old.isEmpty {
                if version < 1 {
                    // Before version 1 a write could land after its session's delete: drop the
                    // rows of sessions that are gone.
                    for table in ["journal", "snapshots", "idempotency"] {
                        try db.exec("DELETE FROM \(table) WHERE session NOT IN (SELECT id FROM sessions)")
                    }
                }
                try convertToChanges(db)
            }
            try db.exec("PRAGMA user_version = \(schemaVersion)")
            try db.exec("COMMIT")
        } catch {
            if db.inTransaction { try? db.exec("ROLLBACK") }
            throw error
        }
    }

    /// Version 1 → 2: each journal row's event (which held the whole state) becomes a change
    /// (action, effect, and a patch from the previous version when it has one and it is
    /// smaller); snapshots become bases; remembered replies become references to their
    /// change; the heads are the last seq and versions found.
    static func convertToChanges(_ db: SQLiteConnection) throws(StorageError) {
        let columns = try db.query("PRAGMA table_info(sessions)", []) { $0.text(1) }
        if !columns.contains("head_seq") {
            try db.exec("ALTER TABLE sessions ADD COLUMN head_seq INTEGER NOT NULL DEFAULT 0")
        }
        let sessions = try db.query("SELECT id FROM sessions", []) { $0.text(0) }
        for session in sessions {
            let rows = try db.query(
                "SELECT seq, feature, version, cause, event, time FROM journal WHERE session = ? ORDER BY feature, version",
                [.text(session)]
            ) { ($0.int(0), $0.text(1), $0.int(2), $0.text(3), $0.blob(4) ?? [], $0.int(5)) }
            var previous: (feature: String, version: Int64, state: [UInt8])?
            for (seq, feature, version, cause, event, time) in rows {
                guard case .object(let data)? = JSONCoding.parse(event), let state = data["state"]?.bytes else {
                    throw StorageError(.unusable, "journal entry \(session)/\(feature)@\(version) has no readable event")
                }
                let base = previous.flatMap { $0.feature == feature && $0.version == version - 1 ? $0.state : nil }
                let delta = StateDelta.between(base, state)
                try db.run(
                    """
                    INSERT INTO changes (session, seq, feature, version, cause, action, effect, is_patch, delta, time)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(session), .int(seq), .text(feature), .int(version), .text(cause),
                        data["action"].map { .blob($0.bytes) } ?? .null, data["effect"].map { .blob($0.bytes) } ?? .null,
                        .int(delta.isPatch ? 1 : 0), .blob(delta.bytes), .int(time),
                    ])
                previous = (feature, version, state)
            }
        }
        try db.exec(
            """
            INSERT INTO bases (session, feature, version, state_version, state, time)
                SELECT session, feature, version, state_version, state, time FROM snapshots;
            INSERT INTO stores (session, feature, version)
                SELECT session, feature, max(version) FROM (
                    SELECT session, feature, version FROM journal UNION ALL SELECT session, feature, version FROM snapshots
                ) GROUP BY session, feature;
            UPDATE sessions SET head_seq = coalesce((SELECT max(seq) FROM journal WHERE session = sessions.id), 0);
            """)
        let replies = try db.query("SELECT session, key, body, version, time FROM idempotency WHERE status = 200", []) {
            ($0.text(0), $0.text(1), $0.blob(2) ?? [], $0.int(3), $0.int(4))
        }
        for (session, key, body, version, time) in replies {
            guard case .string(let feature)? = JSONCoding.parse(body)?["feature"] else { continue }
            try db.run(
                "INSERT INTO remembered_keys (session, key, feature, version, time) VALUES (?, ?, ?, ?, ?)",
                [.text(session), .text(key), .text(feature), .int(version), .int(time)])
        }
        try db.exec("DROP TABLE journal; DROP TABLE snapshots; DROP TABLE idempotency;")
    }

    /// `PRAGMA integrity_check` of the database at `path`, opened read-only: `"ok"` when sound.
    public static func integrityCheck(path: String) throws(StorageError) -> String {
        let connection = try SQLiteConnection(path: path, readOnly: true)
        return try connection.query("PRAGMA integrity_check", []) { $0.text(0) }.joined(separator: "; ")
    }

    public func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        guard !batch.isEmpty else { return }
        try health.check()
        let result: Result<Void, StorageError> = await withCheckedContinuation { continuation in
            writer.submit(batch) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// Commits `batches` in one group commit, as if they had been submitted concurrently: each
    /// is atomic on its own and gets its own answer (in order), exact like ``commit(_:)``'s.
    /// For bulk loads, and for tests that need a group of a known shape.
    public func commit(group batches: [[StorageWrite]]) async -> [Result<Void, StorageError>] {
        guard !batches.isEmpty else { return [] }
        if let problem = health.problem() { return batches.map { _ in .failure(problem) } }
        let collected = GroupResults(count: batches.count)
        return await withCheckedContinuation { continuation in
            writer.submit(group: batches) { index, result in
                if let all = collected.set(index, result) { continuation.resume(returning: all) }
            }
        }
    }

    public func session(id: String) async throws(StorageError) -> StoredSession? {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT id, token_hash, created_at, last_active FROM sessions WHERE id = ?", [.text(id)]) {
                StoredSession(id: $0.text(0), tokenHash: $0.blob(1) ?? [], createdAt: $0.int(2), lastActiveAt: $0.int(3))
            }.first
        }
    }

    public func grants(session: String) async throws(StorageError) -> [StoredGrant] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT id, token_hash, grant_json, created_at, expires_at FROM tokens WHERE session = ? ORDER BY created_at, id",
                [.text(session)]
            ) {
                StoredGrant(
                    session: session, id: $0.text(0), tokenHash: $0.blob(1) ?? [], grant: $0.blob(2) ?? [], createdAt: $0.int(3),
                    expiresAt: $0.isNull(4) ? nil : $0.int(4))
            }
        }
    }

    public func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT version, state_version, state, time FROM bases
                WHERE session = ? AND feature = ? AND version <= ? ORDER BY version DESC LIMIT 1
                """,
                [.text(session), .text(feature), .int(Int64(clamping: version))]
            ) {
                StoreSnapshot(
                    session: session, feature: feature, version: Int($0.int(0)), stateVersion: Int($0.int(1)),
                    state: $0.blob(2) ?? [], time: $0.int(3))
            }.first
        }
    }

    static func entry(_ session: String, _ row: Statement) -> JournalEntry {
        let delta = row.blob(7) ?? []
        return JournalEntry(
            session: session, seq: Int(row.int(0)), feature: row.text(1), version: Int(row.int(2)), cause: row.text(3),
            action: row.blob(4), effect: row.blob(5), delta: row.int(6) != 0 ? .patch(delta) : .state(delta), time: row.int(8))
    }

    public func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT seq, feature, version, cause, action, effect, is_patch, delta, time FROM changes
                WHERE session = ? AND feature = ? AND version > ? AND version <= ? ORDER BY version
                """, [.text(session), .text(feature), .int(Int64(afterVersion)), .int(Int64(clamping: through))]
            ) { Self.entry(session, $0) }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT seq, feature, version, cause, action, effect, is_patch, delta, time FROM changes
                WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?
                """, [.text(session), .int(Int64(afterSeq)), .int(Int64(limit))]
            ) { Self.entry(session, $0) }
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT \(SQLiteStorage.headSeqColumn) FROM sessions WHERE id = ?1", [.text(session)]) { Int($0.int(0)) }.first ?? 0
        }
    }

    public func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT feature, version, time FROM remembered_keys WHERE session = ? AND key = ?", [.text(session), .text(key)]
            ) { RememberedKey(feature: $0.text(0), version: Int($0.int(1)), time: $0.int(2)) }.first
        }
    }

    public func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT id FROM sessions WHERE last_active < ? ORDER BY last_active LIMIT ?",
                [.int(time), .int(Int64(limit))]
            ) { $0.text(0) }
        }
    }

    public func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT id, token_hash, created_at, last_active FROM sessions WHERE id > ? ORDER BY id LIMIT ?",
                [.text(id), .int(Int64(max(0, limit)))]
            ) { StoredSession(id: $0.text(0), tokenHash: $0.blob(1) ?? [], createdAt: $0.int(2), lastActiveAt: $0.int(3)) }
        }
    }

    public func sessionCount() async throws(StorageError) -> Int {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT count(*) FROM sessions", []) { Int($0.int(0)) }.first ?? 0
        }
    }

    public func close() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            writer.stop { continuation.resume() }
        }
        lock.release()
    }
}

/// The answers of a group submitted with ``SQLiteStorage/commit(group:)``, as they arrive.
private final class GroupResults: Sendable {
    private let state: Mutex<(results: [Result<Void, StorageError>?], pending: Int)>

    init(count: Int) {
        state = Mutex((Array(repeating: nil, count: count), count))
    }

    /// Records one answer; all of them, in order, once the last one is in.
    func set(_ index: Int, _ result: Result<Void, StorageError>) -> [Result<Void, StorageError>]? {
        state.withLock { state in
            state.results[index] = result
            state.pending -= 1
            return state.pending == 0 ? state.results.compactMap { $0 } : nil
        }
    }
}

// MARK: - Writer

extension SQLiteStorage {
    /// The single writer: a thread that commits every waiting batch in one transaction.
    final class Writer: @unchecked Sendable {
        // @unchecked: `connection` is touched only by the writer thread; everything else sits
        // behind `queue`'s lock.
        typealias Completion = @Sendable (Result<Void, StorageError>) -> Void

        private struct Queue {
            var jobs = Deque<(batch: [StorageWrite], done: Completion)>()
            var stopping = false
            var onStopped: (@Sendable () -> Void)?
        }

        private let connection: SQLiteConnection
        private let queue = Mutex(Queue())
        private let wake = DispatchSemaphore(value: 0)
        /// Heads of the sessions written lately (writer thread only).
        private var heads = SQLiteHeads()
        /// An append writes the session row's activity only when what it holds is older than
        /// this (milliseconds): at most one session-row write a minute for a busy session.
        static let activityInterval: Int64 = 60_000

        init(connection: SQLiteConnection) {
            self.connection = connection
            let thread = Thread { [self] in loop() }
            thread.name = "sqlite-writer"
            thread.start()
        }

        func submit(_ batch: [StorageWrite], done: @escaping Completion) {
            let accepted = queue.withLock { q -> Bool in
                guard !q.stopping else { return false }
                q.jobs.append((batch, done))
                return true
            }
            if accepted {
                wake.signal()
            } else {
                done(.failure(StorageError(.unavailable, "the storage is closing")))
            }
        }

        /// Queues `batches` together, so the writer takes them into one group.
        func submit(group batches: [[StorageWrite]], done: @escaping @Sendable (Int, Result<Void, StorageError>) -> Void) {
            let accepted = queue.withLock { q -> Bool in
                guard !q.stopping else { return false }
                for (index, batch) in batches.enumerated() {
                    q.jobs.append((batch, { done(index, $0) }))
                }
                return true
            }
            if accepted {
                wake.signal()
            } else {
                for index in batches.indices { done(index, .failure(StorageError(.unavailable, "the storage is closing"))) }
            }
        }

        func stop(_ done: @escaping @Sendable () -> Void) {
            queue.withLock { q in
                q.stopping = true
                q.onStopped = done
            }
            wake.signal()
        }

        private func loop() {
            while true {
                wake.wait()
                let (jobs, stopping, onStopped) = queue.withLock { q in
                    defer { q.jobs.removeAll() }
                    return (Array(q.jobs), q.stopping, q.onStopped)
                }
                if !jobs.isEmpty { commit(jobs) }
                if stopping && queue.withLock({ $0.jobs.isEmpty }) {
                    onStopped?()
                    return
                }
            }
        }

        /// Time from BEGIN to the end of COMMIT (the fsync) of each group.
        private let commitTimer = Timer(label: "stateserver_storage_commit_duration_seconds")
        private let groupSize = Recorder(label: "stateserver_storage_commit_batches")

        private func commit(_ jobs: [(batch: [StorageWrite], done: Completion)]) {
            let started = ContinuousClock.now
            defer {
                let elapsed = ContinuousClock.now - started
                commitTimer.recordNanoseconds(elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000)
                groupSize.record(jobs.count)
            }
            // A lone batch needs no savepoint: the transaction is its boundary.
            if jobs.count == 1 {
                jobs[0].done(commitAlone(jobs[0].batch))
                return
            }
            switch commitTogether(jobs.map(\.batch)) {
            case .committed(let results):
                for (job, result) in zip(jobs, results) { job.done(result) }
            case .notBegun(let error):
                for job in jobs { job.done(.failure(error)) }
            case .lost:
                heads.rollBack()
                // Nothing of the group is stored. Each batch again, alone: one that does not
                // fit fails by itself, and none is answered for another's failure.
                for job in jobs { job.done(commitAlone(job.batch)) }
            }
        }

        private enum GroupOutcome {
            /// COMMIT succeeded: one result per batch (failed ones were rolled back to their
            /// savepoint and left nothing).
            case committed([Result<Void, StorageError>])
            /// BEGIN failed: nothing was written.
            case notBegun(StorageError)
            /// The transaction was rolled back as a whole (by SQLite itself, or by us after a
            /// failed savepoint operation or COMMIT): nothing of the group is stored.
            case lost
        }

        /// All batches in one transaction, a savepoint each.
        private func commitTogether(_ batches: [[StorageWrite]]) -> GroupOutcome {
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
            } catch {
                return .notBegun(error)
            }
            var results: [Result<Void, StorageError>] = []
            for batch in batches {
                do {
                    try connection.run("SAVEPOINT batch", [])
                    try apply(batch)
                    try connection.run("RELEASE batch", [])
                    heads.releaseBatch()
                    results.append(.success(()))
                } catch {
                    // SQLITE_FULL and I/O errors may have rolled back the whole transaction:
                    // then a SAVEPOINT of the next batch would start a transaction of its own
                    // and RELEASE would commit it for real.
                    guard connection.inTransaction else { return .lost }
                    do {
                        try connection.run("ROLLBACK TO batch", [])
                        try connection.run("RELEASE batch", [])
                        heads.rollBackBatch()
                    } catch {
                        endTransaction()
                        return .lost
                    }
                    results.append(.failure(error))
                }
            }
            do {
                try connection.run("COMMIT", [])
            } catch {
                endTransaction()
                return .lost
            }
            heads.commit()
            return .committed(results)
        }

        /// One batch in a transaction of its own.
        private func commitAlone(_ batch: [StorageWrite]) -> Result<Void, StorageError> {
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
                try apply(batch)
                try connection.run("COMMIT", [])
                heads.commit()
                return .success(())
            } catch {
                endTransaction()
                heads.rollBack()
                return .failure(error)
            }
        }

        /// Rolls back a transaction left open (after a failure); nothing when there is none.
        private func endTransaction() {
            if connection.inTransaction { try? connection.run("ROLLBACK", []) }
        }

        /// The writes of one batch, in order. Every write naming a session checks, once per
        /// batch and inside the batch's transaction, that the session exists.
        private func apply(_ batch: [StorageWrite]) throws(StorageError) {
            var existing: Set<String> = []
            for write in batch {
                switch write {
                case .createSession(let s):
                    try apply(write)
                    existing.insert(s.id)
                    continue
                case .deleteSession(let id):
                    try apply(write)
                    existing.remove(id)
                    continue
                case .append(let e, _):
                    // The append's own fence (the session row at seq - 1) finds the session:
                    // no query of its own.
                    try apply(write)
                    existing.insert(e.session)
                    continue
                case .snapshot(let s): try requireSession(s.session, &existing)
                case .touch(let session, _): try requireSession(session, &existing)
                case .compact(let session, _, _, _, _, _): try requireSession(session, &existing)
                case .createGrant(let grant): try requireSession(grant.session, &existing)
                case .deleteGrants(let session, _): try requireSession(session, &existing)
                }
                try apply(write)
            }
        }

        private func requireSession(_ id: String, _ existing: inout Set<String>) throws(StorageError) {
            guard !existing.contains(id) else { return }
            let found = try connection.query("SELECT 1 FROM sessions WHERE id = ?", [.text(id)]) { _ in true }
            guard !found.isEmpty else {
                throw StorageError(.sessionGone, "session \(id) does not exist (deleted or expired)")
            }
            existing.insert(id)
        }

        private func apply(_ write: StorageWrite) throws(StorageError) {
            let db = connection
            switch write {
            case .createSession(let s):
                try db.run(
                    "INSERT INTO sessions (id, token_hash, created_at, last_active) VALUES (?, ?, ?, ?)",
                    [.text(s.id), .blob(s.tokenHash), .int(s.createdAt), .int(s.lastActiveAt)])
                heads.set(s.id, SQLiteHeads.Head(seq: 0, stores: [:], storedActivity: s.lastActiveAt))
            case .deleteSession(let id):
                for table in ["changes", "stores", "bases", "remembered_keys", "tokens"] {
                    try db.run("DELETE FROM \(table) WHERE session = ?", [.text(id)])
                }
                try db.run("DELETE FROM sessions WHERE id = ?", [.text(id)])
                heads.set(id, nil)
            case .append(let e, let key):
                // Fenced: the entry must follow the session's last seq and the store's last
                // version, whatever compaction removed (heads known to the writer, or read).
                var head = try sessionHead(e.session)
                guard e.seq == head.seq + 1 else { throw Self.notNext(e) }
                guard try e.version == storeVersion(e.session, e.feature) + 1 else { throw Self.notNext(e) }
                try db.run(
                    """
                    INSERT INTO changes (session, seq, feature, version, cause, action, effect, is_patch, delta, time)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(e.session), .int(Int64(e.seq)), .text(e.feature), .int(Int64(e.version)), .text(e.cause),
                        e.action.map { .blob($0) } ?? .null, e.effect.map { .blob($0) } ?? .null,
                        .int(e.delta.isPatch ? 1 : 0), .blob(e.delta.bytes), .int(e.time),
                    ])
                if let key {
                    try db.run(
                        "INSERT INTO remembered_keys (session, key, feature, version, time) VALUES (?, ?, ?, ?, ?)",
                        [.text(e.session), .text(key), .text(e.feature), .int(Int64(e.version)), .int(e.time)])
                }
                head.seq = e.seq
                head.stores[e.feature] = e.version
                if e.time - head.storedActivity >= Self.activityInterval {
                    // The session row keeps a lower bound of the head seq (exact once written
                    // here or by compaction); readers take the newest of it and the journal's.
                    try db.run(
                        "UPDATE sessions SET head_seq = max(head_seq, ?), last_active = max(last_active, ?) WHERE id = ?",
                        [.int(Int64(e.seq)), .int(e.time), .text(e.session)])
                    head.storedActivity = e.time
                }
                heads.set(e.session, head)
            case .snapshot(let s):
                let head = try storeVersion(s.session, s.feature)
                guard s.version <= head else {
                    throw StorageError(.conflict, "snapshot \(s.session)/\(s.feature)@\(s.version) is ahead of the journal (\(head))")
                }
                try db.run(
                    """
                    INSERT OR REPLACE INTO bases (session, feature, version, state_version, state, time)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(s.session), .text(s.feature), .int(Int64(s.version)), .int(Int64(s.stateVersion)),
                        .blob(s.state), .int(s.time),
                    ])
            case .touch(let session, let at):
                try db.run("UPDATE sessions SET last_active = max(last_active, ?) WHERE id = ?", [.int(at), .text(session)])
                if var head = heads.head(of: session) ?? nil {
                    head.storedActivity = max(head.storedActivity, at)
                    heads.set(session, head)
                }
            case .compact(let session, let feature, let upToVersion, let keepLast, let keysSince, let maxKeys):
                // The journal's newest seq may go: the session row keeps the head first.
                let headSeq = try sessionHead(session).seq
                try db.run("UPDATE sessions SET head_seq = ? WHERE id = ? AND head_seq < ?", [.int(Int64(headSeq)), .text(session), .int(Int64(headSeq))])
                try db.run("DELETE FROM remembered_keys WHERE session = ? AND time < ?", [.text(session), .int(keysSince)])
                try db.run(
                    """
                    DELETE FROM remembered_keys WHERE session = ? AND key NOT IN (
                        SELECT key FROM remembered_keys WHERE session = ? ORDER BY time DESC, key DESC LIMIT ?)
                    """, [.text(session), .text(session), .int(Int64(max(0, maxKeys)))])
                // The oldest version still needed: of the entries in the replay window, of the
                // remembered keys, or just after the snapshot.
                let needFrom = try db.query(
                    """
                    SELECT min(v) FROM (
                        SELECT ? AS v
                        UNION ALL SELECT min(version) FROM changes WHERE session = ? AND feature = ?
                            AND seq > ?
                        UNION ALL SELECT min(version) FROM remembered_keys WHERE session = ? AND feature = ?)
                    """,
                    [
                        .int(Int64(upToVersion + 1)), .text(session), .text(feature), .int(Int64(headSeq - keepLast)),
                        .text(session), .text(feature),
                    ]
                ) { $0.int(0) }.first ?? Int64(upToVersion + 1)
                let base = try db.query(
                    "SELECT max(version) FROM bases WHERE session = ? AND feature = ? AND version <= ?",
                    [.text(session), .text(feature), .int(needFrom - 1)]
                ) { $0.int(0) }.first ?? 0
                guard base > 0 else { return }
                try db.run("DELETE FROM bases WHERE session = ? AND feature = ? AND version < ?", [.text(session), .text(feature), .int(base)])
                try db.run("DELETE FROM changes WHERE session = ? AND feature = ? AND version <= ?", [.text(session), .text(feature), .int(base)])
            case .createGrant(let g):
                try db.run(
                    "INSERT INTO tokens (session, id, token_hash, grant_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [.text(g.session), .text(g.id), .blob(g.tokenHash), .blob(g.grant), .int(g.createdAt), g.expiresAt.map { .int($0) } ?? .null])
            case .deleteGrants(let session, let ids):
                for id in ids {
                    try db.run("DELETE FROM tokens WHERE session = ? AND id = ?", [.text(session), .text(id)])
                }
            }
        }

        /// The session's heads: as the writer knows them, or read (`.sessionGone` when there is no
        /// such session).
        private func sessionHead(_ session: String) throws(StorageError) -> SQLiteHeads.Head {
            switch heads.head(of: session) {
            case .some(.some(let head)): return head
            case .some(.none), .none: break
            }
            let found = try connection.query(
                "SELECT \(SQLiteStorage.headSeqColumn), last_active FROM sessions WHERE id = ?1", [.text(session)]
            ) { SQLiteHeads.Head(seq: Int($0.int(0)), stores: [:], storedActivity: $0.int(1)) }
            guard let head = found.first else {
                throw StorageError(.sessionGone, "session \(session) does not exist (deleted or expired)")
            }
            heads.set(session, head)
            return head
        }

        /// A store's last version, as the writer knows it or read.
        private func storeVersion(_ session: String, _ feature: String) throws(StorageError) -> Int {
            var head = try sessionHead(session)
            if let version = head.stores[feature] { return version }
            let version = try Self.storeHead(connection, session, feature)
            head.stores[feature] = version
            heads.set(session, head)
            return version
        }

        /// A store's last version: the newest of its changes and bases (0: none yet).
        static func storeHead(_ db: SQLiteConnection, _ session: String, _ feature: String) throws(StorageError) -> Int {
            try db.query(
                """
                SELECT max(coalesce((SELECT max(version) FROM changes WHERE session = ?1 AND feature = ?2), 0),
                    coalesce((SELECT max(version) FROM bases WHERE session = ?1 AND feature = ?2), 0))
                """, [.text(session), .text(feature)]
            ) { Int($0.int(0)) }.first ?? 0
        }

        static func notNext(_ e: JournalEntry) -> StorageError {
            StorageError(.conflict, "journal entry \(e.session)/\(e.feature)@\(e.version) (seq \(e.seq)) does not follow the journal's head")
        }
    }

    /// Reads on one read-only connection, on a serial queue so callers never block an event
    /// thread or the cooperative pool on I/O.
    final class Reader: @unchecked Sendable {
        // @unchecked: `connection` is only touched on `queue`.
        private let connection: SQLiteConnection
        private let queue = DispatchQueue(label: "sqlite-reader")

        init(connection: SQLiteConnection) {
            self.connection = connection
        }

        /// Bytes of page cache the reader keeps between reads.
        static let cacheKept = 256 << 10

        func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> T) async throws(StorageError) -> T {
            let result: Result<T, StorageError> = await withCheckedContinuation { continuation in
                queue.async { [connection] in
                    let result: Result<T, StorageError>
                    do throws(StorageError) {
                        result = .success(try body(connection))
                    } catch {
                        result = .failure(error)
                    }
                    // Loads are read once per store: what they bring into the cache is not
                    // read again soon (the writer's connection keeps its own).
                    connection.releaseCache(above: Self.cacheKept)
                    continuation.resume(returning: result)
                }
            }
            return try result.get()
        }
    }
}
