import StateJSON
import StatePersistence

/// One page of a session's history: its changes in order, as the journal keeps them.
public struct HistoryPage: Sendable {
    public struct Change: Sendable, Equatable {
        public let seq: Int
        public let feature: String
        public let version: Int
        /// `dispatch`, `rehydrate`, `reset` or `travel`.
        public let cause: String
        /// The action of a dispatch, tagged, in its public form (masked as in events); nil for
        /// other causes.
        public let action: [UInt8]?
        /// The change's one-shot effect, tagged, if any.
        public let effect: [UInt8]?
        /// Milliseconds since 1970.
        public let time: Int64
    }

    public let changes: [Change]
    /// The cursor of the next page (`after`), or nil when this page reached the newest change.
    public let next: Int?
    /// Whether changes after the page's `after` are no longer kept (compacted away, or past
    /// memory mode's bounds): the history the server has begins later.
    public let truncated: Bool
    /// The oldest change still kept (its seq), when `truncated`.
    public let keptFrom: Int?
}

extension Session {
    /// The session's changes after `after` (a seq), oldest first: at most `limit` looked at,
    /// those of `feature` returned (all when nil), as the journal keeps them (the last
    /// `max(events.replayBuffer, history.keep)` changes; memory mode's journal is also bounded in
    /// bytes).
    public func history(after: Int, limit: Int, feature: String?) async throws(SessionFailure) -> HistoryPage {
        let entries: [JournalEntry]
        do {
            entries = try await storage.journal(session: id, afterSeq: after, limit: limit)
        } catch {
            throw error.kind == .sessionGone ? .sessionGone : .storage(error)
        }
        let scanned = entries.map {
            HistoryPage.Change(
                seq: $0.seq, feature: $0.feature, version: $0.version, cause: $0.cause, action: $0.action,
                effect: $0.effect, time: $0.time)
        }
        let head = hub.seq
        let firstAfter = scanned.first?.seq ?? head + 1
        let truncated = after < head && firstAfter > after + 1
        return HistoryPage(
            changes: feature.map { name in scanned.filter { $0.feature == name } } ?? scanned,
            next: scanned.count >= limit ? scanned.last?.seq : nil,
            truncated: truncated,
            keptFrom: truncated ? scanned.first?.seq : nil)
    }
}
