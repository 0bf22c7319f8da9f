import ExampleFeatures
import Foundation
import StatePersistence
import StateStore
import TestSupport
import Testing

/// History, time travel, recordings and the admin on PostgreSQL, through three real nodes:
/// whichever node is asked, the owner answers from the one journal.
@Suite("History, travel, recordings and the admin on PostgreSQL (three nodes)", .serialized, .postgres)
struct DevtoolsOnPostgresTests {
    static let adminToken = "postgres-admin-token"

    @Test("every node answers the same history, travels through the owner, exports a recording that replays, lists sessions for the admin")
    func throughEveryNode() async throws {
        let hash = SHA256.hash(Self.adminToken).map { String(format: "%02x", $0) }.joined()
        try await withCluster(environment: ["STATE_SERVER_ADMIN_TOKEN_HASH": hash]) { cluster in
            let (a, b, c) = (cluster.nodes[0].api, cluster.nodes[1].api, cluster.nodes[2].api)
            let session = try await a.createSession()
            try await session.dispatchOK("counter", ["type": "increment", "by": 2])
            try await cluster.session(session, on: b).dispatchOK("counter", ["type": "increment", "by": 3])
            try await cluster.session(session, on: c).dispatchOK("todos", ["type": "add", "title": "milk"])

            // The same history on every node.
            var pages: [JSON] = []
            for api in [a, b, c] {
                let response = try await cluster.session(session, on: api).request("GET", "/history")
                #expect(response.status == 200, "\(response)")
                pages.append(try #require(response.json?["changes"]))
            }
            #expect(pages.allSatisfy { $0 == pages[0] }, "\(pages)")
            #expect(pages[0].array?.compactMap { $0["seq"]?.int } == [1, 2, 3])

            // A travel asked of node C is a new change every node reads.
            let travel = try await cluster.session(session, on: c).request(
                "POST", "/state/counter/travel", body: JSON.object(["version": 1]).bytes)
            #expect(travel.status == 200 && travel.json?["version"] == 3 && travel.json?["state"] == ["count": 2], "\(travel)")
            for api in [a, b] {
                #expect(try await cluster.session(session, on: api).store("counter") == StoreState(version: 3, state: ["count": 2]))
            }

            // The recording from node B replays offline.
            let exported = try await cluster.session(session, on: b).request("GET", "/recording")
            #expect(exported.status == 200, "\(exported)")
            let recording = try Recording(json: exported.body)
            #expect(recording.changes.map(\.cause) == ["dispatch", "dispatch", "dispatch", "travel"])
            #expect(try recording.replay(with: try ExampleFeatures.registry()) == nil)

            // The admin lists the stored sessions and reads this one's history on any node.
            let admin: [Header] = [("Authorization", "Bearer \(Self.adminToken)")]
            let listed = try await c.request("GET", "/v1/admin/sessions?limit=1000", headers: admin)
            #expect(listed.status == 200, "\(listed)")
            #expect(listed.json?["sessions"]?.array?.contains { $0["id"]?.string == session.id } == true, "\(listed)")
            let history = try await a.request("GET", "/v1/sessions/\(session.id)/history", headers: admin)
            #expect(history.json?["changes"]?.array?.count == 4, "\(history)")
            let refused = try await b.request("GET", "/v1/sessions/\(session.id)/state", headers: admin)
            #expect(refused.status == 404, "\(refused)")
        }
    }

    @Test("a delta stream opened on any node gets the owner's patches, whichever node the change was asked of")
    func deltasThroughEveryNode() async throws {
        try await withCluster { cluster in
            let (a, b, c) = (cluster.nodes[0].api, cluster.nodes[1].api, cluster.nodes[2].api)
            let session = try await a.createSession()
            let title = String(repeating: "a long enough title ", count: 5)
            for _ in 0..<3 { try await session.dispatchOK("todos", ["type": "add", "title": .string(title)]) }
            let (stream, snapshot) = try await cluster.session(session, on: b).subscribe(query: "delta=json-patch&feature=todos")
            defer { stream.close() }
            var state = try #require(snapshot.json?["features"]?["todos"]?["state"])
            var version = try #require(snapshot.json?["features"]?["todos"]?["version"]?.int)
            try await cluster.session(session, on: c).dispatchOK("todos", ["type": "add", "title": .string(title)])
            try await cluster.session(session, on: a).dispatchOK("todos", ["type": "toggle", "id": "2"])
            for _ in 0..<2 {
                let event = try await stream.nextEvent(timeout: .seconds(10))
                let patch = try #require(event.json?["patch"], "a patch: \(event)")
                #expect(event.json?["baseVersion"]?.int == version, "\(event)")
                state = try state.applying(patch: patch)
                version += 1
            }
            #expect(try await cluster.session(session, on: c).store("todos") == StoreState(version: version, state: state))
        }
    }
}
