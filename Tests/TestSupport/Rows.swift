import StatePersistence

/// Rows for storage tests: the behaviour checks, and PersistenceTests' other suites.
package enum Rows {
    package static func session(_ id: String, token: String = "token", createdAt: Int64 = 1_000, lastActive: Int64? = nil) -> StoredSession {
        StoredSession(id: id, tokenHash: SHA256.hash(token), createdAt: createdAt, lastActiveAt: lastActive ?? createdAt)
    }

    /// A counter increment journaled at `version` with session sequence `seq`: its action and
    /// its whole state (`{"count":VERSION}` unless given).
    package static func entry(
        _ session: String, seq: Int, feature: String = "counter", version: Int, cause: String = "dispatch",
        action: String? = #"{"type":"increment"}"#, state: String? = nil, time: Int64 = 5_000
    ) -> JournalEntry {
        JournalEntry(
            session: session, seq: seq, feature: feature, version: version, cause: cause,
            action: action.map { Array($0.utf8) }, effect: nil,
            delta: .state(Array((state ?? #"{"count":\#(version)}"#).utf8)), time: time)
    }

    package static func snapshot(_ session: String, feature: String = "counter", version: Int, state: String, stateVersion: Int = 1) -> StoreSnapshot {
        StoreSnapshot(session: session, feature: feature, version: version, stateVersion: stateVersion, state: Array(state.utf8), time: 7_000)
    }
}

/// The `StorageError` `body` throws, or nil when it does not throw.
package func storageError(_ body: () async throws(StorageError) -> Void) async -> StorageError? {
    do {
        try await body()
        return nil
    } catch {
        return error
    }
}

/// The `StorageError` a synchronous `body` throws, or nil when it does not throw.
package func storageErrorSync(_ body: () throws(StorageError) -> Void) -> StorageError? {
    do {
        try body()
        return nil
    } catch {
        return error
    }
}
