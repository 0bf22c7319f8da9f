import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Executing one change: the idempotency key, the store's computation, the journal, then
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

    /// One change: the idempotency key, the store's computation, the journal, then memory.
    /// `attempt` counts the tries after lost races; each try finds the store afresh (a catch-up
    /// that found a gap drops a stale store, which then loads again from storage).
    /// `release`, when given, hands the pipeline on as soon as the change is handed to storage
    /// (``CommitChain``).
    func execute(
        _ request: ChangeRequest, attempt: Int = 0, release: ChangeRelease? = nil,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        guard registry[request.feature] != nil else { return finish(.failed(.unknownFeature(request.feature))) }
        guard let store = loadedStore(request.feature) else {
            // Durable mode, a store not loaded yet (callers normally load it first). Inside the
            // pipeline: load it here, not as another job behind this one.
            Task { [self] in
                do throws(SessionFailure) {
                    guard let store = try await loadStore(request.feature) else {
                        return finish(.failed(.unknownFeature(request.feature)))
                    }
                    checkKey(request, store, attempt: attempt, release: release, finish: finish)
                } catch {
                    finish(.failed(error))
                }
            }
            return
        }
        checkKey(request, store, attempt: attempt, release: release, finish: finish)
    }

    /// A key seen before answers with its first reply; storage is asked when memory has
    /// forgotten it (or the session was loaded after a restart). Asked again after a lost race:
    /// the winner may have been the same request on another node.
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
        guard journal.lifetime == .durable else { return apply(request, store, attempt: attempt, finish: finish) }
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

    func apply(
        _ request: ChangeRequest, _ store: any AnyStateStore, attempt: Int = 0, release: ChangeRelease? = nil,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        let prepared: PreparedChange
        do throws(StoreError) {
            let version = try request.precondition.resolve(store)
            switch request.kind {
            case .dispatch(let action):
                if settings.middleware.isEmpty {
                    prepared = try store.prepareDispatch(json: action, ifVersion: version)
                } else {
                    let context = DispatchContext(
                        session: id, feature: request.feature, version: try store.currentJSON().version,
                        idempotencyKey: request.idempotencyKey, subject: request.subject, tokenID: request.tokenID)
                    prepared = try settings.middleware.run(action, context: context) { (action) throws(StoreError) in
                        try store.prepareDispatch(json: action, ifVersion: version)
                    }
                }
            case .rehydrate(let state): prepared = try store.prepareRehydrate(json: state, ifVersion: version)
            case .reset: prepared = try store.prepareReset(ifVersion: version)
            case .travel(let state): prepared = try store.prepareTravel(json: state, ifVersion: version)
            case .replay(let cause, let payload):
                prepared = try store.prepareReplay(cause: cause, payload: payload, enforceCeiling: true)
            case .importStart(let state, let asRecorded): prepared = try store.prepareImport(json: state, asRecorded: asRecorded)
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
                return retryAfterCatchUp(request, attempt: 1, finish: finish)
            }
            return finish(.failed(.store(error)))
        }
        let reply = StoredReply(
            status: 200, body: ChangeReply.body(prepared.encoded, withEffect: request.replyHasEffect),
            version: prepared.encoded.version)
        let remembered = request.idempotencyKey.flatMap { key in settings.idempotencyKeys > 0 ? (key, reply) : nil }
        if let chain {
            return applyInOrder(
                request, store, prepared, reply: reply, remembered: remembered, chain: chain, attempt: attempt, release: release,
                finish: finish)
        }
        // The change's number: its journal entry's seq and its event's id (the pipeline runs
        // one change at a time, so nothing is numbered in between).
        let seq = nextSeq()
        // Built here, not by the journal, so an uncertain commit can be looked for.
        let batch = writes(prepared, store: store, seq: seq, key: remembered?.0)
        // How the journal stores the state: delta event streams reuse its patch (memory mode's
        // journal keeps whole states: the hub diffs for delta streams, when there are any).
        let journaled: StateDelta? =
            if journal.lifetime == .durable, case .append(let entry, _)? = batch.first { entry.delta } else { nil }
        // A recorded change replayed as recorded starts no work: its follow-ups are recorded too.
        let startsWork: Bool = if case .replay = request.kind { false } else { true }
        let committed: @Sendable () -> Void = { [self] in
            // Every change of this store goes through this pipeline, so it is still at the
            // change's base version.
            guard store.commit(prepared, startWork: startsWork) else {
                return finish(.failed(.store(StoreError(
                    .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
            }
            publish(prepared.encoded, seq: seq, delta: journaled)
            if let remembered { idempotency.remember(remembered.0, remembered.1) }
            recount()
            finish(.applied(prepared.encoded, reply: reply))
        }
        journal.record({ batch }) { [self] result in
            if case .failure(let error) = result, error.kind == .conflict, readsCatchUp, attempt < Self.conflictRetries {
                // Another node committed this version or sequence number first: catch up with
                // it and compute the change again on the fresh state.
                return retryAfterCatchUp(request, attempt: attempt + 1, finish: finish)
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

    /// A change over a journal that commits in order (``CommitChain``): held as the store's
    /// change ahead, handed to storage, and — when `release` is given — the pipeline goes on to
    /// the next job while it commits. Applied, published and answered once its own commit is
    /// answered (in order); a failed commit fails every change handed to storage after it and
    /// returns the stores to their committed state.
    func applyInOrder(
        _ request: ChangeRequest, _ store: any AnyStateStore, _ prepared: PreparedChange, reply: StoredReply,
        remembered: (String, StoredReply)?, chain: CommitChain, attempt: Int, release: ChangeRelease?,
        finish: @escaping @Sendable (ChangeOutcome) -> Void
    ) {
        let encoded = prepared.encoded
        // The store's head moved since the change was computed: a commit failed meanwhile and
        // the store went back to its committed state. Computed again on that (it was not
        // handed to storage); a second time only when something else moves the store.
        guard prepared.advance() else {
            if attempt < 2 { return apply(request, store, attempt: attempt + 1, release: release, finish: finish) }
            return finish(.failed(.store(StoreError(
                .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
        }
        let (seq, generation) = chain.next(after: hub.seq)
        let base = chain.handedState(encoded.feature, version: prepared.baseVersion)
        let batch = writes(prepared, store: store, seq: seq, key: remembered?.0, base: base)
        chain.handed(encoded.feature, version: encoded.version, state: encoded.state)
        let journaled: StateDelta? = if case .append(let entry, _)? = batch.first { entry.delta } else { nil }
        let startsWork: Bool = if case .replay = request.kind { false } else { true }
        pipeline.commitStarted()
        journal.record({ batch }) { [self] result in
            switch result {
            case .success:
                if store.commit(prepared, startWork: startsWork) {
                    publish(encoded, seq: seq, delta: journaled)
                    if let remembered { idempotency.remember(remembered.0, remembered.1) }
                    recount()
                    finish(.applied(encoded, reply: reply))
                } else {
                    finish(.failed(.store(StoreError(
                        .versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion))))
                }
            case .failure(let error):
                let (cause, ended) = chain.failed(generation: generation, error)
                if ended { for store in stores.all { store.dropAhead() } }
                switch cause.kind {
                case .sessionGone:
                    markGone()
                    finish(.failed(.sessionGone))
                case .notOwner, .conflict:
                    // With one owner per session: another node owns it now, or this copy is
                    // behind the journal; nothing of this change was written. This copy goes (as
                    // for a change that waited for its commit); the caller reaches the owner or
                    // a fresh copy.
                    if ownerEpoch != 0 {
                        abandon()
                        finish(.failed(.retired))
                    } else {
                        finish(.failed(.storage(cause)))
                    }
                case .uncertain where ended:
                    // The connection broke after the commit was sent: the journal says whether it
                    // landed (the stores went back to what was committed before it).
                    Task { [self] in
                        let landed: Bool? = if case .append(let entry, _)? = batch.first { await landed(entry) } else { nil }
                        // Landed or unknown: this copy is behind the journal, or may be.
                        if landed != false { abandon() }
                        switch landed {
                        case true?: finish(.applied(encoded, reply: reply))
                        case false?: finish(.failed(.storage(StorageError(.unavailable, cause.message))))
                        case nil: finish(.failed(.outcomeUnknown))
                        }
                    }
                case .uncertain:
                    // Committed with the one that ended the chain, or never sent: not known here.
                    if ownerEpoch != 0 { abandon() }
                    finish(.failed(.outcomeUnknown))
                default:
                    finish(.failed(.storage(cause)))
                }
            }
            if let parked = pipeline.commitEnded() { drain(parked) }
        }
        release?.fire()
    }

    /// Shared storage without owners: catches up with the journal, then runs the change again
    /// (try number `attempt`) on the fresh state.
    func retryAfterCatchUp(_ request: ChangeRequest, attempt: Int, finish: @escaping @Sendable (ChangeOutcome) -> Void) {
        Task { [self] in
            do throws(StorageError) {
                try await catchUp()
                execute(request, attempt: attempt, finish: finish)
            } catch {
                finish(.failed(error.kind == .sessionGone ? .sessionGone : .storage(error)))
            }
        }
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
    func writes(
        _ prepared: PreparedChange, store: any AnyStateStore, seq: Int, key: String?, base: [UInt8]? = nil
    ) -> [StorageWrite] {
        let now = WallClock.now
        let encoded = prepared.encoded
        // The append moves the session's stored activity too.
        lastStoredActivity.store(now, ordering: .relaxed)
        guard journal.lifetime == .durable else {
            // Memory mode: the whole state (no diff), no snapshot (the ring's oldest change
            // becomes the base when it leaves), no key (the session's table is what remembers
            // keys: a key it forgot is a new request, which the journal must not refuse).
            return [.append(
                JournalEntry(
                    session: id, seq: seq, feature: encoded.feature, version: encoded.version, cause: encoded.cause,
                    action: encoded.action, effect: encoded.effect, delta: .state(encoded.state), time: now),
                idempotencyKey: nil)]
        }
        let previous =
            prepared.baseVersion == 0
            ? nil : base ?? (try? store.currentJSON()).flatMap { $0.version == prepared.baseVersion ? $0.state : nil }
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
                    session: id, feature: feature, upToVersion: version, keepLast: max(settings.replayBuffer, settings.historyKeep),
                    keysSince: now - SessionManager.milliseconds(settings.idempotencyTTL), maxKeys: settings.idempotencyKeys))
            }
        }
        return batch
    }
}

extension Session {
    /// The number of the session's next change: after the last one published and after
    /// `journaled` (the journal's last seq, when the caller read it). Every change this node
    /// makes is numbered here; changes of other nodes keep the number they were journaled with.
    func nextSeq(journaled: Int = 0) -> Int {
        if let chain { return chain.next(after: max(hub.seq, journaled)).seq }
        return max(hub.seq, journaled) + 1
    }

    /// Publishes a change at `seq`; a number the hub refuses (not after its last one) is
    /// reported, not dropped in silence.
    func publish(_ change: EncodedChange, seq: Int, delta: StateDelta? = nil) {
        if !hub.publish(change, seq: seq, delta: delta) {
            notify(.sequenceRefused(session: id, feature: change.feature, seq: seq, last: hub.seq))
        }
    }

    /// Publishes a change another node journaled, as stored; reported like ``publish(_:seq:delta:)``.
    func publishRecorded(seq: Int, feature: String, data: [UInt8]) {
        if !hub.publishRecorded(seq: seq, feature: feature, data: data) {
            notify(.sequenceRefused(session: id, feature: feature, seq: seq, last: hub.seq))
        }
    }
}
