// Deltas: changes() asks for JSON Patch events by default, applies them, and resynchronises
// from a snapshot when a patch does not fit the state it holds. And the devtools helpers:
// history, travel, recordings.

import ExampleFeatures
import Foundation
@testable import StateClient
import StateStore
import TestSupport
import Testing

@Suite("changes(): JSON Patch deltas", .timeLimit(.minutes(5)))
struct DeltaTests {
    static func title(_ number: Int) -> String {
        "todo \(number): " + String(repeating: "calm and readable ", count: 8)
    }

    static let todosSnapshot = """
        id: 3
        event: snapshot
        data: {"features":{"todos":{"version":1,"state":{"items":[{"done":false,"id":"1","title":"milk"}],"nextId":2}}}}


        """

    static func patched(id: Int, version: Int, base: Int, patch: String) -> ServerSentEvent {
        ServerSentEvent(
            type: "state",
            data: #"{"feature":"todos","version":\#(version),"cause":"dispatch","action":{"type":"toggle","id":"1"},"baseVersion":\#(base),"patch":\#(patch),"effect":null}"#,
            id: String(id))
    }

    static func snapshotEvent() -> ServerSentEvent {
        ServerSentEvent(
            type: "snapshot",
            data: #"{"features":{"todos":{"version":1,"state":{"items":[{"done":false,"id":"1","title":"milk"}],"nextId":2}}}}"#,
            id: "3")
    }

    @Test("a patched event is applied to the state held at its base version")
    func decoderApplies() throws {
        var decoder = ChangeDecoder<TodosFeature>(featureName: "todos", lastEventID: nil, deltas: true)
        _ = try decoder.decode(Self.snapshotEvent())
        let toggled = try #require(try decoder.decode(Self.patched(id: 4, version: 2, base: 1, patch: #"[{"op":"replace","path":"/items/0/done","value":true}]"#)))
        #expect(toggled.version == 2 && toggled.state.items.map(\.done) == [true] && toggled.change?.action == .toggle(id: "1"))
        let added = try #require(try decoder.decode(Self.patched(
            id: 6, version: 3, base: 2,
            patch: #"[{"op":"add","path":"/items/1","value":{"done":false,"id":"2","title":"eggs"}},{"op":"replace","path":"/nextId","value":3}]"#)))
        #expect(added.state.items.map(\.title) == ["milk", "eggs"] && added.state.nextId == 3)
    }

