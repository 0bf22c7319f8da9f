import Foundation
import TestSupport
import StatePersistence
import StateServerHTTP
@testable import StateSessions
import StateStore
import Testing

/// Two session managers on one shared storage, as two nodes on one PostgreSQL, each with its
/// own view (``InMemoryStorage/node()``) and membership: one owner per session, appends fenced
/// on owning it, takeover when a membership lapses, handover, deletes heard across nodes.
@Suite("Several nodes on one shared storage")
struct SeveralNodesTests {
    struct Nodes {
        let storageA: InMemoryStorage
        let storageB: InMemoryStorage
        let nodeA: SessionManager
        let nodeB: SessionManager
    }

    /// Two joined nodes on one shared in-memory storage, following each other's notices and
    /// their own membership.
    static func twoNodes(
        loginCheckDelay: Duration = .milliseconds(20), notices: NoticeLog = NoticeLog()
    ) async throws -> Nodes {
        let storageA = InMemoryStorage(shared: true)
        let storageB = storageA.node()
        let nodeA = try exampleManager(storageA, loginCheckDelay: loginCheckDelay)
        let nodeB = try exampleManager(storageB, notices: notices)
        try await storageA.join(advertising: "http://node-a")
        try await storageB.join(advertising: "http://node-b")
        for node in [nodeA, nodeB] {
            #expect(!node.isFollowing, "a node on shared storage does not follow before it hears the notices")
            Task { await node.followOtherNodes() }
            Task { await node.followMembership() }
            await node.untilFollowing(atMost: .seconds(10))
            #expect(node.isFollowing)
        }
        return Nodes(storageA: storageA, storageB: storageB, nodeA: nodeA, nodeB: nodeB)
    }

    static func isElsewhere(_ located: SessionManager.Located?, _ url: String) -> Bool {
        if case .elsewhere(let found)? = located { return found == url }
        return false
    }

    @Test("a node serves no session before it joined: create and lookups answer unavailable")
    func notJoined() async throws {
        let storage = InMemoryStorage(shared: true)
        let node = try exampleManager(storage)
        do {
            _ = try await node.create()
            Issue.record("created a session before joining")
        } catch {
            guard case .storage(let e) = error, e.kind == .unavailable else { Issue.record("\(error)"); return }
        }
        await #expect(throws: StorageError.self) { _ = try await node.locate(id: "abc", token: "t") }
        try await storage.join(advertising: "http://node")
        let (session, token) = try await node.create()
        guard case .here(let found)? = try await node.locate(id: session.id, token: token) else {
            Issue.record("the joined node does not serve its session")
            return
        }
        #expect(found === session)
    }

