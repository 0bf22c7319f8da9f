import ExampleFeatures
import Foundation
import StateStore
import StateStoreTesting
import Testing

/// The recorded flows in Tests/Recordings (exported with `GET /v1/sessions/{id}/recording`
/// from a running server), replayed through today's reducers.
@Suite("Recorded flows replay through today's reducers")
struct RecordingTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Recordings")

    static func path(_ name: String) -> String { folder.appendingPathComponent("\(name).json").path }

    @Test("every shipped recording gives the same states", arguments: ["counter", "todos", "settings", "login"])
    func shippedRecordings(name: String) throws {
        expectReplays(Self.path(name), with: try ExampleFeatures.registry(loginCheckDelay: .milliseconds(200)))
    }

    /// The example counter, except that an increment adds one more: a regression.
    struct OffByOneCounter: Feature {
        typealias State = CounterFeature.State
        typealias Action = CounterFeature.Action
        typealias Effect = Never
        let name = "counter"
        let initialState = CounterFeature().initialState

        func reduce(_ action: Action, state: State, dispatch: Dispatcher<Action>) throws(ActionRejected) -> StateContainer<State, Effect> {
            if case .increment(let by) = action {
                return try CounterFeature().reduce(.increment(by: (by ?? 1) + 1), state: state, dispatch: dispatch)
            }
            return try CounterFeature().reduce(action, state: state, dispatch: dispatch)
        }
    }

    @Test("a changed reducer fails the shipped recording at its first step, with a readable JSON Patch")
    func changedReducerDiverges() throws {
        var registry = FeatureRegistry()
        try registry.register(OffByOneCounter())
        let bytes = try #require(FileManager.default.contents(atPath: Self.path("counter")))
        let divergence = try #require(try Recording(json: Array(bytes)).replay(with: registry))
        #expect(divergence.index == 0 && divergence.step.feature == "counter" && divergence.step.version == 1)
        #expect(divergence.actual == .success(.object(["count": .int(2)])), "\(divergence)")
        let text = divergence.description
        #expect(text.hasPrefix(#"step 1 (seq 1), counter version 1, dispatch {"type":"increment"}"#), "\(text)")
        #expect(text.contains(#"{"op":"replace","path":"/count","value":2}"#), "\(text)")
        #expect(text.contains(#"recorded: {"count":1}"#) && text.contains(#"replayed: {"count":2}"#), "\(text)")
    }

    @Test("a todos recording made at state version 1 (before reminders) replays, upgraded with reminded false; a newer one is unreadable")
    func olderStateVersionReplays() throws {
        let registry = try ExampleFeatures.registry()
        let bytes = try #require(FileManager.default.contents(atPath: Self.path("todos-state-version-1")))
        let recording = try Recording(json: Array(bytes))
        #expect(recording.features.map(\.stateVersion) == [1])
        #expect(try recording.replay(with: registry) == nil)
        let upgraded = try recording.upgraded(with: registry)
        #expect(upgraded.features.map(\.stateVersion) == [2])
        let states = try upgraded.states()
        #expect(states.count == recording.changes.count)
        for state in states {
            guard case .array(let items)? = state["items"] else { continue }
            #expect(items.allSatisfy { $0["reminded"] == .bool(false) }, "\(state)")
        }
        let recorded = try recording.states().first?["items"]
        guard case .array(let firstItems)? = recorded else {
            Issue.record("the first recorded state has no items: \(String(describing: recorded))")
            return
        }
        #expect(firstItems.first?["reminded"] == nil, "the recording itself is unchanged")
        let newer = Recording(
            server: recording.server,
            features: recording.features.map { Recording.Start(name: $0.name, stateVersion: 3, version: $0.version, state: $0.state) },
            changes: recording.changes)
        #expect(throws: Recording.Unreadable.self) { try newer.replay(with: registry) }
    }

    @Test("a recording round-trips through its JSON, and unreadable ones say why")
    func documentShape() throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.path("todos")))
        let recording = try Recording(json: Array(bytes))
        #expect(try Recording(json: recording.json) == recording)
        #expect(recording.changes.map(\.cause).contains("travel"))
        for (document, problem) in [
            ("[]", "not a JSON object"), (#"{"format":"other","version":1}"#, "'format'"),
            (#"{"format":"stateserver-recording","version":3,"features":[],"changes":[]}"#, "'version'"),
            (#"{"format":"stateserver-recording","version":1,"features":[{"name":"x"}],"changes":[]}"#, "features[0]"),
        ] {
            #expect(throws: Recording.Unreadable.self, "\(document)") { try Recording(json: Array(document.utf8)) }
            do { _ = try Recording(json: Array(document.utf8)) } catch { #expect(error.description.contains(problem), "\(error)") }
        }
        var unknown = FeatureRegistry()
        try unknown.register(CounterFeature())
        #expect(throws: Recording.Unreadable.self) { try recording.replay(with: unknown) }
    }
}
