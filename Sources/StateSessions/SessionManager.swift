import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Limits and sizes of sessions.
public struct SessionSettings: Sendable {
    /// Changes kept per session for `Last-Event-ID` replay.
    public var replayBuffer = 1000
    /// Code around every client dispatch, in order (``DispatchMiddleware``); none by default.
    public var middleware = MiddlewareChain()
    /// Durable mode: changes of a session its journal keeps for `GET .../history` (compaction
    /// keeps the last `max(replayBuffer, historyKeep)`).
    public var historyKeep = 1000
    /// Bytes of changes kept per session for replay (the oldest are forgotten first).
    public var replayBytes = 16 << 20
    /// Bytes of changes kept for replay by all sessions in memory together.
    public var serverReplayBytes = 1 << 30
    /// Sessions held in memory at once in memory mode; creating one more fails.
    public var maxSessions = 100_000
    /// Idempotency keys remembered per session in memory (oldest forgotten first).
    public var idempotencyKeys = 1000
    /// Bytes of remembered reply bodies per session in memory (durable mode still finds older
    /// replies in storage).
    public var idempotencyBytes = 4 << 20
    /// Durable mode: state bytes all loaded sessions may hold together; past it idle sessions
    /// leave memory (least recently used first) before another store loads.
    public var memoryBytes = 1 << 30
    /// Durable mode: storage forgets an idempotency key this long after its first use (a
    /// repeat after that is a new request).
    public var idempotencyTTL: Duration = .seconds(86_400)
    /// Durable mode: a store's state is snapshotted every this many changes.
    public var snapshotEvery = 100
    /// Durable mode: sessions unused this long (and without event streams) leave memory; they
    /// reload from storage on next use.
    public var idleTimeout: Duration = .seconds(300)
    /// Sessions inactive this long are deleted (memory and storage).
    public var ttl: Duration = .seconds(30 * 86_400)
    /// Timers a store may hold pending (``StateStore/Dispatcher/schedule(_:after:id:)``); a
    /// change that would leave more is refused.
    public var maxTimersPerStore = TimerPolicy.defaultMaxPending

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
    /// Where sessions are committed: memory mode's bounded journal, SQLite, PostgreSQL.
    public let storage: any SessionStorage
    let sessions = Mutex<Table>(Table())
    let notify: @Sendable (SessionNotice) -> Void
    private let metrics = HubMetrics()
    private let replayBudget: ReplayBudget
    private let encoder: any EventEncoder
    /// How sessions stay in memory (resident in memory mode, evictable over durable storage):
    /// decided here, once, from the storage.
    public let residency: Residency
    /// Fires the timers reducers scheduled when they are due (``TimerScheduler``); runs while
    /// its ``TimerScheduler/run()`` does (the server runs it as a service).
    public let timers: TimerScheduler
    /// Shared storage: whether this node hears other nodes' commits now (``followOtherNodes()``).
    let hearing = Atomic<Bool>(false)
    /// Callers of ``untilFollowing(atMost:)`` waiting for the first `.listening`.
    let followWaiters = Mutex<Waiters>(Waiters())
    let nextWaiter = Atomic<UInt64>(0)

    struct Waiters {
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waiters whose time ran out before they started waiting.
        var expired: Set<UInt64> = []
    }

    struct Table {
        var byID: [String: Session] = [:]
        /// Several nodes: sessions being handed over to another node, with its URL: requests
        /// meanwhile go there.
        var leaving: [String: String] = [:]
        /// Several nodes: the URLs of other nodes by epoch (epochs are never reused).
        var nodeURLs: [Int64: String] = [:]
        /// Deletes so far: a load that raced a delete of the same session checks again.
        var deletes: UInt64 = 0
    }

