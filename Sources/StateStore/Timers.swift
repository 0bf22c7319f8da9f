import Foundation

/// An action a reducer scheduled for later (``Dispatcher/schedule(_:after:id:)``), pending
/// until its due time. Kept with the store's state: stored in the same commit as the change that
/// scheduled it, and removed in the same commit as the change that fires it.
public struct PendingTimer: Sendable, Equatable {
    /// Unique per store; scheduling an id again replaces its timer.
    public let id: String
    /// The action as a tagged object: what fires.
    public let action: [UInt8]
    /// The action as observers see it (``Feature/publicAction(_:)``).
    public let publicAction: [UInt8]
    /// When it is due, and when it was scheduled: milliseconds since 1970 (UTC).
    public let due: Int64
    public let scheduledAt: Int64

    public init(id: String, action: [UInt8], publicAction: [UInt8], due: Int64, scheduledAt: Int64) {
        self.id = id
        self.action = action
        self.publicAction = publicAction
        self.due = due
        self.scheduledAt = scheduledAt
    }

    /// `{"id", "action", "due", "scheduledAt"}`: the action of a change of cause `timer` (the
    /// timer that fired), and an item of a session's pending timers (with `feature` first).
    public func json(feature: String? = nil) -> [UInt8] {
        var out = JSONObjectWriter(capacity: 64 + id.utf8.count + publicAction.count)
        out.string("id", id)
        if let feature { out.string("feature", feature) }
        out.raw("action", publicAction)
        out.int("due", Int(due))
        out.int("scheduledAt", Int(scheduledAt))
        return out.finish()
    }

    /// The parts of a timer change's action (``json(feature:)``): id, action, due, scheduled.
    static func parse(_ bytes: [UInt8]) -> (id: String, action: JSONValue, due: Int64, scheduledAt: Int64)? {
        guard let json = JSONCoding.parse(bytes), case .string(let id)? = json["id"], let action = json["action"],
            case .int(let due)? = json["due"], case .int(let scheduledAt)? = json["scheduledAt"]
        else { return nil }
        return (id, action, due, scheduledAt)
    }

    /// Sorted as listed: due first, then id.
    public static func dueOrder(_ a: PendingTimer, _ b: PendingTimer) -> Bool {
        (a.due, a.id) < (b.due, b.id)
    }
}

/// What one change does to its store's pending timers, applied in this order: all removed
/// (a reset, rehydrate, travel or import), then `removed` (cancelled, or the one that fired),
/// then `set` (scheduled, replacing a timer of the same id).
public struct TimerChanges: Sendable, Equatable {
    public var clearsAll: Bool
    public var removed: [String]
    public var set: [PendingTimer]

    public init(clearsAll: Bool = false, removed: [String] = [], set: [PendingTimer] = []) {
        self.clearsAll = clearsAll
        self.removed = removed
        self.set = set
    }

    /// `timers` after these changes.
    public func applied(to timers: [String: PendingTimer]) -> [String: PendingTimer] {
        var result = clearsAll ? [:] : timers
        for id in removed { result[id] = nil }
        for timer in set { result[timer.id] = timer }
        return result
    }
}

/// The rules a store holds its timers to, and its clock.
public struct TimerPolicy: Sendable {
    /// The most timers a store may hold pending; a change that would hold more is refused.
    public var maxPending: Int
    /// Milliseconds since 1970 (UTC): when a scheduled timer is due is counted from it.
    public var now: @Sendable () -> Int64

    /// The default limit of pending timers per store.
    public static let defaultMaxPending = 1_000
    /// The longest delay a timer may have: 366 days.
    public static let maxDelay = Duration.seconds(366 * 86_400)
    /// The longest timer id, in UTF-8 bytes.
    public static let maxIDBytes = 256

    public init(maxPending: Int = TimerPolicy.defaultMaxPending, now: @escaping @Sendable () -> Int64 = TimerPolicy.wallClock) {
        self.maxPending = maxPending
        self.now = now
    }

