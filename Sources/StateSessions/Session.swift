import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// A response remembered for an `Idempotency-Key`.
public typealias IdempotentReply = StoredReply

/// Something a session reports to the server's log (sessions never log themselves).
public enum SessionNotice: Sendable {
    case followUpRejected(session: String, StoreError)
    case followUpNotStored(session: String, StorageError)
    /// A store could not be restored as saved and was rebuilt from its journal or reset.
    case storeRecovered(session: String, feature: String, how: String, reason: String)
    /// Shared storage: this node started (`true`) or stopped (`false`) hearing other nodes'
    /// commits; when it stops, its event streams end.
    case following(Bool)
    /// Several nodes with one owner per session: this node's membership lapsed (`false`: every
    /// session in memory was dropped) or it joined again (`true`).
    case membership(member: Bool)
    /// Shared storage: a store found waiting for asynchronous work was checked again after
    /// `recoveryDelay`: `settled` when it was still waiting at the same version (the work's
    /// node is gone) and this node settled it, `false` when the work's own follow-up (or any
    /// change) came first.
    case waitingWorkChecked(session: String, feature: String, settled: Bool)
    /// A store was loaded from storage; `bytes` is its state's JSON size. Building it parsed,
    /// patched and decoded copies of that state that are garbage now: a server may give such
    /// memory back to the system after large loads.
    case storeLoaded(session: String, feature: String, bytes: Int)
}

/// One client session: a store per registered feature (created or loaded on first use), an
/// event hub, and the replies remembered for idempotency keys.
///
/// **One change path.** Every change — a client's dispatch, rehydrate or reset, a follow-up of
/// asynchronous work, a recovery after a restart — is a ``ChangeRequest`` given to
/// ``submit(_:done:)``. The session takes requests one at a time, in arrival order (its
/// pipeline): the idempotency key is looked up, the store computes the change without applying
/// it, the ``ChangeJournal`` records it (a no-op in memory mode, a storage commit in durable
/// mode), and only then is it applied in memory and published. Memory never runs ahead of the
/// disk, and one session's changes never interleave; different sessions run concurrently and
/// share fsyncs. With a journal that keeps nothing, the whole path runs synchronously on the
/// caller's thread.
///
/// Deleting the session is a request in the same pipeline, so a change that arrived before the
/// delete is applied before it and one that arrived after is refused (`.sessionGone`).
///
/// Thread-safety: tables sit behind their own locks; stores and the hub are thread-safe.
/// Lock order: pipeline → hub; store → hub; idempotency alone.
public final class Session: Sendable {
    public let id: String
    private let tokenHash: [UInt8]
    private let registry: FeatureRegistry
    private let settings: SessionSettings
    public let journal: any ChangeJournal
    private let stores = Mutex<[String: any AnyStateStore]>([:])
    public let hub: EventHub
    private let idempotency: Mutex<IdempotencyTable>
    private let pipeline = Mutex(Pipeline())
    /// Held while a store is loaded from storage (two requests never load the same store twice).
    private let loadLock = AsyncLock()
    private let notify: @Sendable (SessionNotice) -> Void
    /// Milliseconds since 1970 of the last request, and of the last activity written to disk.
    private let lastUsed: Atomic<Int64>
    private let lastStoredActivity: Atomic<Int64>
    /// Shared storage: the highest sequence number heard of (any node's commit), and whether a
    /// pull is queued.
    private let heardSeq = Atomic<Int>(0)
    private let pullQueued = Atomic<Bool>(false)
    /// Durable mode: bytes journaled per store since its last snapshot (a snapshot is written
    /// early when they outgrow the state, so a load never reads much more than twice it).
    private let sinceSnapshot = Mutex<[String: Int]>([:])
    /// Durable mode: the server's budget for the state bytes of loaded sessions, and what this
    /// session has counted in it.
    private let memory: MemoryBudget?
    private let counted = Atomic<Int>(0)
    /// Several nodes with one owner per session: the membership epoch under which this node
    /// owns the session (0: no owners, every node may write and reads catch up first). The
    /// copy is served only while the node is still a member with that epoch.
    public let ownerEpoch: Int64
    /// Several nodes: the copy was given up (``abandon()``); the manager forgets it.
    let abandoned = Atomic<Bool>(false)

    /// Requests waiting for their turn.
    struct Pipeline {
        enum Job {
            case change(ChangeRequest, @Sendable (ChangeOutcome) -> Void)
            case delete(@Sendable (Result<Void, SessionFailure>) -> Void)
            /// Shared storage: apply what other nodes committed since this node last looked.
            case refresh(@Sendable (Result<Void, SessionFailure>) -> Void)
            /// Shared storage: another node's commit was heard; catch up if still behind it.
            case pull(@Sendable (Result<Void, SessionFailure>) -> Void)
            /// Shared storage: loads a store, ordered with catch-ups (a load outside the
            /// pipeline could install a copy older than what a catch-up already published).
            case load(String, @Sendable (Result<Void, SessionFailure>) -> Void)
        }

        var running = false
        var waiting = Deque<Job>()
        /// Deleted: every request is refused with `.sessionGone`.
        var deleted = false
        /// Evicted from memory: requests are refused with `.retired` (the caller loads again).
        var retired = false
    }

    init(
        id: String, tokenHash: [UInt8], registry: FeatureRegistry, settings: SessionSettings,
        journal: any ChangeJournal, startSeq: Int = 0,
        recent: [(seq: Int, feature: String, data: [UInt8])] = [], lastStoredActivity: Int64 = WallClock.now,
        metrics: HubMetrics = HubMetrics(), replayBudget: ReplayBudget? = nil, encoder: any EventEncoder,
        memory: MemoryBudget? = nil, ownerEpoch: Int64 = 0, notify: @escaping @Sendable (SessionNotice) -> Void
    ) {
        self.memory = memory
        self.ownerEpoch = ownerEpoch
        self.id = id
        self.tokenHash = tokenHash
        self.registry = registry
        self.settings = settings
        self.journal = journal
        self.hub = EventHub(
            features: registry.features, replayLimit: settings.replayBuffer, replayBytes: settings.replayBytes,
            startSeq: startSeq, recent: recent, metrics: metrics, budget: replayBudget, encoder: encoder)
        self.idempotency = Mutex(IdempotencyTable(limit: settings.idempotencyKeys, byteLimit: settings.idempotencyBytes))
        self.notify = notify
        self.lastUsed = Atomic(WallClock.now)
        self.lastStoredActivity = Atomic(lastStoredActivity)
    }

