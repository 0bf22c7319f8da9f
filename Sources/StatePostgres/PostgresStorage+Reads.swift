// PostgresStorage's reads: sessions, tokens, snapshots, journals, sequences, remembered keys, listings.
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import StateStore
import Synchronization

extension PostgresStorage {
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

    public func hasToken(session: String, tokenHash: [UInt8], now: Int64) async throws(StorageError) -> Bool {
        try await perform("look up a session's token") { db, logger in
            let rows = try await db.query(
                """
                SELECT 1 FROM state_tokens WHERE session = \(session) AND token_hash = \(ByteBuffer(bytes: tokenHash))
                AND (expires_at IS NULL OR expires_at > \(now)) LIMIT 1
                """, logger: logger)
            for try await _ in rows.decode(Int32.self) { return true }
            return false
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

    // MARK: Timers

    public func timers(session: String) async throws(StorageError) -> [StoredTimer] {
        try await perform("list timers") { db, logger in
            let rows = try await db.query(
                """
                SELECT feature, id, action, public_action, due, scheduled_at FROM state_timers
                WHERE session = \(session) ORDER BY due, feature COLLATE "C", id COLLATE "C"
                """, logger: logger)
            var timers: [StoredTimer] = []
            for try await (feature, id, action, visible, due, scheduledAt) in rows.decode(
                (String, String, ByteBuffer, ByteBuffer, Int64, Int64).self)
            {
                timers.append(StoredTimer(
                    session: session, feature: feature,
                    timer: PendingTimer(
                        id: id, action: Array(buffer: action), publicAction: Array(buffer: visible), due: due,
                        scheduledAt: scheduledAt)))
            }
            return timers
        }
    }

    /// Due timers of sessions this node may fire: its own, and those no live node owns (a
    /// lapsed owner's, or none), which it takes over to fire them.
    public func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference] {
        let epoch = epoch
        return try await perform("list due timers") { db, logger in
            let rows = try await db.query(
                """
                SELECT t.session, t.feature, t.id, t.due
                FROM state_timers t JOIN state_sessions s ON s.id = t.session
                WHERE t.due <= \(time) AND (s.owner IS NULL OR s.owner = \(epoch)
                    OR NOT EXISTS (SELECT 1 FROM state_nodes n WHERE n.epoch = s.owner AND n.expires_at > now()))
                ORDER BY t.due, t.session COLLATE "C", t.feature COLLATE "C", t.id COLLATE "C" LIMIT \(max(0, limit))
                """, logger: logger)
            var due: [TimerReference] = []
            for try await (session, feature, id, at) in rows.decode((String, String, String, Int64).self) {
                due.append(TimerReference(session: session, feature: feature, id: id, due: at))
            }
            return due
        }
    }

    public func nextTimerDue() async throws(StorageError) -> Int64? {
        let epoch = epoch
        return try await perform("find the next timer") { db, logger in
            let rows = try await db.query(
                """
                SELECT t.due FROM state_timers t JOIN state_sessions s ON s.id = t.session
                WHERE s.owner IS NULL OR s.owner = \(epoch)
                    OR NOT EXISTS (SELECT 1 FROM state_nodes n WHERE n.epoch = s.owner AND n.expires_at > now())
                ORDER BY t.due LIMIT 1
                """, logger: logger)
            for try await due in rows.decode(Int64.self) { return due }
            return nil
        }
    }

    public func timerCount() async throws(StorageError) -> Int {
        try await perform("count timers") { db, logger in
            let rows = try await db.query("SELECT count(*) FROM state_timers", logger: logger)
            for try await count in rows.decode(Int.self) { return count }
            return 0
        }
    }
}
