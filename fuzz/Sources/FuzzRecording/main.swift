// libFuzzer target: recordings (Sources/StateStore/Recording.swift) read the way
// `state-server replay FILE` and `POST /v1/recordings` read them: the document is parsed and
// checked, replayed offline through the example features, and (when it replays) imported at
// the stores step by step as the session's import does, as a client and as recorded. Nothing
// may trap or hang; a document that reads writes back (`json`) as one that reads the same.
import ExampleFeatures
import FuzzSupport
import StateStore

private let registry: FeatureRegistry = {
    do { return try ExampleFeatures.registry(loginCheckDelay: .milliseconds(1)) } catch {
        fatalError("the example features do not register: \(error)")
    }
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRecording(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = inputBytes(start, count)
    let recording: Recording
    do { recording = try Recording(json: bytes) } catch { return 0 }
    let written = recording.json
    do {
        let again = try Recording(json: written)
        expect(again == recording, "the recording written back reads differently: \(show(written))")
    } catch {
        finding("the recording written back does not read: \(error) in \(show(written))")
    }
    let divergence: Recording.Divergence?
    do { divergence = try recording.replay(with: registry) } catch { return 0 }
    if let divergence {
        // The server answers 422 with this text, and `state-server replay` prints it.
        _ = divergence.description
        return 0
    }
    importAtStores(recording, asRecorded: true)
    importAtStores(recording, asRecorded: false)
    return 0
}

/// Session.importRecording's steps, at the stores: the starting states imported, then each
/// change as recorded (a replay) or as a client would send it. Stops at the first refusal (the
/// server then deletes the session).
private func importAtStores(_ recording: Recording, asRecorded: Bool) {
    var stores: [String: any AnyStateStore] = [:]
    func store(_ name: String) -> (any AnyStateStore)? {
        if let store = stores[name] { return store }
        guard let feature = registry[name] else { return nil }
        let store = feature.makeStore()
        stores[name] = store
        return store
    }
    defer { for store in stores.values { store.cancelAllWork() } }
    for start in recording.features {
        guard let store = store(start.name) else { return }
        let initial = registry[start.name].flatMap { JSONCoding.parse($0.initialStateJSON) }
        if start.state != initial {
            guard let prepared = try? store.prepareImport(json: start.state, asRecorded: asRecorded) else { return }
            store.commit(prepared, startWork: false)
        }
    }
    var current: [String: JSONValue] = [:]
    for start in recording.features { current[start.name] = start.state }
    for step in recording.changes {
        guard let previous = current[step.feature], let state = try? step.state(after: previous),
            let store = store(step.feature)
        else { return }
        current[step.feature] = state
        let prepared: PreparedChange?
        if asRecorded {
            prepared = try? store.prepareReplay(cause: step.cause, payload: step.payload(state: state), enforceCeiling: true)
        } else {
            switch step.cause {
            case "dispatch":
                guard let action = step.action else { return }
                if !store.acceptsFromClient(json: action) { continue }
                prepared = try? store.prepareDispatch(json: action, ifVersion: nil)
            case "rehydrate": prepared = try? store.prepareRehydrate(json: state, ifVersion: nil)
            case "travel": prepared = try? store.prepareTravel(json: state, ifVersion: nil)
            case "import": prepared = try? store.prepareImport(json: state, asRecorded: false)
            case "reset": prepared = try? store.prepareReset(ifVersion: nil)
            default: return
            }
        }
        guard let prepared = prepared else { return }
        store.commit(prepared, startWork: false)
        do { _ = try store.currentJSON() } catch { finding("an imported state does not encode: \(error)") }
    }
}