    public static let standard = TimerPolicy()

    @Sendable public static func wallClock() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    /// `delay` in whole milliseconds, or nil when it is outside 0 s to ``maxDelay``.
    static func milliseconds(_ delay: Duration) -> Int64? {
        guard delay >= .zero, delay <= maxDelay else { return nil }
        let (seconds, attoseconds) = delay.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}

/// A timer operation a reducer declared, in the order it declared them.
package enum TimerOperation: Sendable {
    /// The action is the feature's `Action`, as a value of no generic type.
    case schedule(id: String, after: Duration, action: any Sendable)
    case cancel(id: String)
}

extension DefaultStateStore {
    /// The store's pending timers, due first.
    public var pendingTimers: [PendingTimer] {
        inner.withLock { Array($0.timers.values) }.sorted(by: PendingTimer.dueOrder)
    }

    /// Sets the pending timers as storage kept them (a store loaded from storage), replacing
    /// any the store holds.
    public func restoreTimers(_ timers: [PendingTimer]) {
        inner.withLock { inner in
            inner.timers = Dictionary(timers.map { ($0.id, $0) }, uniquingKeysWith: { _, last in last })
            inner.aheadTimers = nil
        }
    }

    /// Fires the pending timer `id` due at `due`, prepared: its action through the reducer, as
    /// a change of cause `timer` that removes the timer (and holds what the reducer schedules or
    /// cancels). `action` replaces the timer's action (a middleware's). A reducer that refuses
    /// the action, or `refused` (a middleware refused it), still consumes the timer: the change
    /// keeps the state. Nil when no such timer is pending (fired, cancelled or replaced).
    public func prepareTimer(
        id: String, due: Int64, action override: JSONValue? = nil, refused: Bool = false
    ) throws(StoreError) -> PreparedChange? {
        let (pending, version) = inner.withLock { inner in ((inner.aheadTimers ?? inner.timers)[id], inner.headVersion) }
        guard let pending, pending.due == due else { return nil }
        let json: JSONValue
        if let override { json = override } else {
            guard let parsed = JSONCoding.parse(pending.action) else {
                throw StoreError(.invalidAction, "the action of timer '\(id)' is not JSON", currentVersion: version)
            }
            json = parsed
        }
        return try prepareFiring(pending, action: try Self.decodeAction(json, version: version), refused: refused, required: true)
    }

    /// The firing of `timer` with `action`: a refused action keeps the state.
    func prepareFiring(
        _ timer: PendingTimer, action: F.Action, refused: Bool, required: Bool, enforceCeiling: Bool = true
    ) throws(StoreError) -> PreparedChange {
        let dispatcher = Dispatcher<F.Action>()
        let firing = Firing(timer: timer, required: required)
        let next: Next = { [feature] state, _ in
            guard !refused else { return (state, nil, .timer(id: timer.id, action: action)) }
            do throws(ActionRejected) {
                let next = try feature.reduce(action, state: state, dispatch: dispatcher)
                return (next.state, next.effect, .timer(id: timer.id, action: action))
            } catch {
                // The timer fired; its action was refused. Nothing else of it is applied.
                _ = dispatcher.take()
                return (state, nil, .timer(id: timer.id, action: action))
            }
        }
        do {
            return try prepare(ifVersion: nil, enforceCeiling: enforceCeiling, dispatcher: dispatcher, firing: firing, next)
        } catch where error.kind == .actionRejected && !refused {
            // Its change was refused as a whole (a state over the ceiling, too many timers):
            // consumed, keeping the state.
            return try prepareFiring(timer, action: action, refused: true, required: required, enforceCeiling: enforceCeiling)
        }
    }

