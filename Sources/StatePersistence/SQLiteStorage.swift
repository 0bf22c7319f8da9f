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
/// Opening a version 0 or 1 database converts it in one transaction, losing nothing. 3 appends
/// each change to `recent_changes` (a log in commit order, no index: the changes of a group
/// commit share its last pages) and moves them into `changes` (indexed by session) in bulk,
/// sorted by session, once ``mergeEvery`` have gathered: over many sessions a change
/// then costs a fraction of a page instead of two. Reads take both tables. A version 3
/// database is refused by older servers (they would not see the log).
///
/// The journal's two tables hold disjoint rows: a row is in `recent_changes` until the merge
/// that moves it (one transaction inserts it into `changes` and deletes it).
public final class SQLiteStorage: SessionStorage {
    public let name: String
    let writer: Writer
    let reader: Reader
    private let lock: ProcessLock
    /// The open file is still the one at the path, and writable (SQLiteStorage+Health.swift).
    let health: SQLiteHealth

    /// A session's last seq, in a query over `sessions` with the session's id as `?1`: the row
    /// keeps a lower bound (the writer updates it at most once a minute, and before compaction
    /// may delete the newest changes), the journal the rest.
    static let headSeqColumn =
        "max(head_seq, coalesce((SELECT max(seq) FROM changes WHERE changes.session = ?1), 0), "
        + "coalesce((SELECT max(seq) FROM recent_changes WHERE recent_changes.session = ?1), 0))"

    /// The columns of a change, in `changes` and `recent_changes` alike.
    static let changeColumns = "session, \(entryColumns)"
    /// What a read of the journal takes of a change (``entry(_:_:)``: the session is known).
    static let entryColumns = "seq, feature, version, cause, action, effect, is_patch, delta, time"

    /// The schema version this code writes (`PRAGMA user_version`).
    static let schemaVersion = 3

    /// Changes gathered in `recent_changes` before the writer moves them into `changes` (in
    /// eight parts, one after each group commit): enough that the changes of each of a thousand
    /// busy sessions land on its pages several at a time, few enough that a read's scan of the
    /// log stays short (about 2 MB).
    public static let mergeEvery = 8192

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

    /// Opens (creating if needed) the database at `path`. Fails with `.unusable` and a clear
    /// reason when the path is a directory, not writable, or not a SQLite database.
    ///
    /// - Parameter durability: `.full` (fsync every commit) or `.normal` (see ``Durability``).
    /// - Parameter maxBytes: an upper bound on the file size (`PRAGMA max_page_count`); writes
    ///   past it fail like a full disk. `nil`: no bound but the disk's.
    /// - Parameter mergeEvery: changes gathered in `recent_changes` before they move into
    ///   `changes` (tests make it small; see ``mergeEvery``).
    public init(
        path: String, maxBytes: Int? = nil, durability: Durability = .full, mergeEvery: Int = SQLiteStorage.mergeEvery
    ) throws(StorageError) {
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
        do {
            writer = try Writer(connection: connection, mergeEvery: mergeEvery)
        } catch {
            throw StorageError(.unusable, "storage \(name) is unusable: \(error.message)")
        }
        reader = Reader(connection: readConnection)
        health = SQLiteHealth(path: path)
    }

    /// `PRAGMA integrity_check` of the database at `path`, opened read-only: `"ok"` when sound.
    public static func integrityCheck(path: String) throws(StorageError) -> String {
        let connection = try SQLiteConnection(path: path, readOnly: true)
        return try connection.query("PRAGMA integrity_check", []) { $0.text(0) }.joined(separator: "; ")
    }

    public func close() async {
        health.stop()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            writer.stop { continuation.resume() }
        }
        lock.release()
    }
}
