// Sequence numbers only move forward: the hub refuses a change numbered at or before its last
// one (it is neither sent nor kept for replay), and the session reports the refusal instead of
// losing the change in silence (issue 27 item 3).

import ExampleFeatures
import StatePersistence
import StateServerHTTP
@testable import StateSessions
import StateStore
import Testing

@Suite("Event numbering")
struct EventOrderTests {
    static func change(_ version: Int) -> EncodedChange {
        EncodedChange(
            feature: "counter", version: version, cause: "dispatch", action: Array(#"{"type":"increment"}"#.utf8),
            state: Array(#"{"count":\#(version)}"#.utf8), effect: nil)
    }

    /// The ids of the events a stream resuming after 0 is sent: what the hub keeps for replay.
    static func replayed(_ hub: EventHub) -> [Int] {
        let sink = RecordingSink()
        _ = hub.subscribe(features: ["counter"], lastEventID: 0, sink: sink)
        return sink.events.compactMap(\.seq)
    }

    @Test("the hub refuses a number not after its last one: not sent, not kept; the next one in order goes through")
    func hubRefuses() throws {
        let registry = try ExampleFeatures.registry()
        let hub = EventHub(features: registry.features, replayLimit: 100, encoder: ServerSentEvents())
        let sink = RecordingSink()
        guard case .subscribed = hub.subscribe(features: ["counter"], lastEventID: 0, sink: sink) else {
            Issue.record("not subscribed")
            return
        }
        #expect(hub.publish(Self.change(1), seq: 1))
        let sent = sink.events.count
        #expect(sent == 1)
        #expect(!hub.publish(Self.change(2), seq: 1), "the same number again")
        #expect(!hub.publish(Self.change(1), seq: 0), "an older number")
        #expect(sink.events.count == sent, "a refused change reaches no subscriber")
        #expect(hub.seq == 1)
        #expect(Self.replayed(hub) == [1], "a refused change is not kept for replay")
        #expect(hub.publish(Self.change(2), seq: 2))
        #expect(sink.events.count == sent + 1)
        #expect(Self.replayed(hub) == [1, 2])
    }

    @Test("a session that publishes a change at a number already used reports it; its own changes keep numbering after it")
    func sessionReports() async throws {
        let notices = NoticeLog()
        let manager = try exampleManager(InMemoryStorage(), notices: notices)
        let (session, _) = try await manager.create()
        guard case .applied = await session.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)))).value() else {
            Issue.record("the dispatch was not applied")
            return
        }
        #expect(session.hub.seq == 1)
        // Numbers come after the last published, and after every one handed to storage since.
        let chain = CommitChain()
        #expect(chain.next(after: session.hub.seq).seq == 2)
        #expect(chain.next(after: session.hub.seq).seq == 3, "after the one handed to storage")
        #expect(chain.next(after: 7).seq == 8, "after the last published when it is further")
        session.publish(Self.change(2), seq: 1)
        let refused = notices.all.compactMap { notice -> (String, Int, Int)? in
            if case .sequenceRefused(_, let feature, let seq, let last) = notice { return (feature, seq, last) }
            return nil
        }
        #expect(refused.count == 1 && refused.first?.0 == "counter" && refused.first?.1 == 1 && refused.first?.2 == 1, "\(notices.description)")
        guard case .applied(let next, _) = await session.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)))).value() else {
            Issue.record("the next dispatch was not applied")
            return
        }
        #expect(next.version == 2)
        #expect(session.hub.seq == 2)
    }
}
