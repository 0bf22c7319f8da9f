// SQLiteStorage's reads: sessions, tokens, snapshots, journals, sequences, remembered keys, listings, on the reader.
import CSQLite
import CoreMetrics
import DequeModule
import Dispatch
import Foundation
import StateStore
import Synchronization

extension SQLiteStorage {
    public func timers(session: String) async throws(StorageError) -> [StoredTimer] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT feature, id, action, public_action, due, scheduled_at FROM timers
                WHERE session = ? ORDER BY due, feature, id
                """,
                [.text(session)]
            ) {
                StoredTimer(
                    session: session, feature: $0.text(0),
                    timer: PendingTimer(
                        id: $0.text(1), action: $0.blob(2) ?? [], publicAction: $0.blob(3) ?? [], due: $0.int(4),
                        scheduledAt: $0.int(5)))
            }
        }
    }

    public func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                "SELECT session, feature, id, due FROM timers WHERE due <= ? ORDER BY due, session, feature, id LIMIT ?",
                [.int(time), .int(Int64(max(0, limit)))]
            ) { TimerReference(session: $0.text(0), feature: $0.text(1), id: $0.text(2), due: $0.int(3)) }
        }
    }

    public func nextTimerDue() async throws(StorageError) -> Int64? {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT due FROM timers ORDER BY due LIMIT 1", []) { $0.int(0) }.first
        }
    }

    public func timerCount() async throws(StorageError) -> Int {
        try await reader.read { db throws(StorageError) in
            try db.query("SELECT count(*) FROM timers", []) { Int($0.int(0)) }.first ?? 0
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

    public func hasToken(session: String, tokenHash: [UInt8], now: Int64) async throws(StorageError) -> Bool {
        try await reader.read { db throws(StorageError) in
            try !db.query(
                "SELECT 1 FROM tokens WHERE session = ? AND token_hash = ? AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
                [.text(session), .blob(tokenHash), .int(now)]
            ) { _ in true }.isEmpty
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
                SELECT \(Self.entryColumns) FROM changes
                WHERE session = ?1 AND feature = ?2 AND version > ?3 AND version <= ?4
                UNION ALL
                SELECT \(Self.entryColumns) FROM recent_changes
                WHERE session = ?1 AND feature = ?2 AND version > ?3 AND version <= ?4
                ORDER BY version
                """, [.text(session), .text(feature), .int(Int64(afterVersion)), .int(Int64(clamping: through))]
            ) { Self.entry(session, $0) }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await reader.read { db throws(StorageError) in
            try db.query(
                """
                SELECT \(Self.entryColumns) FROM changes
                WHERE session = ?1 AND seq > ?2
                UNION ALL
                SELECT \(Self.entryColumns) FROM recent_changes
                WHERE session = ?1 AND seq > ?2
                ORDER BY seq LIMIT ?3
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
