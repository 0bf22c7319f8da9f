// PostgresStorage's schema: the statements of each version and the migration that applies them at start.
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

extension PostgresStorage {
    // MARK: - Schema

    /// Statements of each schema version, applied in order from the database's version + 1.
    static let migrations: [[PostgresQuery]] = [
        // Version 1: the tables of SQLiteStorage, with PostgreSQL types.
        [
            """
            CREATE TABLE state_sessions (
                id text PRIMARY KEY,
                token_hash bytea NOT NULL,
                created_at bigint NOT NULL,
                last_active bigint NOT NULL
            )
            """,
            "CREATE INDEX state_sessions_by_activity ON state_sessions (last_active)",
            """
            CREATE TABLE state_journal (
                session text NOT NULL,
                seq bigint NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                cause text NOT NULL,
                payload bytea,
                event bytea NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, seq)
            )
            """,
            "CREATE UNIQUE INDEX state_journal_by_store ON state_journal (session, feature, version)",
            """
            CREATE TABLE state_snapshots (
                session text NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                state_version bigint NOT NULL,
                state bytea NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, feature)
            )
            """,
            """
            CREATE TABLE state_replies (
                session text NOT NULL,
                key text NOT NULL,
                status integer NOT NULL,
                body bytea NOT NULL,
                version bigint NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, key)
            )
            """,
        ],
        // Version 2: changes instead of states (see SQLiteStorage): each journal row becomes a
        // change holding its whole state (nothing lost; later changes are patches), snapshots
        // become bases kept per version, replies become references to their change, and the
        // heads that fence appends are the last seq and versions found.
        [
            "ALTER TABLE state_sessions ADD COLUMN head_seq bigint NOT NULL DEFAULT 0",
            """
            CREATE TABLE state_changes (
                session text NOT NULL,
                seq bigint NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                cause text NOT NULL,
                action bytea,
                effect bytea,
                is_patch boolean NOT NULL,
                delta bytea NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, seq)
            )
            """,
            "CREATE UNIQUE INDEX state_changes_by_store ON state_changes (session, feature, version)",
            """
            CREATE TABLE state_stores (
                session text NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                PRIMARY KEY (session, feature)
            )
            """,
            """
            CREATE TABLE state_bases (
                session text NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                state_version bigint NOT NULL,
                state bytea NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, feature, version)
            )
            """,
            """
            CREATE TABLE state_keys (
                session text NOT NULL,
                key text NOT NULL,
                feature text NOT NULL,
                version bigint NOT NULL,
                time bigint NOT NULL,
                PRIMARY KEY (session, key)
            )
            """,
            """
            INSERT INTO state_changes (session, seq, feature, version, cause, action, effect, is_patch, delta, time)
            SELECT session, seq, feature, version, cause,
                CASE WHEN e->'action' IS NULL OR json_typeof(e->'action') = 'null' THEN NULL ELSE convert_to((e->'action')::text, 'UTF8') END,
                CASE WHEN e->'effect' IS NULL OR json_typeof(e->'effect') = 'null' THEN NULL ELSE convert_to((e->'effect')::text, 'UTF8') END,
                false, convert_to((e->'state')::text, 'UTF8'), time
            FROM (SELECT *, convert_from(event, 'UTF8')::json AS e FROM state_journal) AS old
            """,
            """
            INSERT INTO state_bases (session, feature, version, state_version, state, time)
            SELECT session, feature, version, state_version, state, time FROM state_snapshots
            """,
            """
            INSERT INTO state_stores (session, feature, version)
            SELECT session, feature, max(version) FROM (
                SELECT session, feature, version FROM state_journal
                UNION ALL SELECT session, feature, version FROM state_snapshots) AS heads
            GROUP BY session, feature
            """,
            "UPDATE state_sessions s SET head_seq = coalesce((SELECT max(seq) FROM state_journal WHERE session = s.id), 0)",
            """
            INSERT INTO state_keys (session, key, feature, version, time)
            SELECT session, key, convert_from(body, 'UTF8')::json->>'feature', version, time FROM state_replies
            WHERE status = 200 AND convert_from(body, 'UTF8')::json->>'feature' IS NOT NULL
            """,
            "DROP TABLE state_journal, state_snapshots, state_replies",
        ],
        // Version 3: one owner per session. Each running node holds a membership row (its
        // epoch, from a sequence that only grows; the URL its peers reach it by; when it
        // expires by PostgreSQL's clock). A session names the epoch of its owner; appends are
        // fenced on it. Existing sessions start without an owner (the first node to use one
        // claims it).
        [
            """
            CREATE TABLE state_nodes (
                epoch bigserial PRIMARY KEY,
                url text NOT NULL,
                joined_at timestamptz NOT NULL DEFAULT now(),
                expires_at timestamptz NOT NULL
            )
            """,
            "ALTER TABLE state_sessions ADD COLUMN owner bigint",
        ],
        // Version 4: tokens minted for a session (scoped tokens), by hash.
        [
            """
            CREATE TABLE state_tokens (
                session text NOT NULL,
                id text NOT NULL,
                token_hash bytea NOT NULL,
                grant_json bytea NOT NULL,
                created_at bigint NOT NULL,
                expires_at bigint,
                PRIMARY KEY (session, id)
            )
            """
        ],
        // Version 5: whether a node holds its liveness lock (PostgresStorage+Liveness.swift).
        // Nodes of older builds insert `false`: they are never declared dead early.
        ["ALTER TABLE state_nodes ADD COLUMN locked boolean NOT NULL DEFAULT false"],
        // Version 6: timers reducers scheduled, pending until due; indexed by due time.
        [
            """
            CREATE TABLE state_timers (
                session text NOT NULL,
                feature text NOT NULL,
                id text NOT NULL,
                action bytea NOT NULL,
                public_action bytea NOT NULL,
                due bigint NOT NULL,
                scheduled_at bigint NOT NULL,
                PRIMARY KEY (session, feature, id)
            )
            """,
            "CREATE INDEX state_timers_by_due ON state_timers (due)",
        ],
    ]

    /// Brings the schema to ``schemaVersion`` in one transaction, under an advisory lock.
    func migrate() async throws(StorageError) {
        let known = Self.schemaVersion
        try await perform("migrate the schema") { connection, logger in
            try await Self.transaction(connection, logger) {
                // Any fixed number: nodes of this server serialize their migrations on it.
                try await connection.query("SELECT pg_advisory_xact_lock(7143258921)", logger: logger)
                try await connection.query(
                    "CREATE TABLE IF NOT EXISTS state_schema (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                    logger: logger)
                var current = 0
                for try await version in try await connection.query("SELECT coalesce(max(version), 0) FROM state_schema", logger: logger)
                    .decode(Int.self)
                {
                    current = version
                }
                if current > known {
                    throw StorageError(
                        .unusable,
                        "the database's schema is version \(current), newer than this server knows (\(known)): run a newer server, or another database"
                    )
                }
                for version in (current + 1)..<(known + 1) {
                    for statement in Self.migrations[version - 1] {
                        try await connection.query(statement, logger: logger)
                    }
                    try await connection.query("INSERT INTO state_schema (version) VALUES (\(version))", logger: logger)
                }
            }
        }
    }
}
