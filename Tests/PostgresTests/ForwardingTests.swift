import Foundation
import StatePersistence
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Forwarding between real nodes on one real PostgreSQL (issue 24 items 4 to 6): relayed event
/// streams do not starve requests, a forward that never left the node says nothing was
/// applied, only a peer may say it is forwarding, and the body limit holds on the way to the
/// owner.
@Suite("Forwarding between nodes on PostgreSQL", .serialized, .postgres)
struct ForwardingTests {
    static let adminToken = "forwarding-admin-token"

    // MARK: Item 6: the body limit on the way to the owner

    @Test("over the body limit through a node that does not own the session: DELETE and dispatch are 413 payload_too_large, and nothing happens")
    func bodyLimitThroughNonOwner() async throws {
        try await withCluster(nodes: 2) { cluster in
            let (a, b) = (cluster.nodes[0].api, cluster.nodes[1].api)
            let session = try await a.createSession()
            try await session.dispatchOK("counter", ["type": "increment"])
            let throughB = cluster.session(session, on: b)
            let body = padded(["feature": "counter", "action": ["type": "increment"]], to: 70_000)

            expectError(try await throughB.request("DELETE", "", body: body), 413, "payload_too_large")
            expectError(try await throughB.request("POST", "/dispatch", body: body), 413, "payload_too_large")
            // The same as straight to the owner.
            expectError(try await session.request("DELETE", "", body: body), 413, "payload_too_large")
            expectError(try await session.request("POST", "/dispatch", body: body), 413, "payload_too_large")

            #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
            #expect(try await throughB.store("counter") == StoreState(version: 1, state: ["count": 1]))
        }
    }
}
