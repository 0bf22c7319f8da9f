import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Executing one change: the idempotency key, the store's computation, the commit, then
/// memory; what the journal stores for it.
extension Session {
    /// The reply remembered for an idempotency key, from memory or (durable mode) storage,
    /// where it is rebuilt from the change the key refers to. A key older than
    /// `idempotencyTTL` is forgotten.
    public func rememberedReply(key: String) async throws(SessionFailure) -> IdempotentReply? {
        if let reply = idempotency.reply(for: key) { return reply }
        let storage = self.storage
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
    func change(
        feature: String, version: Int, in storage: any SessionStorage
    ) async throws(StorageError) -> (state: [UInt8]?, entry: JournalEntry?) {
        let entry = try await storage.journal(session: id, feature: feature, afterVersion: version - 1, through: version).first
        if let store = stores[feature], let (state, current) = try? store.currentJSON(), current == version {
            return (state, entry)
        }
        let initial = registry[feature]?.initialStateJSON ?? []
        return (try await storage.state(session: id, feature: feature, at: version, initial: initial), entry)
    }

    // MARK: The change path

    /// One change: the idempotency key, the store's computation, the commit, then memory.
    /// `attempt` counts the computations after the store's head moved (a commit ahead failed
    /// meanwhile). `release`, when given, hands the pipeline on as soon as the change is handed
    /// to storage (``CommitChain``). `store` is the request's (the pipeline loads a missing one
    /// before it runs this): `nil` for an unknown feature.
    func execute(
        _ request: ChangeRequest, _ store: (any AnyStateStore)?, attempt: Int = 0, release: ChangeRelease? = nil,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        guard let store else { return finish(.failed(.unknownFeature(request.feature))) }
        checkKey(request, store, attempt: attempt, release: release, finish: finish)
    }

    /// A key seen before answers with its first reply; storage is asked when memory has
    /// forgotten it (or the session was loaded after a restart).
    func checkKey(
        _ request: ChangeRequest, _ store: any AnyStateStore, attempt: Int = 0, release: ChangeRelease? = nil,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        guard let key = request.idempotencyKey, settings.idempotencyKeys > 0 else {
            return apply(request, store, attempt: attempt, release: release, finish: finish)
        }
        if let reply = idempotency.reply(for: key) { return finish(.replayed(reply)) }
        // Memory mode: the table is what the process remembers (its journal keeps no key
        // longer), so a key it forgot is a new request — answered now, not after a read.
        guard storage.lifetime == .durable else { return apply(request, store, attempt: attempt, finish: finish) }
        Task { [self] in
            do throws(SessionFailure) {
                if let reply = try await rememberedReply(key: key) { return finish(.replayed(reply)) }
                apply(request, store, attempt: attempt, finish: finish)
            } catch {
                finish(.failed(error))
            }
        }
    }

    /// The store's computation of `request`, not applied yet.
    func prepare(_ request: ChangeRequest, _ store: any AnyStateStore) throws(StoreError) -> PreparedChange {
        let version = try request.precondition.resolve(store)
        switch request.kind {
        case .dispatch(let action):
            guard !settings.middleware.isEmpty else { return try store.prepareDispatch(json: action, ifVersion: version) }
            let context = DispatchContext(
                session: id, feature: request.feature, version: try store.currentJSON().version,
                idempotencyKey: request.idempotencyKey, subject: request.subject, tokenID: request.tokenID)
            return try settings.middleware.run(action, context: context) { (action) throws(StoreError) in
                try store.prepareDispatch(json: action, ifVersion: version)
            }
        case .rehydrate(let state): return try store.prepareRehydrate(json: state, ifVersion: version)
        case .reset: return try store.prepareReset(ifVersion: version)
        case .travel(let state): return try store.prepareTravel(json: state, ifVersion: version)
        case .replay(let cause, let payload): return try store.prepareReplay(cause: cause, payload: payload, enforceCeiling: true)
        case .importStart(let state, let asRecorded): return try store.prepareImport(json: state, asRecorded: asRecorded)
        case .followUp(let prepare): return try prepare(version)
        case .timer(let timerID, let due): return try prepareTimer(timerID, due: due, request, store)
        case .recovery:
            let (_, current) = try store.currentJSON()
            if let version, version != current {
                throw StoreError(.versionConflict, "the store moved on from version \(version)", currentVersion: current)
            }
            guard let recovery = try store.prepareRecovery() else {
                throw StoreError(.actionRejected, "nothing to recover", currentVersion: current)
            }
            return recovery
        }
    }

    /// A pending timer's firing: its action through the middleware (with cause `timer`), then
    /// the reducer. A refusal consumes the timer all the same, keeping the state: a timer fires
    /// once, whatever its action meets.
    func prepareTimer(_ timerID: String, due: Int64, _ request: ChangeRequest, _ store: any AnyStateStore) throws(StoreError) -> PreparedChange {
        let notPending = { () -> StoreError in
            StoreError(.timerNotPending, "timer '\(timerID)' of \(request.feature) is no longer pending", currentVersion: (try? store.currentJSON().version) ?? 0)
        }
        guard !settings.middleware.isEmpty else {
            guard let prepared = try store.prepareTimer(id: timerID, due: due, action: nil, refused: false) else { throw notPending() }
            return prepared
        }
        guard let timer = store.pendingTimers.first(where: { $0.id == timerID && $0.due == due }),
            let action = JSONCoding.parse(timer.action)
        else { throw notPending() }
        var context = DispatchContext(
            session: id, feature: request.feature, version: (try? store.currentJSON().version) ?? 0, idempotencyKey: nil, subject: nil, tokenID: nil)
        context.cause = "timer"
        do throws(StoreError) {
            return try settings.middleware.run(action, context: context) { (action) throws(StoreError) in
                guard let prepared = try store.prepareTimer(id: timerID, due: due, action: action, refused: false) else {
                    throw notPending()
                }
                return prepared
            }
        } catch where error.kind == .timerNotPending {
            throw error
        } catch {
            guard let prepared = try store.prepareTimer(id: timerID, due: due, action: nil, refused: true) else { throw notPending() }
            return prepared
        }
    }

    /// The change path after the key: computed on top of the store's change ahead (if one is
    /// still committing), numbered, handed to storage, and — when `release` is given — the
    /// pipeline goes on to the next job while it commits. Applied, published and answered once
    /// its own commit is answered (in order); a failed commit fails every change handed to
    /// storage after it and returns the stores to their committed state. The one place that
    /// numbers changes and the one that judges a commit's answer (``verdict(_:generation:)``).
    func apply(
        _ request: ChangeRequest, _ store: any AnyStateStore, attempt: Int = 0, release: ChangeRelease? = nil,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        let prepared: PreparedChange
        do throws(StoreError) {
            prepared = try prepare(request, store)
        } catch {
            return finish(.failed(.store(error)))
        }
        let encoded = prepared.encoded
        // Storage that answers later (durable) may be handed this change while the one before
        // still commits, so the store holds it ahead; memory mode's journal answers before
        // `commit` returns, with nothing ever ahead. The store's head moved since the change
        // was computed: a commit failed meanwhile and the store went back to its committed
        // state. Computed again on that (it was not handed to storage); a second time only
        // when something else moves the store.
        let durable = commitsAnswerLater
        guard !durable || prepared.advance() else {
            if attempt < 2 { return apply(request, store, attempt: attempt + 1, release: release, finish: finish) }
            return finish(.failed(.store(StoreError(
                .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
        }
        let reply = StoredReply(
            status: 200, body: ChangeReply.body(encoded, withEffect: request.replyHasEffect), version: encoded.version)
        let remembered = request.idempotencyKey.flatMap { key in settings.idempotencyKeys > 0 ? (key, reply) : nil }
        let (seq, generation) = chain.next(after: hub.seq)
        // Durable mode stores patches: from the state of the change ahead when one is still
        // committing (the store's own is not there yet), else from the store's.
        let base = durable ? chain.handedState(encoded.feature, version: prepared.baseVersion) : nil
        let batch = writes(prepared, store: store, seq: seq, key: remembered?.0, base: base, whole: request.installing != nil)
        if durable { chain.handed(encoded.feature, version: encoded.version, state: encoded.state) }
        // How the journal stored the state: delta event streams reuse its patch (memory mode's
        // journal keeps whole states: the hub diffs for delta streams, when there are any).
        let journaled: StateDelta? = if durable, case .append(let entry, _)? = batch.first { entry.delta } else { nil }
        // A recorded change replayed as recorded starts no work: its follow-ups are recorded too.
        let startsWork: Bool = if case .replay = request.kind { false } else { true }
        if durable { pipeline.commitStarted() }
        storage.commit(batch) { [self] result in
            switch verdict(result, generation: generation) {
            case .applied:
                // Every change of this store goes through this pipeline, so it is still at the
                // change's base version.
                guard store.commit(prepared, startWork: startsWork) else {
                    finish(.failed(.store(StoreError(
                        .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
                    break
                }
                if request.installing != nil { install(store, feature: encoded.feature) }
                if let earliest = encoded.timers?.set.lazy.map(\.due).min() { notify(.timersScheduled(earliest: earliest)) }
                publish(encoded, seq: seq, delta: journaled)
                if let remembered { idempotency.remember(remembered.0, remembered.1) }
                recount()
                finish(.applied(encoded, reply: reply))
            case .gone:
                markGone()
                finish(.failed(.sessionGone))
            case .retired:
                abandon()
                finish(.failed(.retired))
            case .uncertain(let ended, let message):
                guard ended, case .append(let entry, _)? = batch.first else {
                    // Committed with the one that ended the chain, or never sent: not known here.
                    if ownerEpoch != 0 { abandon() }
                    finish(.failed(.outcomeUnknown))
                    break
                }
                // The connection broke after the commit was sent: the journal says whether it
                // landed (the stores went back to what was committed before it).
                Task { [self] in
                    let landed = await landed(entry)
                    // Landed or unknown: this copy is behind the journal, or may be.
                    if landed != false { abandon() }
                    switch landed {
                    case true?: finish(.applied(encoded, reply: reply))
                    case false?: finish(.failed(.storage(StorageError(.unavailable, message))))
                    case nil: finish(.failed(.outcomeUnknown))
                    }
                }
            case .failed(let error):
                finish(.failed(.storage(error)))
            }
            if durable, let parked = pipeline.commitEnded() { drain(parked) }
        }
        release?.fire()
    }

    /// What a commit's answer means for the session, judged in one place. A failure ends the
    /// chain's generation when it is the first of it (the stores drop what they held ahead);
    /// a later change of an ended generation reports the error that ended it.
    func verdict(_ result: Result<Void, StorageError>, generation: Int) -> CommitVerdict {
        guard case .failure(let error) = result else { return .applied }
        let (cause, ended) = chain.failed(generation: generation, error)
        if ended { for store in stores.all { store.dropAhead() } }
        switch cause.kind {
        // Storage no longer has the session (deleted by another process or node, or by the
        // TTL sweep): it is gone here too.
        case .sessionGone: return .gone
        // With one owner per session: another node owns it now, or this copy is behind the
        // journal; nothing of this change was written. This copy goes; the caller reaches the
        // owner or a fresh copy.
        case .notOwner where ownerEpoch != 0, .conflict where ownerEpoch != 0: return .retired
        case .uncertain: return .uncertain(ended: ended, message: cause.message)
        default: return .failed(cause)
        }
    }

    /// A store a load rebuilt as a last resort, now that its reset is committed: in memory
    /// from here on, like a store loaded as saved.
    func install(_ store: any AnyStateStore, feature: String) {
        stores.insert(store, for: feature)
    }

    /// Whether `entry` is in the journal (true), another change took its place so it can never
    /// be (false), or that cannot be known now (nil: not there yet, or storage unreachable).
    func landed(_ entry: JournalEntry) async -> Bool? {
        guard let found = try? await storage.journal(session: id, afterSeq: entry.seq - 1, limit: 1) else {
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
    /// `whole`: the state whole and a snapshot of it, whatever is due (a last-resort reset,
    /// whose store's base state was never stored).
    func writes(
        _ prepared: PreparedChange, store: any AnyStateStore, seq: Int, key: String?, base: [UInt8]? = nil, whole: Bool = false
    ) -> [StorageWrite] {
        let now = WallClock.now
        let encoded = prepared.encoded
        // The append moves the session's stored activity too.
        usage.lastStored.store(now, ordering: .relaxed)
        guard storage.lifetime == .durable else {
            // Memory mode: the whole state (no diff), no snapshot (the ring's oldest change
            // becomes the base when it leaves), no key (the session's table is what remembers
            // keys: a key it forgot is a new request, which the journal must not refuse).
            let append = StorageWrite.append(
                JournalEntry(
                    session: id, seq: seq, feature: encoded.feature, version: encoded.version, cause: encoded.cause,
                    action: encoded.action, effect: encoded.effect, delta: .state(encoded.state), time: now),
                idempotencyKey: nil)
            guard let timers = encoded.timers else { return [append] }
            return [append, .timers(session: id, feature: encoded.feature, timers)]
        }
        let previous =
            prepared.baseVersion == 0 || whole
            ? nil : base ?? (try? store.currentJSON()).flatMap { $0.version == prepared.baseVersion ? $0.state : nil }
        let entry = JournalEntry(
            session: id, seq: seq, feature: encoded.feature, version: encoded.version, cause: encoded.cause,
            action: encoded.action, effect: encoded.effect, delta: StateDelta.between(previous, encoded.state), time: now)
        var batch: [StorageWrite] = [.append(entry, idempotencyKey: key)]
        let version = encoded.version
        let feature = encoded.feature
        // A last-resort reset's store held no timers: the ones storage kept go with the reset.
        if let timers = whole ? TimerChanges(clearsAll: true) : encoded.timers {
            batch.append(.timers(session: id, feature: feature, timers))
        }
        let due = chain.journaled(feature, bytes: entry.size) { grown in
            whole || version == 1 || (settings.snapshotEvery > 0 && version % settings.snapshotEvery == 0)
                || grown > max(encoded.state.count, Self.snapshotSlack)
        }
        if due {
            let stateVersion = registry[feature]?.stateVersion ?? 1
            batch.append(.snapshot(StoreSnapshot(
                session: id, feature: feature, version: version, stateVersion: stateVersion, state: encoded.state, time: now)))
            // A last-resort reset keeps what came before it (nothing is compacted on its account).
            if version > 1, !whole {
                batch.append(.compact(
                    session: id, feature: feature, upToVersion: version, keepLast: max(settings.replayBuffer, settings.historyKeep),
                    keysSince: now - SessionManager.milliseconds(settings.idempotencyTTL), maxKeys: settings.idempotencyKeys))
            }
        }
        return batch
    }
}

extension Session {
    /// Publishes a change at `seq`; a number the hub refuses (not after its last one) is
    /// reported, not dropped in silence.
    func publish(_ change: EncodedChange, seq: Int, delta: StateDelta? = nil) {
        if !hub.publish(change, seq: seq, delta: delta) {
            notify(.sequenceRefused(session: id, feature: change.feature, seq: seq, last: hub.seq))
        }
    }
}

/// What a commit's answer means for the change and the session (``Session/verdict(_:generation:)``).
enum CommitVerdict {
    /// Stored: apply, publish, answer.
    case applied
    /// Storage no longer has the session.
    case gone
    /// Another node owns the session now, or this copy is behind the journal: the copy goes,
    /// and the change is submitted again where the session is now.
    case retired
    /// The connection broke after the commit was sent; `ended`: this change ended its
    /// generation (the journal can tell whether it landed).
    case uncertain(ended: Bool, message: String)
    case failed(StorageError)
}
