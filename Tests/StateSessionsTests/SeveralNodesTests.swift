import Foundation
import TestSupport
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
    static func twoNodes() async throws -> (storage: InMemoryStorage, a: StateSessions.Session, b: StateSessions.Session) {
        let storage = InMemoryStorage(shared: true)
        let nodeA = try exampleManager(storage)
        let nodeB = try exampleManager(storage)
        let (session, token) = try await nodeA.create()
        let onB = try #require(try await nodeB.load(id: session.id, token: token))
        _ = try await session.requireStore("counter")
        _ = try await onB.requireStore("counter")
        return (storage, session, onB)
    }

    /// One increment, tried again on `.contention` as a client does on 503 write_contention.
    static func increment(_ node: StateSessions.Session) async throws {
        while true {
            do throws(SessionFailure) {
                _ = try await node.change("counter", .dispatch(json(#"{"type":"increment"}"#)))
                return
            } catch {
                guard case .contention = error else { throw error }
            }
        }
    }

    @Test("concurrent increments through two nodes: exact count, versions and seqs 1...N once each")
    func noLostUpdate() async throws {
        let (storage, a, b) = try await Self.twoNodes()
        let perNode = 40
        try await withThrowingTaskGroup(of: Void.self) { group in
            for node in [a, b] {
                for _ in 0..<perNode {
                    group.addTask { try await Self.increment(node) }
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
        let first = await a.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), idempotencyKey: "k")).value()
        guard case .applied = first else { Issue.record("\(first)"); return }
        let again = await b.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), idempotencyKey: "k")).value()
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
        let storage = a.journal.storage
        try await storage.commit([.deleteSession(id: a.id)])
        let failure = await sessionFailure { () async throws(SessionFailure) in try await b.refresh() }
        #expect({ if case .sessionGone? = failure { true } else { false } }(), "\(String(describing: failure))")
        #expect(sink.isClosed, "the other node's streams end")
    }

    // MARK: Following other nodes (notices)

    /// Two nodes that follow each other's commits through the storage's notices.
    static func followingNodes() async throws -> (
        storage: InMemoryStorage, nodeA: SessionManager, nodeB: SessionManager, a: StateSessions.Session, b: StateSessions.Session
    ) {
        let storage = InMemoryStorage(shared: true)
        let nodeA = try exampleManager(storage)
        let nodeB = try exampleManager(storage)
        for node in [nodeA, nodeB] {
            #expect(!node.isFollowing, "a node on shared storage does not follow before it hears the notices")
            Task { await node.followOtherNodes() }
            await node.untilFollowing(atMost: .seconds(10))
            #expect(node.isFollowing)
        }
        let (session, token) = try await nodeA.create()
        let onB = try #require(try await nodeB.load(id: session.id, token: token))
        return (storage, nodeA, nodeB, session, onB)
    }

    @Test("a subscriber on node B gets every change made on A and B live, in order, once, with the same ids; no refresh")
    func liveAcrossNodes() async throws {
        let (storage, _, _, a, b) = try await Self.followingNodes()
        defer { Task { await storage.close() } }
        let onB = RecordingSink()
        let onA = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: 0, sink: onB)
        _ = a.hub.subscribe(features: nil, lastEventID: 0, sink: onA)
        b.pullIfBehind()
        let count = 30
        try await withThrowingTaskGroup(of: Void.self) { group in
            for node in [a, b] {
                group.addTask {
                    for _ in 0..<count { try await Self.increment(node) }
                }
            }
            try await group.waitForAll()
        }
        for sink in [onA, onB] {
            let all = try await eventually { sink.events.filter { $0.event == "state" }.count >= 2 * count }
            #expect(all, "\(sink.events.count) events")
            let events = sink.events.filter { $0.event == "state" }
            #expect(events.map(\.seq) == Array(1...(2 * count)).map { Optional($0) }, "each change once, in order")
            #expect(events.map { $0.data?["version"] } == (1...(2 * count)).map { Optional(JSONValue.int(Int64($0))) })
        }
    }

    @Test("a commit heard before the first subscriber is fetched when it subscribes")
    func heardBeforeSubscribing() async throws {
        let (storage, _, _, a, b) = try await Self.followingNodes()
        defer { Task { await storage.close() } }
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        // B heard seq 1 with nobody watching: nothing was fetched.
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: 0, sink: sink)
        #expect(sink.events.filter { $0.event == "state" }.isEmpty)
        let heard = try await eventually {
            b.pullIfBehind()
            return sink.events.contains { $0.seq == 1 }
        }
        #expect(heard, "\(sink.events)")
    }

    @Test("a delete on one node ends the other node's streams and drops the session from its memory")
    func deleteHeardAcrossNodes() async throws {
        let (storage, nodeA, nodeB, a, b) = try await Self.followingNodes()
        defer { Task { await storage.close() } }
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
        try await nodeA.delete(a)
        #expect(try await eventually { sink.isClosed }, "B's stream ends without any request on B")
        #expect(!nodeB.isLoaded(id: b.id))
        #expect(b.isGone)
    }

    @Test("a lost notice channel ends every stream and refuses new ones until it is back")
    func lostChannel() async throws {
        let (storage, _, nodeB, _, b) = try await Self.followingNodes()
        defer { Task { await storage.close() } }
        let sink = RecordingSink()
        _ = b.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
        storage.loseNotices()
        #expect(try await eventually { sink.isClosed }, "the stream ends rather than miss changes silently")
        #expect(!nodeB.isFollowing)
        storage.resumeNotices()
        #expect(try await eventually { nodeB.isFollowing })
        let again = RecordingSink()
        guard case .subscribed = b.hub.subscribe(features: nil, lastEventID: nil, sink: again) else {
            Issue.record("a new stream is welcome once the channel is back")
            return
        }
    }

    @Test("untilFollowing returns after its time limit when the node never hears the notices")
    func untilFollowingTimesOut() async throws {
        let node = try exampleManager(InMemoryStorage(shared: true))
        await node.untilFollowing(atMost: .milliseconds(50))
        #expect(!node.isFollowing)
        #expect(try exampleManager(InMemoryStorage()).isFollowing, "storage of one process: always following")
    }

    @Test("one sweeper at a time over the shared storage; each node still evicts its own idle sessions")
    func oneSweeperAtATime() async throws {
        let storage = InMemoryStorage(shared: true)
        let inside = try await storage.exclusively("sweep") { () async -> Bool? in
            try? await storage.exclusively("sweep") { true }
        }
        #expect(inside == .some(.some(nil)), "the second turn is refused while the first runs")
        #expect(try await storage.exclusively("sweep") { 1 } == 1, "the turn is free again")
        // Two nodes sweeping together: the expired session is deleted once, by one of them.
        let nodeA = try exampleManager(storage, settings: testSettings(ttl: .seconds(1)))
        let nodeB = try exampleManager(storage, settings: testSettings(ttl: .seconds(1)))
        let (session, _) = try await nodeA.create()
        let later = WallClock.now + 10_000
        async let first = nodeA.sweep(now: later)
        async let second = nodeB.sweep(now: later)
        let (ra, rb) = await (first, second)
        #expect(ra.purged + rb.purged >= 1)
        #expect(try await storage.session(id: session.id) == nil)
    }

    // MARK: Work that waits on another node

    /// The `settled` of the first `.waitingWorkChecked` notice, once there is one (10 s at most).
    static func waitingWorkChecked(_ notices: NoticeLog) async -> Bool? {
        let found = (try? await eventually(timeout: .seconds(10)) {
            notices.all.contains { if case .waitingWorkChecked = $0 { true } else { false } }
        }) ?? false
        guard found else { return nil }
        for case .waitingWorkChecked(_, _, let settled) in notices.all { return settled }
        return nil
    }

    @Test("a store waiting for work that still runs on node A is not settled by node B loading it: A's result wins")
    func workStaysWithItsNode() async throws {
        let storage = InMemoryStorage(shared: true)
        let nodeA = try exampleManager(storage, loginCheckDelay: .milliseconds(100))
        var settings = testSettings()
        settings.recoveryDelay = .milliseconds(400)
        let notices = NoticeLog()
        let nodeB = try exampleManager(storage, settings: settings, notices: notices)
        let (a, token) = try await nodeA.create()
        try await a.dispatch("login", #"{"type":"submit","username":"ada","password":"short"}"#)
        let b = try #require(try await nodeB.load(id: a.id, token: token))
        #expect(try await b.current("login").version == 1, "B loads the waiting state")
        #expect(await Self.waitingWorkChecked(notices) == false, "B found the store moved on: \(notices)")
        try await b.refresh()
        let login = try await b.current("login")
        #expect(login.version == 2, "the submit and A's result, nothing of B's: \(login)")
        #expect(login.state["error"] == .string("The password must have at least 8 characters."), "\(login)")
    }

    @Test("a store left waiting by a node that is gone is settled by the node that loads it, after recoveryDelay")
    func workOfAGoneNodeIsSettled() async throws {
        let storage = InMemoryStorage(shared: true)
        // Node A's check would take an hour: A is as good as gone.
        let nodeA = try exampleManager(storage, loginCheckDelay: .seconds(3600))
        var settings = testSettings()
        settings.recoveryDelay = .milliseconds(50)
        let notices = NoticeLog()
        let nodeB = try exampleManager(storage, settings: settings, notices: notices)
        let (a, token) = try await nodeA.create()
        try await a.dispatch("login", #"{"type":"submit","username":"ada","password":"long enough"}"#)
        let b = try #require(try await nodeB.load(id: a.id, token: token))
        #expect(try await b.current("login").state["isLoading"] == .bool(true))
        #expect(await Self.waitingWorkChecked(notices) == true, "\(notices)")
        let login = try await b.current("login")
        #expect(login.version == 2, "\(login)")
        #expect(login.state["isLoading"] == .bool(false))
        #expect(login.state["error"] == .string("The server restarted during the check; please try again."), "\(login)")
        try await nodeA.delete(a)  // ends A's hour-long work
    }
}
