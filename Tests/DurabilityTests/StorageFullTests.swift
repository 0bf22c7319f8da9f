import Foundation
import TestSupport
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

    /// A `PUT` body of about 60 KB: a todo list of 115 long items, every title of `letter`.
    /// Alternating letters make each change touch every title, so the journal keeps whole
    /// states (a patch would not be smaller) and the database fills.
    static func largeTodos(_ letter: Character) -> [UInt8] {
        let title = String(repeating: letter, count: 480)
        let items = (1...115).map { #"{"id":"\#($0)","title":"\#(title)","done":false}"# }.joined(separator: ",")
        return Array(#"{"state":{"items":[\#(items)],"nextId":116}}"#.utf8)
    }

    static let largeTodos = largeTodos("y")
    static let otherLargeTodos = largeTodos("z")

    @Test("a full database inside a group commit: every 503 left nothing, every 200 is stored, and the session recovers once there is room")
    func fullWhileConcurrent() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            // Three workers dispatch on one session as fast as they can: on a fast machine that is
            // past the 100 dispatches a second a session may make (429), which is not this claim.
            let environment = ["STATE_SERVER_PERSISTENCE_MAX_BYTES": "\(1 << 20)", "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0"]
            let answers = Tally<(key: String, status: Int)>()
            let counterID: (id: String, token: String) = try await withDurableServer(database, environment: environment) { server in
                let filler = try await server.api.createSession()
                let counter = try await server.api.createSession()
                let fillerRefusals = Tally<Int>()
                let stop = Flag()
                // Three connections fill the database with large PUTs while three others send
                // increments with Idempotency-Keys: their commits share groups with the PUTs
                // that hit the cap.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<3 {
                        group.addTask {
                            var round = 0
                            while !stop.isSet {
                                round += 1
                                let put = try await filler.request(
                                    "PUT", "/state/todos", body: round % 2 == 0 ? Self.largeTodos : Self.otherLargeTodos)
                                if put.status != 200 {
                                    expectError(put, 503, "storage_unavailable")
                                    fillerRefusals.append(put.status)
                                }
                            }
                        }
                    }
                    for worker in 0..<3 {
                        group.addTask {
                            var index = 0
                            while !stop.isSet {
                                index += 1
                                let key = "inc-\(worker)-\(index)"
                                let response = try await counter.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", key)])
                                if response.status != 200 { expectError(response, 503, "storage_unavailable") }
                                answers.append((key, response.status))
                            }
                        }
                    }
                    // Until the cap has refused plenty, with increments answered all along.
                    var incrementsAtFull: Int?
                    _ = try await eventually(timeout: .seconds(60), every: .milliseconds(20)) {
                        if incrementsAtFull == nil, fillerRefusals.count > 0 { incrementsAtFull = answers.count }
                        guard let start = incrementsAtFull else { return false }
                        return fillerRefusals.count >= 40 && answers.count >= start + 150
                    }
                    stop.set()
                    try await group.waitForAll()
                }
                #expect(fillerRefusals.count >= 40, "the database never filled up: \(fillerRefusals.count) refused PUTs")
                let refused = answers.all.filter { $0.status == 503 }.count
                print("storage full under load: \(answers.count) increments, \(refused) refused; \(fillerRefusals.count) refused PUTs")

                // Room again: delete the filler. The counter session takes changes at once.
                let deleted = try await filler.delete()
                #expect(deleted.status == 204, "\(deleted)")
                let after = try await counter.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", "after-room")])
                #expect(after.status == 200, "the session recovers by itself once there is room: \(after)")
                answers.append(("after-room", after.status))
                let acknowledged = answers.all.filter { $0.status == 200 }.count
                #expect(try await counter.store("counter").state["count"]?.int == acknowledged)
                await server.stopCleanly()
                return (counter.id, counter.token)
            }

            // After a restart: every increment answered 200 is there, none answered 503 is.
            try await withDurableServer(database, environment: environment) { server in
                let counter = Session(api: server.api, id: counterID.id, token: counterID.token)
                let all = answers.all
                let acknowledged = all.filter { $0.status == 200 }
                let stored = try await counter.store("counter")
                #expect(stored.state["count"]?.int == acknowledged.count, "\(acknowledged.count) increments answered 200, \(all.count - acknowledged.count) answered 503; stored: \(stored)")
                #expect(stored.version == acknowledged.count)
                // Each acknowledged key replays (storage keeps a session's newest
                // `idempotency.keys`, 1,000: the last 300); so the count above leaves no room
                // for a 503 one.
                for answer in acknowledged.suffix(300) {
                    let replay = try await counter.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", answer.key)])
                    #expect(replay.status == 200 && replay.header("Idempotent-Replayed") == "true", "\(answer.key): \(replay)")
                }
                for answer in all.filter({ $0.status == 503 }).prefix(20) {
                    let fresh = try await counter.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", answer.key)])
                    #expect(fresh.status == 200 && fresh.header("Idempotent-Replayed") == nil, "a key answered 503 was stored: \(answer.key): \(fresh)")
                }
                await server.stopCleanly()
            }
            #expect(try SQLiteStorage.integrityCheck(path: database) == "ok")
        }
    }
}
