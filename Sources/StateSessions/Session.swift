import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// A response remembered for an `Idempotency-Key`.
public typealias IdempotentReply = StoredReply

/// Why a session could not do what was asked.
public enum SessionFailure: Error, Sendable {
    /// The store refused the change (nothing applied).
    case store(StoreError)
    /// Storage failed (nothing applied, nothing acknowledged).
    case storage(StorageError)
}

/// Something a session reports to the server's log (sessions never log themselves).
public enum SessionNotice: Sendable {
    case followUpRejected(session: String, StoreError)
    case followUpNotStored(session: String, StorageError)
    /// A store could not be restored as saved and was rebuilt from its journal or reset.
    case storeRecovered(session: String, feature: String, how: String, reason: String)
}

/// One client session: a store per registered feature (created or loaded on first use), an
/// event hub, and the replies remembered for idempotency keys.
///
/// Without storage (memory mode) changes apply synchronously under each store's lock. With
/// storage (durable mode) every change of the session goes through `writeLock`: it is computed,
/// journaled and committed to disk, and only then applied in memory and published — so memory
/// never runs ahead of the disk. Different sessions commit concurrently and share fsyncs.
///
/// Thread-safety: tables sit behind their own locks; stores and the hub are thread-safe.
/// Lock order: write lock (async) → idempotency → store → hub.
public final class Session: Sendable {
    public let id: String
    private let tokenHash: [UInt8]
    private let registry: FeatureRegistry
    private let settings: SessionSettings
    let storage: (any SessionStorage)?
    private let stores = Mutex<[String: any AnyStateStore]>([:])
    public let hub: EventHub
    private let idempotency: Mutex<IdempotencyTable>
    private let writeLock = AsyncLock()
    private let notify: @Sendable (SessionNotice) -> Void
    /// Milliseconds since 1970 of the last request, and of the last activity written to disk.
    private let lastUsed: Atomic<Int64>
    private let lastStoredActivity: Atomic<Int64>

    init(
        id: String, tokenHash: [UInt8], registry: FeatureRegistry, settings: SessionSettings,
        storage: (any SessionStorage)?, startSeq: Int = 0,
        recent: [(seq: Int, feature: String, data: [UInt8])] = [], lastStoredActivity: Int64 = WallClock.now,
        metrics: HubMetrics = HubMetrics(), notify: @escaping @Sendable (SessionNotice) -> Void
    ) {
        self.id = id
        self.tokenHash = tokenHash
        self.registry = registry
        self.settings = settings
        self.storage = storage
        self.hub = EventHub(
            features: registry.features, replayLimit: settings.replayBuffer, startSeq: startSeq, recent: recent,
            metrics: metrics)
        self.idempotency = Mutex(IdempotencyTable(limit: settings.idempotencyKeys))
        self.notify = notify
        self.lastUsed = Atomic(WallClock.now)
        self.lastStoredActivity = Atomic(lastStoredActivity)
    }

    public var isDurable: Bool { storage != nil }

