import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

/// Sessions, journals, snapshots and idempotency replies in PostgreSQL, shared by several
/// server nodes.
///
/// Every batch commits in its own transaction on a pooled connection (`Settings.poolSize`
/// connections at most); concurrent batches run side by side on different connections, and
/// PostgreSQL's unique keys decide races between nodes: a second journal entry for the same
/// (session, feature, version) or (session, seq), a second reply for the same (session, key),
/// or a second session with the same id fails its batch with `.conflict`, and nothing of that
/// batch is stored.
///
/// Failures: no connection within `Settings.connectionWait`, a refused or lost connection,
/// or a server shutting down is `.unavailable`; the pool reconnects by itself (with backoff)
/// once PostgreSQL is back, so the same instance serves again without being re-created.
/// A commit whose connection is lost during `COMMIT` reports `.unavailable` although it may
/// have committed (as with any network database): a retry then sees `.conflict`.
///
/// The schema is created and migrated at start (``open(settings:logger:)``) under an advisory
/// lock, so nodes starting together do not race; a schema newer than this code knows is
/// `.unusable`.
///
/// Thread-safety: all methods may be called concurrently from any task. No method blocks a
/// thread: the I/O runs on SwiftNIO's event loops.
public final class PostgresStorage: SessionStorage {
    /// The schema version this code creates and understands.
    public static let schemaVersion = 4
    /// The LISTEN/NOTIFY channel commits announce their journal entries on.
    static let channel = "state_server_changes"

    /// `postgres://USER[:***]@HOST:PORT/DB`: never the password.
    public let name: String
    /// Every node of a cluster writes the same database.
    public var isShared: Bool { true }
    public let settings: Settings
    private let client: PostgresClient
    private let runner: Task<Void, Never>
    /// The tasks that hold LISTEN connections (``notices()``).
    private let listeners = Mutex<[Task<Void, Never>]>([])
    let logger: Logger
    /// Several nodes: this node's membership (`PostgresStorage+Membership.swift`). The epoch
    /// is 0 while it is not a member; `memberUntil` is when it stops counting itself one, in
    /// nanoseconds since `clockOrigin` on the monotonic clock.
    let membership = Mutex(Membership())
    let currentEpoch = Atomic<Int64>(0)
    let memberUntil = Atomic<Int64>(0)
    let clockOrigin = ContinuousClock.now

    /// Connects, creates or migrates the schema, and returns a storage ready to serve.
    ///
    /// - Throws: `.unavailable` when PostgreSQL cannot be reached within
    ///   `settings.connectionWait`; `.unusable` when the login or database is refused or the
    ///   database's schema is newer than ``schemaVersion``.
    public static func open(
        settings: Settings,
        logger: Logger = Logger(label: "state-server.postgres", factory: { _ in SwiftLogNoOpLogHandler() })
    ) async throws(StorageError) -> PostgresStorage {
        try await probe(settings, logger: logger)
        let storage = PostgresStorage(settings: settings, logger: logger)
        do {
            try await storage.migrate()
        } catch {
            await storage.close()
            throw error
        }
        return storage
    }

