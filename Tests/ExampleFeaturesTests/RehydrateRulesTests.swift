import ExampleFeatures
import StateStore
import Testing

/// `rehydrate` accepts only states that keep each feature's rules (`Feature.validated`).
@Suite("rehydrate rules")
struct RehydrateRulesTests {
    private func refusal(_ body: () throws -> Void) -> StoreError? {
        do { try body() } catch let error as StoreError { return error } catch { return nil }
        return nil
    }

    @Test func settingsColoursAreCheckedAndStoredUpperCase() throws {
        let store = DefaultStateStore(feature: SettingsFeature())
        let error = refusal { try store.rehydrate(.init(backgroundColor: "red", textColor: "#FFFFFF")) }
        #expect(error?.kind == .invalidState)
        #expect(store.version == 0)
        try store.rehydrate(.init(backgroundColor: "#00ff00", textColor: "#abcdef"))
        #expect(store.state == .init(backgroundColor: "#00FF00", textColor: "#ABCDEF"))
        #expect(store.version == 1)
    }

    @Test func todosNeedUniqueIdsValidTitlesAndANextIdPastTheIds() throws {
        let store = DefaultStateStore(feature: TodosFeature())
        let item = { (id: String, title: String) in TodosFeature.Item(id: id, title: title, done: false) }
        let bad: [TodosFeature.State] = [
            .init(items: [item("1", "a"), item("1", "b")], nextId: 5),
            .init(items: [item("1", "   ")], nextId: 5),
            .init(items: [item("1", String(repeating: "x", count: 501))], nextId: 5),
            .init(items: [item("7", "a")], nextId: 3),
            .init(items: [], nextId: 0),
        ]
        for state in bad {
            #expect(refusal { try store.rehydrate(state) }?.kind == .invalidState, "\(state)")
        }
        #expect(store.version == 0)
        try store.rehydrate(.init(items: [item("1", "a"), item("x", "b")], nextId: 2))
        #expect(store.version == 1)
    }

    @Test func loginCannotBeRestoredMidCheck() throws {
        let store = DefaultStateStore(feature: LoginFeature())
        var state = LoginFeature().initialState
        state.isLoading = true
        #expect(refusal { try store.rehydrate(state) }?.kind == .invalidState)
        state.isLoading = false
        state.isLoggedIn = true
        state.username = "ada"
        try store.rehydrate(state)
        #expect(store.state.isLoggedIn)
    }

    @Test func theJSONPathRefusesTheSameStates() throws {
        let store = DefaultStateStore(feature: SettingsFeature())
        let json = try #require(JSONCoding.parse(Array(##"{"backgroundColor":"#12345","textColor":"#FFFFFF"}"##.utf8)))
        #expect(refusal { _ = try store.rehydrate(json: json, ifVersion: nil) }?.kind == .invalidState)
        #expect(store.version == 0)
    }
}