    /// Compares SHA-256 of `candidate` with the stored hash in constant time.
    public func verify(token candidate: String) -> Bool {
        Self.constantTimeEqual(SHA256.hash(candidate), tokenHash)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count, !a.isEmpty else { return false }
        var difference: UInt8 = 0
        for index in 0..<a.count { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// Marks the session as used now (idle eviction and the TTL count from here).
    public func markUsed() {
        let now = WallClock.now
        lastUsed.store(now, ordering: .relaxed)
        // Durable sessions record activity at most once a minute, off the request path.
        if let storage, now - lastStoredActivity.load(ordering: .relaxed) > 60_000 {
            lastStoredActivity.store(now, ordering: .relaxed)
            let id = self.id
            Task { try? await storage.commit([.touch(session: id, at: now)]) }
        }
    }

    var idleSince: Int64 { lastUsed.load(ordering: .relaxed) }
    /// Stores in memory.
    public var storeCount: Int { stores.withLock { $0.count } }
    /// In use: a change being written, an open event stream, or asynchronous work (a follow-up
    /// still to come) — such a session is neither evicted nor purged.
    var isBusy: Bool {
        writeLock.isLocked || hub.subscriberCount > 0 || stores.withLock { $0.values.contains { $0.hasRunningWork } }
    }

    // MARK: Stores

    /// The store of a feature if it is in memory. In memory mode it is created on first use.
    /// `nil` for an unknown feature, or (durable mode) a store not loaded yet.
    public func loadedStore(_ feature: String) -> (any AnyStateStore)? {
        stores.withLock { stores in
            if let store = stores[feature] { return store }
            guard storage == nil, let definition = registry[feature] else { return nil }
            let store = definition.makeStore(onFollowUpRejected: followUpRejected)
            attach(store, feature: feature)
            stores[feature] = store
            return store
        }
    }

    /// The store of a registered feature, loading it from storage on first use (its snapshot,
    /// then its journal replayed through the reducer with side effects off). `nil` for an
    /// unknown feature.
    public func store(_ feature: String) async throws(SessionFailure) -> (any AnyStateStore)? {
        if let store = loadedStore(feature) { return store }
        guard let storage, let definition = registry[feature] else { return nil }
        await writeLock.lock()
        defer { writeLock.unlock() }
        if let store = stores.withLock({ $0[feature] }) { return store }
        let store: any AnyStateStore
        do {
            store = try await load(definition, from: storage)
        } catch {
            throw .storage(error)
        }
        attach(store, feature: feature)
        if let (state, version) = try? store.currentJSON() {
            hub.seed(feature: feature, version: version, state: state)
        }
        stores.withLock { $0[feature] = store }
        // Work that was running in a previous process never comes back: settle its state now,
        // journaled like any change (the write lock is held, so commit directly).
        if let recovery = try? store.prepareRecovery() {
            do throws(SessionFailure) {
                _ = try await commitLocked(store, storage: storage, prepared: recovery, idempotency: nil)
            } catch {
                if case .storage(let e) = error { notify(.followUpNotStored(session: id, e)) }
            }
        }
        return store
    }

    /// Loads every store (so snapshots and full-state reads show stored versions).
    public func loadAll(_ features: [String]? = nil) async throws(SessionFailure) {
        for name in features ?? registry.names {
            _ = try await store(name)
        }
    }

    private func attach(_ store: any AnyStateStore, feature: String) {
        let hub = self.hub
        _ = store.addJSONObserver { change in hub.publish(change) }
        if storage != nil {
            store.routeFollowUps { [weak self, weak store] prepare in
                guard let self, let store else { return }
                do throws(SessionFailure) {
                    _ = try await self.commitDurably(store, prepare: prepare)
                } catch {
                    switch error {
                    case .store(let e): self.notify(.followUpRejected(session: self.id, e))
                    case .storage(let e): self.notify(.followUpNotStored(session: self.id, e))
                    }
                }
            }
        }
    }

    private var followUpRejected: @Sendable (StoreError) -> Void {
        let id = self.id
        let notify = self.notify
        return { error in notify(.followUpRejected(session: id, error)) }
    }

    /// Snapshot + journal, or a rebuild from the whole journal, or (last resort) a reset that
    /// is itself journaled. Never a crash, never a silently wrong state.
    private func load(_ definition: AnyFeature, from storage: any SessionStorage) async throws(StorageError) -> any AnyStateStore {
        let feature = definition.name
        let onRejected = followUpRejected
        var problem: String?
        let snapshot = try await storage.latestSnapshot(session: id, feature: feature)
        if let snapshot {
            let restored: (any AnyStateStore)?
            do throws(StoreError) {
                restored = try definition.restoreStore(
                    state: snapshot.state, stateVersion: snapshot.stateVersion, version: snapshot.version,
                    onFollowUpRejected: onRejected)
            } catch {
                restored = nil
                problem = "the snapshot at version \(snapshot.version) could not be restored: \(error.message)"
            }
            if let restored {
                let entries = try await storage.journal(session: id, feature: feature, afterVersion: snapshot.version)
                if let failure = replay(entries, into: restored, from: snapshot.version) {
                    problem = failure
                } else {
                    return restored
                }
            }
        }
        // No snapshot, or it failed: rebuild from the start of the journal — only when the
        // journal starts at version 1 and reaches at least the snapshot's version (compaction
        // may have removed the start; going back in time is not a recovery).
        let all = try await storage.journal(session: id, feature: feature, afterVersion: 0)
        let snapshotVersion = snapshot?.version ?? 0
        let rebuilt = definition.makeStore(onFollowUpRejected: onRejected)
        let complete = all.isEmpty ? snapshot == nil : (all.first?.version == 1 && (all.last?.version ?? 0) >= snapshotVersion)
        if complete, replay(all, into: rebuilt, from: 0) == nil {
            if let problem {
                notify(.storeRecovered(session: id, feature: feature, how: "rebuilt from the journal", reason: problem))
            }
            return rebuilt
        }
        // Last resort: the initial state, as a journaled reset after the last known version,
        // with a snapshot so the next load starts from it.
        let lastVersion = max(all.last?.version ?? 0, snapshotVersion)
        let reason = problem ?? "the journal of \(feature) cannot be replayed"
        let store: any AnyStateStore
        do {
            store = try definition.restoreStore(state: nil, stateVersion: definition.stateVersion, version: lastVersion, onFollowUpRejected: onRejected)
        } catch {
            throw StorageError(.unavailable, "cannot create \(feature): \(error.message)")
        }
        do {
            let reset = try store.prepareReset(ifVersion: nil)
            let seq = max(hub.seq, try await storage.lastSeq(session: id)) + 1
            try await storage.commit([
                .append(journalEntry(reset, seq: seq), idempotency: nil),
                .snapshot(StoreSnapshot(
                    session: id, feature: feature, version: reset.encoded.version, stateVersion: definition.stateVersion,
                    state: reset.encoded.state, time: WallClock.now)),
            ])
            store.commit(reset, startWork: false)
            hub.advance(to: seq)
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError(.unavailable, "cannot reset \(feature): \(error)")
        }
        notify(.storeRecovered(session: id, feature: feature, how: "reset to the initial state", reason: reason))
        return store
    }

    /// Replays journal entries; returns why it failed, or nil.
    private func replay(_ entries: [JournalEntry], into store: any AnyStateStore, from version: Int) -> String? {
        var expected = version + 1
        for entry in entries {
            guard entry.version == expected else {
                return "the journal of \(entry.feature) jumps from version \(expected - 1) to \(entry.version)"
            }
            do throws(StoreError) {
                try store.replay(cause: entry.cause, payload: entry.payload)
            } catch {
                return "version \(entry.version) of \(entry.feature) does not replay: \(error.message)"
            }
            expected += 1
        }
        return nil
    }

    /// The current state of every feature (initial state at version 0 for unused ones). In
    /// durable mode call ``loadAll(_:)`` first.
    public func allStates() throws(StoreError) -> [(feature: String, version: Int, state: [UInt8])] {
        let existing = stores.withLock { $0 }
        var result: [(feature: String, version: Int, state: [UInt8])] = []
        for feature in registry.features {
            if let store = existing[feature.name] {
                let (state, version) = try store.currentJSON()
                result.append((feature.name, version, state))
            } else {
                result.append((feature.name, 0, feature.initialStateJSON))
            }
        }
        return result
    }

    // MARK: Durable changes

    /// Computes a change, commits it (and the idempotency reply, snapshot and activity that go
    /// with it) to storage in one batch, then applies and publishes it. Throws, applying
    /// nothing, when the store refuses or storage fails.
    public func commitDurably(
        _ store: any AnyStateStore, idempotencyKey: String? = nil,
        reply: (@Sendable (EncodedChange) -> StoredReply)? = nil,
        prepare: @Sendable (Int?) throws(StoreError) -> PreparedChange, ifVersion: Int? = nil
    ) async throws(SessionFailure) -> EncodedChange {
        guard let storage else {
            // Memory mode: apply directly.
            do throws(StoreError) {
                let prepared = try prepare(ifVersion)
                guard store.commit(prepared, startWork: true) else {
                    throw StoreError(.versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion)
                }
                return prepared.encoded
            } catch {
                throw .store(error)
            }
        }
        await writeLock.lock()
        defer { writeLock.unlock() }
        let prepared: PreparedChange
        do throws(StoreError) {
            prepared = try prepare(ifVersion)
        } catch {
            throw .store(error)
        }
        var remembered: (key: String, reply: StoredReply)?
        if let idempotencyKey, let reply, settings.idempotencyKeys > 0 {
            remembered = (idempotencyKey, reply(prepared.encoded))
        }
        return try await commitLocked(store, storage: storage, prepared: prepared, idempotency: remembered)
    }

    /// Journals a prepared change (with its idempotency reply, and a snapshot when due), then
    /// applies it. The caller holds the write lock.
    private func commitLocked(
        _ store: any AnyStateStore, storage: any SessionStorage, prepared: PreparedChange,
        idempotency remembered: (key: String, reply: StoredReply)?
    ) async throws(SessionFailure) -> EncodedChange {
        let now = WallClock.now
        let seq = hub.seq + 1
        var batch: [StorageWrite] = [.append(journalEntry(prepared, seq: seq, time: now), idempotency: remembered)]
        let version = prepared.encoded.version
        if settings.snapshotEvery > 0, version % settings.snapshotEvery == 0 {
            let feature = prepared.encoded.feature
            let stateVersion = registry[feature]?.stateVersion ?? 1
            batch.append(.snapshot(StoreSnapshot(
                session: id, feature: feature, version: version, stateVersion: stateVersion,
                state: prepared.encoded.state, time: now)))
            batch.append(.compact(session: id, feature: feature, upToVersion: version, keepLast: settings.replayBuffer))
        }
        if now - lastStoredActivity.load(ordering: .relaxed) > 60_000 {
            lastStoredActivity.store(now, ordering: .relaxed)
            batch.append(.touch(session: id, at: now))
        }
        do {
            try await storage.commit(batch)
        } catch {
            throw .storage(error)
        }
        store.commit(prepared, startWork: true)
        if let remembered { idempotency.withLock { $0.insert(remembered.key, remembered.reply) } }
        return prepared.encoded
    }

    private func journalEntry(_ prepared: PreparedChange, seq: Int, time: Int64 = WallClock.now) -> JournalEntry {
        JournalEntry(
            session: id, seq: seq, feature: prepared.encoded.feature, version: prepared.encoded.version,
            cause: prepared.encoded.cause, payload: prepared.payload, event: EventHub.eventData(prepared.encoded),
            time: time)
    }

    // MARK: Idempotency

    /// Memory mode: runs `body` once per idempotency key; a repeat of a key whose first run
    /// produced a reply returns that reply (`replayed: true`) without running `body`. Only
    /// replies marked `keep` are remembered, so a failed request can be retried.
    public func idempotent(
        key: String, _ body: () -> (reply: IdempotentReply, keep: Bool)
    ) -> (reply: IdempotentReply, replayed: Bool) {
        idempotency.withLock { table in
            if let reply = table.replies[key] { return (reply, true) }
            let (reply, keep) = body()
            if keep { table.insert(key, reply) }
            return (reply, false)
        }
    }

    /// Durable mode: the remembered reply for `key`, from memory or storage.
    public func rememberedReply(key: String) async throws(SessionFailure) -> IdempotentReply? {
        if let reply = idempotency.withLock({ $0.replies[key] }) { return reply }
        guard let storage else { return nil }
        do {
            return try await storage.reply(session: id, key: key)
        } catch {
            throw .storage(error)
        }
    }

    /// Durable mode: runs `body` holding the session's write lock's turn for `key`, so two
    /// requests with the same key are answered one after the other (the second sees the
    /// first's reply).
    public func withKeyTurn<T: Sendable>(_ body: () async -> T) async -> T {
        await keyLock.lock()
        defer { keyLock.unlock() }
        return await body()
    }

    private let keyLock = AsyncLock()

    /// Ends the session's event streams.
    func close() {
        hub.close()
    }
}

/// The remembered replies of one session, oldest evicted first past `limit`.
struct IdempotencyTable {
    let limit: Int
    var replies: [String: IdempotentReply] = [:]
    var order = Deque<String>()

    mutating func insert(_ key: String, _ reply: IdempotentReply) {
        guard limit > 0, replies[key] == nil else { return }
        replies[key] = reply
        order.append(key)
        while order.count > limit, let oldest = order.popFirst() { replies[oldest] = nil }
    }
}

/// Wall-clock milliseconds, for stored times.
public enum WallClock {
    public static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
