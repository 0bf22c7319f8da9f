import Foundation
import StatePersistence
import StateServerHTTP
import StateSessions
import StateStore
import Testing

/// Two session managers on one shared storage, as two nodes on one PostgreSQL: no lost update,
/// contiguous versions and sequence numbers, reads and `If-Match` judged against what any node
/// committed, idempotency keys across nodes.
@Suite("Several nodes on one shared storage")
struct SeveralNodesTests {
    /// Two nodes over one shared in-memory storage, with a session both have loaded.
    static func twoNodes() async throws -> (storage: InMemoryStorage, a: Session, b: Session) {
        let storage = InMemoryStorage(shared: true)
        let nodeA = try exampleManager(storage)
        let nodeB = try exampleManager(storage)
        let (session, token) = try await nodeA.create()
        let onB = try #require(try await nodeB.load(id: session.id, token: token))
        _ = try await session.requireStore("counter")
        _ = try await onB.requireStore("counter")
        return (storage, session, onB)
    }

    @Test("concurrent increments through two nodes: exact count, versions and seqs 1...N once each")
    func noLostUpdate() async throws {
        let (storage, a, b) = try await Self.twoNodes()
        let perNode = 40
        try await withThrowingTaskGroup(of: Void.self) { group in
            for node in [a, b] {
                for _ in 0..<perNode {
                    group.addTask {
                        // As a client does on 503 write_contention: try again.
                        while true {
                            do throws(SessionFailure) {
                                _ = try await node.change("counter", .dispatch(json(#"{"type":"increment"}"#)))
                                return
                            } catch {
                                guard case .contention = error else { throw error }
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let journal = try await storage.journal(session: a.id, afterSeq: 0, limit: 10_000)
        #expect(journal.map(\.version) == Array(1...(2 * perNode)))
        #expect(journal.map(\.seq) == Array(1...(2 * perNode)))
        try await b.refresh()
        try await a.refresh()
        #expect(try await a.current("counter") == Snapshot(2 * perNode, #"{"count":\#(2 * perNode)}"#))
        #expect(try await b.current("counter") == Snapshot(2 * perNode, #"{"count":\#(2 * perNode)}"#))
    }

    @Test("a read after refresh sees a change made on the other node; If-Match names the latest version")
    func readYourWrites() async throws {
        let (_, a, b) = try await Self.twoNodes()
        try await a.dispatch("counter", #"{"type":"increment","by":5}"#)
        try await b.refresh()
        #expect(try await b.current("counter") == Snapshot(1, #"{"count":5}"#))
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        // B has not refreshed: its copy is at version 1, but If-Match "2" is the latest committed.
        let applied = try await b.change("counter", .dispatch(json(#"{"type":"increment"}"#)), ifVersion: 2)
        #expect(applied.version == 3)
        let stale = await sessionFailure { () async throws(SessionFailure) in
            _ = try await b.change("counter", .dispatch(json(#"{"type":"increment"}"#)), ifVersion: 2)
        }
        #expect(stale?.storeKind == .versionConflict)
    }

    @Test("an Idempotency-Key applies once across nodes")
    func keyAcrossNodes() async throws {
        let (storage, a, b) = try await Self.twoNodes()
        let first = await a.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), idempotencyKey: "k"))
        guard case .applied = first else { Issue.record("\(first)"); return }
        let again = await b.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), idempotencyKey: "k"))
        guard case .replayed(let reply) = again else { Issue.record("\(again)"); return }
        #expect(reply.version == 1)
        #expect(try await storage.lastSeq(session: a.id) == 1)
    }

    @Test("a subscriber on one node gets the other node's change, with the same id, after refresh")
    func eventsAcrossNodes() async throws {
        let (_, a, b) = try await Self.twoNodes()
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        try await a.dispatch("todos", #"{"type":"add","title":"x"}"#)
        try await b.refresh()
        let events = sink.events.filter { $0.event == "state" }
        #expect(events.map(\.seq) == [1, 2])
        #expect(events.map { $0.data?["feature"] } == [.string("counter"), .string("todos")])
    }

    @Test("a change another node made is kept for Last-Event-ID even when this node's store already loaded it")
    func catchUpKeepsLoadedChanges() async throws {
        let storage = InMemoryStorage(shared: true)
        let nodeA = try exampleManager(storage)
        let nodeB = try exampleManager(storage)
        let (a, token) = try await nodeA.create()
        let b = try #require(try await nodeB.load(id: a.id, token: token))
        _ = try await b.requireStore("todos")
        try await a.dispatch("counter", #"{"type":"increment"}"#)  // seq 1
        try await b.dispatch("todos", #"{"type":"add","title":"x"}"#)  // loses seq 1, catches up: seq 2
        try await a.dispatch("counter", #"{"type":"increment"}"#)  // seq 3
        // B loads its counter store from storage (at version 2, seq 3 included), then loses
        // seq 3 and catches up: seq 3 must still be published, or a resume skips it.
        try await b.dispatch("counter", #"{"type":"increment"}"#)  // seq 4
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: 1, sink: sink)
        #expect(sink.events.map(\.seq) == [2, 3, 4], "\(sink.events)")
    }

    @Test("a session deleted on one node is gone on the other")
    func deleteAcrossNodes() async throws {
        let (_, a, b) = try await Self.twoNodes()
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
        let storage = try #require(a.journal.storage)
        try await storage.commit([.deleteSession(id: a.id)])
        let failure = await sessionFailure { () async throws(SessionFailure) in try await b.refresh() }
        #expect({ if case .sessionGone? = failure { true } else { false } }(), "\(String(describing: failure))")
        #expect(sink.isClosed, "the other node's streams end")
    }
}
