// PostgresStorage's writes: a batch's commit, the fenced append, each write's statements, the transaction.
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import StateStore
import Synchronization

extension PostgresStorage {
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
                    case .deleteGrants(let session, _), .timers(let session, _, _): named.append(session)
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
        let rows = try await db.execute(
            AppendStatement(entry: e, key: key, epoch: epoch, channel: Self.channel), logger: logger)
        var inserted = 0
        var exists = false
        var owned = false
        for try await (count, _, found, mine) in rows {
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
                     t AS (DELETE FROM state_tokens WHERE session = \(id)),
                     m AS (DELETE FROM state_timers WHERE session = \(id))
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
        case .timers(let session, let feature, let changes):
            if changes.clearsAll {
                try await db.query("DELETE FROM state_timers WHERE session = \(session) AND feature = \(feature)", logger: logger)
            } else if !changes.removed.isEmpty {
                try await db.query(
                    "DELETE FROM state_timers WHERE session = \(session) AND feature = \(feature) AND id = ANY(\(changes.removed))",
                    logger: logger)
            }
            for timer in changes.set {
                try await db.query(
                    """
                    INSERT INTO state_timers (session, feature, id, action, public_action, due, scheduled_at)
                    VALUES (\(session), \(feature), \(timer.id), \(ByteBuffer(bytes: timer.action)),
                        \(ByteBuffer(bytes: timer.publicAction)), \(timer.due), \(timer.scheduledAt))
                    ON CONFLICT (session, feature, id) DO UPDATE SET action = excluded.action,
                        public_action = excluded.public_action, due = excluded.due, scheduled_at = excluded.scheduled_at
                    """, logger: logger)
            }
        }
    }

    /// Runs `body` between BEGIN and COMMIT; rolls back when it throws.
    static func transaction(
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
}

/// The fenced append of ``PostgresStorage`` as a prepared statement: planned once per
/// connection instead of once per change (its planning cost about twice its execution).
struct AppendStatement: PostgresPreparedStatement {
    typealias Row = (Int, Int, Bool, Bool)

    /// Its name on each connection (tests-faults' proxy spots an append by it in a Bind message).
    static let name = "state_append"

    static let sql = """
        WITH live AS (
            SELECT id FROM state_sessions WHERE id = $1 AND head_seq = $2::bigint - 1
                AND coalesce(owner, 0) = $3::bigint
                AND ($3::bigint = 0 OR EXISTS (
                    SELECT 1 FROM state_nodes WHERE epoch = $3::bigint AND expires_at > now()))
            FOR UPDATE
        ),
        store AS (
            INSERT INTO state_stores (session, feature, version)
            SELECT id, $4, $5::bigint FROM live
            WHERE $5::bigint = 1
                OR EXISTS (SELECT 1 FROM state_stores WHERE session = $1 AND feature = $4)
            ON CONFLICT (session, feature) DO UPDATE SET version = excluded.version
                WHERE state_stores.version = excluded.version - 1
            RETURNING session
        ),
        head AS (
            UPDATE state_sessions SET head_seq = $2::bigint, last_active = greatest(last_active, $11::bigint)
            WHERE id IN (SELECT session FROM store) RETURNING id
        ),
        j AS (
            INSERT INTO state_changes (session, seq, feature, version, cause, action, effect, is_patch, delta, time)
            SELECT id, $2::bigint, $4, $5::bigint, $6, $7::bytea, $8::bytea, $9::boolean, $10::bytea, $11::bigint
            FROM head RETURNING seq
        ),
        k AS (
            INSERT INTO state_keys (session, key, feature, version, time)
            SELECT id, $12::text, $4, $5::bigint, $11::bigint FROM head WHERE $12::text IS NOT NULL
        ),
        n AS (SELECT pg_notify($13, $14) FROM j WHERE $3::bigint = 0)
        SELECT (SELECT count(*) FROM j)::bigint, (SELECT count(*) FROM n)::bigint,
            EXISTS (SELECT 1 FROM state_sessions WHERE id = $1),
            coalesce((SELECT coalesce(owner, 0) = $3::bigint FROM state_sessions WHERE id = $1), false)
                AND ($3::bigint = 0 OR EXISTS (
                    SELECT 1 FROM state_nodes WHERE epoch = $3::bigint AND expires_at > now()))
        """

    let entry: JournalEntry
    let key: String?
    let epoch: Int64
    let channel: String

    func makeBindings() throws -> PostgresBindings {
        let e = entry
        var bindings = PostgresBindings(capacity: 14)
        bindings.append(e.session)
        bindings.append(Int64(e.seq))
        bindings.append(epoch)
        bindings.append(e.feature)
        bindings.append(Int64(e.version))
        bindings.append(e.cause)
        bindings.append(e.action.map { ByteBuffer(bytes: $0) })
        bindings.append(e.effect.map { ByteBuffer(bytes: $0) })
        bindings.append(e.delta.isPatch)
        bindings.append(ByteBuffer(bytes: e.delta.bytes))
        bindings.append(e.time)
        bindings.append(key)
        bindings.append(channel)
        bindings.append("\(e.seq) \(e.session)")
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