    /// - Parameter events: how the transport encodes events for subscribers (server-sent
    ///   events over HTTP).
    public init(
        registry: FeatureRegistry, settings: SessionSettings = SessionSettings(),
        storage: any SessionStorage, events: any EventEncoder,
        notify: @escaping @Sendable (SessionNotice) -> Void = { _ in }
    ) {
        self.encoder = events
        self.registry = registry
        self.settings = settings
        self.storage = storage
        let timers = TimerScheduler(storage: storage)
        self.timers = timers
        // A change that scheduled a timer wakes the scheduler; everything else is the server's.
        self.notify = { notice in
            if case .timersScheduled(let earliest) = notice { return timers.wake(before: earliest) }
            notify(notice)
        }
        self.replayBudget = ReplayBudget(limit: settings.serverReplayBytes)
        self.residency = Residency(for: self.storage.lifetime, settings)
        residency.evictor { [weak self] limit, sparing in self?.evictIdle(until: limit, sparing: sparing) }
        timers.firing { [weak self] reference in await self?.fireTimer(reference) ?? .failed }
    }

    /// Memory mode's storage: a bounded journal of each session's last changes (as many as
    /// events replay or history keeps, the larger), whole states, in the process's memory.
    /// The composition root passes it as the storage when the server keeps nothing across
    /// restarts.
    public static func memoryStorage(_ registry: FeatureRegistry, _ settings: SessionSettings) -> InMemoryStorage {
        InMemoryStorage.process(InMemoryStorage.Bounds(
            changes: max(settings.replayBuffer, settings.historyKeep, 1), bytes: settings.replayBytes,
            serverBytes: settings.serverReplayBytes, keys: settings.idempotencyKeys,
            stateVersions: Dictionary(registry.features.map { ($0.name, $0.stateVersion) }) { first, _ in first }))
    }

    /// Whether every session there is is in memory here (memory mode: sessions never leave
    /// it), so a session not found in memory does not exist — known without waiting.
    public var holdsEverySession: Bool { residency.holdsEverySession }
    /// Several nodes with one owner per session (see ``SessionOwnership``).
    public var ownership: (any SessionOwnership)? { storage.ownership }

    /// Why a session could not be created.
    public enum CreateFailure: Error, Sendable {
        /// Memory mode holds `maxSessions` already.
        case limitReached
        case storage(StorageError)
    }

    /// Creates a session, recorded in the journal before it is returned. In memory mode at most
    /// `maxSessions` are held.
    public func create() async throws(CreateFailure) -> (session: Session, token: String) {
        let token = Self.randomString(bytes: 32)
        let id = Self.randomString(bytes: 16)
        let now = WallClock.now
        guard residency.mayCreate(holding: count) else { throw .limitReached }
        // Several nodes: the creating node owns the session (storage records it as the owner).
        var ownerEpoch: Int64 = 0
        do throws(StorageError) {
            try requireJoined()
            if let ownership = activeOwnership {
                await ownership.confirmLiveness()
                ownerEpoch = ownership.epoch
                guard ownerEpoch != 0, ownership.isMember else {
                    throw StorageError(.unavailable, "this node is not a member of the cluster now; it is joining again")
                }
            }
            try await storage.commit([
                .createSession(StoredSession(id: id, tokenHash: SHA256.hash(token), createdAt: now, lastActiveAt: now))
            ])
        } catch {
            throw .storage(error)
        }
        let session = makeSession(id: id, tokenHash: SHA256.hash(token), ownerEpoch: ownerEpoch)
        let added = sessions.withLock { table -> Bool in
            guard residency.mayCreate(holding: table.byID.count) else { return false }
            table.byID[id] = session
            return true
        }
        guard added else {
            try? await storage.commit([.deleteSession(id: id)])
            throw .limitReached
        }
        return (session, token)
    }

    private func makeSession(
        id: String, tokenHash: [UInt8], grants: [StoredGrant] = [], startSeq: Int = 0,
        recent: [(seq: Int, feature: String, data: [UInt8])] = [], lastStoredActivity: Int64 = WallClock.now, ownerEpoch: Int64 = 0
    ) -> Session {
        Session(
            id: id, tokenHash: tokenHash, grants: grants, registry: registry, settings: settings, storage: storage,
            startSeq: startSeq, recent: recent, lastStoredActivity: lastStoredActivity, metrics: metrics,
            replayBudget: replayBudget, encoder: encoder, residency: residency, ownerEpoch: ownerEpoch, notify: notify)
    }