    @Test("the node that creates a session owns it; the other node points to it and writes nothing")
    func ownerServes() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        #expect(Self.isElsewhere(try await nodes.nodeB.locate(id: a.id, token: token), "http://node-a"))
        #expect(try await nodes.nodeB.locate(id: a.id, token: "wrong") == nil, "a wrong token learns nothing")
        await #expect(throws: StorageError.self) { _ = try await nodes.nodeB.load(id: a.id, token: token) }
        // B's append is fenced even if B wrote it anyway.
        let entry = JournalEntry(
            session: a.id, seq: 2, feature: "counter", version: 2, cause: "dispatch", action: nil, effect: nil,
            delta: .state(Array(#"{"count":9}"#.utf8)), time: WallClock.now)
        await #expect(throws: StorageError.self) { try await nodes.storageB.commit([.append(entry, idempotencyKey: nil)]) }
        #expect(try await nodes.storageA.lastSeq(session: a.id) == 1)
    }

    @Test("after the owner's membership lapses, the other node takes over and continues the journal; a stream resumes exactly")
    func takeover() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        for _ in 0..<3 { try await a.dispatch("counter", #"{"type":"increment"}"#) }
        let streamOnA = RecordingSink()
        _ = a.subscribe(features: nil, lastEventID: nil, sink: streamOnA)
        nodes.storageA.lapse()
        #expect(try await eventually { streamOnA.isClosed }, "A's streams end when its membership lapses")
        #expect(try await eventually { !nodes.nodeA.isLoaded(id: a.id) }, "A drops its copy")
        guard case .here(let b)? = try await nodes.nodeB.locate(id: a.id, token: token) else {
            Issue.record("B did not take the session over")
            return
        }
        #expect(b.ownerEpoch == nodes.storageB.epoch)
        let applied = try await b.change("counter", .dispatch(json(#"{"type":"increment"}"#)))
        #expect(applied.version == 4)
        let journal = try await nodes.storageB.journal(session: a.id, afterSeq: 0, limit: 100)
        #expect(journal.map(\.seq) == [1, 2, 3, 4])
        #expect(journal.map(\.version) == [1, 2, 3, 4])
        // A stream that saw seq 1 on A resumes on B with 2, 3, 4: rebuilt from the journal.
        #expect(b.needsBackfill(after: 1))
        await b.backfill(after: 1)
        let resumed = RecordingSink()
        _ = b.subscribe(features: nil, lastEventID: 1, sink: resumed)
        #expect(resumed.events.filter { $0.event == "state" }.map(\.seq) == [2, 3, 4], "\(resumed.events)")
    }

    @Test("a timer of a node whose membership lapsed fires once, on the node that takes its session over; the other fires none")
    func timerFiresOnNewOwner() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, _) = try await nodes.nodeA.create()
        try await a.dispatch("todos", #"{"type":"add","title":"call Ada"}"#)
        try await a.dispatch("todos", #"{"type":"remind","id":"1","after":1}"#)
        let pending = try await nodes.storageB.timers(session: a.id)
        #expect(pending.map(\.timer.id) == ["remind-1"])
        let due = try #require(pending.first?.timer.due)
        // While A is a member, B does not see A's timer as its own to fire.
        #expect(try await nodes.storageB.dueTimers(through: due + 60_000, limit: 10).isEmpty)
        #expect(try await nodes.storageA.dueTimers(through: due + 60_000, limit: 10).map(\.id) == ["remind-1"])
        // A dies before the timer is due (its scheduler never runs); B's scheduler runs.
        nodes.storageA.lapse()
        let scheduler = Task { await nodes.nodeB.timers.run() }
        defer { scheduler.cancel() }
        #expect(try await eventually {
            try await nodes.storageB.journal(session: a.id, afterSeq: 0, limit: 100).contains { $0.cause == "timer" }
        })
        let journal = try await nodes.storageB.journal(session: a.id, afterSeq: 0, limit: 100)
        #expect(journal.filter { $0.cause == "timer" }.count == 1, "\(journal.map(\.cause))")
        #expect(try await nodes.storageB.timers(session: a.id).isEmpty)
        guard case .here(let b)? = try await nodes.nodeB.locate(id: a.id, token: "", admin: true) else {
            Issue.record("B does not serve the session")
            return
        }
        #expect(b.ownerEpoch == nodes.storageB.epoch)
        // A, back as a member with a new epoch, finds nothing to fire.
        try await nodes.storageA.join(advertising: "http://node-a")
        #expect(try await nodes.storageA.dueTimers(through: due + 60_000, limit: 10).isEmpty)
    }

    @Test("a copy kept by a node whose session was taken over cannot write: its change is refused as retired, nothing stored")
    func staleCopyIsFenced() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        // A's membership lapses and B takes over, but A's copy is still in A's hands (a paused
        // node that has not heard yet).
        nodes.storageA.lapse()
        try await nodes.storageA.join(advertising: "http://node-a")
        guard case .here(let b)? = try await nodes.nodeB.locate(id: a.id, token: token) else {
            Issue.record("B did not take the session over")
            return
        }
        let outcome = await a.submit(ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)))).value()
        guard case .failed(.retired) = outcome else { Issue.record("\(outcome)"); return }
        #expect(try await nodes.storageA.lastSeq(session: a.id) == 1, "nothing of A's stale copy was stored")
        #expect(try await b.change("counter", .dispatch(json(#"{"type":"increment"}"#))).version == 2)
        // Submitted again where the session is now: B.
        let again = try await nodes.nodeA.submitAgain(
            ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#))), id: a.id, token: token, admin: false)
        guard case .elsewhere(let url) = again else { Issue.record("\(again)"); return }
        #expect(url == "http://node-b")
    }

    @Test("an Idempotency-Key applies once across a takeover")
    func keyAcrossTakeover() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        let request = ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), idempotencyKey: "k")
        guard case .applied = await a.submit(request).value() else { Issue.record("not applied"); return }
        nodes.storageA.lapse()
        let b = try #require(try await nodes.nodeB.load(id: a.id, token: token))
        _ = try await b.requireStore("counter")
        let again = await b.submit(request).value()
        guard case .replayed(let reply) = again else { Issue.record("\(again)"); return }
        #expect(reply.version == 1)
        #expect(try await nodes.storageB.lastSeq(session: a.id) == 1)
    }

    @Test("a session handed over to the node its requests come through is served there, and the old owner points to it")
    func handOver() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        try await a.dispatch("counter", #"{"type":"increment"}"#)
        await nodes.nodeA.handOver(a, to: nodes.storageB.epoch)
        guard case .here(let b)? = try await nodes.nodeB.locate(id: a.id, token: token) else {
            Issue.record("B does not serve the session handed to it")
            return
        }
        #expect(try await b.change("counter", .dispatch(json(#"{"type":"increment"}"#))).version == 2)
        #expect(Self.isElsewhere(try await nodes.nodeA.locate(id: a.id, token: token), "http://node-b"))
    }

    @Test("a delete on one node ends the owner's streams and drops the session from its memory")
    func deleteHeardAcrossNodes() async throws {
        let nodes = try await Self.twoNodes()
        defer { Task { await nodes.storageA.close() } }
        let (a, _) = try await nodes.nodeA.create()
        let sink = RecordingSink()
        _ = a.subscribe(features: nil, lastEventID: nil, sink: sink)
        // As B's TTL sweep deletes a session it does not hold.
        try await nodes.storageB.commit([.deleteSession(id: a.id)])
        #expect(try await eventually { sink.isClosed }, "A's stream ends without any request on A")
        #expect(!nodes.nodeA.isLoaded(id: a.id))
        #expect(a.isGone)
    }

    @Test("a lost notice channel ends every stream and refuses new ones until it is back")
    func lostChannel() async throws {
        let nodes = try await Self.twoNodes()
        let (storage, nodeB) = (nodes.storageB, nodes.nodeB)
        defer { Task { await storage.close() } }
        let (b, _) = try await nodeB.create()
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
        let other = storage.node()
        try await storage.join(advertising: "http://node-a")
        try await other.join(advertising: "http://node-b")
        let inside = try await storage.exclusively("sweep") { () async -> Bool? in
            try? await storage.exclusively("sweep") { true }
        }
        #expect(inside == .some(.some(nil)), "the second turn is refused while the first runs")
        #expect(try await storage.exclusively("sweep") { 1 } == 1, "the turn is free again")
        // Two nodes sweeping together: the expired session is deleted once, by one of them.
        let nodeA = try exampleManager(storage, settings: testSettings(ttl: .seconds(1)))
        let nodeB = try exampleManager(other, settings: testSettings(ttl: .seconds(1)))
        let (session, _) = try await nodeA.create()
        let later = WallClock.now + 10_000
        async let first = nodeA.sweep(now: later)
        async let second = nodeB.sweep(now: later)
        let (ra, rb) = await (first, second)
        #expect(ra.purged + rb.purged >= 1)
        #expect(try await storage.session(id: session.id) == nil)
    }

    // MARK: Work left by a node that is gone

    @Test("a store left waiting by work of a node whose membership lapsed is settled at once by the node that takes over; the old work cannot land")
    func workOfALapsedNodeIsSettled() async throws {
        // Node A's check would take an hour: A is as good as gone.
        let nodes = try await Self.twoNodes(loginCheckDelay: .seconds(3600))
        defer { Task { await nodes.storageA.close() } }
        let (a, token) = try await nodes.nodeA.create()
        try await a.dispatch("login", #"{"type":"submit","username":"ada","password":"long enough"}"#)
        #expect(try await a.current("login").state["isLoading"] == .bool(true))
        nodes.storageA.lapse()
        let b = try #require(try await nodes.nodeB.load(id: a.id, token: token))
        let login = try await b.current("login")
        #expect(login.version == 2, "\(login)")
        #expect(login.state["isLoading"] == .bool(false))
        #expect(login.state["error"] == .string("The server restarted during the check; please try again."), "\(login)")
        #expect(try await nodes.storageB.lastSeq(session: a.id) == 2)
    }
}
