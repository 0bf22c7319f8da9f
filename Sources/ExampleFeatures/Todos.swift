import Foundation
import StateStore

/// A to-do list.
///
/// Wire shape:
/// - state: `{"items": [{"id": "1", "title": "Milk", "done": false}], "nextId": 2}`
/// - actions: `{"type": "add", "title": "Milk"}`, `{"type": "toggle", "id": "1"}`,
///   `{"type": "remove", "id": "1"}`, `{"type": "clearCompleted"}`
///
/// Ids are assigned by the reducer from `nextId` (`"1"`, `"2"`, ...), never from a clock or a
/// random source, so replaying the same actions gives the same ids.
public struct TodosFeature: Feature {
    public let name = "todos"
    public let initialState = State(items: [], nextId: 1)

    /// The most Unicode scalar values (code points, not grapheme clusters) a title may have,
    /// after trimming: `"a"` followed by combining accents counts every accent, so a title stays
    /// below 2,000 bytes of UTF-8.
    public static let maxTitleLength = 500
    /// The most items a list may hold, so a client cannot grow a session without bound.
    public static let maxItems = 10_000

    public init() {}

    public struct Item: Codable, Sendable, Equatable {
        public var id: String
        public var title: String
        public var done: Bool

        public init(id: String, title: String, done: Bool) {
            self.id = id
            self.title = title
            self.done = done
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
    }

    public typealias Effect = Never

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
        schema[action: "clearCompleted"].describe("Removes every done item.")
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
        case .clearCompleted:
            state.items.removeAll { $0.done }
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