    private init(settings: Settings, logger: Logger) {
        self.settings = settings
        self.name = settings.redacted
        self.logger = logger
        var configuration = PostgresClient.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: Self.tls(settings.tls))
        configuration.options.maximumConnections = max(1, settings.poolSize)
        configuration.options.minimumConnections = 0
        configuration.options.connectTimeout = settings.connectionWait
        let (seconds, attoseconds) = settings.statementTimeout.components
        let timeoutMillis = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        // A connection cut off inside a transaction (a partition between BEGIN and COMMIT)
        // would keep its row locks, and every node's writes to that session would wait behind
        // it: PostgreSQL ends such a session after the same time.
        // At least 1 s: the gaps between a transaction's statements are network round trips.
        let idleMillis = timeoutMillis == 0 ? 0 : max(timeoutMillis, 1000)
        configuration.options.additionalStartupParameters = [
            ("statement_timeout", "\(timeoutMillis)"), ("idle_in_transaction_session_timeout", "\(idleMillis)"),
        ]
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.client = client
        runner = Task { await client.run() }
    }

    /// One direct connection before the pool: the pool retries a failed login quietly, while a
    /// start-up must say at once that the password or database is wrong (`.unusable`) or that
    /// nothing answers (`.unavailable`).
    private static func probe(_ settings: Settings, logger: Logger) async throws(StorageError) {
        do {
            let connection = try await connect(settings, logger: logger, id: 0)
            try? await connection.close()
        } catch {
            throw storageError(error, what: "connect", name: settings.redacted, wait: settings.connectionWait)
        }
    }

    /// One connection outside the pool (the start-up probe, the LISTEN connection).
    private static func connect(_ settings: Settings, logger: Logger, id: Int) async throws -> PostgresConnection {
        let tls: PostgresConnection.Configuration.TLS
        switch settings.tls {
        case .disable: tls = .disable
        case .prefer: tls = .prefer(try NIOSSLContext(configuration: .makeClientConfiguration()))
        case .require: tls = .require(try NIOSSLContext(configuration: .makeClientConfiguration()))
        }
        var configuration = PostgresConnection.Configuration(
            host: settings.host, port: settings.port, username: settings.user, password: settings.password,
            database: settings.database, tls: tls)
        configuration.options.connectTimeout = .init(settings.connectionWait)
        return try await PostgresConnection.connect(configuration: configuration, id: id, logger: logger)
    }

    private static func tls(_ mode: Settings.TLSMode) -> PostgresClient.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(.makeClientConfiguration())
        case .require: .require(.makeClientConfiguration())
        }
    }

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
    ]

    /// Brings the schema to ``schemaVersion`` in one transaction, under an advisory lock.
    private func migrate() async throws(StorageError) {
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

    // MARK: - Writes

    public func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        guard !batch.isEmpty else { return }
        if batch.count == 1, case .touch(let session, let at) = batch[0] {
            // One statement, no transaction: the row is there or it is not.
            let updated = try await perform("touch", writes: true) { db, logger -> Bool in
                let rows = try await db.query(
                    "UPDATE state_sessions SET last_active = greatest(last_active, \(at)) WHERE id = \(session) RETURNING 1",
                    logger: logger)
                for try await _ in rows { return true }
                return false
            }
            guard updated else { throw StorageError(.sessionGone, "session \(session) does not exist") }
            return
        }
        if batch.count == 1, case .append(let entry, let key) = batch[0] {
            let epoch = epoch
            return try await perform("commit", writes: true) { db, logger in
                try await Self.append(entry, key, epoch: epoch, on: db, logger)
            }
        }
        let epoch = epoch
        try await perform("commit", writes: true) { connection, logger in
            try await Self.transaction(connection, logger) {
                // Writes for a session that does not exist (deleted, perhaps by another node)
                // are refused; the row lock orders a concurrent delete after this commit (and
                // is the one an append's own statement takes, so two batches never deadlock
                // upgrading a shared lock).
                var created = Set<String>()
                var named: [String] = []
                for write in batch {
                    switch write {
                    case .createSession(let s): created.insert(s.id)
                    case .append(let e, _): named.append(e.session)
                    case .snapshot(let s): named.append(s.session)
                    case .touch(let session, _), .compact(let session, _, _, _, _, _): named.append(session)
                    case .createGrant(let grant): named.append(grant.session)
                    case .deleteGrants(let session, _): named.append(session)
                    case .deleteSession(let id):
                        // Waits for appends under way on the session row, so the delete's own
                        // statement (a later snapshot) sees and removes what they wrote.
                        try await connection.query("SELECT 1 FROM state_sessions WHERE id = \(id) FOR UPDATE", logger: logger)
                    }
                }
                for session in Set(named).subtracting(created).sorted() {
                    let rows = try await connection.query(
                        "SELECT 1 FROM state_sessions WHERE id = \(session) FOR UPDATE", logger: logger)
                    var exists = false
                    for try await _ in rows { exists = true }
                    guard exists else { throw StorageError(.sessionGone, "session \(session) does not exist") }
                }
                for write in batch { try await Self.apply(write, epoch: epoch, on: connection, logger) }
                // Notices ("D SESSION" for a delete; an append's own statement announces its
                // seq): delivered at COMMIT, never for a rollback.
                var payloads: [String] = []
                for write in batch {
                    if case .deleteSession(let id) = write { payloads.append("D \(id)") }
                }
                for payload in payloads {
                    try await connection.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: logger)
                }
            }
        }
    }

    /// A journal entry, perhaps with its idempotency key, fenced, in one statement (one round
    /// trip; PostgreSQL runs a lone statement as its own transaction). The session row is
    /// locked and must be at `seq - 1`, the store's head at `version - 1`: only then are the
    /// heads moved, the change and key inserted and the NOTIFY sent (at commit; only without
    /// owners: a node that owns its sessions serves their streams itself, and other nodes
    /// relay them, so nobody listens for its commits — and NOTIFY serializes commits on a
    /// lock of the whole database). A session that
    /// is gone is `.sessionGone`; a head elsewhere (another writer, a compaction, a stale copy)
    /// or a key already remembered is `.conflict`, with nothing written.
    private static func append(
        _ e: JournalEntry, _ key: String?, epoch: Int64, on db: PostgresConnection, _ logger: Logger
    ) async throws {
        let notice = "\(e.seq) \(e.session)"
        let action = e.action.map { ByteBuffer(bytes: $0) }
        let effect = e.effect.map { ByteBuffer(bytes: $0) }
        let rows = try await db.query(
            """
            WITH live AS (
                SELECT id FROM state_sessions WHERE id = \(e.session) AND head_seq = \(e.seq - 1)
                    AND coalesce(owner, 0) = \(epoch)
                    AND (\(epoch)::bigint = 0 OR EXISTS (
                        SELECT 1 FROM state_nodes WHERE epoch = \(epoch) AND expires_at > now()))
                FOR UPDATE
            ),
            store AS (
                INSERT INTO state_stores (session, feature, version)
                SELECT id, \(e.feature), \(e.version) FROM live
                WHERE \(e.version)::bigint = 1
                    OR EXISTS (SELECT 1 FROM state_stores WHERE session = \(e.session) AND feature = \(e.feature))
                ON CONFLICT (session, feature) DO UPDATE SET version = excluded.version
                    WHERE state_stores.version = excluded.version - 1
                RETURNING session
            ),
            head AS (
                UPDATE state_sessions SET head_seq = \(e.seq), last_active = greatest(last_active, \(e.time))
                WHERE id IN (SELECT session FROM store) RETURNING id
            ),
            j AS (
                INSERT INTO state_changes (session, seq, feature, version, cause, action, effect, is_patch, delta, time)
                SELECT id, \(e.seq), \(e.feature), \(e.version), \(e.cause), \(action), \(effect), \(e.delta.isPatch),
                    \(ByteBuffer(bytes: e.delta.bytes)), \(e.time)
                FROM head RETURNING seq
            ),
            k AS (
                INSERT INTO state_keys (session, key, feature, version, time)
                SELECT id, \(key), \(e.feature), \(e.version), \(e.time) FROM head WHERE \(key)::text IS NOT NULL
            ),
            n AS (SELECT pg_notify(\(Self.channel), \(notice)) FROM j WHERE \(epoch)::bigint = 0)
            SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM n),
                EXISTS (SELECT 1 FROM state_sessions WHERE id = \(e.session)),
                coalesce((SELECT coalesce(owner, 0) = \(epoch) FROM state_sessions WHERE id = \(e.session)), false)
                    AND (\(epoch)::bigint = 0 OR EXISTS (
                        SELECT 1 FROM state_nodes WHERE epoch = \(epoch) AND expires_at > now()))
            """, logger: logger)
        var inserted = 0
        var exists = false
        var owned = false
        for try await (count, _, found, mine) in rows.decode((Int, Int, Bool, Bool).self) {
            inserted = count
            exists = found
            owned = mine
        }
        guard inserted == 1 else {
            guard exists else { throw StorageError(.sessionGone, "session \(e.session) does not exist") }
            guard owned else {
                throw StorageError(
                    .notOwner, "session \(e.session) is not owned by this node (epoch \(epoch)) any more: nothing was written")
            }
            throw StorageError(
                .conflict, "journal entry \(e.session)/\(e.feature)@\(e.version) (seq \(e.seq)) does not follow the journal's head")
        }
    }

    private static func apply(_ write: StorageWrite, epoch: Int64, on db: PostgresConnection, _ logger: Logger) async throws {
        switch write {
        case .createSession(let s):
            // Owned by the node that creates it (none before a node joined).
            try await db.query(
                """
                INSERT INTO state_sessions (id, token_hash, created_at, last_active, owner)
                VALUES (\(s.id), \(ByteBuffer(bytes: s.tokenHash)), \(s.createdAt), \(s.lastActiveAt),
                    nullif(\(epoch)::bigint, 0))
                """, logger: logger)
        case .deleteSession(let id):
            // One round trip for the five tables.
            try await db.query(
                """
                WITH j AS (DELETE FROM state_changes WHERE session = \(id)),
                     h AS (DELETE FROM state_stores WHERE session = \(id)),
                     s AS (DELETE FROM state_bases WHERE session = \(id)),
                     r AS (DELETE FROM state_keys WHERE session = \(id)),
                     t AS (DELETE FROM state_tokens WHERE session = \(id))
                DELETE FROM state_sessions WHERE id = \(id)
                """, logger: logger)
        case .append(let e, let key):
            try await append(e, key, epoch: epoch, on: db, logger)
        case .snapshot(let s):
            // Never ahead of the store's head: a stale writer cannot write a base for history
            // that was not journaled.
            try await db.query(
                """
                INSERT INTO state_bases (session, feature, version, state_version, state, time)
                SELECT \(s.session), \(s.feature), \(s.version), \(s.stateVersion), \(ByteBuffer(bytes: s.state)), \(s.time)
                WHERE \(s.version)::bigint <= (
                    SELECT version FROM state_stores WHERE session = \(s.session) AND feature = \(s.feature))
                ON CONFLICT (session, feature, version) DO UPDATE SET
                    state_version = excluded.state_version, state = excluded.state, time = excluded.time
                """, logger: logger)
        case .touch(let session, let at):
            try await db.query(
                "UPDATE state_sessions SET last_active = greatest(last_active, \(at)) WHERE id = \(session)", logger: logger)
        case .compact(let session, let feature, let upToVersion, let keepLast, let keysSince, let maxKeys):
            try await db.query(
                """
                DELETE FROM state_keys WHERE session = \(session) AND (time < \(keysSince) OR key NOT IN (
                    SELECT key FROM state_keys WHERE session = \(session) ORDER BY time DESC, key DESC LIMIT \(max(0, maxKeys))))
                """, logger: logger)
            try await db.query(
                """
                WITH need AS (
                    SELECT least(
                        \(upToVersion + 1)::bigint,
                        (SELECT min(version) FROM state_changes WHERE session = \(session) AND feature = \(feature)
                            AND seq > (SELECT head_seq FROM state_sessions WHERE id = \(session)) - \(keepLast)),
                        (SELECT min(version) FROM state_keys WHERE session = \(session) AND feature = \(feature))) AS v
                ),
                base AS (
                    SELECT max(version) AS v FROM state_bases
                    WHERE session = \(session) AND feature = \(feature) AND version <= (SELECT v FROM need) - 1
                ),
                b AS (
                    DELETE FROM state_bases WHERE session = \(session) AND feature = \(feature) AND version < (SELECT v FROM base)
                )
                DELETE FROM state_changes WHERE session = \(session) AND feature = \(feature) AND version <= (SELECT v FROM base)
                """, logger: logger)
        case .createGrant(let g):
            try await db.query(
                """
                INSERT INTO state_tokens (session, id, token_hash, grant_json, created_at, expires_at)
                VALUES (\(g.session), \(g.id), \(ByteBuffer(bytes: g.tokenHash)), \(ByteBuffer(bytes: g.grant)), \(g.createdAt),
                    \(g.expiresAt))
                """, logger: logger)
        case .deleteGrants(let session, let ids):
            try await db.query("DELETE FROM state_tokens WHERE session = \(session) AND id = ANY(\(ids))", logger: logger)
        }
    }

    /// Runs `body` between BEGIN and COMMIT; rolls back when it throws.
    private static func transaction(
        _ connection: PostgresConnection, _ logger: Logger, _ body: () async throws -> Void
    ) async throws {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await body()
        } catch {
            // A lost connection cannot roll back; PostgreSQL aborts the transaction then.
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        try await connection.query("COMMIT", logger: logger)
    }

    // MARK: - Reads

    public func session(id: String) async throws(StorageError) -> StoredSession? {
        try await perform("read a session") { db, logger in
            let rows = try await db.query(
                "SELECT token_hash, created_at, last_active FROM state_sessions WHERE id = \(id)", logger: logger)
            for try await (hash, created, last) in rows.decode((ByteBuffer, Int64, Int64).self) {
                return StoredSession(id: id, tokenHash: Array(buffer: hash), createdAt: created, lastActiveAt: last)
            }
            return nil
        }
    }

    public func grants(session: String) async throws(StorageError) -> [StoredGrant] {
        try await perform("read a session's tokens") { db, logger in
            let rows = try await db.query(
                """
                SELECT id, token_hash, grant_json, created_at, expires_at FROM state_tokens
                WHERE session = \(session) ORDER BY created_at, id
                """, logger: logger)
            var grants: [StoredGrant] = []
            for try await (id, hash, grant, created, expires) in rows.decode((String, ByteBuffer, ByteBuffer, Int64, Int64?).self) {
                grants.append(
                    StoredGrant(
                        session: session, id: id, tokenHash: Array(buffer: hash), grant: Array(buffer: grant), createdAt: created,
                        expiresAt: expires))
            }
            return grants
        }
    }

    public func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        try await perform("read a snapshot") { db, logger in
            let rows = try await db.query(
                """
                SELECT version, state_version, state, time FROM state_bases
                WHERE session = \(session) AND feature = \(feature) AND version <= \(version) ORDER BY version DESC LIMIT 1
                """, logger: logger)
            for try await (version, stateVersion, state, time) in rows.decode((Int, Int, ByteBuffer, Int64).self) {
                return StoreSnapshot(
                    session: session, feature: feature, version: version, stateVersion: stateVersion,
                    state: Array(buffer: state), time: time)
            }
            return nil
        }
    }

    private typealias ChangeRow = (Int, String, Int, String, ByteBuffer?, ByteBuffer?, Bool, ByteBuffer, Int64)

    private static func entry(_ session: String, _ row: ChangeRow) -> JournalEntry {
        let (seq, feature, version, cause, action, effect, isPatch, delta, time) = row
        let bytes = Array(buffer: delta)
        return JournalEntry(
            session: session, seq: seq, feature: feature, version: version, cause: cause,
            action: action.map { Array(buffer: $0) }, effect: effect.map { Array(buffer: $0) },
            delta: isPatch ? .patch(bytes) : .state(bytes), time: time)
    }

    public func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        try await perform("read a journal") { db, logger in
            let rows = try await db.query(
                """
                SELECT seq, feature, version, cause, action, effect, is_patch, delta, time FROM state_changes
                WHERE session = \(session) AND feature = \(feature) AND version > \(afterVersion) AND version <= \(through)
                ORDER BY version
                """, logger: logger)
            var entries: [JournalEntry] = []
            for try await row in rows.decode(ChangeRow.self) { entries.append(Self.entry(session, row)) }
            return entries
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await perform("read a journal") { db, logger in
            let rows = try await db.query(
                """
                SELECT seq, feature, version, cause, action, effect, is_patch, delta, time FROM state_changes
                WHERE session = \(session) AND seq > \(afterSeq) ORDER BY seq LIMIT \(max(0, limit))
                """, logger: logger)
            var entries: [JournalEntry] = []
            for try await row in rows.decode(ChangeRow.self) { entries.append(Self.entry(session, row)) }
            return entries
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        try await perform("read a sequence") { db, logger in
            let rows = try await db.query(
                "SELECT head_seq FROM state_sessions WHERE id = \(session)", logger: logger)
            for try await seq in rows.decode(Int.self) { return seq }
            return 0
        }
    }

    public func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        try await perform("read a key") { db, logger in
            let rows = try await db.query(
                "SELECT feature, version, time FROM state_keys WHERE session = \(session) AND key = \(key)", logger: logger)
            for try await (feature, version, time) in rows.decode((String, Int, Int64).self) {
                return RememberedKey(feature: feature, version: version, time: time)
            }
            return nil
        }
    }

    public func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        try await perform("list inactive sessions") { db, logger in
            let rows = try await db.query(
                "SELECT id FROM state_sessions WHERE last_active < \(time) ORDER BY last_active, id LIMIT \(max(0, limit))",
                logger: logger)
            var ids: [String] = []
            for try await id in rows.decode(String.self) { ids.append(id) }
            return ids
        }
    }

    public func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        try await perform("list sessions") { db, logger in
            // `COLLATE "C"`: byte order, as SQLite and memory list them.
            let rows = try await db.query(
                """
                SELECT id, token_hash, created_at, last_active FROM state_sessions
                WHERE id COLLATE "C" > \(id) ORDER BY id COLLATE "C" LIMIT \(max(0, limit))
                """, logger: logger)
            var sessions: [StoredSession] = []
            for try await (found, hash, created, last) in rows.decode((String, ByteBuffer, Int64, Int64).self) {
                sessions.append(StoredSession(id: found, tokenHash: Array(buffer: hash), createdAt: created, lastActiveAt: last))
            }
            return sessions
        }
    }

    public func sessionCount() async throws(StorageError) -> Int {
        try await perform("count sessions") { db, logger in
            let rows = try await db.query("SELECT count(*) FROM state_sessions", logger: logger)
            for try await count in rows.decode(Int.self) { return count }
            return 0
        }
    }

    /// Closes the pool and ends the notice streams: running operations finish or fail, later
    /// ones fail `.unavailable`.
    public func close() async {
        let renewer = membership.withLock { m in
            defer { m.renewer = nil }
            return m.renewer
        }
        renewer?.cancel()
        await renewer?.value
        for listener in membership.withLock({ Array($0.listeners.values) }) { listener.finish() }
        let listeners = listeners.withLock { tasks in
            defer { tasks = [] }
            return tasks
        }
        for task in listeners { task.cancel() }
        for task in listeners { await task.value }
        runner.cancel()
        await runner.value
    }

    // MARK: - Notices and turns

    /// How often a listening node sends a heartbeat on ``channel`` through its pool; a LISTEN
    /// connection that hears nothing at all for ``silenceLimit`` is taken as lost.
    static let heartbeat = Duration.seconds(2)
    static let silenceLimit = Duration.seconds(6)

    /// Every commit and delete of every node, heard on a connection of its own that LISTENs on
    /// ``channel``. A broken connection is `.lost`; it reconnects by itself (after 0.1 s, then
    /// doubling up to 5 s) and says `.listening` again. A half-open connection (PostgreSQL gone
    /// without a reset, a black-holed network) would stay silent for as long as TCP takes to
    /// notice: while listening, the node NOTIFYs a heartbeat every ``heartbeat`` through its
    /// pool, and a connection that hears nothing — not even that — for ``silenceLimit`` is
    /// closed and counts as lost (streams end and `/readyz` fails until it is back).
    public func notices() -> AsyncStream<StorageNotice> {
        let (stream, continuation) = AsyncStream<StorageNotice>.makeStream()
        let settings = settings
        let logger = logger
        let task = Task { [self] in
            var delay = Duration.milliseconds(100)
            var listening = false
            while !Task.isCancelled {
                var connection: PostgresConnection?
                do {
                    let opened = try await Self.connect(settings, logger: logger, id: 1)
                    connection = opened
                    try await opened.listen(on: Self.channel) { notifications in
                        listening = true
                        delay = .milliseconds(100)
                        continuation.yield(.listening)
                        let heard = Mutex(ContinuousClock.now)
                        // One heartbeat at a time: with PostgreSQL unreachable they would pile up.
                        let beating = Flag()
                        let watchdog = Task { [self] in
                            var sent = ContinuousClock.now
                            while !Task.isCancelled {
                                try? await Task.sleep(for: .milliseconds(500))
                                if Task.isCancelled { return }
                                if ContinuousClock.now - sent >= Self.heartbeat, beating.raise() {
                                    sent = .now
                                    // Not awaited: a PostgreSQL that does not answer must not
                                    // delay the silence check below.
                                    Task {
                                        _ = try? await perform("send a heartbeat") { connection, logger in
                                            _ = try await connection.query("SELECT pg_notify(\(Self.channel), 'H')", logger: logger)
                                        }
                                        beating.lower()
                                    }
                                }
                                if ContinuousClock.now - heard.withLock({ $0 }) > Self.silenceLimit {
                                    logger.warning(
                                        "the LISTEN connection heard nothing, not even its own heartbeat: reconnecting",
                                        metadata: ["silence.limit": "\(Self.silenceLimit)"])
                                    try? await opened.close()
                                    return
                                }
                            }
                        }
                        defer { watchdog.cancel() }
                        for try await notification in notifications {
                            heard.withLock { $0 = ContinuousClock.now }
                            if let notice = Self.notice(notification.payload) { continuation.yield(notice) }
                        }
                    }
                } catch {
                    logger.debug("LISTEN connection failed", metadata: ["error": "\(String(reflecting: error))"])
                }
                try? await connection?.close()
                if Task.isCancelled { break }
                if listening {
                    listening = false
                    continuation.yield(.lost)
                }
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(5))
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        listeners.withLock { $0.append(task) }
        return stream
    }

    /// A notice from its payload (`SEQ SESSION` or `D SESSION`); `nil` for anything else.
    static func notice(_ payload: String) -> StorageNotice? {
        guard let space = payload.firstIndex(of: " ") else { return nil }
        let head = payload[..<space]
        let session = String(payload[payload.index(after: space)...])
        guard !session.isEmpty else { return nil }
        if head == "D" { return .deleted(session: session) }
        guard let seq = Int(head), seq > 0 else { return nil }
        return .committed(session: session, seq: seq)
    }

    /// Runs `body` while holding a session-level advisory lock named after `job`, taken with
    /// `pg_try_advisory_lock` on a leased connection: `nil` at once when another node holds it.
    /// The connection stays leased while `body` runs (so `body`'s own queries need a pool of at
    /// least 2); if it breaks, PostgreSQL releases the lock.
    public func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        let key = Self.lockKey("state-server:" + job)
        return try await perform("take the \(job) turn", bounded: false) { connection, logger -> T? in
            let rows = try await connection.query("SELECT pg_try_advisory_lock(\(key))", logger: logger)
            var taken = false
            for try await value in rows.decode(Bool.self) { taken = value }
            guard taken else { return nil }
            let result = await body()
            _ = try? await connection.query("SELECT pg_advisory_unlock(\(key))", logger: logger)
            return result
        }
    }

    /// A stable 64-bit key for an advisory lock (FNV-1a of the name).
    static func lockKey(_ name: String) -> Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return Int64(bitPattern: hash)
    }

    // MARK: - Running an operation

    /// Leases a connection (waiting at most `settings.connectionWait`), runs `body` on it, and
    /// turns every failure into a `StorageError`.
    ///
    /// A write (`sent: true`) whose connection breaks once it was leased may have reached
    /// PostgreSQL and committed: that failure is `.uncertain`, never `.unavailable`. The lease
    /// and the time-out decide once, atomically, which of them won: a connection leased after
    /// the time-out runs nothing.
    func perform<T: Sendable>(
        _ what: String, writes: Bool = false, bounded: Bool = true,
        _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws(StorageError) -> T {
        let lease = Lease()
        let client = client
        let logger = logger
        let wait = settings.connectionWait
        // Once leased, the operation gets `statementTimeout` (PostgreSQL's own bound) and
        // `answerGrace` (2 s) more: a server that stops answering altogether (a black hole, no reset) cannot enforce
        // its timeout, and the caller — a session's pipeline — must not wait for TCP to give up.
        let limit = (settings.statementTimeout == .zero ? Self.unboundedStatementWait : settings.statementTimeout) + settings.answerGrace
        // PostgreSQL found unreachable moments ago (no connection within `connectionWait`, and
        // none since): fail at once instead of queueing another wait behind the last one, so a
        // session's pipeline drains during an outage. One caller per `connectionWait` still
        // waits, and finds out when it is back.
        let now = ContinuousClock.now
        var probe = false
        if let down = unreachableSince.withLock({ $0 }), now - down < wait {
            guard probing.raise() else {
                throw StorageError(
                    .unavailable, "\(name): cannot \(what): PostgreSQL was unreachable moments ago (no connection within \(wait))")
            }
            probe = true
        }
        defer { if probe { probing.lower() } }
        let answer = Answer<T>()
        let result: Result<T, any Error> = await withCheckedContinuation { continuation in
            answer.await(continuation)
            let work = Task {
                do {
                    let value = try await client.withConnection { connection in
                        guard lease.take() else { throw NoConnection() }
                        answer.leasedAt = .now
                        do {
                            return try await body(connection, logger)
                        } catch {
                            // A server that turned read-only (a standby after a switchover) keeps
                            // refusing writes on this connection: close it, so the pool connects
                            // again — to the new primary, once the address points there.
                            if Self.isReadOnly(error) {
                                logger.warning("PostgreSQL is read-only on this connection (SQLSTATE 25006): closing it")
                                try? await connection.close()
                            }
                            throw error
                        }
                    }
                    answer.give(.success(value))
                } catch {
                    answer.give(.failure(error))
                }
            }
            // Not a child of a task group: a group waits for every child, and a child stuck on
            // a connection that never answers would keep the caller waiting with it.
            answer.timer = Task {
                try? await Task.sleep(for: wait)
                if Task.isCancelled { return }
                if lease.expire() {
                    if answer.give(.failure(NoConnection())) { work.cancel() }
                    return
                }
                guard bounded else { return }
                try? await Task.sleep(until: (answer.leasedAt ?? .now) + limit)
                if Task.isCancelled { return }
                if answer.give(.failure(Unanswered(limit: limit))) { work.cancel() }
            }
        }
        answer.timer?.cancel()
        if lease.taken {
            unreachableSince.withLock { $0 = nil }
        } else if case .failure(let error) = result, error is NoConnection {
            unreachableSince.withLock { $0 = $0 ?? .now }
        }
        switch result {
        case .success(let value):
            return value
        case .failure(let error):
            let failure = Self.storageError(error, what: what, name: name, wait: wait)
            if writes, lease.taken, failure.kind == .unavailable, !(error is StorageError), !Self.isServerError(error) {
                throw StorageError(.uncertain, failure.message + " (the write may have been committed)")
            }
            throw failure
        }
    }

    /// Since when no connection could be had (`nil`: a connection was leased since), and whether
    /// one caller is trying again meanwhile (see ``perform(_:writes:bounded:_:)``).
    private let unreachableSince = Mutex<ContinuousClock.Instant?>(nil)
    private let probing = Flag()

    /// A flag one caller at a time may raise.
    private final class Flag: Sendable {
        private let raised = Atomic<Bool>(false)
        /// `true` when this caller raised it (it was down).
        func raise() -> Bool { raised.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged }
        func lower() { raised.store(false, ordering: .sequentiallyConsistent) }
    }

    /// How long a leased operation may take when `statement_timeout` is off.
    static let unboundedStatementWait = Duration.seconds(30)

    /// The first of the operation's outcome and its time-outs, handed to the waiting caller once.
    private final class Answer<T: Sendable>: Sendable {
        private let state = Mutex<(continuation: CheckedContinuation<Result<T, any Error>, Never>?, given: Result<T, any Error>?)>(
            (nil, nil))
        private let timerTask = Mutex<Task<Void, Never>?>(nil)
        private let leased = Mutex<ContinuousClock.Instant?>(nil)

        /// When a connection was leased (the statement's bound counts from there).
        var leasedAt: ContinuousClock.Instant? {
            get { leased.withLock { $0 } }
            set { leased.withLock { $0 = newValue } }
        }

        var timer: Task<Void, Never>? {
            get { timerTask.withLock { $0 } }
            set { timerTask.withLock { $0 = newValue } }
        }

        func await(_ continuation: CheckedContinuation<Result<T, any Error>, Never>) {
            let ready = state.withLock { s -> Result<T, any Error>? in
                if let given = s.given { return given }
                s.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }

        /// `false` when an outcome was given before (this one is dropped).
        @discardableResult
        func give(_ result: Result<T, any Error>) -> Bool {
            let (first, continuation) = state.withLock { s -> (Bool, CheckedContinuation<Result<T, any Error>, Never>?) in
                guard s.given == nil else { return (false, nil) }
                s.given = result
                let continuation = s.continuation
                s.continuation = nil
                return (true, continuation)
            }
            continuation?.resume(returning: result)
            return first
        }
    }

    /// A leased operation that got no answer within its bound.
    private struct Unanswered: Error, CustomStringConvertible {
        let limit: Duration
        var description: String { "PostgreSQL did not answer within \(limit)" }
    }

    private struct NoConnection: Error {}

    /// Whether PostgreSQL answered the statement with an error of its own (then nothing of it
    /// was committed).
    /// SQLSTATE 25006, read_only_sql_transaction: a write sent to a read-only server.
    static func isReadOnly(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError, error.code == .server else { return false }
        return error.serverInfo?[.sqlState] == "25006"
    }

    static func isServerError(_ error: any Error) -> Bool {
        if let error = error as? PSQLError, error.code == .server { return true }
        return false
    }

    /// Who won: the connection (leased) or the time-out (expired), decided once.
    private final class Lease: Sendable {
        private let state = Atomic<Int>(0)  // 0 waiting, 1 leased, 2 expired

        /// The connection's turn: false when the time-out came first.
        func take() -> Bool { state.compareExchange(expected: 0, desired: 1, ordering: .sequentiallyConsistent).exchanged }
        /// The time-out's turn: false when a connection was leased first.
        func expire() -> Bool { state.compareExchange(expected: 0, desired: 2, ordering: .sequentiallyConsistent).exchanged }
        var taken: Bool { state.load(ordering: .sequentiallyConsistent) == 1 }
    }

    /// What a failure means for the caller. Messages name the storage without its password and
    /// quote PostgreSQL's own message and SQLSTATE, never bound values.
    static func storageError(_ error: any Error, what: String, name: String, wait: Duration) -> StorageError {
        if let error = error as? StorageError { return error }
        if error is NoConnection {
            return StorageError(.unavailable, "\(name): cannot \(what): no connection to PostgreSQL within \(wait)")
        }
        if let error = error as? PSQLError {
            if error.code == .server, let info = error.serverInfo {
                let state = info[.sqlState] ?? "?"
                let message = info[.message] ?? "error"
                let text = "\(name): cannot \(what): \(message) (SQLSTATE \(state))"
                switch state {
                case _ where state.hasPrefix("23"): return StorageError(.conflict, text)
                case _ where state.hasPrefix("28"), "3D000", "42501": return StorageError(.unusable, text)
                default: return StorageError(.unavailable, text)
                }
            }
            let cause = error.underlying.map { ": \($0)" } ?? ""
            return StorageError(.unavailable, "\(name): cannot \(what): PostgreSQL connection failed (\(error.code))\(cause)")
        }
        if error is CancellationError {
            return StorageError(.unavailable, "\(name): cannot \(what): cancelled")
        }
        // The pool's own errors (circuit breaker open, shut down) and anything else.
        return StorageError(.unavailable, "\(name): cannot \(what): PostgreSQL is unreachable (\(String(describing: error)))")
    }
}
