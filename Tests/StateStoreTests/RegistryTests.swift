import StateStore
import StateStoreTesting
import Testing

@Suite("FeatureRegistry")
struct RegistryTests {
    @Test func featuresAreListedInRegistrationOrder() throws {
        var registry = FeatureRegistry()
        try registry.register(Named(name: "zeta"))
        try registry.register(Ledger(name: "alpha"))
        try registry.register(Named(name: "Mid_dle-9"))
        #expect(registry.names == ["zeta", "alpha", "Mid_dle-9"])
        #expect(registry.features.map(\.name) == registry.names)
        #expect(registry["alpha"]?.name == "alpha")
        #expect(registry["missing"] == nil)
        #expect(registry["ALPHA"] == nil)
    }

    @Test func aNameCanBeRegisteredOnlyOnce() throws {
        var registry = FeatureRegistry()
        try registry.register(Named(name: "counter"))
        #expect {
            try registry.register(Ledger(name: "counter"))
        } throws: { error in
            (error as? RegistryError)?.message == "feature 'counter' is registered twice"
        }
        #expect(registry.names == ["counter"])
    }

    @Test(arguments: ["", "has space", "slash/name", "dot.name", "ünïcode", "query?x", "%41"])
    func aNameMustBeURLSafe(name: String) {
        var registry = FeatureRegistry()
        #expect(throws: RegistryError.self) { try registry.register(Named(name: name)) }
        #expect(registry.names.isEmpty)
    }

    @Test func aRegisteredFeatureMakesIndependentStores() throws {
        var registry = FeatureRegistry()
        try registry.register(Ledger(name: "ledger"))
        let feature = try #require(registry["ledger"])
        #expect(text(feature.initialStateJSON) == #"{"finished":[],"ratio":0,"total":0}"#)

        let first = feature.makeStore()
        let second = feature.makeStore()
        #expect(first.featureName == "ledger")
        _ = try first.dispatch(json: json(#"{"type":"add","amount":1}"#), ifVersion: nil)
        #expect(try first.currentJSON().version == 1)
        #expect(try second.currentJSON().version == 0)
        #expect(try second.currentJSON().state == feature.initialStateJSON)
    }

    @Test func aStoreFromTheRegistryReportsRejectedFollowUps() async throws {
        var registry = FeatureRegistry()
        try registry.register(Ledger())
        let rejected = Recorder<StoreError>()
        let store = try #require(registry["ledger"]).makeStore { rejected.append($0) }
        _ = try store.dispatch(json: json(#"{"type":"startDoomedWork"}"#), ifVersion: nil)
        #expect(await rejected.wait(forCount: 1))
        #expect(rejected.values.first?.message == "too late")
    }
}
