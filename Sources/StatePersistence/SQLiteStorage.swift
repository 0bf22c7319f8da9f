import CSQLite
import CoreMetrics
import DequeModule
import Dispatch
import Foundation
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
/// left behind by deleted sessions (writes now check that their session exists).
public final class SQLiteStorage: SessionStorage {
    public let name: String
    private let writer: Writer
    private let reader: Reader
    private let lock: ProcessLock
    /// The open file is still the one at the path, and writable (SQLiteStorage+Health.swift).
    let health: SQLiteHealth

    /// The schema version this code writes (`PRAGMA user_version`).
    static let schemaVersion = 1

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
            last_active INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions (last_active);
        CREATE TABLE IF NOT EXISTS journal (
            session TEXT NOT NULL,
            seq INTEGER NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            cause TEXT NOT NULL,
            payload BLOB,
            event BLOB NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, seq)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX IF NOT EXISTS journal_by_store ON journal (session, feature, version);
        CREATE TABLE IF NOT EXISTS snapshots (
            session TEXT NOT NULL,
            feature TEXT NOT NULL,
            version INTEGER NOT NULL,
            state_version INTEGER NOT NULL,
            state BLOB NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, feature)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS idempotency (
            session TEXT NOT NULL,
            key TEXT NOT NULL,
            status INTEGER NOT NULL,
            body BLOB NOT NULL,
            version INTEGER NOT NULL,
            time INTEGER NOT NULL,
            PRIMARY KEY (session, key)
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
            if version < 1 {
                // Before version 1 a write could land after its session's delete: drop the
                // rows of sessions that are gone.
                for table in ["journal", "snapshots", "idempotency"] {
                    try db.exec("DELETE FROM \(table) WHERE session NOT IN (SELECT id FROM sessions)")
                }
            }
            try db.exec("PRAGMA user_version = \(schemaVersion)")
            try db.exec("COMMIT")
        } catch {
            if db.inTransaction { try? db.exec("ROLLBACK") }
            throw error
        }
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

    public func latestSnapshot(session: String, feature: String) async throws(StorageError) -> StoreSnapshot? {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT version, state_version, state, time FROM snapshots WHERE session = ? AND feature = ?",
                [.text(session), .text(feature)]
            ) {
                StoreSnapshot(
                    session: session, feature: feature, version: Int($0.int(0)), stateVersion: Int($0.int(1)),
                    state: $0.blob(2) ?? [], time: $0.int(3))
            }.first
        }
    }

    public func journal(session: String, feature: String, afterVersion: Int) async throws(StorageError) -> [JournalEntry] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT seq, version, cause, payload, event, time FROM journal
                WHERE session = ? AND feature = ? AND version > ? ORDER BY version
                """, [.text(session), .text(feature), .int(Int64(afterVersion))]
            ) {
                JournalEntry(
                    session: session, seq: Int($0.int(0)), feature: feature, version: Int($0.int(1)), cause: $0.text(2),
                    payload: $0.blob(3), event: $0.blob(4) ?? [], time: $0.int(5))
            }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT seq, feature, version, cause, payload, event, time FROM journal
                WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?
                """, [.text(session), .int(Int64(afterSeq)), .int(Int64(limit))]
            ) {
                JournalEntry(
                    session: session, seq: Int($0.int(0)), feature: $0.text(1), version: Int($0.int(2)), cause: $0.text(3),
                    payload: $0.blob(4), event: $0.blob(5) ?? [], time: $0.int(6))
            }
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT max(seq) FROM journal WHERE session = ?", [.text(session)]) { Int($0.int(0)) }.first ?? 0
        }
    }

    public func reply(session: String, key: String) async throws(StorageError) -> StoredReply? {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT status, body, version FROM idempotency WHERE session = ? AND key = ?", [.text(session), .text(key)]
            ) { StoredReply(status: Int($0.int(0)), body: $0.blob(1) ?? [], version: Int($0.int(2))) }.first
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
                    results.append(.success(()))
                } catch {
                    // SQLITE_FULL and I/O errors may have rolled back the whole transaction:
                    // then a SAVEPOINT of the next batch would start a transaction of its own
                    // and RELEASE would commit it for real.
                    guard connection.inTransaction else { return .lost }
                    do {
                        try connection.run("ROLLBACK TO batch", [])
                        try connection.run("RELEASE batch", [])
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
            return .committed(results)
        }

        /// One batch in a transaction of its own.
        private func commitAlone(_ batch: [StorageWrite]) -> Result<Void, StorageError> {
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
                try apply(batch)
                try connection.run("COMMIT", [])
                return .success(())
            } catch {
                endTransaction()
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
                case .append(let e, _): try requireSession(e.session, &existing)
                case .snapshot(let s): try requireSession(s.session, &existing)
                case .touch(let session, _): try requireSession(session, &existing)
                case .compact(let session, _, _, _): try requireSession(session, &existing)
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
            case .deleteSession(let id):
                for table in ["journal", "snapshots", "idempotency"] {
                    try db.run("DELETE FROM \(table) WHERE session = ?", [.text(id)])
                }
                try db.run("DELETE FROM sessions WHERE id = ?", [.text(id)])
            case .append(let e, let idempotency):
                try db.run(
                    """
                    INSERT INTO journal (session, seq, feature, version, cause, payload, event, time)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(e.session), .int(Int64(e.seq)), .text(e.feature), .int(Int64(e.version)), .text(e.cause),
                        e.payload.map { .blob($0) } ?? .null, .blob(e.event), .int(e.time),
                    ])
                if let (key, reply) = idempotency {
                    try db.run(
                        """
                        INSERT OR REPLACE INTO idempotency (session, key, status, body, version, time)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """,
                        [
                            .text(e.session), .text(key), .int(Int64(reply.status)), .blob(reply.body),
                            .int(Int64(reply.version)), .int(e.time),
                        ])
                }
            case .snapshot(let s):
                try db.run(
                    """
                    INSERT OR REPLACE INTO snapshots (session, feature, version, state_version, state, time)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(s.session), .text(s.feature), .int(Int64(s.version)), .int(Int64(s.stateVersion)),
                        .blob(s.state), .int(s.time),
                    ])
            case .touch(let session, let at):
                try db.run("UPDATE sessions SET last_active = max(last_active, ?) WHERE id = ?", [.int(at), .text(session)])
            case .compact(let session, let feature, let upToVersion, let keepLast):
                try db.run(
                    """
                    DELETE FROM journal WHERE session = ? AND feature = ? AND version <= ?
                    AND seq <= (SELECT coalesce(max(seq), 0) FROM journal WHERE session = ?) - ?
                    """,
                    [.text(session), .text(feature), .int(Int64(upToVersion)), .text(session), .int(Int64(keepLast))])
            }
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

        func read<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws(StorageError) -> T) async throws(StorageError) -> T {
            let result: Result<T, StorageError> = await withCheckedContinuation { continuation in
                queue.async { [connection] in
                    do throws(StorageError) {
                        continuation.resume(returning: .success(try body(connection)))
                    } catch {
                        continuation.resume(returning: .failure(error))
                    }
                }
            }
            return try result.get()
        }
    }
}
