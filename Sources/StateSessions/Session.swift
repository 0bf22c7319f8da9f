import DequeModule
import Foundation
import NowOrLater
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
    /// Several nodes: the session was handed over to the node its requests came through
    /// (`moved`), or the handover failed and this node keeps it.
    case handedOver(session: String, moved: Bool)
    /// A store was loaded from storage; `bytes` is its state's JSON size. Building it parsed,
    /// patched and decoded copies of that state that are garbage now: a server may give such
    /// memory back to the system after large loads.
    case storeLoaded(session: String, feature: String, bytes: Int)
    /// A change reached the event hub with a sequence number not after the last one it
    /// published: it was not published (its subscribers did not get it). A bug, never a
    /// client's doing: the server logs it as an error.
    case sequenceRefused(session: String, feature: String, seq: Int, last: Int)
    /// A committed change scheduled timers, the earliest due at `earliest` (milliseconds since
    /// 1970): the session manager's timer scheduler wakes for it if it sleeps longer.
    case timersScheduled(earliest: Int64)
}

/// One client session: a store per registered feature (created or loaded on first use), an
/// event hub, and the replies remembered for idempotency keys.
///
/// **One change path.** Every change — a client's dispatch, rehydrate or reset, a follow-up of
/// asynchronous work, a recovery after a restart — is a ``ChangeRequest`` given to
/// ``submit(_:)``. The session takes requests one at a time, in arrival order (its
/// pipeline): the idempotency key is looked up, the store computes the change without applying
/// it, storage commits it in order (``SessionStorage/commit(_:done:)``: memory mode's bounded
/// journal at once, SQLite's writer, PostgreSQL), and only then is it applied in memory and
/// published. Memory never runs ahead of the disk, and one session's changes never interleave;
/// different sessions run concurrently and share fsyncs. In memory mode the whole path runs
/// synchronously on the caller's thread.
///
/// Deleting the session is a request in the same pipeline, so a change that arrived before the
/// delete is applied before it and one that arrived after is refused (`.sessionGone`).
///
/// Thread-safety: tables sit behind their own locks; stores and the hub are thread-safe.
/// Lock order: pipeline → hub (a retire asks the hub under the pipeline's lock); the session
/// publishes after `store.commit` returned, holding no lock; idempotency alone.
public final class Session: Sendable {
    public let id: String
    /// Its credentials: the SHA-256 of the owner's token, and the tokens minted for it
    /// (Session+Tokens.swift).
    let grants: GrantStore
    let registry: FeatureRegistry
    let settings: SessionSettings
    /// Where its changes are committed and what history, recordings, travel and resumed
    /// streams read: memory mode's bounded journal, SQLite, PostgreSQL.
    public let storage: any SessionStorage
    /// Its stores in memory (``LoadedStores``).
    let stores = LoadedStores()
    public let hub: EventHub
    /// The replies remembered for `Idempotency-Key`s (``IdempotencyCache``).
    let idempotency: IdempotencyCache
    /// Its jobs, one at a time in arrival order (``SessionPipeline``).
    let pipeline = SessionPipeline()
    /// The changes handed to storage and not answered yet, and how they are numbered
    /// (``CommitChain``).
    let chain = CommitChain()
    let notify: @Sendable (SessionNotice) -> Void
    /// When it was last used, and the state bytes it counts in the server's ``Residency``.
    let usage: SessionUsage
    /// Several nodes: under which membership this node owns it, whether the copy was given up,
    /// and who forwards its requests (``Placement``).
    let placement: Placement

    /// Several nodes with one owner per session: the membership epoch under which this node
    /// owns the session (0: storage of one process). The copy is served only while the node is
    /// still a member with that epoch.
    public var ownerEpoch: Int64 { placement.ownerEpoch }

    /// Several nodes: counts a request for this session, forwarded by the node with `epoch`
    /// (0: it came straight to this node). Returns that node's epoch when it has forwarded
    /// ``handOverAfter`` requests in a row: the balancer sends the session there (it routes by
    /// session id), so the session should live there.
    public func arrived(forwardedBy epoch: Int64) -> Int64? {
        placement.arrived(forwardedBy: epoch, after: Self.handOverAfter)
    }

    /// Forwarded requests in a row from one node after which the session moves there.
    public static let handOverAfter = 3

