import DequeModule
import Foundation
import StatePersistence
import StateStore
import Synchronization

/// Events rebuilt from the journal for a resuming stream; a delete heard from another node.
extension Session {
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
}
