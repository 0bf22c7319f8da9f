import Foundation
import StateStore

/// A to-do list.
///
/// Wire shape:
/// - state: `{"items": [{"id": "1", "title": "Milk", "done": false, "reminded": false}], "nextId": 2}`
/// - actions: `{"type": "add", "title": "Milk"}`, `{"type": "toggle", "id": "1"}`,
///   `{"type": "remove", "id": "1"}`, `{"type": "clearCompleted"}`,
///   `{"type": "remind", "id": "1", "after": 60}`, `{"type": "cancelReminder", "id": "1"}`
/// - effect: `{"type": "toast", "message": "Reminder: Milk"}` when a reminder is due
///
/// Ids are assigned by the reducer from `nextId` (`"1"`, `"2"`, ...), never from a clock or a
/// random source, so replaying the same actions gives the same ids.
///
/// `remind` schedules a timer (id `remind-<item id>`) that fires `reminderDue` after `after`
/// seconds, durably: the item then gets `"reminded": true` and a `toast` effect says so.
/// Reminding again replaces the pending reminder; `cancelReminder`, removing the item (or
/// clearing it as done) cancels it. State version 2 added `reminded`; version 1 states are
/// migrated with `"reminded": false`.
public struct TodosFeature: Feature {
    public let name = "todos"
    public let initialState = State(items: [], nextId: 1)

    /// The most Unicode scalar values (code points, not grapheme clusters) a title may have,
    /// after trimming: `"a"` followed by combining accents counts every accent, so a title stays
    /// below 2,000 bytes of UTF-8.
    public static let maxTitleLength = 500
    /// The most items a list may hold, so a client cannot grow a session without bound.
    public static let maxItems = 10_000
    /// The longest a reminder may wait, in seconds (30 days); the shortest is 1 s.
    public static let maxReminderSeconds = 30 * 24 * 3_600

    public init() {}

    /// The id of the timer that reminds of item `id`.
    public static func reminderTimer(_ id: String) -> String { "remind-" + id }

    public struct Item: Codable, Sendable, Equatable {
        public var id: String
        public var title: String
        public var done: Bool
        /// Whether a reminder of this item has fired.
        public var reminded: Bool

        public init(id: String, title: String, done: Bool, reminded: Bool = false) {
            self.id = id
            self.title = title
            self.done = done
            self.reminded = reminded
        }

