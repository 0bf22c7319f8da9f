import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Limits and sizes of sessions.
public struct SessionSettings: Sendable {
    /// Changes kept per session for `Last-Event-ID` replay.
    public var replayBuffer = 1000
    /// Sessions held in memory at once in memory mode; creating one more fails.
    public var maxSessions = 100_000
    /// Idempotency keys remembered per session in memory (oldest forgotten first).
    public var idempotencyKeys = 1000
    /// Durable mode: a store's state is snapshotted every this many changes.
    public var snapshotEvery = 100
    /// Durable mode: sessions unused this long (and without event streams) leave memory; they
    /// reload from storage on next use.
    public var idleTimeout: Duration = .seconds(300)
    /// Sessions inactive this long are deleted (memory and storage).
    public var ttl: Duration = .seconds(30 * 86_400)

    public init() {}
}

/// All sessions, by id: in memory, and in storage when there is one.
///
/// Session ids carry 128 random bits and tokens 256, from the system's secure generator,
/// both base64url without padding. Only SHA-256 of a token is kept. Looking a session up costs
/// the same whatever the number of sessions (a hash table behind one lock).
public final class SessionManager: Sendable {
    public let registry: FeatureRegistry
    public let settings: SessionSettings
    public let storage: (any SessionStorage)?
    private let sessions = Mutex<[String: Session]>([:])
    private let notify: @Sendable (SessionNotice) -> Void
    private let metrics = HubMetrics()

    public init(
        registry: FeatureRegistry, settings: SessionSettings = SessionSettings(),
        storage: (any SessionStorage)? = nil,
        notify: @escaping @Sendable (SessionNotice) -> Void = { _ in }
    ) {
        self.registry = registry
        self.settings = settings
        self.storage = storage
        self.notify = notify
    }

    public var isDurable: Bool { storage != nil }

    /// Memory mode: creates a session; `nil` when `maxSessions` are already held.
    public func create() -> (session: Session, token: String)? {
        let token = Self.randomString(bytes: 32)
        return sessions.withLock { sessions in
            guard sessions.count < settings.maxSessions else { return nil }
            var id = Self.randomString(bytes: 16)
            while sessions[id] != nil { id = Self.randomString(bytes: 16) }
            let session = makeSession(id: id, token: token)
            sessions[id] = session
            return (session, token)
        }
    }

    /// Durable mode: creates a session and stores it before returning.
    public func createDurably() async throws(StorageError) -> (session: Session, token: String) {
        guard let storage else {
            guard let created = create() else { throw StorageError(.unavailable, "the session limit is reached") }
            return created
        }
        let token = Self.randomString(bytes: 32)
        let id = Self.randomString(bytes: 16)
        let now = WallClock.now
        try await storage.commit([
            .createSession(StoredSession(id: id, tokenHash: SHA256.hash(token), createdAt: now, lastActiveAt: now))
        ])
        let session = makeSession(id: id, token: token)
        sessions.withLock { $0[id] = session }
        return (session, token)
    }

    private func makeSession(id: String, token: String) -> Session {
        Session(
            id: id, tokenHash: SHA256.hash(token), registry: registry, settings: settings, storage: storage,
            metrics: metrics, notify: notify)
    }

    /// The in-memory session with this id whose token is `token`; `nil` for an unknown id,
    /// another token (callers can't tell which), or a durable session not in memory.
    public func session(id: String, token: String) -> Session? {
        guard let session = sessions.withLock({ $0[id] }) else { return nil }
        guard session.verify(token: token) else { return nil }
        session.markUsed()
        return session
    }

    /// Whether a session with this id is in memory (whatever the token).
    public func isLoaded(id: String) -> Bool {
        sessions.withLock { $0[id] != nil }
    }

