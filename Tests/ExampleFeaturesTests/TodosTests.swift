import ExampleFeatures
import StateStore
import StateStoreTesting
import Testing

@Suite("todos")
struct TodosTests {
    typealias Item = TodosFeature.Item

    @Test func addToggleRemoveAndClearCompleted() {
        let store = TestStore(TodosFeature())
        store.send(.add(title: "Milk")) {
            $0.items = [Item(id: "1", title: "Milk", done: false)]
            $0.nextId = 2
        }
        store.send(.add(title: "Eggs")) {
            $0.items.append(Item(id: "2", title: "Eggs", done: false))
            $0.nextId = 3
        }
        store.send(.add(title: "Bread")) {
            $0.items.append(Item(id: "3", title: "Bread", done: false))
            $0.nextId = 4
        }
        store.send(.toggle(id: "1")) { $0.items[0].done = true }
        store.send(.toggle(id: "3")) { $0.items[2].done = true }
        store.send(.toggle(id: "3")) { $0.items[2].done = false }
        store.send(.remove(id: "2")) { $0.items.remove(at: 1) }
        store.send(.clearCompleted) { $0.items = [Item(id: "3", title: "Bread", done: false)] }
        store.send(.clearCompleted)
        // Ids are never reused: the next one comes from nextId, not the item count.
        store.send(.add(title: "Jam")) {
            $0.items.append(Item(id: "4", title: "Jam", done: false))
            $0.nextId = 5
        }
        store.finish()
    }

