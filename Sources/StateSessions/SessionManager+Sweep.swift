// SessionManager's housekeeping: idle sessions leaving memory (the sweep, the memory budget's evictor), expired ones deleted.
import Foundation
import StatePersistence
import StateStore
import Synchronization

extension SessionManager {
    // MARK: Sweeping

    /// One pass of housekeeping: evicts idle durable sessions from memory and deletes sessions
    /// inactive past the TTL. Returns (evicted, purged).
    @discardableResult
    public func sweep(now: Int64 = WallClock.now) async -> (evicted: Int, purged: Int) {
        let ttlLimit = now - Self.milliseconds(settings.ttl)
        var evicted = 0
        var purgedIDs: [String] = []
        let snapshot = sessions.withLock { Array($0.byID.values) }
        for session in snapshot {
            session.storeActivityIfStale()
            let idle = session.idleSince
            if idle < ttlLimit, !session.isBusy {
                purgedIDs.append(session.id)
            } else if residency.mayEvict(idleSince: idle, now: now), session.retireIfIdle() {
                // Retired atomically with its pipeline: a request that looked it up just before
                // is refused (`.retired`) and loads it again, never working on a stale copy.
                sessions.withLock { table in
                    if table.byID[session.id] === session { table.byID[session.id] = nil }
                }
                evicted += 1
            }
        }
        var purged = await purge(purgedIDs)
        // The stored sessions past their TTL: one node at a time looks (shared storage).
        // Stored activity is written at most once a minute; a session in memory is judged by
        // its exact last use above, not by the stored time.
        let storage = self.storage
        let fromStorage = try? await storage.exclusively("sweep") { [self] () async -> Int in
            guard let stale = try? await storage.sessions(inactiveBefore: ttlLimit, limit: 1000) else { return 0 }
            return await purge(stale.filter { !isLoaded(id: $0) })
        }
        purged += (fromStorage ?? nil) ?? 0
        return (evicted, purged)
    }

    /// Deletes each session; returns how many were deleted.
    private func purge(_ ids: [String]) async -> Int {
        var purged = 0
        for id in Set(ids) {
            do {
                try await delete(id: id)
                purged += 1
            } catch {
                continue
            }
        }
        return purged
    }

    /// Evicts idle sessions, least recently used first, until the loaded states fit `limit`.
    func evictIdle(until limit: Int, sparing: String) {
        let candidates = sessions.withLock { Array($0.byID.values) }.sorted { $0.idleSince < $1.idleSince }
        for session in candidates where session.id != sparing {
            guard residency.bytes >= limit else { return }
            if session.retireIfIdle() {
                sessions.withLock { t in
                    if t.byID[session.id] === session { t.byID[session.id] = nil }
                }
            }
        }
    }
}