    /// The session, loading it from storage if it is not in memory. Start-up loads nothing:
    /// sessions come back one by one, on first use.
    public func load(id: String, token: String) async throws(StorageError) -> Session? {
        if let session = session(id: id, token: token) { return session }
        guard let storage, !isLoaded(id: id), Self.isPlausibleID(id) else { return nil }
        guard let stored = try await storage.session(id: id),
            Session.constantTimeEqual(SHA256.hash(token), stored.tokenHash)
        else { return nil }
        let lastSeq = try await storage.lastSeq(session: id)
        let recent = try await storage.journal(
            session: id, afterSeq: max(0, lastSeq - settings.replayBuffer), limit: settings.replayBuffer)
        let fresh = Session(
            id: id, tokenHash: stored.tokenHash, registry: registry, settings: settings, storage: storage,
            startSeq: lastSeq, recent: recent.map { ($0.seq, $0.feature, $0.event) },
            lastStoredActivity: stored.lastActiveAt, metrics: metrics, notify: notify)
        let session = sessions.withLock { sessions in
            if let existing = sessions[id] { return existing }
            sessions[id] = fresh
            return fresh
        }
        session.markUsed()
        return session
    }

    /// Removes a session (from storage first, in durable mode) and ends its event streams.
    public func delete(id: String) async throws(StorageError) {
        if let storage { try await storage.commit([.deleteSession(id: id)]) }
        removeFromMemory(id: id)
    }

    /// Memory mode: removes a session and ends its event streams.
    @discardableResult
    public func delete(id: String) -> Bool {
        removeFromMemory(id: id)
    }

    @discardableResult
    private func removeFromMemory(id: String) -> Bool {
        guard let session = sessions.withLock({ $0.removeValue(forKey: id) }) else { return false }
        session.close()
        return true
    }

    /// Sessions in memory.
    public var count: Int { sessions.withLock { $0.count } }

    /// Stores in memory, over all sessions (walks the sessions: for metrics scrapes).
    public var storeCount: Int {
        sessions.withLock { Array($0.values) }.reduce(0) { $0 + $1.storeCount }
    }

    // MARK: Sweeping

    /// One pass of housekeeping: evicts idle durable sessions from memory and deletes sessions
    /// inactive past the TTL. Returns (evicted, purged).
    @discardableResult
    public func sweep(now: Int64 = WallClock.now) async -> (evicted: Int, purged: Int) {
        let idleLimit = now - Self.milliseconds(settings.idleTimeout)
        let ttlLimit = now - Self.milliseconds(settings.ttl)
        var evicted = 0
        var purgedIDs: [String] = []
        let snapshot = sessions.withLock { Array($0.values) }
        for session in snapshot {
            let idle = session.idleSince
            if idle < ttlLimit, !session.isBusy {
                purgedIDs.append(session.id)
            } else if storage != nil, idle < idleLimit, !session.isBusy {
                sessions.withLock { sessions in
                    if sessions[session.id] === session { sessions[session.id] = nil }
                }
                evicted += 1
            }
        }
        if let storage, let stale = try? await storage.sessions(inactiveBefore: ttlLimit, limit: 1000) {
            // Stored activity is written at most once a minute; a session in memory is judged
            // by its exact last use above, not by the stored time.
            purgedIDs += stale.filter { !isLoaded(id: $0) }
        }
        var purged = 0
        for id in Set(purgedIDs) {
            do {
                try await delete(id: id)
                purged += 1
            } catch {
                continue
            }
        }
        return (evicted, purged)
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds.multipliedReportingOverflow(by: 1000).overflow
            ? Int64.max / 2 : seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    static func isPlausibleID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 64
            && id.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x2D || b == 0x5F
            }
    }

    static func randomString(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Base64URL.encode(bytes)
    }
}

/// base64url without padding (RFC 4648 §5).
enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)], alphabet[Int(n & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let n = UInt32(bytes[index]) << 16
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)]]
        } else if rest == 2 {
            let n = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(n >> 18 & 63)], alphabet[Int(n >> 12 & 63)], alphabet[Int(n >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }
}