    @Test func theWireShape() throws {
        let store = TestStore(TodosFeature())
        #expect(text(try store.store.currentJSON().state) == #"{"items":[],"nextId":1}"#)
        let added = store.send(json: #"{"type":"add","title":"  Milk \n"}"#) {
            $0.items = [Item(id: "1", title: "Milk", done: false)]
            $0.nextId = 2
        }
        #expect(text(added?.action) == #"{"title":"  Milk \n","type":"add"}"#)
        #expect(text(added?.state) == #"{"items":[{"done":false,"id":"1","reminded":false,"title":"Milk"}],"nextId":2}"#)
        store.send(json: #"{"type":"toggle","id":"1"}"#) { $0.items[0].done = true }
        let cleared = store.send(json: #"{"type":"clearCompleted"}"#) { $0.items = [] }
        #expect(text(cleared?.action) == #"{"type":"clearCompleted"}"#)
        store.send(json: #"{"type":"add","title":"Eggs"}"#) {
            $0.items = [Item(id: "2", title: "Eggs", done: false)]
            $0.nextId = 3
        }
        store.send(json: #"{"type":"remove","id":"2"}"#) { $0.items = [] }
        store.sendRejected(json: #"{"type":"toggle","id":"2"}"#)
        store.finish()

        #expect(throws: StoreError.self) {
            _ = try store.store.dispatch(json: json(#"{"type":"toggle","id":2}"#), ifVersion: nil)
        }
    }

    @Test func titlesAreTrimmed() {
        let store = TestStore(TodosFeature())
        store.send(.add(title: " \t\n  Call Ada \r\n ")) {
            $0.items = [Item(id: "1", title: "Call Ada", done: false)]
            $0.nextId = 2
        }
        // Inner whitespace is kept.
        store.send(.add(title: "a  b\nc")) {
            $0.items.append(Item(id: "2", title: "a  b\nc", done: false))
            $0.nextId = 3
        }
        store.finish()
    }

    @Test(arguments: ["", " ", "  \n\t ", "\u{00A0}\u{2003}"])
    func anEmptyTitleIsRejected(title: String) {
        let store = TestStore(TodosFeature())
        #expect(store.sendRejected(.add(title: title)) == "a todo's title must not be empty")
        store.finish()
    }

    @Test func aTitleHasAtMost500UnicodeScalars() {
        let store = TestStore(TodosFeature())
        let title500 = String(repeating: "x", count: 500)
        store.send(.add(title: title500)) {
            $0.items = [Item(id: "1", title: title500, done: false)]
            $0.nextId = 2
        }
        #expect(
            store.sendRejected(.add(title: title500 + "y"))
                == "a todo's title must have at most 500 Unicode scalars, not 501")
        // The limit applies after trimming.
        store.send(.add(title: "   " + title500 + "\n")) {
            $0.items.append(Item(id: "2", title: title500, done: false))
            $0.nextId = 3
        }
        // Unicode scalars, not bytes: 500 four-byte scalars fit; not characters: an emoji of two
        // scalars counts two.
        let faces500 = String(repeating: "🙂", count: 500)
        store.send(.add(title: faces500)) {
            $0.items.append(Item(id: "3", title: faces500, done: false))
            $0.nextId = 4
        }
        let thumbs250 = String(repeating: "👍🏽", count: 250)
        store.send(.add(title: thumbs250)) {
            $0.items.append(Item(id: "4", title: thumbs250, done: false))
            $0.nextId = 5
        }
        store.sendRejected(.add(title: thumbs250 + "👍🏽"))
        store.finish()
    }

    /// Issue 11 item 2: "a" and 25,000 combining accents is one character (grapheme cluster) of
    /// 50 KB; counted in Unicode scalars it is 25,001, far over the limit.
    @Test func combiningMarksCountEach() throws {
        let store = TestStore(TodosFeature())
        let zalgo = "a" + String(repeating: "\u{0301}", count: 25_000)
        #expect(zalgo.count == 1)
        #expect(
            store.sendRejected(.add(title: zalgo))
                == "a todo's title must have at most 500 Unicode scalars, not 25001")
        let plain = DefaultStateStore(feature: TodosFeature())
        let item = TodosFeature.Item(id: "1", title: zalgo, done: false)
        #expect(throws: StoreError.self) { try plain.rehydrate(.init(items: [item], nextId: 2)) }
        store.finish()
    }

    /// Issue 11 item 2: the state's size ceiling (1 MiB as JSON) bounds a list of long titles
    /// before its 10,000 items do.
    @Test func theListStopsGrowingAtTheStateSizeCeiling() throws {
        let store = DefaultStateStore(feature: TodosFeature())
        let title = String(repeating: "🙂", count: 500)  // 2,000 bytes of UTF-8
        // Start near the ceiling (about 2,040 bytes an item), then add until refused.
        let items = (1...505).map { TodosFeature.Item(id: String($0), title: title, done: false) }
        try store.rehydrate(.init(items: items, nextId: 506))
        var refusal: StoreError?
        for _ in 0..<20 {
            do { _ = try store.dispatch(.add(title: title)) } catch {
                refusal = error
                break
            }
        }
        let error = try #require(refusal)
        #expect(error.kind == .actionRejected)
        #expect(error.message.hasPrefix("the state of todos would take "), "\(error)")
        #expect(error.message.hasSuffix("bytes as JSON, more than its limit of 1048576"), "\(error)")
        let size = try store.currentJSON().state.count
        #expect(size <= TodosFeature().maxStateBytes)
        #expect(size > TodosFeature().maxStateBytes - 2_100)
        #expect(store.state.items.count == 505 + store.version - 1)
        #expect(store.version > 1, "some items were added before the ceiling")
    }

    @Test func unknownIdsAreRejected() {
        let store = TestStore(TodosFeature())
        #expect(store.sendRejected(.toggle(id: "1")) == "there is no todo with id '1'")
        #expect(store.sendRejected(.remove(id: "1")) == "there is no todo with id '1'")
        store.send(.add(title: "Milk")) {
            $0.items = [Item(id: "1", title: "Milk", done: false)]
            $0.nextId = 2
        }
        store.sendRejected(.toggle(id: "01"))
        store.sendRejected(.toggle(id: " 1"))
        store.sendRejected(.remove(id: "2"))
        store.send(.remove(id: "1")) { $0.items = [] }
        store.sendRejected(.remove(id: "1"))
        store.finish()
    }

    @Test func aListHoldsAtMost10000Items() {
        let full = TodosFeature.State(
            items: (1...10_000).map { Item(id: String($0), title: "item \($0)", done: false) },
            nextId: 10_001)
        let store = TestStore(TodosFeature(), state: full)
        #expect(store.sendRejected(.add(title: "one more")) == "the list is full: it already has 10000 items")
        store.send(.remove(id: "10000")) { $0.items.removeLast() }
        store.send(.add(title: "one more")) {
            $0.items.append(Item(id: "10001", title: "one more", done: false))
            $0.nextId = 10_002
        }
        store.sendRejected(.add(title: "and another"))
        store.finish()
    }

    @Test func idsNeverOverflow() {
        let store = TestStore(TodosFeature(), state: .init(items: [], nextId: Int.max))
        #expect(store.sendRejected(.add(title: "last")) == "no ids are left for new todos")
        store.finish()
    }

    @Test func anIdAlreadyInUseIsNotReused() {
        // Only reachable by rehydrating an inconsistent state.
        let state = TodosFeature.State(items: [Item(id: "1", title: "Milk", done: false)], nextId: 1)
        let store = TestStore(TodosFeature(), state: state)
        store.sendRejected(.add(title: "Eggs"))
        #expect(store.state.items.count == 1)
        store.finish()
    }

    @Test func replayingTheSameActionsGivesTheSameState() throws {
        let actions: [TodosFeature.Action] = [
            .add(title: "a"), .add(title: "b"), .toggle(id: "1"), .add(title: " c "), .remove(id: "2"),
            .clearCompleted, .add(title: "d"), .toggle(id: "4"),
        ]
        let first = DefaultStateStore(feature: TodosFeature())
        let second = DefaultStateStore(feature: TodosFeature())
        for action in actions { try first.dispatch(action) }
        for action in actions { try second.dispatch(action) }
        #expect(first.state == second.state)
        #expect(first.state.items.map(\.id) == ["3", "4"])
        #expect(first.state.nextId == 5)
        #expect(try first.currentJSON().state == second.currentJSON().state)
    }
}

@Suite("todos: state version 2")
struct TodosMigrationTests {
    @Test("a list saved at state version 1 is migrated with reminded false; a later version is refused")
    func migratesVersion1() throws {
        let registry = try ExampleFeatures.registry()
        let todos = try #require(registry["todos"])
        #expect(todos.stateVersion == 2)
        let saved = #"{"items":[{"id":"1","title":"Milk","done":true},{"id":"2","title":"Eggs","done":false}],"nextId":3}"#
        let store = try todos.restoreStore(state: Array(saved.utf8), stateVersion: 1, version: 7)
        let current = try store.currentJSON()
        #expect(current.version == 7)
        #expect(String(decoding: current.state, as: UTF8.self)
            == #"{"items":[{"done":true,"id":"1","reminded":false,"title":"Milk"},{"done":false,"id":"2","reminded":false,"title":"Eggs"}],"nextId":3}"#)
        #expect(throws: StoreError.self) {
            try todos.restoreStore(state: Array(saved.utf8), stateVersion: 3, version: 7)
        }
    }
}