        /// `reminded` may be left out (a client restoring a list it kept from before
        /// reminders): it is then `false`.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            id = try container.decode(String.self, forKey: .id)
            title = try container.decode(String.self, forKey: .title)
            done = try container.decode(Bool.self, forKey: .done)
            reminded = try container.decodeIfPresent(Bool.self, forKey: .reminded) ?? false
        }
    }

    public struct State: Codable, Sendable, Equatable {
        public var items: [Item]
        /// The number the next added item's id is made from.
        public var nextId: Int

        public init(items: [Item], nextId: Int) {
            self.items = items
            self.nextId = nextId
        }
    }

    public enum Action: Codable, Sendable, Equatable {
        /// Adds an item, not done, with `title` trimmed of surrounding whitespace.
        case add(title: String)
        /// Flips an item between done and not done.
        case toggle(id: String)
        case remove(id: String)
        /// Removes every done item.
        case clearCompleted
        /// Reminds of an item in `after` seconds (1 s to 30 days), replacing a pending reminder
        /// of it; `reminded` becomes `false` until it fires.
        case remind(id: String, after: Int)
        /// Cancels an item's pending reminder (nothing happens when there is none).
        case cancelReminder(id: String)
        /// The reminder's timer fired: only the server sends it.
        case reminderDue(id: String)
    }

    public enum Effect: Codable, Sendable, Equatable {
        /// A message to show briefly.
        case toast(message: String)
    }

    /// Version 2 added each item's `reminded`.
    public var stateVersion: Int { 2 }

    /// From version 1: every item gets `"reminded": false`.
    public func migrate(_ state: JSONValue, from version: Int) throws(ActionRejected) -> JSONValue {
        guard version == 1 else {
            throw ActionRejected("todos has no migration from state version \(version) to \(stateVersion)")
        }
        guard case .object(var fields) = state, case .array(let items)? = fields["items"] else {
            throw ActionRejected("a version 1 todos state is an object with an array of items")
        }
        fields["items"] = .array(items.map { item in
            guard case .object(var itemFields) = item else { return item }
            if itemFields["reminded"] == nil { itemFields["reminded"] = .bool(false) }
            return .object(itemFields)
        })
        return .object(fields)
    }

    /// `reminderDue` comes from the reminder's timer only.
    public func acceptsFromClient(_ action: Action) -> Bool {
        if case .reminderDue = action { return false }
        return true
    }

    /// A restored list must keep the rules `add` keeps: at most `maxItems` items, titles of 1 to
    /// 500 Unicode scalars, unique ids, and a `nextId` past every numeric id (so new ids never clash).
    public func validated(_ state: State) throws(ActionRejected) -> State {
        guard state.items.count <= Self.maxItems else {
            throw ActionRejected("a list holds at most \(Self.maxItems) items")
        }
        var seen = Set<String>()
        for item in state.items {
            guard seen.insert(item.id).inserted else { throw ActionRejected("two items share an id") }
            let length = item.title.trimmingCharacters(in: .whitespacesAndNewlines).unicodeScalars.count
            guard (1...Self.maxTitleLength).contains(length) else {
                throw ActionRejected("every title must have 1 to \(Self.maxTitleLength) Unicode scalars")
            }
            if let number = Int(item.id), number >= state.nextId {
                throw ActionRejected("nextId must be greater than every numeric item id")
            }
        }
        guard state.nextId >= 1 else { throw ActionRejected("nextId must be at least 1") }
        return state
    }

    /// The prose and the rules of `/openapi.json` for the list (its schemas are derived from the
    /// types).
    public func refineSchema(_ schema: inout FeatureSchema) {
        schema.rename(Item.self, to: "TodoItem")
        schema[Item.self][property: "id"].describe(#"Assigned by the reducer from `nextId` (`"1"`, `"2"`, ...)."#)
        schema[Item.self][property: "title"]["minLength"] = 1
        schema[Item.self][property: "title"].describe(
            "1 to \(Self.maxTitleLength) Unicode scalars (code points) once trimmed of surrounding whitespace.")
        schema.state.describe("State of the example feature `todos`. Ids are unique and `nextId` is above every numeric id.")
        schema.state[property: "items"]["maxItems"] = .number(String(Self.maxItems))
        schema.state[property: "nextId"]["minimum"] = 1
        schema.state["example"] = ["items": [["id": "1", "title": "Buy milk", "done": false]], "nextId": 2]
        schema.actionDescription = "An action of the example feature `todos`: a tagged object whose `type` names the case."
        schema[action: "add"].describe(
            "Appends an item, not done, with the title trimmed and id `String(nextId)`. `action_rejected` when the trimmed "
                + "title is empty or longer than \(Self.maxTitleLength) Unicode scalars, the list has 10,000 items, or the "
                + "state would exceed 1 MiB of JSON.")
        schema[action: "add"][property: "title"]["minLength"] = 1
        schema[action: "toggle"].describe("Flips `done`; unknown id: `action_rejected`.")
        schema[action: "remove"].describe("Removes the item; unknown id: `action_rejected`.")
        schema[action: "clearCompleted"].describe("Removes every done item (and cancels their reminders).")
        schema[action: "remind"].describe(
            "Schedules a reminder of the item in `after` seconds (1 to \(Self.maxReminderSeconds)), a timer of id "
                + "`remind-<id>` that replaces a pending one; sets `reminded` to false. Unknown id or a delay out of "
                + "range: `action_rejected`.")
        schema[action: "remind"][property: "after"]["minimum"] = 1
        schema[action: "remind"][property: "after"]["maximum"] = .number(String(Self.maxReminderSeconds))
        schema[action: "cancelReminder"].describe("Cancels the item's pending reminder; unknown id: `action_rejected`.")
        schema[action: "reminderDue"].describe(
            "Sent by the reminder's timer only (a client sending it gets `422 action_rejected`): sets `reminded` and "
                + "shows a `toast`.")
        schema[Item.self][property: "reminded"].describe("Whether a reminder of the item has fired (`false` until one fires).")
        schema[effect: "toast"].describe("Effect of the example feature `todos`: a reminder is due.")
        schema[effect: "toast"]["example"] = ["type": "toast", "message": "Reminder: Buy milk"]
        schema.dispatchExample = ("todos: add", ["type": "add", "title": "Buy milk"])
    }

    public func reduce(
        _ action: Action, state: State, dispatch: Dispatcher<Action>
    ) throws(ActionRejected) -> StateContainer<State, Effect> {
        var state = state
        switch action {
        case .add(let title):
            let title = title.trimmingCharacters(in: .whitespacesAndNewlines)
            guard !title.isEmpty else {
                throw ActionRejected("a todo's title must not be empty")
            }
            let length = title.unicodeScalars.count
            guard length <= Self.maxTitleLength else {
                throw ActionRejected(
                    "a todo's title must have at most \(Self.maxTitleLength) Unicode scalars, not \(length)")
            }
            guard state.items.count < Self.maxItems else {
                throw ActionRejected("the list is full: it already has \(Self.maxItems) items")
            }
            let id = String(state.nextId)
            let (nextId, overflow) = state.nextId.addingReportingOverflow(1)
            guard !overflow else {
                throw ActionRejected("no ids are left for new todos")
            }
            // Only possible after rehydrating a state whose nextId is behind its items' ids.
            guard !state.items.contains(where: { $0.id == id }) else {
                throw ActionRejected("the id '\(id)' is already in use: nextId must be above every item's id")
            }
            state.items.append(Item(id: id, title: title, done: false))
            state.nextId = nextId
        case .toggle(let id):
            let index = try Self.index(of: id, in: state)
            state.items[index].done.toggle()
        case .remove(let id):
            let index = try Self.index(of: id, in: state)
            state.items.remove(at: index)
            dispatch.cancel(id: Self.reminderTimer(id))
        case .clearCompleted:
            for item in state.items where item.done { dispatch.cancel(id: Self.reminderTimer(item.id)) }
            state.items.removeAll { $0.done }
        case .remind(let id, let after):
            let index = try Self.index(of: id, in: state)
            guard (1...Self.maxReminderSeconds).contains(after) else {
                throw ActionRejected("a reminder's delay must be from 1 to \(Self.maxReminderSeconds) seconds, not \(after)")
            }
            state.items[index].reminded = false
            dispatch.schedule(.reminderDue(id: id), after: .seconds(after), id: Self.reminderTimer(id))
        case .cancelReminder(let id):
            _ = try Self.index(of: id, in: state)
            dispatch.cancel(id: Self.reminderTimer(id))
        case .reminderDue(let id):
            // Removing an item cancels its reminder, so it is there; a list restored without it
            // (a PUT also cancels timers) leaves nothing to remind of.
            guard let index = state.items.firstIndex(where: { $0.id == id }) else { return StateContainer(state) }
            state.items[index].reminded = true
            return StateContainer(state, effect: .toast(message: "Reminder: " + state.items[index].title))
        }
        return StateContainer(state)
    }

    private static func index(of id: String, in state: State) throws(ActionRejected) -> Int {
        guard let index = state.items.firstIndex(where: { $0.id == id }) else {
            let shown = id.count <= 32 ? id : id.prefix(32) + "…"
            throw ActionRejected("there is no todo with id '\(shown)'")
        }
        return index
    }
}