    private var storage: (any SessionStorage)? { journal.storage }


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

    /// Marks the session as used now (idle eviction and the TTL count from here). Activity is
    /// recorded in the journal at most once a minute, off the request path.
    public func markUsed() {
        let now = WallClock.now
        lastUsed.store(now, ordering: .relaxed)
        if storage != nil, now - lastStoredActivity.load(ordering: .relaxed) > 60_000 {
            lastStoredActivity.store(now, ordering: .relaxed)
            let id = self.id
            journal.record({ [.touch(session: id, at: now)] }, done: { _ in })
        }
    }

    var idleSince: Int64 { lastUsed.load(ordering: .relaxed) }
    /// Stores in memory.
    public var storeCount: Int { stores.withLock { $0.count } }
    /// In use: a change running or waiting, an open event stream, or asynchronous work (a
    /// follow-up still to come) — such a session is neither evicted nor purged.
    var isBusy: Bool {
        pipeline.withLock { $0.running } || hub.subscriberCount > 0 || hasRunningWork
    }

    private var hasRunningWork: Bool {
        stores.withLock { $0.values.contains { $0.hasRunningWork } }
    }

    /// Takes the session out of service if nothing uses it (no change running or waiting, no
    /// event stream, no asynchronous work), atomically with respect to new requests: later
    /// changes get `.retired` and the hub refuses subscribers, so a caller that looked the
    /// session up just before can never work on a copy that left memory.
    func retireIfIdle() -> Bool {
        let retired = pipeline.withLock { p in
            guard !p.running, !p.deleted, !p.retired, !hasRunningWork, hub.closeIfIdle() else { return false }
            p.retired = true
            return true
        }
        if retired { memory?.count(-counted.exchange(0, ordering: .relaxed)) }
        return retired
    }

    /// Several nodes: this node no longer owns the session (its membership lapsed, or another
    /// node took the session over). Whatever uses it: its streams end (clients reconnect and
    /// are served by the owner), its asynchronous work is cancelled (a result could not be
    /// committed anyway: appends are fenced on the owner), and later changes are refused with
    /// `.retired`, so callers look the session up again and reach its owner.
    func abandon() {
        abandoned.store(true, ordering: .sequentiallyConsistent)
        pipeline.withLock { $0.retired = true }
        hub.close()
        for store in stores.withLock({ Array($0.values) }) { store.cancelAllWork() }
        memory?.count(-counted.exchange(0, ordering: .relaxed))
    }

    /// Durable mode: counts this session's state bytes in the server's memory budget again
    /// (after a load or a change).
    func recount() {
        guard let memory else { return }
        let loaded = stores.withLock { Array($0.values) }
        let bytes = loaded.reduce(0) { $0 + ((try? $1.currentJSON().state.count) ?? 0) }
        memory.count(bytes - counted.exchange(bytes, ordering: .relaxed))
    }

    // MARK: Stores

