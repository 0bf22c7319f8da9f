import StateJSON
import StatePersistence

/// One page of a session's history: its changes in order, as the journal keeps them.
public struct HistoryPage: Sendable {
    /// The changes as the journal keeps them (history writes all but their states).
    public let changes: [JournalEntry]
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
        let scanned = entries
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
