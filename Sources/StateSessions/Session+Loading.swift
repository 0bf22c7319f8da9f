import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Loading a store: its base and the changes after it, a rebuild from the whole journal,
/// or (last resort) a reset; settling work left waiting by a process that is gone.
extension Session {
    /// Loads a store from storage unless it is in memory (see ``store(_:)``); never inside the
    /// pipeline (a load may submit a change of its own and wait for it).
    func loadStore(_ feature: String) async throws(SessionFailure) -> (any AnyStateStore)? {
        if let store = loadedStore(feature) { return store }
        guard let definition = registry[feature] else { return nil }
        await stores.loadLock.lock()
        defer { stores.loadLock.unlock() }
        if let store = stores[feature] { return store }
        // Loaded sessions past the server's memory budget: idle ones leave memory first.
        if !usage.residency.makeRoom(sparing: id) { throw .memoryFull }
        let store: any AnyStateStore
        do {
            store = try await load(definition, from: storage)
            // Its pending timers, as the changes that scheduled them stored them.
            let timers = try await storage.timers(session: id)
            if timers.contains(where: { $0.feature == feature }) {
                store.restoreTimers(timers.filter { $0.feature == feature }.map(\.timer))
            }
        } catch {
            throw .storage(error)
        }
        attach(store, feature: feature)
        var bytes = 0
        if let (state, version) = try? store.currentJSON() {
            hub.seed(feature: feature, version: version, state: state)
            bytes = state.count
        }
        stores.insert(store, for: feature)
        recount()
        notify(.storeLoaded(session: id, feature: feature, bytes: bytes))
        // Work that was running in a previous process (or on the node that owned the session
        // before) never comes back: settle its state now, through the change path like any
        // change. Another node's work cannot land anyway: its appends are fenced on owning
        // the session.
        if (try? store.prepareRecovery()) != nil,
            case .failed(let failure) = await submit(ChangeRequest(feature: feature, kind: .recovery)).value()
        {
            report(failure)
        }
        return store
    }

    /// Sends the store's follow-ups through the change path. (Its changes reach the hub from
    /// the change path too, numbered there: ``Session/apply(_:_:attempt:release:finish:)``.)
    func attach(_ store: any AnyStateStore, feature: String) {
        store.routeFollowUps { [weak self] prepare in
            guard let self else { return }
            if case .failed(let failure) = await self.submit(ChangeRequest(feature: feature, kind: .followUp(prepare))).value() {
                self.report(failure)
            }
        }
    }

    func report(_ failure: SessionFailure) {
        switch failure {
        // Work cancelled by a later change (a reset, a logout) sends nothing on purpose.
        case .store(let e) where e.kind == .workCancelled: break
        case .store(let e): notify(.followUpRejected(session: id, e))
        case .storage(let e): notify(.followUpNotStored(session: id, e))
        case .unknownFeature, .sessionGone, .retired, .memoryFull: break
        case .outcomeUnknown:
            notify(.followUpNotStored(session: id, StorageError(.uncertain, "a follow-up's commit may or may not have landed")))
        }
    }

    /// Snapshot + the journal's changes after it, or a rebuild from the whole journal, or (last
    /// resort) a reset that is itself journaled. Never a crash, never a silently wrong state.
    func load(_ definition: AnyFeature, from storage: any SessionStorage) async throws(StorageError) -> any AnyStateStore {
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
                    timers: timerPolicy, onFollowUpRejected: onRejected)
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
                    definition, stateVersion: definition.stateVersion, version: version, timers: timerPolicy, onFollowUpRejected: onRejected)
            }
            if rebuilt == nil {
                let replayed = definition.makeStore(timers: timerPolicy, onFollowUpRejected: onRejected)
                if Self.replayActions(all, into: replayed) { rebuilt = replayed }
            }
            if let rebuilt {
                notify(.storeRecovered(
                    session: id, feature: feature, how: "rebuilt from the journal", reason: problem ?? "unknown"))
                try await rebase(rebuilt, definition)
                return rebuilt
            }
        }
        // Last resort: the initial state, as a reset after the last known version, committed
        // through the pipeline like any change, with its state whole and a snapshot so the
        // next load starts from it. The store is in memory once the reset is committed.
        let lastVersion = max(all.last?.version ?? 0, entries.last?.version ?? 0, snapshotVersion)
        let reason = problem ?? "the journal of \(feature) cannot be replayed"
        let store: any AnyStateStore
        do {
            store = try definition.restoreStore(state: nil, stateVersion: definition.stateVersion, version: lastVersion, timers: timerPolicy, onFollowUpRejected: onRejected)
        } catch {
            throw StorageError(.unavailable, "cannot create \(feature): \(error.message)")
        }
        var reset = ChangeRequest(feature: feature, kind: .reset)
        reset.installing = store
        switch await submit(reset).value() {
        case .applied, .replayed: break
        case .failed(.storage(let error)): throw error
        case .failed(let failure): throw StorageError(.unavailable, "cannot reset \(feature): \(failure)")
        }
        notify(.storeRecovered(session: id, feature: feature, how: "reset to the initial state", reason: reason))
        return store
    }

    /// A snapshot of `store` as it is now, in today's state schema: later changes are patches
    /// from it, so a load never applies them to a state of an older schema.
    func rebase(_ store: any AnyStateStore, _ definition: AnyFeature) async throws(StorageError) {
        guard let (state, version) = try? store.currentJSON(), version > 0 else { return }
        let snapshot = StoreSnapshot(
            session: id, feature: definition.name, version: version, stateVersion: definition.stateVersion, state: state,
            time: WallClock.now)
        try await storage.commit([.snapshot(snapshot)])
    }

    /// Replays a whole journal's actions (and rehydrated states) through `store`'s reducer,
    /// side effects off; `false` at the first that does not apply.
    static func replayActions(_ entries: [JournalEntry], into store: any AnyStateStore) -> Bool {
        var state: [UInt8]?
        for entry in entries {
            do throws(StorageError) {
                state = try entry.delta.state(after: state)
            } catch {
                return false
            }
            let payload: [UInt8]? =
                entry.cause == "dispatch" || entry.cause == "timer"
                ? entry.action : ChangeCauseName.setsState(entry.cause) ? state : nil
            do throws(StoreError) {
                try store.replay(cause: entry.cause, payload: payload)
            } catch {
                return false
            }
        }
        return true
    }

    struct RollFailure: Error {
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
            timers: TimerPolicy, onFollowUpRejected: @escaping @Sendable (StoreError) -> Void
        ) throws(StoreError) -> any AnyStateStore {
            switch self {
            case .none:
                return try definition.restoreStore(
                    state: nil, stateVersion: stateVersion, version: version, timers: timers, onFollowUpRejected: onFollowUpRejected)
            case .bytes(let bytes):
                return try definition.restoreStore(
                    state: bytes, stateVersion: stateVersion, version: version, timers: timers, onFollowUpRejected: onFollowUpRejected)
            case .tree(let json):
                return try definition.restoreStore(
                    json: json, stateVersion: stateVersion, version: version, timers: timers, onFollowUpRejected: onFollowUpRejected)
            }
        }
    }

    /// The state after `entries` applied in order to `base` (a version and its state; nil for
    /// the start of the journal), and its version; why not, when a version is missing or a
    /// patch does not apply. However many patches, the state is parsed once.
    static func roll(
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
}