    init(
        id: String, tokenHash: [UInt8], grants: [StoredGrant] = [], registry: FeatureRegistry, settings: SessionSettings,
        storage: any SessionStorage, startSeq: Int = 0,
        recent: [(seq: Int, feature: String, data: [UInt8])] = [], lastStoredActivity: Int64 = WallClock.now,
        metrics: HubMetrics = HubMetrics(), replayBudget: ReplayBudget? = nil, encoder: any EventEncoder,
        residency: Residency, ownerEpoch: Int64 = 0, notify: @escaping @Sendable (SessionNotice) -> Void
    ) {
        self.usage = SessionUsage(residency, lastStored: lastStoredActivity)
        self.placement = Placement(ownerEpoch: ownerEpoch)
        self.id = id
        self.grants = GrantStore(ownerHash: tokenHash, grants)
        self.registry = registry
        self.settings = settings
        self.storage = storage
        self.hub = EventHub(
            features: registry.features, replayLimit: settings.replayBuffer, replayBytes: settings.replayBytes,
            startSeq: startSeq, recent: recent, metrics: metrics, budget: replayBudget, encoder: encoder)
        self.idempotency = IdempotencyCache(limit: settings.idempotencyKeys, byteLimit: settings.idempotencyBytes)
        self.notify = notify
    }

    /// Marks the session as used now (idle eviction and the TTL count from here). Storage
    /// learns of it with the next change, or from the sweep (``storeActivityIfStale()``).
    public func markUsed() {
        usage.markUsed()
    }

    /// Records the last use in storage when it is more than a minute newer than what storage
    /// has (a session only read; a change records it with its append). Called by the sweep,
    /// off the request path.
    func storeActivityIfStale() {
        let used = usage.idleSince
        guard used - usage.lastStored.load(ordering: .relaxed) > 60_000 else { return }
        usage.lastStored.store(used, ordering: .relaxed)
        let id = self.id
        storage.commit([.touch(session: id, at: used)], done: { _ in })
    }

    var idleSince: Int64 { usage.idleSince }
    /// Stores in memory.
    public var storeCount: Int { stores.count }
    /// In use: a change running or waiting, an open event stream, or asynchronous work (a
    /// follow-up still to come) — such a session is neither evicted nor purged.
    var isBusy: Bool {
        pipeline.isRunning || hub.subscriberCount > 0 || hasRunningWork
    }

    var hasRunningWork: Bool {
        stores.haveRunningWork
    }

    /// Takes the session out of service if nothing uses it (no change running or waiting, no
    /// event stream, no asynchronous work), atomically with respect to new requests: later
    /// changes get `.retired` and the hub refuses subscribers, so a caller that looked the
    /// session up just before can never work on a copy that left memory.
    func retireIfIdle() -> Bool {
        let retired = pipeline.retire { !hasRunningWork && hub.closeIfIdle() }
        if retired { usage.release() }
        return retired
    }

    /// Several nodes: this node no longer owns the session (its membership lapsed, or another
    /// node took the session over). Whatever uses it: its streams end (clients reconnect and
    /// are served by the owner), its asynchronous work is cancelled (a result could not be
    /// committed anyway: appends are fenced on the owner), and later changes are refused with
    /// `.retired`, so callers look the session up again and reach its owner.
    func abandon() {
        placement.abandon()
        pipeline.markRetired()
        leaveService()
    }

    /// Counts this session's state bytes in the server's residency again (after a load or a
    /// change): an evictable server keeps the loaded sessions' states under its budget.
    func recount() {
        guard usage.residency.memoryLimit != nil else { return }
        let bytes = stores.all.reduce(0) { $0 + ((try? $1.currentJSON().state.count) ?? 0) }
        usage.recount(bytes)
    }

    // MARK: Stores

    /// The store of a feature if it is in memory; in memory mode (storage that lives as long as
    /// the process, where a session never leaves memory) it is created on first use. `nil` for
    /// an unknown feature, or (durable mode) a store not loaded yet.
    public func loadedStore(_ feature: String) -> (any AnyStateStore)? {
        stores.store(feature) {
            guard usage.residency.makesStoresOnUse, let definition = registry[feature] else { return nil }
            let store = definition.makeStore(timers: timerPolicy, onFollowUpRejected: followUpRejected)
            attach(store, feature: feature)
            return store
        }
    }

    /// The store of a registered feature, loading it from storage on first use (its snapshot,
    /// then its journal replayed through the reducer with side effects off). `nil` for an
    /// unknown feature.
    public func store(_ feature: String) async throws(SessionFailure) -> (any AnyStateStore)? {
        if let store = loadedStore(feature) { return store }
        guard registry[feature] != nil else { return nil }
        return try await loadStore(feature)
    }

    /// Whether a read of `features` (`nil`: all) can be answered from memory now, without
    /// waiting: every store is in memory (memory mode makes them on first use). Otherwise the
    /// caller waits for ``loadAll(_:)``. The routes ask this, never which storage the server
    /// runs on.
    public func isReady(for features: [String]? = nil) -> Bool {
        return (features ?? registry.names).allSatisfy { loadedStore($0) != nil || registry[$0] == nil }
    }

