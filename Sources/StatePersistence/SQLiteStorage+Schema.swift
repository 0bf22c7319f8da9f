// SQLiteStorage's schema: the tables, and the migrations from older schema versions.
import CSQLite
import CoreMetrics
import DequeModule
import Dispatch
import Foundation
import StateStore
import Synchronization

extension SQLiteStorage {
    /// A change's columns, the same in `changes` (keyed by session and seq) and in the log
    /// `recent_changes` (no key: rows in commit order).
    static let changeColumnDefinitions = """
        session TEXT NOT NULL, seq INTEGER NOT NULL, feature TEXT NOT NULL, version INTEGER NOT NULL,
        cause TEXT NOT NULL, action BLOB, effect BLOB, is_patch INTEGER NOT NULL, delta BLOB NOT NULL,
        time INTEGER NOT NULL
        """

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
        CREATE TABLE IF NOT EXISTS changes (\(changeColumnDefinitions), PRIMARY KEY (session, seq)) WITHOUT ROWID;
        CREATE UNIQUE INDEX IF NOT EXISTS changes_by_store ON changes (session, feature, version);
        CREATE TABLE IF NOT EXISTS recent_changes (\(changeColumnDefinitions));
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
        CREATE TABLE IF NOT EXISTS timers (
            session TEXT NOT NULL,
            feature TEXT NOT NULL,
            id TEXT NOT NULL,
            action BLOB NOT NULL,
            public_action BLOB NOT NULL,
            due INTEGER NOT NULL,
            scheduled_at INTEGER NOT NULL,
            PRIMARY KEY (session, feature, id)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS timers_by_due ON timers (due, session, feature, id);
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
}
