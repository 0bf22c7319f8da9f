import Foundation
import TestSupport
import Testing

/// Scoped tokens on several nodes: a token minted through one node works on every node (it is in
/// PostgreSQL, and a node that takes the session over loads it), and a revocation made through
/// any node refuses it everywhere and ends its streams, relayed ones included.
@Suite("Scoped tokens on several nodes", .serialized, .postgres)
struct TokensOnPostgresTests {
    @Test("mint through A, stream through A from B's session, revoke through A: refused on A and B, the relayed stream ends")
    func revokeEverywhere() async throws {
        try await withCluster(nodes: 2) { cluster in
            let (a, b) = (cluster.nodes[0].api, cluster.nodes[1].api)
            let owned = try await b.createSession()
            let ownerOnA = cluster.session(owned, on: a)
            let minted = try await ownerOnA.request("POST", "/tokens", body: JSON.object(["scope": "dispatch", "features": ["counter"]]).bytes)
            try #require(minted.status == 201, "\(minted)")
            let token = try #require(minted.json?["token"]?.string)
            let id = try #require(minted.json?["id"]?.string)
            let onA = Session(api: a, id: owned.id, token: token)
            let onB = Session(api: b, id: owned.id, token: token)
            try await onB.dispatchOK("counter", ["type": "increment"])
            try await onA.dispatchOK("counter", ["type": "increment"])
            expectError(try await onA.dispatch("todos", ["type": "add", "title": "x"]), 403, "forbidden")

            let (stream, _) = try await onA.subscribe()
            defer { stream.close() }
            let revoked = try await ownerOnA.request("DELETE", "/tokens/\(id)")
            #expect(revoked.status == 204, "\(revoked)")
            var last: SSEEvent?
            while let event = try? await stream.nextEvent(timeout: .seconds(10)) {
                last = event
                if event.event == "revoked" { break }
            }
            #expect(last?.event == "revoked", "the relayed stream's last event: \(String(describing: last))")
            #expect(try await stream.waitForEnd(timeout: .seconds(10)))
            expectError(try await onA.request("GET", "/state/counter"), 404, "session_not_found")
            expectError(try await onB.request("GET", "/state/counter"), 404, "session_not_found")
            #expect(try await cluster.session(owned, on: b).store("counter").version == 2)
        }
    }
}
