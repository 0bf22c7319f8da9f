import Foundation
import TestSupport
import StatePersistence
import Testing

/// A DELETE racing writes on the same session (issue 11 §5): every write is ordered before the
/// delete (answered 200, then removed with the session) or after it (404), and nothing of the
/// session remains in storage.
@Suite("Deleting a session while it is written")
struct DeleteRaceTests {
    @Test("writes racing a DELETE leave no rows behind, and none is answered 200 after the 204")
    func deleteRacingWrites() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("race.db")
            var deleted: [String] = []
            try await withDurableServer(database) { server in
                let api = server.api
                for trial in 0..<12 {
                    let session = try await api.createSession()
                    try await session.dispatchOK("counter", ["type": "increment"])
                    let statuses = Tally<(status: Int, afterDelete: Bool)>()
                    let deleteDone = Flag()
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        for writer in 0..<6 {
                            group.addTask {
                                for step in 0..<4 {
                                    let response: HTTPResponse
                                    // Sent after the 204 arrived: must be refused.
                                    let sentAfterDelete = deleteDone.isSet
                                    if (writer + step) % 3 == 0 {
                                        response = try await session.request("DELETE", "/state/todos")
                                    } else {
                                        response = try await session.dispatch(
                                            "counter", ["type": "increment"], headers: [("Idempotency-Key", "k-\(writer)-\(step)")])
                                    }
                                    statuses.append((response.status, sentAfterDelete))
                                }
                            }
                        }
                        group.addTask {
                            let response = try await session.delete()
                            #expect(response.status == 204, "\(response)")
                            deleteDone.set()
                        }
                        try await group.waitForAll()
                    }
                    for result in statuses.all {
                        #expect(result.status == 200 || result.status == 404, "trial \(trial): \(result)")
                        if result.afterDelete { #expect(result.status == 404, "a write sent after the 204 was applied") }
                    }
                    let after = try await session.dispatch("counter", ["type": "increment"])
                    #expect(after.status == 404, "\(after)")
                    deleted.append(session.id)
                }
                await server.stopCleanly()
            }
            // Nothing of the deleted sessions is stored: no session, no journal row.
            try await withSQLiteStorage(at: database) { storage async throws in
                for id in deleted {
                    #expect(try await storage.session(id: id) == nil)
                    #expect(try await storage.journal(session: id, afterSeq: 0, limit: 10_000).isEmpty, "orphan journal rows of \(id)")
                    #expect(try await storage.lastSeq(session: id) == 0)
                    for feature in ["counter", "todos"] {
                        #expect(try await storage.latestSnapshot(session: id, feature: feature) == nil)
                    }
                }
            }
        }
    }
}
