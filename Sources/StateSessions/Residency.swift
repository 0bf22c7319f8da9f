import StatePersistence
import Synchronization

/// How sessions stay in memory: decided once, by the session manager from its storage, and
/// asked by every caller that creates, loads, counts or evicts (nothing else reads the mode).
///
/// - **Resident** (memory mode: storage that lives as long as the process): a session never
///   leaves memory before its TTL, so one not found in memory does not exist; at most
///   `maxSessions` are held; stores are made on first use (there is nothing to load).
/// - **Evictable** (durable storage): sessions idle for `idleTimeout` leave memory, and before a
///   store loads, idle sessions leave (least recently used first) while the state bytes of the
///   loaded sessions pass `memoryBytes`; they load again on next use.
public final class Residency: Sendable {
    public enum Policy: Sendable, Equatable {
        case resident(maxSessions: Int)
        case evictable(memoryBytes: Int, idleTimeout: Duration)
    }

    public let policy: Policy
    /// The state bytes loaded sessions hold together (counted under both policies: only an
    /// evictable one acts on it).
    private let held = Atomic<Int>(0)
    /// Evicts idle sessions but `sparing` until `limit` is met; set by the session manager.
    private let evict = Mutex<(@Sendable (_ limit: Int, _ sparing: String) -> Void)?>(nil)

    init(_ policy: Policy) {
        self.policy = policy
    }

    /// The policy for `storage`'s lifetime, with the limits of `settings`.
    convenience init(for lifetime: StorageLifetime, _ settings: SessionSettings) {
        switch lifetime {
        case .process: self.init(.resident(maxSessions: settings.maxSessions))
        case .durable: self.init(.evictable(memoryBytes: settings.memoryBytes, idleTimeout: settings.idleTimeout))
        }
    }

    func evictor(_ body: @escaping @Sendable (_ limit: Int, _ sparing: String) -> Void) {
        evict.withLock { $0 = body }
    }

    /// Whether every session there is is in memory (resident), so a session not found in
    /// memory does not exist — known without waiting.
    public var holdsEverySession: Bool {
        if case .resident = policy { return true }
        return false
    }

    /// Whether stores are made on first use, with nothing to load (resident).
    var makesStoresOnUse: Bool { holdsEverySession }

    /// Whether one more session may be created while `count` are held.
    func mayCreate(holding count: Int) -> Bool {
        guard case .resident(let maxSessions) = policy else { return true }
        return count < maxSessions
    }

    /// The state bytes loaded sessions hold now.
    public var bytes: Int { held.load(ordering: .relaxed) }

    /// The budget for those bytes (`nil`: resident, nothing can leave memory).
    public var memoryLimit: Int? {
        guard case .evictable(let memoryBytes, _) = policy else { return nil }
        return memoryBytes
    }

    func count(_ delta: Int) {
        if delta != 0 { held.add(delta, ordering: .relaxed) }
    }

    /// Whether there is room for one more store, after evicting idle sessions (but the one
    /// asking) if needed. Always, when resident.
    func makeRoom(sparing session: String) -> Bool {
        guard let limit = memoryLimit, bytes >= limit else { return true }
        evict.withLock { $0 }?(limit, session)
        return bytes < limit
    }

    /// Whether a session last used at `idleSince` may leave memory at `now` (milliseconds since
    /// 1970): never when resident.
    func mayEvict(idleSince: Int64, now: Int64) -> Bool {
        guard case .evictable(_, let idleTimeout) = policy else { return false }
        return idleSince < now - SessionManager.milliseconds(idleTimeout)
    }
}

/// A session's part of residency: when it was last used (and when storage last learned of
/// it), and the state bytes it counts in the manager's ``Residency``.
final class SessionUsage: Sendable {
    let residency: Residency
    /// Milliseconds since 1970 of the last request, and of the last activity written to disk.
    let lastUsed: Atomic<Int64>
    let lastStored: Atomic<Int64>
    private let counted = Atomic<Int>(0)

    init(_ residency: Residency, lastStored: Int64) {
        self.residency = residency
        lastUsed = Atomic(WallClock.now)
        self.lastStored = Atomic(lastStored)
    }

    var idleSince: Int64 { lastUsed.load(ordering: .relaxed) }

    func markUsed() { lastUsed.store(WallClock.now, ordering: .relaxed) }

    /// Counts `bytes` (the session's states now) in place of what it counted before.
    func recount(_ bytes: Int) {
        residency.count(bytes - counted.exchange(bytes, ordering: .relaxed))
    }

    /// Counts nothing any more (the session left memory).
    func release() {
        residency.count(-counted.exchange(0, ordering: .relaxed))
    }
}