    @Test("a patch from another version, one that does not apply, or one with no state held: resync, nothing delivered")
    func decoderRefuses() throws {
        let toggle = #"[{"op":"replace","path":"/items/0/done","value":true}]"#
        var decoder = ChangeDecoder<TodosFeature>(featureName: "todos", lastEventID: nil, deltas: true)
        _ = try decoder.decode(Self.snapshotEvent())
        #expect(throws: ChangeDecoder<TodosFeature>.Resync.self) { try decoder.decode(Self.patched(id: 4, version: 6, base: 5, patch: toggle)) }
        #expect(throws: ChangeDecoder<TodosFeature>.Resync.self) {
            try decoder.decode(Self.patched(id: 4, version: 2, base: 1, patch: #"[{"op":"remove","path":"/items/7"}]"#))
        }
        // Resuming from an id alone: no state to patch.
        var resumed = ChangeDecoder<TodosFeature>(featureName: "todos", lastEventID: 3, deltas: true)
        #expect(throws: ChangeDecoder<TodosFeature>.Resync.self) { try resumed.decode(Self.patched(id: 4, version: 2, base: 1, patch: toggle)) }
        // Still at the snapshot: a fitting patch goes through after the refusals.
        #expect(try decoder.decode(Self.patched(id: 4, version: 2, base: 1, patch: toggle))?.state.items.first?.done == true)
    }

    @Test("a patch that does not fit: the stream reconnects without Last-Event-ID and goes on from the fresh snapshot")
    func resyncsOverTheWire() async throws {
        let wrong = "id: 4\nevent: state\ndata: {\"feature\":\"todos\",\"version\":9,\"cause\":\"dispatch\",\"action\":null,\"baseVersion\":8,\"patch\":[],\"effect\":null}\n\n"
        let fresh = """
            id: 7
            event: snapshot
            data: {"features":{"todos":{"version":4,"state":{"items":[{"done":true,"id":"1","title":"milk"}],"nextId":2}}}}

            id: 8
            event: state
            data: {"feature":"todos","version":5,"cause":"dispatch","action":{"type":"toggle","id":"1"},"baseVersion":4,"patch":[{"op":"replace","path":"/items/0/done","value":false}],"effect":null}


            """
        let server = try ScriptedEventServer(connections: [
            .init(Self.todosSnapshot + wrong, thenEnd: false),
            .init(fresh, thenEnd: false),
        ])
        defer { Task { await server.stop() } }
        let store = StateServerClient(baseURL: server.baseURL).store(TodosFeature(), credentials: SessionCredentials(id: "s", token: "t"))
        let recorder = EventRecorder(store.changes())
        let events = try await recorder.wait(for: "the change after the resync", timeout: .seconds(60), detail: { server.requestLog }) { $0.last?.version == 5 }
        #expect(events.map(\.version) == [1, 4, 5], "the wrong patch is not delivered; a snapshot follows")
        #expect(events.map(\.isSnapshot) == [true, true, false])
        #expect(events.last?.state.items.first?.done == false)
        #expect(server.lastEventIDs == [nil, nil], "the resync asks for a snapshot, not a resume")
        try await recorder.stop()
        #expect(recorder.error == nil)
    }

    @Test("on a real server, with and without deltas, the same events arrive; typed states equal GET")
    func sameEventsEitherWay() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let todos = client.store(TodosFeature(), credentials: credentials)
            for number in 0..<5 { try await todos.dispatch(.add(title: Self.title(number))) }
            let withDeltas = EventRecorder(todos.changes())
            let whole = EventRecorder(todos.changes(deltas: false))
            try await withDeltas.wait(for: "the snapshot") { !$0.isEmpty }
            try await whole.wait(for: "the snapshot") { !$0.isEmpty }
            for number in 5..<10 { try await todos.dispatch(.add(title: Self.title(number))) }
            let ids = try await todos.state().state.items.map(\.id)
            try await todos.dispatch(.toggle(id: ids[3]))
            try await todos.dispatch(.remove(id: ids[1]))
            try await todos.rehydrate(.init(items: [], nextId: 1))
            try await todos.dispatch(.add(title: Self.title(99)))
            let final = try await todos.state()
            let patched = try await withDeltas.wait(for: "the last change") { $0.last?.version == final.version }
            let full = try await whole.wait(for: "the last change") { $0.last?.version == final.version }
            #expect(patched.map(\.version) == full.map(\.version))
            #expect(patched.map(\.state) == full.map(\.state))
            #expect(patched.map(\.eventID) == full.map(\.eventID))
            #expect(patched.last?.state == final.state)
            #expect(patched.filter(\.isSnapshot).count == 1, "no resync on a healthy stream")
            try await withDeltas.stop()
            try await whole.stop()
        }
    }
}

@Suite("History, travel and recordings", .timeLimit(.minutes(5)))
struct DevtoolsClientTests {
    @Test("history pages, a travel with its cause, and a recording imported into a new session with the same states")
    func helpers() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let counter = client.store(CounterFeature(), credentials: credentials)
            for _ in 0..<3 { try await counter.dispatch(.increment(by: 2)) }
            try await client.store(TodosFeature(), credentials: credentials).dispatch(.add(title: "milk"))

            let first = try await client.history(credentials, limit: 2)
            #expect(first.changes.map(\.version) == [1, 2] && first.next == 2 && !first.truncated)
            let rest = try await client.history(credentials, after: try #require(first.next))
            #expect(rest.changes.map(\.feature) == ["counter", "todos"] && rest.next == nil)
            let todosOnly = try await client.history(credentials, feature: "todos")
            #expect(todosOnly.changes.count == 1 && todosOnly.changes[0].action?["title"] == .string("milk"))

            let travelled = try await counter.travel(to: 1)
            #expect(travelled.version == 4 && travelled.state.count == 2 && travelled.cause == .travel)
            let history = try await client.history(credentials, feature: "counter")
            #expect(history.changes.last?.cause == "travel")
            await #expect { try await counter.travel(to: 40) } throws: {
                ($0 as? StateClientError)?.code == .versionUnreachable
            }

            let recording = try await client.recording(credentials)
            #expect(recording.changes.count == 5)
            let copy = try await client.importRecording(recording)
            #expect(copy.id != credentials.id)
            let copied = try await client.store(CounterFeature(), credentials: copy).state()
            #expect(copied.state.count == 2)
            let copiedTodos = try await client.store(TodosFeature(), credentials: copy).state()
            #expect(copiedTodos.state.items.map(\.title) == ["milk"])
        }
    }
}