    /// The in-memory session with this id whose token is `token`; `nil` for an unknown id,
    /// another token (callers can't tell which), or a durable session not in memory. `admin`:
    /// the caller proved the admin credential, and the token is not checked.
    public func session(id: String, token: String, admin: Bool = false) -> Session? {
        guard let session = sessions.withLock({ $0.byID[id] }) else { return nil }
        guard admin || session.verify(token: token) else { return nil }
        return served(session).session
    }

    /// `session` (found in memory, its token checked) if it may be served from here: not a
    /// copy owned under a lapsed membership or given up, not found gone; marked used.
    /// `notMember`: held here, but this node is not a member this moment (see ``locate``).
    private func served(_ session: Session) -> (session: Session?, notMember: Bool) {
        let id = session.id
        if session.ownerEpoch != 0, let ownership {
            if session.ownerEpoch != ownership.epoch || session.placement.abandoned {
                // Owned under a membership that lapsed (another node may own it now), or a copy
                // given up: load it afresh, or reach its owner.
                drop(session)
                return (nil, false)
            }
            // Not a member this moment (its liveness not confirmed lately: ``locate`` waits
            // for it), or its lease is running out (then it lapses, and drops every copy).
            guard ownership.isMember else { return (nil, true) }
        }
        if session.isGone {
            // Found gone by a write (deleted elsewhere): forget it.
            sessions.withLock { table in
                if table.byID[id] === session { table.byID[id] = nil }
            }
            return (nil, false)
        }
        session.markUsed()
        return (session, false)
    }

    /// The in-memory session with this id and what `token` may do on it (the owner's token or a
    /// live minted one); nil as for ``session(id:token:admin:)``. The token is hashed once.
    public func authorized(id: String, token: String) -> (session: Session, grant: Grant)? {
        guard let found = sessions.withLock({ $0.byID[id] }), let grant = found.grant(for: token),
            let session = served(found).session
        else { return nil }
        return (session, grant)
    }

    /// Sessions with an id after `id` (byte order), at most `limit`, with their last activity
    /// (milliseconds since 1970): from storage (every node's), with the exact last use of those
    /// in memory here (storage learns of reads at most once a minute). The admin's list.
    public func list(after id: String, limit: Int) async throws(StorageError) -> [(id: String, lastActive: Int64)] {
        let stored = try await storage.sessions(after: id, limit: limit)
        let loaded = sessions.withLock { table in stored.map { table.byID[$0.id]?.idleSince ?? 0 } }
        return zip(stored, loaded).map { ($0.id, max($0.lastActiveAt, $1)) }
    }

    /// Whether a session with this id is in memory (whatever the token).
    public func isLoaded(id: String) -> Bool {
        sessions.withLock { $0.byID[id] != nil }
    }

    /// Where a session is served: here (in memory now, loaded from storage, or claimed from
    /// a node that is gone), or by the node that owns it (several nodes).
    public enum Located: Sendable {
        case here(Session)
        /// Another node owns the session; `url` is the address it advertises to its peers.
        case elsewhere(url: String)
    }

    /// The session, loading it from storage if it is not in memory. Start-up loads nothing:
    /// sessions come back one by one, on first use. A session deleted while it was being
    /// loaded is not put back into memory. With one owner per session, a session another
    /// node owns is `.notOwner`: use ``locate(id:token:)`` to learn where it is.
    public func load(id: String, token: String) async throws(StorageError) -> Session? {
        switch try await locate(id: id, token: token) {
        case .here(let session)?: return session
        case .elsewhere(let url)?: throw StorageError(.notOwner, "session \(id) is owned by the node at \(url)")
        case nil: return nil
        }
    }