    /// Whether a stream resuming after `lastEventID` needs events rebuilt from storage first
    /// (see ``backfill(after:)``).
    public func needsBackfill(after lastEventID: Int?) -> Bool {
        guard let lastEventID else { return false }
        return hub.missing(after: lastEventID) != nil
    }

    /// Loads every store (so snapshots and full-state reads show stored versions).
    public func loadAll(_ features: [String]? = nil) async throws(SessionFailure) {
        for name in features ?? registry.names {
            _ = try await store(name)
        }
    }

    /// The limit of pending timers each of its stores holds to.
    var timerPolicy: TimerPolicy { TimerPolicy(maxPending: settings.maxTimersPerStore) }

    var followUpRejected: @Sendable (StoreError) -> Void {
        let id = self.id
        let notify = self.notify
        return { error in notify(.followUpRejected(session: id, error)) }
    }

    /// The current state of every feature (initial state at version 0 for unused ones). In
    /// durable mode call ``loadAll(_:)`` first.
    /// Whether every registered feature's store is in memory.
    public var holdsEveryStore: Bool {
        let held = stores.count
        return held >= registry.features.count
    }

    public func allStates() throws(StoreError) -> [(feature: String, version: Int, state: [UInt8])] {
        let existing = stores.byFeature
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
    public var isGone: Bool { pipeline.isDeleted }

    func markGone() {
        pipeline.markDeleted()
        leaveService()
    }

    /// What a session out of service gives up (deleted, or abandoned to another node): its
    /// streams end, its asynchronous work is cancelled, its states leave the memory budget.
    private func leaveService() {
        hub.close()
        for store in stores.all { store.cancelAllWork() }
        usage.release()
    }

    /// Runs `request` when its turn comes: its outcome now when the change path finished before
    /// `submit` returned (a loaded store, memory mode's journal, nothing waiting before it),
    /// else later (a store to load, a commit to disk, changes ahead of it).
    public func submit(_ request: ChangeRequest) -> NowOrLater<ChangeOutcome, Never> {
        let outcome = OutcomePromise()
        enqueue(.change(request) { outcome.fill($0) })
        return outcome.outcome
    }

    /// Deletes the session: from storage first, then its streams end. Changes submitted before
    /// are applied before; changes after are refused with `.sessionGone`.
    func delete() async throws(SessionFailure) {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, SessionFailure>, Never>) in
            enqueue(.delete { continuation.resume(returning: $0) })
        }
        try result.get()
    }

    /// Subscribes `sink` to the session's events (``EventHub/subscribe(features:lastEventID:sink:limit:)``).
    public func subscribe(
        features: Set<String>?, lastEventID: Int?, sink: any EventSink, limit: Int = .max, deltas: Bool = false,
        presence: PresenceEntry? = nil, presenceLimit: Int = .max
    ) -> Subscription {
        hub.subscribe(
            features: features, lastEventID: lastEventID, sink: sink, limit: limit, deltas: deltas, presence: presence,
            presenceLimit: presenceLimit)
    }

    /// The streams present on the session now, oldest first (``PresenceEntry``).
    public var presence: [PresenceEntry] { hub.presence }

}

/// Several nodes: where a session's copy on this node stands — the membership epoch under
/// which this node owns it, whether the copy was given up, and which node forwarded its latest
/// requests (and how many in a row).
final class Placement: Sendable {
    let ownerEpoch: Int64
    private let given = Atomic<Bool>(false)
    private let forwardedBy = Mutex<(epoch: Int64, streak: Int)>((0, 0))

    init(ownerEpoch: Int64) {
        self.ownerEpoch = ownerEpoch
    }

    /// The copy was given up (``Session/abandon()``); the manager forgets it.
    var abandoned: Bool { given.load(ordering: .sequentiallyConsistent) }

    func abandon() { given.store(true, ordering: .sequentiallyConsistent) }

    /// Counts a request forwarded by the node with `epoch` (0: straight to this node); that
    /// node's epoch once it forwarded `after` requests in a row.
    func arrived(forwardedBy epoch: Int64, after: Int) -> Int64? {
        guard ownerEpoch != 0 else { return nil }
        return forwardedBy.withLock { last -> Int64? in
            guard epoch != 0 else {
                last = (0, 0)
                return nil
            }
            last = last.epoch == epoch ? (epoch, last.streak + 1) : (epoch, 1)
            return last.streak >= after ? epoch : nil
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
