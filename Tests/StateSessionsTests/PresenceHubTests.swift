// Presence in the hub (issue 38 part 5): the list and the `presence` events never disagree,
// whatever ends a present subscriber, and presence takes no sequence number.

import ExampleFeatures
import StatePersistence
import StateServerHTTP
@testable import StateSessions
import StateStore
import Synchronization
import Testing

@Suite("Presence in the event hub")
struct PresenceHubTests {
    /// A sink that takes frames until told to refuse them (a reader too slow: it closes).
    final class FlakySink: EventSink {
        let refusing = Atomic<Bool>(false)
        let inner = RecordingSink()
        func send(_ bytes: [UInt8]) -> Bool { refusing.load(ordering: .relaxed) ? false : inner.send(bytes) }
        func offer(_ bytes: [UInt8]) -> Bool { send(bytes) }
        func close() { inner.close() }
    }

    static func entry(_ label: String) -> PresenceEntry {
        PresenceEntry(id: "id-" + label, label: label, subject: nil, since: 1)
    }

    static func presence(_ sink: RecordingSink) -> [String] {
        sink.events.filter { $0.event == "presence" }.map { frame in
            guard case .object(let fields)? = frame.data, let (kind, value) = fields.first,
                case .object(let entry) = value, case .string(let label)? = entry["label"]
            else { return "?" }
            return kind + " " + label
        }
    }

    @Test("a present subscriber dropped for refusing a change leaves: the others hear it, the list forgets it")
    func droppedLeaves() throws {
        let registry = try ExampleFeatures.registry()
        let hub = EventHub(features: registry.features, replayLimit: 100, encoder: ServerSentEvents())
        let steady = RecordingSink()
        let flaky = FlakySink()
        guard case .subscribed = hub.subscribe(features: nil, lastEventID: nil, sink: steady, presence: Self.entry("steady")),
            case .subscribed = hub.subscribe(features: nil, lastEventID: nil, sink: flaky, presence: Self.entry("flaky"))
        else {
            Issue.record("not subscribed")
            return
        }
        #expect(hub.presence.map(\.label) == ["steady", "flaky"])
        #expect(Self.presence(flaky.inner) == ["joined steady", "joined flaky"])
        flaky.refusing.store(true, ordering: .relaxed)
        #expect(hub.publish(EventOrderTests.change(1), seq: 1))
        #expect(hub.presence.map(\.label) == ["steady"])
        #expect(Self.presence(steady) == ["joined steady", "joined flaky", "left flaky"])
        // Presence frames have no id; the change kept its number.
        #expect(steady.events.filter { $0.event == "presence" }.allSatisfy { $0.seq == nil })
        #expect(steady.events.contains { $0.event == "state" && $0.seq == 1 })
        #expect(hub.seq == 1)
    }

    @Test("the limit counts present subscribers only; unsubscribing twice leaves once")
    func limit() throws {
        let registry = try ExampleFeatures.registry()
        let hub = EventHub(features: registry.features, replayLimit: 100, encoder: ServerSentEvents())
        let first = RecordingSink()
        guard case .subscribed(let id) = hub.subscribe(features: nil, lastEventID: nil, sink: first, presence: Self.entry("a"), presenceLimit: 1) else {
            Issue.record("not subscribed")
            return
        }
        #expect(hub.subscribe(features: nil, lastEventID: nil, sink: RecordingSink(), presence: Self.entry("b"), presenceLimit: 1) == .presenceFull)
        guard case .subscribed = hub.subscribe(features: nil, lastEventID: nil, sink: RecordingSink(), presenceLimit: 1) else {
            Issue.record("a subscriber that does not join was refused")
            return
        }
        let watcher = RecordingSink()
        hub.unsubscribe(id)
        hub.unsubscribe(id)
        #expect(hub.presence.isEmpty)
        guard case .subscribed = hub.subscribe(features: nil, lastEventID: nil, sink: watcher, presence: Self.entry("c"), presenceLimit: 1) else {
            Issue.record("the place did not come free")
            return
        }
        #expect(Self.presence(watcher) == ["joined c"])
    }
}
