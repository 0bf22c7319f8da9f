// Presence from the Swift client: a store's stream joins with a label, `onPresence` follows who
// comes and goes, and `presence(_:)` reads the list.

import ExampleFeatures
import Foundation
import StateClient
import Synchronization
import TestSupport
import Testing

@Suite("Presence from the Swift client", .timeLimit(.minutes(5)))
struct PresenceClientTests {
    @Test("two streams join; each sees both; one that stops leaves")
    func twoStreams() async throws {
        try await withServer { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let credentials = try await client.createSession()
            let counter = client.store(CounterFeature(), credentials: credentials)
            let seenByWall = Mutex<[[String]]>([])
            let wall = EventRecorder(counter.changes(presence: "wall screen", onPresence: { present in
                seenByWall.withLock { $0.append(present.map(\.label)) }
            }))
            try await wall.wait(for: "the wall's snapshot") { !$0.isEmpty }
            try await waitUntil("the wall sees itself") { seenByWall.withLock { $0.last == ["wall screen"] } }

            let todos = client.store(TodosFeature(), credentials: credentials)
            let seenByPad = Mutex<[String]>([])
            let pad = EventRecorder(todos.changes(presence: "Ada's iPad", onPresence: { present in
                seenByPad.withLock { $0 = present.map(\.label) }
            }))
            try await waitUntil("the iPad sees both") { seenByPad.withLock { $0 == ["wall screen", "Ada's iPad"] } }
            try await waitUntil("the wall sees the iPad") { seenByWall.withLock { $0.last == ["wall screen", "Ada's iPad"] } }
            let listed = try await client.presence(credentials)
            #expect(listed.map(\.label) == ["wall screen", "Ada's iPad"])
            #expect(listed.allSatisfy { $0.sub == nil && $0.since > 0 && !$0.id.isEmpty })
            #expect(try await metric("stateserver_presence_entries", at: server.baseURL) == 2)

            try await pad.stop()
            try await waitUntil("the wall sees the iPad leave") { seenByWall.withLock { $0.last == ["wall screen"] } }
            #expect(try await client.presence(credentials).map(\.label) == ["wall screen"])
            #expect(try await metric("stateserver_presence_entries", at: server.baseURL) == 1)
            // Changes still flow on the wall's stream.
            try await counter.dispatch(.increment(by: 1))
            try await wall.wait(for: "the change") { $0.count >= 2 }
            try await wall.stop()
            #expect(wall.error == nil)
        }
    }
}