    /// The store of a feature if it is in memory; without storage it is created on first use.
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
        guard storage != nil, registry[feature] != nil else { return nil }
        guard readsCatchUp else { return try await loadStore(feature) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, SessionFailure>, Never>) in
            enqueue(.load(feature) { continuation.resume(returning: $0) })
        }
        try result.get()
        if let store = loadedStore(feature) { return store }
        // Dropped again meanwhile (a catch-up found a gap): load it once more, in turn.
        return try await store(feature)
    }

    /// Loads a store from storage unless it is in memory (see ``store(_:)``); inside the
    /// pipeline with shared storage.
    private func loadStore(_ feature: String) async throws(SessionFailure) -> (any AnyStateStore)? {
        if let store = loadedStore(feature) { return store }
        guard let storage, let definition = registry[feature] else { return nil }
        await loadLock.lock()
        defer { loadLock.unlock() }
        if let store = stores.withLock({ $0[feature] }) { return store }
        // Loaded sessions past the server's memory budget: idle ones leave memory first.
        if let memory, !memory.makeRoom(sparing: id) { throw .memoryFull }
        let store: any AnyStateStore
        do {
            store = try await load(definition, from: storage)
        } catch {
            throw .storage(error)
        }
        attach(store, feature: feature)
        var bytes = 0
        if let (state, version) = try? store.currentJSON() {
            hub.seed(feature: feature, version: version, state: state)
            bytes = state.count
        }
        stores.withLock { $0[feature] = store }
        recount()
        notify(.storeLoaded(session: id, feature: feature, bytes: bytes))
        // Work that was running in a previous process never comes back: settle its state now,
        // through the change path like any change. With several nodes the work may still run
        // on another node: give it `recoveryDelay`, then settle only if nothing changed.
        if (try? store.prepareRecovery()) != nil {
            if readsCatchUp, let version = try? store.currentJSON().version {
                settleLater(feature, ifStillAt: version)
            } else if case .failed(let failure) = await submit(ChangeRequest(feature: feature, kind: .recovery)) {
                report(failure)
            }
        }
        return store
    }

    /// Shared storage: after `recoveryDelay`, settles the store's waiting state if it is still at
    /// `version` (the latest committed: a stale copy catches up and is judged again).
    private func settleLater(_ feature: String, ifStillAt version: Int) {
        let delay = settings.recoveryDelay
        Task { [weak self] in
            try? await Task.sleep(for: delay)
            guard let self else { return }
            let outcome = await submit(ChangeRequest(feature: feature, kind: .recovery, precondition: .version(version)))
            let settled: Bool
            switch outcome {
            case .applied, .replayed: settled = true
            case .failed(.store), .failed(.sessionGone), .failed(.retired): settled = false
            case .failed(let failure):
                report(failure)
                settled = false
            }
            notify(.waitingWorkChecked(session: id, feature: feature, settled: settled))
        }
    }

    /// Whether a read of `features` (`nil`: all) can be answered from memory now, without
    /// waiting: every store is in memory (memory mode makes them on first use) and no other
    /// node's changes must be read first. Otherwise the caller waits for ``loadAll(_:)`` and
    /// ``refresh()``. The routes ask this, never which storage the server runs on.
    public func isReady(for features: [String]? = nil) -> Bool {
        guard !readsCatchUp else { return false }
        return (features ?? registry.names).allSatisfy { loadedStore($0) != nil || registry[$0] == nil }
    }

    /// Whether a stream resuming after `lastEventID` needs events rebuilt from storage first
    /// (see ``backfill(after:)``); never without storage.
    public func needsBackfill(after lastEventID: Int?) -> Bool {
        guard storage != nil, let lastEventID else { return false }
        return hub.missing(after: lastEventID) != nil
    }

    /// Loads every store (so snapshots and full-state reads show stored versions).
    public func loadAll(_ features: [String]? = nil) async throws(SessionFailure) {
        for name in features ?? registry.names {
            _ = try await store(name)
        }
    }

    /// Publishes the store's changes on the hub, and sends its follow-ups through the change path.
    private func attach(_ store: any AnyStateStore, feature: String) {
        let hub = self.hub
        _ = store.addJSONObserver { change in hub.publish(change) }
        store.routeFollowUps { [weak self] prepare in
            guard let self else { return }
            if case .failed(let failure) = await self.submit(ChangeRequest(feature: feature, kind: .followUp(prepare))) {
                self.report(failure)
            }
        }
    }

    private func report(_ failure: SessionFailure) {
        switch failure {
        // Work cancelled by a later change (a reset, a logout) sends nothing on purpose.
        case .store(let e) where e.kind == .workCancelled: break
        case .store(let e): notify(.followUpRejected(session: id, e))
        case .storage(let e): notify(.followUpNotStored(session: id, e))
        case .contention:
            notify(.followUpNotStored(session: id, StorageError(.conflict, "other nodes kept changing the store")))
        case .unknownFeature, .sessionGone, .retired, .memoryFull: break
        case .outcomeUnknown:
            notify(.followUpNotStored(session: id, StorageError(.uncertain, "a follow-up's commit may or may not have landed")))
        }
    }

    private var followUpRejected: @Sendable (StoreError) -> Void {
        let id = self.id
        let notify = self.notify
        return { error in notify(.followUpRejected(session: id, error)) }
    }

    /// Snapshot + the journal's changes after it, or a rebuild from the whole journal, or (last
    /// resort) a reset that is itself journaled. Never a crash, never a silently wrong state.
    private func load(_ definition: AnyFeature, from storage: any SessionStorage) async throws(StorageError) -> any AnyStateStore {
        let feature = definition.name
        let onRejected = followUpRejected
        var problem: String?
        let snapshot = try await storage.latestSnapshot(session: id, feature: feature)
        let entries = try await storage.journal(session: id, feature: feature, afterVersion: snapshot?.version ?? 0)
        switch Self.roll(entries, from: snapshot.map { ($0.version, $0.state) }) {
        case .success(let (state, version)):
            var restored: (any AnyStateStore)?
            do throws(StoreError) {
                restored = try state.restore(
                    definition, stateVersion: snapshot?.stateVersion ?? definition.stateVersion, version: version,
                    onFollowUpRejected: onRejected)
            } catch {
                let base = snapshot.map { "the snapshot at version \($0.version)" } ?? "the journal"
                problem = "\(base) and the changes after it (to version \(version)) could not be restored: \(error.message)"
            }
            if let restored {
                if let snapshot, snapshot.stateVersion != definition.stateVersion {
                    try await rebase(restored, definition)
                }
                return restored
            }
        case .failure(let reason):
            problem = reason.message
        }
        // The snapshot (or what follows it) failed: rebuild from the start of the journal —
        // only when the journal starts at version 1 and reaches at least the snapshot's version
        // (compaction may have removed the start; going back in time is not a recovery). First
        // its states as recorded; when they no longer decode (a state schema changed without a
        // migration), its actions replayed through today's reducers, side effects off.
        let snapshotVersion = snapshot?.version ?? 0
        let all = snapshot == nil ? entries : try await storage.journal(session: id, feature: feature, afterVersion: 0)
        if all.first?.version == 1, let last = all.last?.version, last >= snapshotVersion {
            var rebuilt: (any AnyStateStore)?
            if case .success(let (state, version)) = Self.roll(all, from: nil) {
                rebuilt = try? state.restore(
                    definition, stateVersion: definition.stateVersion, version: version, onFollowUpRejected: onRejected)
            }
            if rebuilt == nil {
                let replayed = definition.makeStore(onFollowUpRejected: onRejected)
                if Self.replayActions(all, into: replayed) { rebuilt = replayed }
            }
            if let rebuilt {
                notify(.storeRecovered(
                    session: id, feature: feature, how: "rebuilt from the journal", reason: problem ?? "unknown"))
                try await rebase(rebuilt, definition)
                return rebuilt
            }
        }
        // Last resort: the initial state, as a journaled reset after the last known version,
        // with a snapshot so the next load starts from it.
        let lastVersion = max(all.last?.version ?? 0, entries.last?.version ?? 0, snapshotVersion)
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
            let entry = JournalEntry(
                session: id, seq: seq, feature: feature, version: reset.encoded.version, cause: reset.encoded.cause,
                action: nil, effect: nil, delta: .state(reset.encoded.state), time: WallClock.now)
            try await journal.record {
                [
                    .append(entry, idempotencyKey: nil),
                    .snapshot(StoreSnapshot(
                        session: id, feature: feature, version: reset.encoded.version, stateVersion: definition.stateVersion,
                        state: reset.encoded.state, time: WallClock.now)),
                ]
            }
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

    /// A snapshot of `store` as it is now, in today's state schema: later changes are patches
    /// from it, so a load never applies them to a state of an older schema.
    private func rebase(_ store: any AnyStateStore, _ definition: AnyFeature) async throws(StorageError) {
        guard let (state, version) = try? store.currentJSON(), version > 0 else { return }
        let snapshot = StoreSnapshot(
            session: id, feature: definition.name, version: version, stateVersion: definition.stateVersion, state: state,
            time: WallClock.now)
        try await journal.record { [.snapshot(snapshot)] }
    }

    /// Replays a whole journal's actions (and rehydrated states) through `store`'s reducer,
    /// side effects off; `false` at the first that does not apply.
    private static func replayActions(_ entries: [JournalEntry], into store: any AnyStateStore) -> Bool {
        var state: [UInt8]?
        for entry in entries {
            do throws(StorageError) {
                state = try entry.delta.state(after: state)
            } catch {
                return false
            }
            let payload: [UInt8]? =
                switch entry.cause {
                case "dispatch": entry.action
                case "rehydrate": state
                default: nil
                }
            do throws(StoreError) {
                try store.replay(cause: entry.cause, payload: payload)
            } catch {
                return false
            }
        }
        return true
    }

    private struct RollFailure: Error {
        let message: String
    }

    /// A state rolled forward from a base: still the stored bytes (no patch on the way), parsed
    /// (patches applied to one tree, parsed once), or none (the journal's start, no change).
    enum Rolled {
        case none
        case bytes([UInt8])
        case tree(JSONValue)

        func restore(
            _ definition: AnyFeature, stateVersion: Int, version: Int,
            onFollowUpRejected: @escaping @Sendable (StoreError) -> Void
        ) throws(StoreError) -> any AnyStateStore {
            switch self {
            case .none:
                return try definition.restoreStore(
                    state: nil, stateVersion: stateVersion, version: version, onFollowUpRejected: onFollowUpRejected)
            case .bytes(let bytes):
                return try definition.restoreStore(
                    state: bytes, stateVersion: stateVersion, version: version, onFollowUpRejected: onFollowUpRejected)
            case .tree(let json):
                return try definition.restoreStore(
                    json: json, stateVersion: stateVersion, version: version, onFollowUpRejected: onFollowUpRejected)
            }
        }
    }

    /// The state after `entries` applied in order to `base` (a version and its state; nil for
    /// the start of the journal), and its version; why not, when a version is missing or a
    /// patch does not apply. However many patches, the state is parsed once.
    private static func roll(
        _ entries: [JournalEntry], from base: (version: Int, state: [UInt8])?
    ) -> Result<(state: Rolled, version: Int), RollFailure> {
        var state = Rolled.none
        if let base { state = Rolled.bytes(base.state) }
        var version = base?.version ?? 0
        for entry in entries {
            guard entry.version == version + 1 else {
                let message = "the journal of \(entry.feature) jumps from version \(version) to \(entry.version)"
                return .failure(RollFailure(message: message))
            }
            switch entry.delta {
            case .state(let bytes):
                state = Rolled.bytes(bytes)
            case .patch(let patch):
                var tree: JSONValue
                switch state {
                case .none:
                    return .failure(RollFailure(message: "version \(entry.version) of \(entry.feature) is a patch with nothing before it"))
                case .bytes(let bytes):
                    guard let parsed = JSONCoding.parse(bytes) else {
                        return .failure(RollFailure(message: "the state before version \(entry.version) of \(entry.feature) is not JSON"))
                    }
                    tree = parsed
                case .tree(let current):
                    tree = current
                }
                state = Rolled.none  // the tree is edited in place, not copied
                guard let operations = JSONCoding.parse(patch) else {
                    return .failure(RollFailure(message: "version \(entry.version) of \(entry.feature) has a patch that is not JSON"))
                }
                do throws(JSONPatch.Failure) {
                    try JSONPatch.apply(operations, to: &tree)
                } catch {
                    return .failure(RollFailure(message: "version \(entry.version) of \(entry.feature) does not apply: \(error.message)"))
                }
                state = Rolled.tree(tree)
            }
            version = entry.version
        }
        return .success((state, version))
    }

    /// The current state of every feature (initial state at version 0 for unused ones). In
    /// durable mode call ``loadAll(_:)`` first.
    /// Whether every registered feature's store is in memory.
    public var holdsEveryStore: Bool {
        let held = stores.withLock { $0.count }
        return held >= registry.features.count
    }

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

    /// Deleted: every later request is refused with `.sessionGone` and the streams end.
    public var isGone: Bool { pipeline.withLock { $0.deleted } }

    private func markGone() {
        pipeline.withLock { $0.deleted = true }
        hub.close()
        for store in stores.withLock({ Array($0.values) }) { store.cancelAllWork() }
        memory?.count(-counted.exchange(0, ordering: .relaxed))
    }

    /// The reply remembered for an idempotency key, from memory or (durable mode) storage,
    /// where it is rebuilt from the change the key refers to. A key older than
    /// `idempotencyTTL` is forgotten.
    public func rememberedReply(key: String) async throws(SessionFailure) -> IdempotentReply? {
        if let reply = idempotency.withLock({ $0.reply(for: key) }) { return reply }
        guard let storage else { return nil }
        do throws(StorageError) {
            guard let remembered = try await storage.rememberedKey(session: id, key: key),
                remembered.time >= WallClock.now - SessionManager.milliseconds(settings.idempotencyTTL)
            else { return nil }
            let (state, entry) = try await change(feature: remembered.feature, version: remembered.version, in: storage)
            guard let state, let entry else {
                throw StorageError(
                    .unavailable, "the change of this Idempotency-Key (version \(remembered.version)) is no longer in the journal")
            }
            let change = EncodedChange(
                feature: entry.feature, version: entry.version, cause: entry.cause, action: entry.action, state: state,
                effect: entry.effect)
            return StoredReply(status: 200, body: ChangeReply.body(change, withEffect: true), version: entry.version)
        } catch {
            throw .storage(error)
        }
    }

    /// A store's state at `version` and the journal entry of that version, from this node's
    /// store when it is at that version, else from storage (nil when compacted away).
    private func change(
        feature: String, version: Int, in storage: any SessionStorage
    ) async throws(StorageError) -> (state: [UInt8]?, entry: JournalEntry?) {
        let entry = try await storage.journal(session: id, feature: feature, afterVersion: version - 1, through: version).first
        if let store = stores.withLock({ $0[feature] }), let (state, current) = try? store.currentJSON(), current == version {
            return (state, entry)
        }
        let initial = registry[feature]?.initialStateJSON ?? []
        return (try await storage.state(session: id, feature: feature, at: version, initial: initial), entry)
    }

    // MARK: The change path

    /// Runs `request` when its turn comes and calls `done` with the outcome. With a journal
    /// that keeps nothing and a loaded store, `done` runs before `submit` returns.
    public func submit(_ request: ChangeRequest, done: @escaping @Sendable (ChangeOutcome) -> Void) {
        enqueue(.change(request, done))
    }

    /// ``submit(_:done:)`` for async callers.
    public func submit(_ request: ChangeRequest) async -> ChangeOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<ChangeOutcome, Never>) in
            submit(request) { continuation.resume(returning: $0) }
        }
    }

    /// Deletes the session: from storage first, then its streams end. Changes submitted before
    /// are applied before; changes after are refused with `.sessionGone`.
    func delete() async throws(SessionFailure) {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, SessionFailure>, Never>) in
            enqueue(.delete { continuation.resume(returning: $0) })
        }
        try result.get()
    }

    /// Whether reads must first catch up with other nodes (shared storage).
    public var readsCatchUp: Bool { ownerEpoch == 0 && storage?.isShared == true }

    /// Shared storage: applies what other nodes committed to this session since this node last
    /// looked, in the session's order (one storage read; nothing when it is up to date). After
    /// it, reads see every change acknowledged by any node before the call.
    public func refresh() async throws(SessionFailure) {
        guard readsCatchUp else { return }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, SessionFailure>, Never>) in
            enqueue(.refresh { continuation.resume(returning: $0) })
        }
        try result.get()
    }

    /// Shared storage: a commit up to `seq` was heard (perhaps another node's). If the session
    /// has event streams and is behind, it catches up in its pipeline and publishes the changes
    /// in order at their own sequence numbers.
    public func heard(seq: Int) {
        heardSeq.max(seq, ordering: .sequentiallyConsistent)
        pullIfBehind()
    }

    /// Queues one pull when the session is behind what was heard and someone watches. Called
    /// after a commit is heard and after a stream subscribes (so a commit heard just before the
    /// first subscriber is not missed). A failed pull ends the streams: the clients reconnect
    /// and resume from the journal, never with a silent gap.
    public func pullIfBehind() {
        guard heardSeq.load(ordering: .sequentiallyConsistent) > hub.seq, hub.subscriberCount > 0,
            pullQueued.compareExchange(expected: false, desired: true, ordering: .sequentiallyConsistent).exchanged
        else { return }
        enqueue(.pull { [self] result in
            pullQueued.store(false, ordering: .sequentiallyConsistent)
            switch result {
            case .success: pullIfBehind()
            case .failure(.storage): hub.endStreams()
            case .failure: break  // deleted (streams ended) or retired (no streams)
            }
        })
    }

    /// Subscribes `sink` to the session's events (``EventHub/subscribe(features:lastEventID:sink:limit:)``);
    /// with shared storage, a commit heard between the caller's catch-up and this subscription
    /// is fetched now.
    public func subscribe(features: Set<String>?, lastEventID: Int?, sink: any EventSink, limit: Int = .max) -> Subscription {
        let outcome = hub.subscribe(features: features, lastEventID: lastEventID, sink: sink, limit: limit)
        if case .subscribed = outcome { pullIfBehind() }
        return outcome
    }

    /// Deleted by another node: refuses every later request and ends the streams.
    func deletedElsewhere() {
        markGone()
    }

    /// Durable mode: before a stream resumes from `lastEventID`, rebuilds from the journal the
    /// events after it that the hub no longer holds (after a restart, an eviction, or on
    /// another node), so the resume is exact; bounded by the session's replay limits (past
    /// them the stream starts with a snapshot, as the contract says). Loads never pay for it.
    public func backfill(after lastEventID: Int) async {
        guard let storage, let missing = hub.missing(after: lastEventID), missing.count <= settings.replayBuffer else { return }
        guard let entries = try? await storage.journal(session: id, afterSeq: lastEventID, limit: missing.count),
            entries.map(\.seq) == Array(missing)
        else { return }
        var chain: [String: (version: Int, state: [UInt8])] = [:]
        var frames: [(seq: Int, feature: String, data: [UInt8])] = []
        var bytes = 0
        for entry in entries {
            guard let state = try? await stateOf(entry, chain: &chain, in: storage) else { return }
            let data = EventHub.eventData(entry, state: state)
            bytes += data.count
            guard bytes <= settings.replayBytes else { return }
            frames.append((entry.seq, entry.feature, data))
        }
        hub.backfill(frames)
    }

    /// The state `entry` led to: its delta applied to the state before it — from `chain` (the
    /// previous entry of its feature just handled), this node's store, or storage.
    private func stateOf(
        _ entry: JournalEntry, chain: inout [String: (version: Int, state: [UInt8])], in storage: any SessionStorage
    ) async throws(StorageError) -> [UInt8] {
        var previous: [UInt8]?
        if case .patch = entry.delta {
            if let last = chain[entry.feature], last.version == entry.version - 1 {
                previous = last.state
            } else {
                previous = try await change(feature: entry.feature, version: entry.version - 1, in: storage).state
            }
        }
        let state = try entry.delta.state(after: previous)
        chain[entry.feature] = (entry.version, state)
        return state
    }

    /// Reads the journal after the hub's last sequence number and applies it: loaded stores
    /// apply each change as recorded (side effects off: the node that made it runs its work),
    /// and every change is published at its own sequence number. Runs inside the pipeline.
    private func catchUp(checkingExistence: Bool = true) async throws(StorageError) {
        guard let storage else { return }
        if checkingExistence, try await storage.session(id: id) == nil {
            markGone()
            throw StorageError(.sessionGone, "the session was deleted")
        }
        let entries = try await storage.journal(session: id, afterSeq: hub.seq, limit: 1_000_000)
        var chain: [String: (version: Int, state: [UInt8])] = [:]
        for entry in entries {
            let store = stores.withLock { $0[entry.feature] }
            if let store, let (current, version) = try? store.currentJSON(), entry.version == version + 1 {
                chain[entry.feature] = (version, current)
            }
            let state = try await stateOf(entry, chain: &chain, in: storage)
            guard let store else {
                hub.publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
                continue
            }
            let version = (try? store.currentJSON().version) ?? 0
            if entry.version == version + 1 {
                hub.advance(to: entry.seq - 1)
                do throws(StoreError) {
                    try store.applyRecorded(
                        version: entry.version, cause: entry.cause, action: entry.action, state: state, effect: entry.effect)
                    continue
                } catch {
                    // Falls through: the store is dropped and loads afresh on next use.
                }
            } else if entry.version <= version {
                // The store already has it (loaded from storage after this node's last look),
                // but this node's subscribers and replay buffer do not: publish it as stored.
                hub.publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
                continue
            }
            // A gap (or a change this node cannot apply): forget the store; it loads again
            // from storage when next used.
            stores.withLock { _ = $0.removeValue(forKey: entry.feature) }
            hub.publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
        }
    }

    private enum Admission {
        case refuse(SessionFailure)
        case queued
        case run
    }

    private func enqueue(_ job: Pipeline.Job) {
        let admission = pipeline.withLock { p -> Admission in
            if p.deleted { return .refuse(.sessionGone) }
            if p.retired { return .refuse(.retired) }
            if p.running {
                p.waiting.append(job)
                return .queued
            }
            p.running = true
            return .run
        }
        switch admission {
        case .refuse(let failure): Self.refuse(job, failure)
        case .queued: break
        case .run: drain(job)
        }
    }

    private static func refuse(_ job: Pipeline.Job, _ failure: SessionFailure) {
        switch job {
        case .change(_, let done): done(.failed(failure))
        case .delete(let done), .refresh(let done), .pull(let done), .load(_, let done): done(.failure(failure))
        }
    }

    /// Runs `first`, then the waiting jobs in order, until none is left or one goes on
    /// asynchronously (its completion drains the rest). A loop, not recursion: a long queue of
    /// synchronous jobs does not grow the stack.
    private func drain(_ first: Pipeline.Job) {
        var job = first
        while true {
            let handoff = Handoff()
            run(job) { [self] in
                // Finished after `run` returned: this completion carries the pipeline on.
                if handoff.finish(), let next = takeNext() { drain(next) }
            }
            guard handoff.leave(), let next = takeNext() else { return }
            job = next
        }
    }

    /// The next waiting job, or `nil` (and the pipeline idle). After a delete, waiting jobs
    /// are refused.
    private func takeNext() -> Pipeline.Job? {
        var refused: [Pipeline.Job] = []
        let next = pipeline.withLock { p -> Pipeline.Job? in
            if p.deleted {
                refused = Array(p.waiting)
                p.waiting.removeAll()
            }
            if let next = p.waiting.popFirst() { return next }
            p.running = false
            return nil
        }
        for job in refused { Self.refuse(job, .sessionGone) }
        return next
    }

    /// Runs one job. Its caller is answered after `completion` hands the pipeline on, so a
    /// caller that resumes never finds the session still busy with its own request.
    private func run(_ job: Pipeline.Job, completion: @escaping @Sendable () -> Void) {
        switch job {
        case .load(let feature, let done):
            Task { [self] in
                let result: Result<Void, SessionFailure>
                do throws(SessionFailure) {
                    _ = try await loadStore(feature)
                    result = .success(())
                } catch {
                    result = .failure(error)
                }
                completion()
                done(result)
            }
        case .refresh(let done):
            catchUpThen(checkingExistence: true, completion: completion, done: done)
        case .pull(let done):
            // Caught up meanwhile (by this node's own commit or a read): nothing to fetch.
            guard heardSeq.load(ordering: .sequentiallyConsistent) > hub.seq else {
                completion()
                return done(.success(()))
            }
            // A delete is heard as a notice of its own: one read, not two.
            catchUpThen(checkingExistence: false, completion: completion, done: done)
        case .change(let request, let done):
            execute(request) { [self] outcome in
                // A change counts as use when it ends, not only when its request looked the
                // session up: one that waited or committed slowly must not leave the session
                // looking idle (the TTL sweep judges loaded sessions by this time).
                lastUsed.store(WallClock.now, ordering: .relaxed)
                completion()
                done(outcome)
            }
        case .delete(let done):
            let id = self.id
            journal.record({ [.deleteSession(id: id)] }) { [self] result in
                if case .success = result { markGone() }
                completion()
                done(result.mapError { .storage($0) })
            }
        }
    }

    private func catchUpThen(
        checkingExistence: Bool, completion: @escaping @Sendable () -> Void,
        done: @escaping @Sendable (Result<Void, SessionFailure>) -> Void
    ) {
        Task { [self] in
            let result: Result<Void, SessionFailure>
            do throws(StorageError) {
                try await catchUp(checkingExistence: checkingExistence)
                result = .success(())
            } catch {
                result = .failure(error.kind == .sessionGone ? .sessionGone : .storage(error))
            }
            completion()
            done(result)
        }
    }

    /// One change: the idempotency key, the store's computation, the journal, then memory.
    /// `attempt` counts the tries after lost races; each try finds the store afresh (a catch-up
    /// that found a gap drops a stale store, which then loads again from storage).
    private func execute(_ request: ChangeRequest, attempt: Int = 0, finish: @escaping @Sendable (ChangeOutcome) -> Void) {
        guard registry[request.feature] != nil else { return finish(.failed(.unknownFeature(request.feature))) }
        guard let store = loadedStore(request.feature) else {
            // Durable mode, a store not loaded yet (callers normally load it first). Inside the
            // pipeline: load it here, not as another job behind this one.
            Task { [self] in
                do throws(SessionFailure) {
                    guard let store = try await loadStore(request.feature) else {
                        return finish(.failed(.unknownFeature(request.feature)))
                    }
                    checkKey(request, store, attempt: attempt, finish: finish)
                } catch {
                    finish(.failed(error))
                }
            }
            return
        }
        checkKey(request, store, attempt: attempt, finish: finish)
    }

    /// A key seen before answers with its first reply; storage is asked when memory has
    /// forgotten it (or the session was loaded after a restart). Asked again after a lost race:
    /// the winner may have been the same request on another node.
    private func checkKey(
        _ request: ChangeRequest, _ store: any AnyStateStore, attempt: Int = 0,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        guard let key = request.idempotencyKey, settings.idempotencyKeys > 0 else {
            return apply(request, store, attempt: attempt, finish: finish)
        }
        if let reply = idempotency.withLock({ $0.reply(for: key) }) { return finish(.replayed(reply)) }
        guard storage != nil else { return apply(request, store, attempt: attempt, finish: finish) }
        Task { [self] in
            do throws(SessionFailure) {
                if let reply = try await rememberedReply(key: key) { return finish(.replayed(reply)) }
                apply(request, store, attempt: attempt, finish: finish)
            } catch {
                finish(.failed(error))
            }
        }
    }

    /// Times a change is computed again after losing a race with another node.
    static let conflictRetries = 8

    private func apply(
        _ request: ChangeRequest, _ store: any AnyStateStore, attempt: Int = 0,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        let prepared: PreparedChange
        do throws(StoreError) {
            let version = try request.precondition.resolve(store)
            switch request.kind {
            case .dispatch(let action): prepared = try store.prepareDispatch(json: action, ifVersion: version)
            case .rehydrate(let state): prepared = try store.prepareRehydrate(json: state, ifVersion: version)
            case .reset: prepared = try store.prepareReset(ifVersion: version)
            case .followUp(let prepare): prepared = try prepare(version)
            case .recovery:
                let (_, current) = try store.currentJSON()
                if let version, version != current {
                    throw StoreError(.versionConflict, "the store moved on from version \(version)", currentVersion: current)
                }
                guard let recovery = try store.prepareRecovery() else {
                    throw StoreError(.actionRejected, "nothing to recover", currentVersion: current)
                }
                prepared = recovery
            }
        } catch {
            if error.kind == .versionConflict, readsCatchUp, attempt == 0 {
                // The precondition is judged against the latest committed version, not this
                // node's copy: catch up once and judge again.
                Task { [self] in
                    do throws(StorageError) {
                        try await catchUp()
                        execute(request, attempt: 1, finish: finish)
                    } catch {
                        finish(.failed(error.kind == .sessionGone ? .sessionGone : .storage(error)))
                    }
                }
                return
            }
            return finish(.failed(.store(error)))
        }
        let reply = StoredReply(
            status: 200, body: ChangeReply.body(prepared.encoded, withEffect: request.replyHasEffect),
            version: prepared.encoded.version)
        let remembered = request.idempotencyKey.flatMap { key in settings.idempotencyKeys > 0 ? (key, reply) : nil }
        let seq = hub.seq + 1
        // Built here, not by the journal, so an uncertain commit can be looked for; memory mode
        // builds nothing.
        let batch = storage == nil ? [] : writes(prepared, store: store, seq: seq, key: remembered?.0)
        let committed: @Sendable () -> Void = { [self] in
            // Every change of this store goes through this pipeline, so it is still at the
            // change's base version.
            guard store.commit(prepared, startWork: true) else {
                return finish(.failed(.store(StoreError(
                    .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
            }
            if let remembered { idempotency.withLock { $0.insert(remembered.0, remembered.1) } }
            recount()
            finish(.applied(prepared.encoded, reply: reply))
        }
        journal.record({ batch }) { [self] result in
            if case .failure(let error) = result, error.kind == .conflict, readsCatchUp, attempt < Self.conflictRetries {
                // Another node committed this version or sequence number first: catch up with
                // it and compute the change again on the fresh state.
                Task { [self] in
                    do throws(StorageError) {
                        try await catchUp()
                        execute(request, attempt: attempt + 1, finish: finish)
                    } catch {
                        finish(.failed(error.kind == .sessionGone ? .sessionGone : .storage(error)))
                    }
                }
                return
            }
            if case .failure(let error) = result, error.kind == .conflict, readsCatchUp {
                return finish(.failed(.contention))
            }
            if case .failure(let error) = result, error.kind == .uncertain, case .append(let entry, _)? = batch.first {
                // The connection broke after the commit was sent: the journal says whether it
                // landed. Never "nothing applied" unless that is known.
                Task { [self] in
                    switch await landed(entry) {
                    case true?: committed()
                    case false?: finish(.failed(.storage(StorageError(.unavailable, error.message))))
                    case nil:
                        // This copy may be behind the journal now: the next request loads it
                        // afresh (with one owner nobody else would catch it up).
                        if ownerEpoch != 0 { abandon() }
                        finish(.failed(.outcomeUnknown))
                    }
                }
                return
            }
            if case .failure(let error) = result, ownerEpoch != 0, error.kind == .notOwner || error.kind == .conflict {
                // Another node owns the session now, or (a conflict) this copy is behind the
                // journal — after a commit whose outcome this node never heard: nothing was
                // written. This copy goes; the caller looks the session up again and reaches
                // the owner, or loads the journal afresh and computes the change again.
                abandon()
                return finish(.failed(.retired))
            }
            if case .failure(let error) = result {
                // Storage no longer has the session (deleted by another process or node, or
                // by the TTL sweep): it is gone here too.
                guard error.kind == .sessionGone else { return finish(.failed(.storage(error))) }
                markGone()
                return finish(.failed(.sessionGone))
            }
            committed()
        }
    }

    /// Whether `entry` is in the journal (true), another change took its place so it can never
    /// be (false), or that cannot be known now (nil: not there yet, or storage unreachable).
    private func landed(_ entry: JournalEntry) async -> Bool? {
        guard let storage, let found = try? await storage.journal(session: id, afterSeq: entry.seq - 1, limit: 1) else {
            return nil
        }
        guard let first = found.first, first.seq == entry.seq else { return nil }
        return first == entry
    }

    /// Journal bytes a store may gather since its last snapshot even when its state is smaller.
    static let snapshotSlack = 64 << 10

    /// What the journal stores for a change: its row (what caused it, and the state as a patch
    /// from the store's current one when that is smaller), the idempotency key as a reference
    /// to it, a snapshot and compaction when due (a store's first change, every
    /// `snapshotEvery`, and whenever the entries since the last snapshot outgrow the state and
    /// ``snapshotSlack``), and the session's activity at most once a minute. Called before the
    /// change is applied: the store is still at the change's base version.
    private func writes(_ prepared: PreparedChange, store: any AnyStateStore, seq: Int, key: String?) -> [StorageWrite] {
        let now = WallClock.now
        let encoded = prepared.encoded
        let previous = prepared.baseVersion == 0 ? nil : (try? store.currentJSON()).flatMap { $0.version == prepared.baseVersion ? $0.state : nil }
        let entry = JournalEntry(
            session: id, seq: seq, feature: encoded.feature, version: encoded.version, cause: encoded.cause,
            action: encoded.action, effect: encoded.effect, delta: StateDelta.between(previous, encoded.state), time: now)
        var batch: [StorageWrite] = [.append(entry, idempotencyKey: key)]
        let version = encoded.version
        let feature = encoded.feature
        let due = sinceSnapshot.withLock { journaled in
            let grown = journaled[feature, default: 0] + entry.size
            let due = version == 1 || (settings.snapshotEvery > 0 && version % settings.snapshotEvery == 0)
                || grown > max(encoded.state.count, Self.snapshotSlack)
            journaled[feature] = due ? 0 : grown
            return due
        }
        if due {
            let stateVersion = registry[feature]?.stateVersion ?? 1
            batch.append(.snapshot(StoreSnapshot(
                session: id, feature: feature, version: version, stateVersion: stateVersion, state: encoded.state, time: now)))
            if version > 1 {
                batch.append(.compact(
                    session: id, feature: feature, upToVersion: version, keepLast: settings.replayBuffer,
                    keysSince: now - SessionManager.milliseconds(settings.idempotencyTTL), maxKeys: settings.idempotencyKeys))
            }
        }
        if now - lastStoredActivity.load(ordering: .relaxed) > 60_000 {
            lastStoredActivity.store(now, ordering: .relaxed)
            batch.append(.touch(session: id, at: now))
        }
        return batch
    }
}

/// The state bytes all loaded sessions of a durable server may hold together
/// (`sessions.memoryBytes`). Sessions count their stores' states; before a store loads, idle
/// sessions leave memory, least recently used first, until the total is under the budget — or
/// the load is refused when nothing idle is left to evict.
public final class MemoryBudget: Sendable {
    public let limit: Int
    private let held = Atomic<Int>(0)
    /// Evicts idle sessions but `sparing` until `limit` is met; set by the session manager.
    private let evict = Mutex<(@Sendable (_ limit: Int, _ sparing: String) -> Void)?>(nil)

    init(limit: Int) {
        self.limit = limit
    }

    func evictor(_ body: @escaping @Sendable (_ limit: Int, _ sparing: String) -> Void) {
        evict.withLock { $0 = body }
    }

    /// State bytes the loaded sessions hold now.
    public var bytes: Int { held.load(ordering: .relaxed) }

    func count(_ delta: Int) {
        if delta != 0 { held.add(delta, ordering: .relaxed) }
    }

    /// Whether there is room for one more store, after evicting idle sessions (but the one
    /// asking) if needed.
    func makeRoom(sparing session: String) -> Bool {
        guard bytes >= limit else { return true }
        evict.withLock { $0 }?(limit, session)
        return bytes < limit
    }
}

/// Tells a job's runner whether its completion ran before `run` returned (then the runner
/// takes the next job) or after (then the completion does).
private final class Handoff: Sendable {
    private let state = Atomic<Int>(0)  // 0 running, 1 finished, 2 runner left

    /// Called by the completion; `true` when the runner already left.
    func finish() -> Bool { state.exchange(1, ordering: .acquiringAndReleasing) == 2 }

    /// Called by the runner after `run`; `true` when the completion already ran.
    func leave() -> Bool { state.exchange(2, ordering: .acquiringAndReleasing) == 1 }
}

/// The remembered replies of one session, oldest forgotten first past `limit` replies or
/// `byteLimit` bytes of reply bodies (a forgotten key is still answered from storage in durable
/// mode).
struct IdempotencyTable {
    let limit: Int
    let byteLimit: Int
    private var replies: [String: IdempotentReply] = [:]
    private var order = Deque<String>()
    private(set) var bytes = 0

    init(limit: Int, byteLimit: Int) {
        self.limit = limit
        self.byteLimit = byteLimit
    }

    func reply(for key: String) -> IdempotentReply? { replies[key] }

    mutating func insert(_ key: String, _ reply: IdempotentReply) {
        guard limit > 0, replies[key] == nil, reply.body.count <= byteLimit else { return }
        replies[key] = reply
        order.append(key)
        bytes += reply.body.count
        while order.count > limit || bytes > byteLimit, let oldest = order.popFirst() {
            bytes -= replies.removeValue(forKey: oldest)?.body.count ?? 0
        }
    }
}

extension EventHub {
    /// The `data` JSON of a journaled change's `state` event, with the state it led to.
    static func eventData(_ entry: JournalEntry, state: [UInt8]) -> [UInt8] {
        eventData(EncodedChange(
            feature: entry.feature, version: entry.version, cause: entry.cause, action: entry.action, state: state,
            effect: entry.effect))
    }
}

/// Wall-clock milliseconds, for stored times.
public enum WallClock {
    public static var now: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
