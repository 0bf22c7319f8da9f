import Foundation
import StatePersistence
import TestSupport
import Testing

private let adminToken = "stream-admin-token"

/// The admin's event stream of another session, and a travel's event, in process (the binary
/// reading admin.tokenHash: ImportRulesTests, which imports with the admin token).
@Suite("Admin events and travel events", .inProcessServer { $0.routes.adminTokenHash = SHA256.hash(adminToken) })
struct AdminStreamTests {
    @Test("the admin token opens any session's stream; a travel is a state event with cause travel and the old state")
    func adminStreamSeesTravel() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let admin = Session(api: api, id: session.id, token: adminToken)
        let (stream, snapshot) = try await admin.subscribe()
        defer { stream.close() }
        #expect(snapshot.event == "snapshot")
        try await session.dispatchOK("counter", ["type": "increment", "by": 4])
        let travel = try await session.request("POST", "/state/counter/travel", body: jsonBytes(["version": 0]))
        #expect(travel.status == 200, "\(travel)")
        let dispatched = try await stream.nextEvent()
        #expect(dispatched.json?["cause"] == "dispatch" && dispatched.json?["version"] == 1, "\(dispatched)")
        let travelled = try await stream.nextEvent()
        #expect(travelled.json?["cause"] == "travel", "\(travelled)")
        #expect(travelled.json?["version"] == 2 && travelled.json?["state"] == ["count": 0], "\(travelled)")
        #expect(travelled.json?["action"] == .null)
        // The admin token is not the session's: no change through it.
        let refused = try await admin.dispatch("counter", ["type": "increment"])
        #expect(refused.status == 404, "\(refused)")
    }
}
