// libFuzzer target: the example features' actions and states (Sources/ExampleFeatures), decoded
// through the stores' JSON entry points the server uses (AnyFeature/AnyStateStore).
//
// The input is a JSON object like a dispatch or a state body, with more optional members:
// `{"feature": "todos", "state": {...}, "stateVersion": 1, "action": {...}, "actions": [...]}`
// (an unknown or missing feature picks one by the input's length). The state is loaded as a
// saved snapshot is (restoreStore, with migration from `stateVersion`), rehydrated as a client's
// `PUT` is and imported as a recording's start is; each action goes through a client's dispatch
// (prepareDispatch, no work started) and a journal's replay. After every applied change, the
// state the store encodes loads back as a snapshot to the same bytes: whatever the server
// saves, it can restore.
import ExampleFeatures
import FuzzSupport
import StateStore

private let registry: FeatureRegistry = {
    do { return try ExampleFeatures.registry(loginCheckDelay: .milliseconds(1)) } catch {
        fatalError("the example features do not register: \(error)")
    }
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFeatures(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = inputBytes(start, count)
    guard case .object(let fields)? = JSONCoding.parse(bytes) else { return 0 }
    let feature: AnyFeature
    if case .string(let name)? = fields["feature"], let named = registry[name] {
        feature = named
    } else {
        feature = registry.features[bytes.count % registry.features.count]
    }
    var actions: [JSONValue] = []
    if let action = fields["action"] { actions.append(action) }
    if case .array(let more)? = fields["actions"] { actions += more }

    var stores: [any AnyStateStore] = [feature.makeStore()]
    if let state = fields["state"] {
        var stateVersion = feature.stateVersion
        if case .int(let number)? = fields["stateVersion"] { stateVersion = Int(truncatingIfNeeded: number) }
        // A saved snapshot (the store's load), from bytes and from a parsed tree.
        if let restored = try? feature.restoreStore(state: state.bytes, stateVersion: stateVersion, version: 1) {
            checkSnapshot(restored, feature)
            stores.append(restored)
        }
        if let restored = try? feature.restoreStore(json: state, stateVersion: stateVersion, version: 1) {
            checkSnapshot(restored, feature)
        }
        // A client's rehydrate, and a recording's start imported as a client and as recorded.
        let client = feature.makeStore()
        if let prepared = try? client.prepareRehydrate(json: state, ifVersion: 0) {
            expect(client.commit(prepared, startWork: false), "a prepared rehydrate did not commit")
            checkSnapshot(client, feature)
            stores.append(client)
        }
        for asRecorded in [false, true] {
            let imported = feature.makeStore()
            if let prepared = try? imported.prepareImport(json: state, asRecorded: asRecorded) {
                expect(imported.commit(prepared, startWork: false), "a prepared import did not commit")
                checkSnapshot(imported, feature)
            }
        }
        // Time travel to it is held to the client's rules too.
        let travelled = feature.makeStore()
        if let prepared = try? travelled.prepareTravel(json: state, ifVersion: nil) {
            expect(travelled.commit(prepared, startWork: false), "a prepared travel did not commit")
            checkSnapshot(travelled, feature)
        }
    }
    for store in stores {
        for action in actions.prefix(64) {
            _ = store.acceptsFromClient(json: action)
            let before = try? store.currentJSON()
            if let prepared = try? store.prepareDispatch(json: action, ifVersion: nil) {
                expect(store.commit(prepared, startWork: false), "a prepared dispatch did not commit")
            } else {
                let after = try? store.currentJSON()
                expect(before?.state == after?.state && before?.version == after?.version, "a refused dispatch changed the store")
            }
            checkSnapshot(store, feature)
            // The journal's replay of the same action (the server's own actions included).
            if let prepared = try? store.prepareReplay(cause: "dispatch", payload: action.bytes, enforceCeiling: true) {
                expect(store.commit(prepared, startWork: false), "a prepared replay did not commit")
                checkSnapshot(store, feature)
            }
        }
        store.cancelAllWork()
    }
    return 0
}

/// The store's state encodes, parses, and loads back as a snapshot to the same bytes.
private func checkSnapshot(_ store: any AnyStateStore, _ feature: AnyFeature) {
    let current: (state: [UInt8], version: Int)
    do { current = try store.currentJSON() } catch {
        finding("\(feature.name): the state does not encode: \(error)")
    }
    guard let json = JSONCoding.parse(current.state) else {
        finding("\(feature.name): the state encodes as something that is not JSON: \(show(current.state))")
    }
    expect(json.bytes == current.state, "\(feature.name): the state is not canonical JSON: \(show(current.state))")
    let restored: any AnyStateStore
    do {
        restored = try feature.restoreStore(state: current.state, stateVersion: feature.stateVersion, version: current.version)
    } catch {
        finding("\(feature.name): the state \(show(current.state)) does not load back: \(error)")
    }
    do {
        let again = try restored.currentJSON()
        expect(again.state == current.state, "\(feature.name): \(show(current.state)) loads back as \(show(again.state))")
        expect(again.version == current.version, "\(feature.name): version \(current.version) loads back as \(again.version)")
    } catch {
        finding("\(feature.name): a restored state does not encode: \(error)")
    }
}