    /// The session here, or where it is served (``Located``); `nil` for an unknown id or
    /// another token. With one owner per session, a session no live node owns is claimed
    /// for this one first.
    public func locate(id: String, token: String, admin: Bool = false) async throws(StorageError) -> Located? {
        try requireJoined()
        if let ownership = activeOwnership, !ownership.isMember { await ownership.confirmLiveness() }
        if let held = sessions.withLock({ $0.byID[id] }) {
            guard admin || held.verify(token: token) else { return nil }
            let (session, notMember) = served(held)
            if let session { return .here(session) }
            if notMember { throw StorageError(.unavailable, "this node is not a member of the cluster this moment; try again") }
        }
        if let url = sessions.withLock({ $0.leaving[id] }) { return .elsewhere(url: url) }
        // Not `isLoaded` here: a request loading the same session meanwhile (many do at once
        // after a takeover) would make a found session answer 404; the load below returns the
        // copy it finds in the table.
        guard Self.isPlausibleID(id) else { return nil }
        while true {
            let deletesBefore = sessions.withLock { $0.deletes }
            guard let stored = try await storage.session(id: id) else { return nil }
            // The owner's token, or a live token minted for the session: looked up by its hash,
            // so a wrong token costs one lookup, never a read of every grant.
            let hash = SHA256.hash(token)
            if !admin, !ConstantTime.equal(hash, stored.tokenHash) {
                guard try await storage.hasToken(session: id, tokenHash: hash, now: WallClock.now) else { return nil }
            }
            let grants = try await storage.grants(session: id)
            var ownerEpoch: Int64 = 0
            if let ownership = activeOwnership {
                ownerEpoch = ownership.epoch
                switch try await ownership.claim(session: id) {
                case .gone: return nil
                case .elsewhere(let url): return .elsewhere(url: url)
                case .mine: break
                }
            }
            // Events before `lastSeq` are rebuilt from the journal only if a stream resumes
            // from one of them (``Session/backfill(after:)``): loading costs no replay buffer.
            let lastSeq = try await storage.lastSeq(session: id)
            let fresh = makeSession(
                id: id, tokenHash: stored.tokenHash, grants: grants, startSeq: lastSeq, lastStoredActivity: stored.lastActiveAt,
                ownerEpoch: ownerEpoch)
            let session = sessions.withLock { table -> Session? in
                if let existing = table.byID[id] { return existing }
                // A delete ran meanwhile: what was read may be gone; read again.
                guard table.deletes == deletesBefore else { return nil }
                table.byID[id] = fresh
                return fresh
            }
            if let session {
                session.markUsed()
                return .here(session)
            }
        }
    }

    /// Shared storage has one owner per session, and a node serves no session before it joined
    /// the cluster (between its port opening and its join): `.unavailable` until then.
    func requireJoined() throws(StorageError) {
        guard storage.isShared, activeOwnership == nil else { return }
        throw StorageError(.unavailable, "this node has not joined the cluster yet")
    }

    /// Deletes a session: its changes submitted before are applied first, then it is removed
    /// from storage and memory, and its event streams end.
    public func delete(_ session: Session) async throws(SessionFailure) {
        do throws(SessionFailure) {
            try await session.delete()
        } catch {
            guard case .sessionGone = error else { throw error }
        }
        sessions.withLock { table in
            table.deletes &+= 1
            if table.byID[session.id] === session { table.byID[session.id] = nil }
        }
    }

    /// Deletes a session by id, loaded or not (the TTL sweep).
    func delete(id: String) async throws(SessionFailure) {
        if let session = sessions.withLock({ $0.byID[id] }) {
            return try await delete(session)
        }
        do {
            try await storage.commit([.deleteSession(id: id)])
        } catch {
            throw .storage(error)
        }
        sessions.withLock { $0.deletes &+= 1 }
    }

    /// Sessions in memory.
    public var count: Int { sessions.withLock { $0.byID.count } }

    /// Stores in memory, over all sessions (walks the sessions: for metrics scrapes).
    public var storeCount: Int {
        sessions.withLock { Array($0.byID.values) }.reduce(0) { $0 + $1.storeCount }
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