    /// A recorded change of cause `timer` replayed: its action fires as recorded, removing the
    /// timer of its id if one is pending.
    func prepareTimerReplay(_ payload: [UInt8]?, enforceCeiling: Bool) throws(StoreError) -> PreparedChange {
        guard let payload, let parts = PendingTimer.parse(payload) else {
            throw StoreError(.invalidAction, "a journaled timer is not {\"id\", \"action\", \"due\", \"scheduledAt\"}", currentVersion: version)
        }
        let action = try Self.decodeAction(parts.action, version: version)
        let timer = PendingTimer(
            id: parts.id, action: [], publicAction: (try? EncodedChange.tagged(feature.publicAction(action))) ?? [],
            due: parts.due, scheduledAt: parts.scheduledAt)
        return try prepareFiring(timer, action: action, refused: false, required: false, enforceCeiling: enforceCeiling)
    }

    /// What a change does to the pending timers `base` (the committed ones, or those of the
    /// change ahead): `firing` removed, all of them for a change that sets a whole state, then
    /// the reducer's `operations` in order. Nil when it changes none. Refuses a delay outside
    /// 0 s to 366 days, a bad id, and a change that would hold more than the policy's limit.
    func timerChanges(
        _ base: [String: PendingTimer], cause: ChangeCause<F.Action>, firing: Firing?,
        operations: [TimerOperation], version: Int
    ) throws(StoreError) -> TimerChanges? {
        let clearsAll: Bool =
            switch cause {
            case .reset, .rehydrate, .travel, .import: !base.isEmpty
            case .dispatch, .timer: false
            }
        guard clearsAll || firing != nil || !operations.isEmpty else { return nil }
        var after = clearsAll ? [:] : base
        var touched: [String] = []
        var seen = Set<String>()
        func touch(_ id: String) { if seen.insert(id).inserted { touched.append(id) } }
        if let firing, after[firing.timer.id] != nil {
            after[firing.timer.id] = nil
            touch(firing.timer.id)
        }
        let now = operations.isEmpty ? 0 : timerPolicy.now()
        for operation in operations {
            switch operation {
            case .cancel(let id):
                guard after[id] != nil else { continue }
                after[id] = nil
                touch(id)
            case .schedule(let id, let delay, let sent):
                guard !id.isEmpty, id.utf8.count <= TimerPolicy.maxIDBytes else {
                    throw StoreError(
                        .actionRejected, "a timer's id must be 1 to \(TimerPolicy.maxIDBytes) bytes, not \(id.utf8.count)",
                        currentVersion: version)
                }
                guard let milliseconds = TimerPolicy.milliseconds(delay) else {
                    throw StoreError(
                        .actionRejected, "timer '\(id)' must be due in 0 s to 366 days, not \(delay)", currentVersion: version)
                }
                guard let action = sent as? F.Action else { continue }
                let full: [UInt8]
                let visible: [UInt8]
                do {
                    full = try EncodedChange.tagged(action)
                    visible = try EncodedChange.tagged(feature.publicAction(action))
                } catch {
                    throw StoreError(
                        .encodingFailed, "the action of timer '\(id)' could not be encoded as JSON: \(error)",
                        currentVersion: version)
                }
                after[id] = PendingTimer(id: id, action: full, publicAction: visible, due: now + milliseconds, scheduledAt: now)
                touch(id)
            }
        }
        if after.count > timerPolicy.maxPending, after.count > base.count {
            throw StoreError(
                .actionRejected,
                "the change would leave \(after.count) timers pending in \(feature.name), more than its limit of \(timerPolicy.maxPending)",
                currentVersion: version)
        }
        var changes = TimerChanges(clearsAll: clearsAll)
        for id in touched {
            if let timer = after[id] { changes.set.append(timer) } else if !clearsAll { changes.removed.append(id) }
        }
        guard changes.clearsAll || !changes.set.isEmpty || !changes.removed.isEmpty else { return nil }
        return changes
    }
}

/// A timer being fired by a change; `required`: the change is refused unless the timer is still
/// pending with the same due time (a recorded firing replayed does not require it).
struct Firing: Sendable {
    let timer: PendingTimer
    let required: Bool
}
