import ExampleFeatures
import StateStore
import StateStoreTesting
import Testing

@Suite("ExampleFeatures.registry")
struct ExampleFeaturesRegistryTests {
    @Test func registersTheFourFeaturesInOrder() throws {
        let registry = try ExampleFeatures.registry()
        #expect(registry.names == ["counter", "todos", "settings", "login"])
    }

    @Test func initialStatesOnTheWire() throws {
        let registry = try ExampleFeatures.registry()
        #expect(text(registry["counter"]?.initialStateJSON) == #"{"count":0}"#)
        #expect(text(registry["todos"]?.initialStateJSON) == #"{"items":[],"nextId":1}"#)
        #expect(
            text(registry["settings"]?.initialStateJSON)
                == ##"{"backgroundColor":"#FF0000","textColor":"#FFFFFF"}"##)
        #expect(
            text(registry["login"]?.initialStateJSON)
                == #"{"error":null,"isLoading":false,"isLoggedIn":false,"username":""}"#)
    }

    @Test func theLoginDelayIsPassedToTheFeature() async throws {
        let registry = try ExampleFeatures.registry(loginCheckDelay: .milliseconds(10))
        let store = try #require(registry["login"]).makeStore()
        let changes = Recorder<EncodedChange>()
        _ = store.addJSONObserver { changes.append($0) }
        let submit = json(#"{"type":"submit","username":"ada","password":"password1"}"#)
        _ = try store.dispatch(json: submit, ifVersion: nil)
        #expect(await changes.wait(forCount: 2))
        #expect(text(changes.values.last?.action) == #"{"type":"succeeded"}"#)
        #expect(
            text(changes.values.last?.state)
                == #"{"error":null,"isLoading":false,"isLoggedIn":true,"username":"ada"}"#)
    }

    @Test func theDefaultLoginDelay() {
        #expect(LoginFeature().checkDelay == .milliseconds(200))
    }
}
