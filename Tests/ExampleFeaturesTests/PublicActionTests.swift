import ExampleFeatures
import StateStore
import Testing

@Suite("public actions")
struct PublicActionTests {
    @Test func loginPasswordsAreMaskedInEncodedChanges() throws {
        let store = DefaultStateStore(feature: LoginFeature(checkDelay: .seconds(60)))
        let action = try #require(JSONCoding.parse(Array(#"{"type":"submit","username":"ada","password":"hunter22"}"#.utf8)))
        let change = try store.dispatch(json: action, ifVersion: nil)
        let text = String(decoding: change.action ?? [], as: UTF8.self)
        #expect(!text.contains("hunter22"), "\(text)")
        #expect(text.contains(#""username":"ada""#))
        #expect(store.state.username == "ada")
    }

    @Test func otherActionsAreShownAsSent() throws {
        let store = DefaultStateStore(feature: CounterFeature())
        let action = try #require(JSONCoding.parse(Array(#"{"type":"increment","by":3}"#.utf8)))
        let change = try store.dispatch(json: action, ifVersion: nil)
        #expect(change.action == Array(#"{"by":3,"type":"increment"}"#.utf8))
    }
}
