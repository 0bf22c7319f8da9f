import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Several nodes without owners (shared storage where any node writes): catching up with
/// the journal, hearing other nodes' commits, and rebuilding events for a resuming stream.
extension Session {
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
        catchUp.heard(seq: seq)
        pullIfBehind()
    }

    /// Queues one pull when the session is behind what was heard and someone watches. Called
    /// after a commit is heard and after a stream subscribes (so a commit heard just before the
    /// first subscriber is not missed). A failed pull ends the streams: the clients reconnect
    /// and resume from the journal, never with a silent gap.
    public func pullIfBehind() {
        guard catchUp.isBehind(hub.seq), hub.subscriberCount > 0, catchUp.queuePull() else { return }
        enqueue(.pull { [self] result in
            catchUp.pullDone()
            switch result {
            case .success: pullIfBehind()
            case .failure(.storage): hub.endStreams()
            case .failure: break  // deleted (streams ended) or retired (no streams)
            }
        })
    }

    /// Deleted by another node: refuses every later request and ends the streams.
    func deletedElsewhere() {
        markGone()
    }

    /// Before a stream resumes from `lastEventID`, rebuilds from the journal the events after it
    /// that the hub no longer holds (after a restart, an eviction, on another node, or past the
    /// hub's byte bounds), so the resume is exact; bounded by the session's replay limits (past
    /// them the stream starts with a snapshot, as the contract says). Loads never pay for it.
    public func backfill(after lastEventID: Int) async {
        let storage = self.storage
        guard let missing = hub.missing(after: lastEventID), missing.count <= settings.replayBuffer else { return }
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
    func stateOf(
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
    func catchUp(checkingExistence: Bool = true) async throws(StorageError) {
        let storage = self.storage
        if checkingExistence, try await storage.session(id: id) == nil {
            markGone()
            throw StorageError(.sessionGone, "the session was deleted")
        }
        let entries = try await storage.journal(session: id, afterSeq: hub.seq, limit: 1_000_000)
        var chain: [String: (version: Int, state: [UInt8])] = [:]
        for entry in entries {
            let store = stores[entry.feature]
            if let store, let (current, version) = try? store.currentJSON(), entry.version == version + 1 {
                chain[entry.feature] = (version, current)
            }
            let state = try await stateOf(entry, chain: &chain, in: storage)
            guard let store else {
                publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
                continue
            }
            let version = (try? store.currentJSON().version) ?? 0
            if entry.version == version + 1 {
                do throws(StoreError) {
                    let change = try store.applyRecorded(
                        version: entry.version, cause: entry.cause, action: entry.action, state: state, effect: entry.effect)
                    publish(change, seq: entry.seq, delta: entry.delta)
                    continue
                } catch {
                    // Falls through: the store is dropped and loads afresh on next use.
                }
            } else if entry.version <= version {
                // The store already has it (loaded from storage after this node's last look),
                // but this node's subscribers and replay buffer do not: publish it as stored.
                publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
                continue
            }
            // A gap (or a change this node cannot apply): forget the store; it loads again
            // from storage when next used.
            stores.remove(entry.feature)
            publishRecorded(seq: entry.seq, feature: entry.feature, data: EventHub.eventData(entry, state: state))
        }
    }
}
