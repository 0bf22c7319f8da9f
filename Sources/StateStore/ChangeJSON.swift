import StateJSON

/// The one writer of a change as JSON — events, delta events, replies, history and recordings
/// all write a change through it, so its members have one spelling and one order:
/// `seq`, `feature`, `version`, `cause`, `action`, `timer`, `baseVersion`, the state or patch,
/// `effect`, `time`, each where the place writing it has it.
///
/// A change of cause `timer` is kept (journal, ``EncodedChange/action``) with the timer that
/// fired as its action, `{"id", "action", "due", "scheduledAt"}`; written, its `action` is the
/// timer's action (a tagged object, as for a dispatch) and `timer` is `{"id", "due",
/// "scheduledAt"}`.
public enum ChangeJSON {
    /// The state member: whole (`state`), a patch from `baseVersion` (delta events:
    /// `baseVersion` and `patch`), a patch alone (recordings: `patch`), or none (history).
    public enum Content {
        case state([UInt8])
        case patchFrom(baseVersion: Int, [UInt8])
        case patch([UInt8])
        case none

        var size: Int {
            switch self {
            case .state(let bytes), .patchFrom(_, let bytes), .patch(let bytes): bytes.count
            case .none: 0
            }
        }
    }

    /// What to write of a change's cause, action and effect: replies write no cause and no
    /// action, and their effect only for dispatches; everything else writes all three
    /// (`null` when there is none).
    public struct Parts: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let cause = Parts(rawValue: 1)
        public static let action = Parts(rawValue: 2)
        public static let effect = Parts(rawValue: 4)
        public static let all: Parts = [.cause, .action, .effect]
    }

    public static func object(
        seq: Int? = nil, feature: String, version: Int, cause: String, action: [UInt8]?, content: Content,
        effect: [UInt8]?, time: Int64? = nil, parts: Parts = .all
    ) -> [UInt8] {
        var out = JSONObjectWriter(capacity: 128 + content.size + (action?.count ?? 0) + (effect?.count ?? 0))
        if let seq { out.int("seq", seq) }
        out.string("feature", feature)
        out.int("version", version)
        if parts.contains(.cause) { out.string("cause", cause) }
        if parts.contains(.action) {
            if cause == "timer", let action, let timer = PendingTimer.parse(action) {
                out.raw("action", timer.action.bytes)
                var fired = JSONObjectWriter(capacity: 64 + timer.id.utf8.count)
                fired.string("id", timer.id)
                fired.int("due", Int(timer.due))
                fired.int("scheduledAt", Int(timer.scheduledAt))
                out.raw("timer", fired.finish())
            } else {
                out.raw("action", action)
            }
        }
        switch content {
        case .state(let state): out.raw("state", state)
        case .patchFrom(let base, let patch):
            out.int("baseVersion", base)
            out.raw("patch", patch)
        case .patch(let patch): out.raw("patch", patch)
        case .none: break
        }
        if parts.contains(.effect) { out.raw("effect", effect) }
        if let time { out.int("time", Int(time)) }
        return out.finish()
    }

    /// `change` with its whole state (an event's data, or with `parts` a reply).
    public static func object(_ change: EncodedChange, parts: Parts = .all) -> [UInt8] {
        object(
            feature: change.feature, version: change.version, cause: change.cause, action: change.action,
            content: .state(change.state), effect: change.effect, parts: parts)
    }
}
