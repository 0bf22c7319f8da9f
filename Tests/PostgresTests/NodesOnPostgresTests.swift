import Foundation
import TestSupport
import StatePersistence
import StatePostgres
import Testing

/// Real server processes as nodes of one cluster on a real PostgreSQL (issue 9): no lost update
/// across nodes, read your writes on any node, readiness and recovery when PostgreSQL stops.
@Suite("Server nodes on PostgreSQL", .serialized)
struct NodesOnPostgresTests {
    /// Dispatches an increment, trying again on `503 write_contention` as a client would.
    static func increment(_ session: TestSupport.Session) async throws -> Int {
        for _ in 0..<50 {
            let response = try await session.dispatch("counter", ["type": "increment"])
            if response.status == 200 { return 200 }
            guard response.status == 503 else { return response.status }
        }
        return 503
    }

    @Test("two nodes: concurrent increments are all applied once, versions 1...N; a read on either node sees the latest")
    func twoNodes() async throws {
        let server = try TestPostgres.start()
        defer { server.destroy() }
        let url = try server.makeDatabase() + "?sslmode=disable"
        try await ServerProcess.start(arguments: ["--storage", url]).stopping { nodeA in
        try await ServerProcess.start(arguments: ["--storage", url]).stopping { nodeB in
        #expect(try await nodeA.api.request("GET", "/readyz").status == 200)
        let onA = try await nodeA.api.createSession()
        let onB = TestSupport.Session(api: nodeB.api, id: onA.id, token: onA.token)
        let perNode = 30
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for session in [onA, onB] {
                for _ in 0..<perNode { group.addTask { try await Self.increment(session) } }
            }
            var all: [Int] = []
            for try await status in group { all.append(status) }
            return all
        }
        #expect(statuses.allSatisfy { $0 == 200 }, "\(statuses.filter { $0 != 200 })")
        // Read your writes on both nodes.
        #expect(try await onA.store("counter") == StoreState(version: 2 * perNode, state: ["count": .int(2 * perNode)]))
        #expect(try await onB.store("counter") == StoreState(version: 2 * perNode, state: ["count": .int(2 * perNode)]))
        try await onA.dispatchOK("counter", ["type": "increment"])
        #expect(try await onB.store("counter").version == 2 * perNode + 1, "B sees A's change at once")
        // If-Match on B names the version A just made.
        let conditional = try await onB.dispatch("counter", ["type": "increment"], headers: [("If-Match", "\"\(2 * perNode + 1)\"")])
        #expect(conditional.status == 200, "\(conditional)")

        // The journal holds every version once, and the event sequence 1...N with no gap.
        let storage = try await PostgresStorage.open(settings: TestPostgres.settings(url))
        let journal = try await storage.journal(session: onA.id, afterSeq: 0, limit: 10_000)
        await storage.close()
        #expect(journal.map(\.version) == Array(1...(2 * perNode + 2)))
        #expect(journal.map(\.seq) == Array(1...(2 * perNode + 2)))
        }
        }
    }

    @Test("PostgreSQL stopped under light load on three nodes and nginx: 503 storage_unavailable with Retry-After; started again: full service, no restart, nothing acknowledged lost")
    func outage() async throws {
        let server = try TestPostgres.start()
        defer { server.destroy() }
        try await withCluster(on: server) { cluster in
        let nodes = cluster.nodes
        let entries: [(name: String, api: API)] = [
            ("A", nodes[0].api), ("B", nodes[1].api), ("C", nodes[2].api), ("nginx", cluster.nginx.api),
        ]
        #expect(try await nodes[0].api.request("GET", "/readyz").status == 200)
        // One client per entry point, each on its own session, a change every 20 ms or so.
        var created: [TestSupport.Session] = []
        for entry in entries { created.append(try await entry.api.createSession()) }
        let sessions = created
        let load = Load()
        let workers = Task {
            await withTaskGroup(of: Void.self) { group in
                for (entry, session) in zip(entries, sessions) {
                    group.addTask { await load.worker([entry], sessions: [session], limit: 5_000, pause: .milliseconds(20)) }
                }
            }
        }
        defer { load.stop() }
        func acknowledgedByEveryClient(after instant: ContinuousClock.Instant?) -> Bool {
            let acknowledged = load.acknowledged(after: instant)
            return entries.allSatisfy { entry in acknowledged.filter { $0.entry == entry.name }.count >= 3 }
        }
        try #require(try await eventually(timeout: .seconds(30)) { acknowledgedByEveryClient(after: nil) }, "\(load.all.suffix(4))")

        let stoppedAt = ContinuousClock.now  // refusals may start while pg_ctl waits for the stop
        try server.stop()
        let notReady = try await eventually(timeout: .seconds(30)) {
            var statuses: [Int] = []
            for node in nodes { statuses.append((try? await node.api.request("GET", "/readyz").status) ?? 0) }
            return statuses.allSatisfy { $0 == 503 }
        }
        #expect(notReady, "/readyz of every node answers 503 while PostgreSQL is down")
        let refusedEverywhere = try await eventually(timeout: .seconds(30)) {
            let refused = load.all.filter { $0.at > stoppedAt && $0.code == "storage_unavailable" }
            return entries.allSatisfy { entry in refused.contains { $0.entry == entry.name } }
        }
        #expect(refusedEverywhere, "\(load.all.suffix(8))")
        for node in nodes {
            #expect(try await node.api.request("GET", "/healthz").status == 200, "/healthz stays cheap")
        }

        try server.startAgain()
        let restartedAt = ContinuousClock.now
        let back = try await eventually(timeout: .seconds(60), every: .milliseconds(200)) {
            var ready = true
            for node in nodes where (try? await node.api.request("GET", "/readyz").status) != 200 { ready = false }
            return ready && acknowledgedByEveryClient(after: restartedAt)
        }
        #expect(back, "the nodes did not recover by themselves: \(load.all.suffix(8))")
        load.stop()
        await workers.value

        // Every answer was a 200, or a 503 with Retry-After while PostgreSQL was down: nothing
        // applied (`storage_unavailable`, or `owner_unavailable` from a node whose request for a
        // session owned elsewhere could not be placed), or — a commit in flight when the
        // connection broke, whose fate could not be read back — `outcome_unknown`, never
        // "nothing applied".
        let refusals = load.all.filter { !$0.acknowledged }
        for answer in refusals {
            #expect(
                answer.status == 503 && answer.retryAfter != nil
                    && (answer.code == "storage_unavailable" || answer.code == "outcome_unknown"
                        || answer.code == "owner_unavailable"), "\(answer)")
            #expect(answer.at > stoppedAt, "refused before PostgreSQL stopped: \(answer)")
        }
        // Nothing acknowledged was lost, nothing applied twice; every node reads the journal's last version.
        for session in sessions {
            let versions = try cluster.counterJournal(session.id).map(\.version)
            #expect(versions == Array(1..<(versions.count + 1)), "journal of \(session.id): \(versions)")
            let acknowledged = Set(load.acknowledged().filter { $0.session == session.id }.compactMap(\.version))
            #expect(acknowledged.isSubset(of: Set(versions)), "lost: \(acknowledged.subtracting(versions).sorted())")
            for node in nodes {
                let store = try await TestSupport.Session(api: node.api, id: session.id, token: session.token).store("counter")
                #expect(store == StoreState(version: versions.count, state: ["count": .int(versions.count)]))
            }
        }
        }
    }

    @Test("a stream on node B gets A's changes live with A's ids; a delete on A ends it; B losing PostgreSQL ends its streams and refuses new ones until back")
    func streamsFollowOtherNodes() async throws {
        let server = try TestPostgres.start()
        defer { server.destroy() }
        let url = try server.makeDatabase() + "?sslmode=disable"
        try await ServerProcess.start(arguments: ["--storage", url]).stopping { nodeA in
        try await ServerProcess.start(arguments: ["--storage", url]).stopping { nodeB in
        let onA = try await nodeA.api.createSession()
        let onB = TestSupport.Session(api: nodeB.api, id: onA.id, token: onA.token)
        let stream = try await onB.events(query: "?feature=counter")
        #expect(stream.status == 200)
        let snapshot = try await stream.nextEvent()
        #expect(snapshot.event == "snapshot", "\(snapshot)")
        for expected in 1...3 {
            try await onA.dispatchOK("counter", ["type": "increment"])
            let event = try await stream.nextEvent(timeout: .seconds(10))
            #expect(event.event == "state" && event.id == "\(expected)", "\(event)")
            #expect(event.data.contains(#""version":\#(expected)"#), "\(event)")
        }
        // Deleted on A: B's stream ends although nobody asked B anything.
        let second = try await onA.api.createSession()
        let watched = try await TestSupport.Session(api: nodeB.api, id: second.id, token: second.token).events()
        #expect(watched.status == 200)
        _ = try await watched.nextEvent()
        #expect(try await nodeA.api.request("DELETE", "/v1/sessions/\(second.id)", headers: [("Authorization", "Bearer \(second.token)")]).status == 204)
        #expect(try await watched.waitForEnd(timeout: .seconds(10)), "a delete on A ends B's stream")

        // PostgreSQL goes away: B ends its stream (no silent gap) and refuses new ones.
        try server.stop()
        #expect(try await stream.waitForEnd(timeout: .seconds(20)), "losing PostgreSQL ends B's streams")
        let refused = try await onB.events()
        #expect(refused.status == 503, "\(refused.status)")
        try server.startAgain()
        let back = try await eventually(timeout: .seconds(30)) {
            (try? await nodeB.api.request("GET", "/readyz").status) == 200
        }
        #expect(back, "B hears the others again by itself")
        let resumed = try await onB.events(headers: [("Last-Event-ID", "3")])
        #expect(resumed.status == 200)
        #expect(try await eventually(timeout: .seconds(30)) {
            (try? await onA.dispatch("counter", ["type": "increment"]).status) == 200
        })
        let fourth = try await resumed.nextEvent(timeout: .seconds(10))
        #expect(fourth.id == "4" && fourth.event == "state", "resumed with no gap: \(fourth)")
        }
        }
    }
}
