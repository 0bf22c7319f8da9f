import StateStore
import StateStoreTesting
import Synchronization
import Testing

/// Reminders a reducer schedules as timers: every path of timers in the store (schedule,
/// replace, cancel, a refused change, a timer that reschedules itself, the limits).
struct Reminders: Feature {
    let name = "reminders"
    let initialState = State(items: [], ticks: 0)

    struct State: Codable, Sendable, Equatable {
        var items: [Item]
        var ticks: Int
    }

    struct Item: Codable, Sendable, Equatable {
        var id: Int
        var text: String
        var reminded = false
    }

    enum Action: Codable, Sendable, Equatable {
        /// Adds an item; with `remindIn`, schedules `remind(id:)` under `remind-<id>`.
        case add(text: String, remindIn: Int?)
        /// Fired by the timer: marks the item reminded, with an effect. Refused for an item
        /// that is gone.
        case remind(id: Int)
        /// Schedules `remind(id:)` again (replacing the timer of the same id).
        case snooze(id: Int, seconds: Int)
        /// Removes the item and cancels its timer.
        case dismiss(id: Int)
        /// Schedules `tick` in a second, `remaining` times in a row (each tick schedules the next).
        case tick(remaining: Int)
        /// Schedules `tick(remaining: 0)` under each of `ids`, after `milliseconds`.
        case schedule(ids: [String], milliseconds: Int)
        /// Schedules a timer, then refuses the action.
        case scheduleThenRefuse(id: String)
        /// Cancels the timer `id`.
        case cancel(id: String)
    }

    enum Effect: Codable, Sendable, Equatable {
        case reminder(text: String)
    }

    static func timerID(_ item: Int) -> String { "remind-\(item)" }

    func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .add(let text, let remindIn):
            let id = (state.items.map(\.id).max() ?? 0) + 1
            state.items.append(Item(id: id, text: text))
            if let remindIn { dispatch.schedule(.remind(id: id), after: .seconds(remindIn), id: Self.timerID(id)) }
        case .remind(let id):
            guard let index = state.items.firstIndex(where: { $0.id == id }) else { throw ActionRejected("no item \(id)") }
            state.items[index].reminded = true
            return StateContainer(state, effect: .reminder(text: state.items[index].text))
        case .snooze(let id, let seconds):
            dispatch.schedule(.remind(id: id), after: .seconds(seconds), id: Self.timerID(id))
        case .dismiss(let id):
            state.items.removeAll { $0.id == id }
            dispatch.cancel(id: Self.timerID(id))
        case .tick(let remaining):
            state.ticks += 1
            if remaining > 0 { dispatch.schedule(.tick(remaining: remaining - 1), after: .seconds(1), id: "tick") }
        case .schedule(let ids, let milliseconds):
            for id in ids { dispatch.schedule(.tick(remaining: 0), after: .milliseconds(milliseconds), id: id) }
        case .scheduleThenRefuse(let id):
            dispatch.schedule(.tick(remaining: 0), after: .seconds(1), id: id)
            throw ActionRejected("refused after scheduling")
        case .cancel(let id):
            dispatch.cancel(id: id)
        }
        return StateContainer(state)
    }
}

/// A clock for a store's ``TimerPolicy``: milliseconds that move only when a test sets them.
final class ManualMilliseconds: Sendable {
    private let value: Mutex<Int64>

    init(_ start: Int64 = 1_000_000) {
        value = Mutex(start)
    }

    var now: Int64 { value.withLock { $0 } }
    func advance(by milliseconds: Int64) { value.withLock { $0 += milliseconds } }

    func policy(maxPending: Int = TimerPolicy.defaultMaxPending) -> TimerPolicy {
        TimerPolicy(maxPending: maxPending, now: { self.now })
    }
}

/// A known issue whose comment mentions `text`.
func mentioning(_ text: String) -> KnownIssueMatcher {
    { issue in issue.comments.contains { $0.rawValue.contains(text) } }
}
