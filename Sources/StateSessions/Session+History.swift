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
    /// memory mode's replay buffer): the history the server has begins later.
    public let truncated: Bool
    /// The oldest change still kept (its seq), when `truncated`.
    public let keptFrom: Int?
}

extension Session {
    /// The session's changes after `after` (a seq), oldest first: at most `limit` looked at,
    /// those of `feature` returned (all when nil). Durable modes read the journal (kept for
    /// `history.keep` changes); memory mode has what its replay buffer holds.
    public func history(after: Int, limit: Int, feature: String?) async throws(SessionFailure) -> HistoryPage {
        let scanned: [HistoryPage.Change]
        let oldestKept: Int?
        if let storage {
            let entries: [JournalEntry]
            do {
                entries = try await storage.journal(session: id, afterSeq: after, limit: limit)
            } catch {
                throw error.kind == .sessionGone ? .sessionGone : .storage(error)
            }
            scanned = entries.map {
                HistoryPage.Change(
                    seq: $0.seq, feature: $0.feature, version: $0.version, cause: $0.cause, action: $0.action,
                    effect: $0.effect, time: $0.time)
            }
            oldestKept = scanned.first?.seq
        } else {
            let held = hub.held(after: after, limit: limit)
            scanned = held.changes.compactMap(Self.change)
            oldestKept = held.oldest
        }
        let head = hub.seq
        let firstAfter = scanned.first?.seq ?? head + 1
        let truncated = after < head && firstAfter > after + 1
        return HistoryPage(
            changes: feature.map { name in scanned.filter { $0.feature == name } } ?? scanned,
            next: scanned.count >= limit ? scanned.last?.seq : nil,
            truncated: truncated,
            keptFrom: truncated ? (scanned.first?.seq ?? oldestKept) : nil)
    }

    /// A change from its event data (memory mode).
    static func change(_ held: EventHub.HeldChange) -> HistoryPage.Change? {
        guard case .object(let fields)? = JSONCoding.parse(held.data),
            case .int(let version)? = fields["version"], case .string(let cause)? = fields["cause"]
        else { return nil }
        func raw(_ name: String) -> [UInt8]? {
            guard let value = fields[name], value != .null else { return nil }
            return value.bytes
        }
        return HistoryPage.Change(
            seq: held.seq, feature: held.feature, version: Int(version), cause: cause, action: raw("action"),
            effect: raw("effect"), time: held.time)
    }
}
