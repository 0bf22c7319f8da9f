import Foundation
import HTTPTestSupport
import StatePersistence
import Testing

/// A full disk (simulated by STATE_SERVER_PERSISTENCE_MAX_BYTES): 503, nothing applied, and
/// recovery without a restart once there is room again.
@Suite("Storage full")
struct StorageFullTests {
    static let bigTitle = String(repeating: "x", count: 480)

    @Test("past the size cap dispatches get 503 storage_unavailable with nothing applied; deleting a large session makes room")
    func fullThenRoomAgain() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let environment = ["STATE_SERVER_PERSISTENCE_MAX_BYTES": "196608"]
            try await withDurableServer(database, environment: environment) { server in
                let large = try await server.api.createSession()
                let victim = try await server.api.createSession()
                var victimVersion = try await victim.dispatchOK("todos", ["type": "add", "title": .string(Self.bigTitle)])["version"]?.int ?? 0
                #expect(victimVersion == 1)

                // Grow the large session (and the victim, in turn) until the victim is refused.
                var refusal: HTTPResponse?
                var largeAcknowledged = 0
                for _ in 0..<400 where refusal == nil {
                    let grow = try await large.dispatch("todos", ["type": "add", "title": .string(Self.bigTitle)])
                    if grow.status == 200 {
                        largeAcknowledged += 1
                    } else {
                        expectError(grow, 503, "storage_unavailable")
                    }
                    let attempt = try await victim.dispatch("todos", ["type": "add", "title": .string(Self.bigTitle)])
                    if attempt.status == 200 {
                        victimVersion = attempt.json?["version"]?.int ?? -1
                    } else {
                        refusal = attempt
                    }
                }
                let refused = try #require(refusal, "the database never filled up")
                expectError(refused, 503, "storage_unavailable")
                #expect(largeAcknowledged > 3)
                print("storage full after \(largeAcknowledged) large and \(victimVersion) victim changes")

                // Nothing of the refused change was applied, or shown to anyone.
                let todos = try await victim.store("todos")
                #expect(todos.version == victimVersion)
                #expect(todos.state["items"]?.array?.count == victimVersion)
                let again = try await victim.dispatch("counter", ["type": "set", "value": 5], headers: [("Idempotency-Key", "while-full")])
                if again.status != 200 {
                    expectError(again, 503, "storage_unavailable")
                }
                #expect(await server.api.isHealthy())

                // Free room: delete the large session. No restart.
                let deleted = try await large.delete()
                #expect(deleted.status == 204, "a delete must work on a full disk: \(deleted)")
                let accepted = try await victim.dispatch("todos", ["type": "add", "title": .string(Self.bigTitle)])
                #expect(accepted.status == 200, "the server accepts changes again: \(accepted)")
                #expect(accepted.json?["version"]?.int == victimVersion + 1)
                let retried = try await victim.dispatch("counter", ["type": "set", "value": 5], headers: [("Idempotency-Key", "while-full")])
                #expect(retried.status == 200, "\(retried)")
                // Stored once either way: replayed if it got through while full, applied now if not.
                #expect((retried.header("Idempotent-Replayed") == "true") == (again.status == 200), "\(retried)")
                #expect(try await victim.store("counter") == StoreState(version: 1, state: ["count": 5]))
                expectError(try await large.request("GET", "/state"), 404, "session_not_found")
                #expect(server.isRunning)
                await server.stopCleanly()
            }
            #expect(try SQLiteStorage.integrityCheck(path: database) == "ok")
        }
    }
}
