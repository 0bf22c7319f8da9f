import ExampleFeatures
import Foundation
import TestSupport
import StatePersistence
import StateSessions
import StateStore
import Testing

/// When storage fails, nothing is applied or acknowledged, memory does not run ahead of the
/// disk, and the next change works once the disk does.
@Suite("Storage failures during changes (InMemoryStorage.failNextCommits)")
struct StorageFailureTests {
    @Test("a failing commit leaves memory unchanged, publishes nothing, remembers no reply; the next change works")
    func failingCommitChangesNothing() async throws {
        let storage = InMemoryStorage()
        let manager = try exampleManager(storage)
        let (session, token) = try await manager.create()
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        let sink = RecordingSink()
        _ = session.hub.subscribe(features: nil, lastEventID: nil, sink: sink)
        #expect(sink.events.count == 1, "the snapshot")

        storage.failNextCommits(3)
        let dispatch = await sessionFailure { () async throws(SessionFailure) in
            _ = try await session.knownStore("counter")
            let action = json(#"{"type":"increment","by":10}"#)
            _ = try await session.change("counter", .dispatch(action), key: "retry-me")
        }
        #expect(dispatch?.storageKind == .unavailable, "\(String(describing: dispatch))")
        let rehydrate = await sessionFailure { () async throws(SessionFailure) in
            let store = try await session.knownStore("counter")
            let state = json(#"{"count":99}"#)
            _ = try await session.change(store.featureName, .rehydrate(state))
        }
        #expect(rehydrate?.storageKind == .unavailable)
        let reset = await sessionFailure { () async throws(SessionFailure) in
            let store = try await session.knownStore("counter")
            _ = try await session.change(store.featureName, .reset)
        }
        #expect(reset?.storageKind == .unavailable)

        #expect(try await session.current("counter") == Snapshot(2, #"{"count":2}"#))
        #expect(sink.events.count == 1, "nothing published: \(sink.events)")
        #expect(session.hub.seq == 2)
        #expect(try await session.rememberedReply(key: "retry-me") == nil, "a failed change can be retried with its key")
        #expect(try await storage.lastSeq(session: session.id) == 2)

        // The disk is back: the retry applies once, with the next version and sequence number.
        let retried = try await session.dispatch("counter", #"{"type":"increment","by":10}"#, key: "retry-me")
        #expect(retried.version == 3)
        #expect(try await session.current("counter") == Snapshot(3, #"{"count":12}"#))
        #expect(sink.events.map(\.seq) == [2, 3])
        #expect(try await session.rememberedReply(key: "retry-me")?.version == 3)
        let journal = try await storage.journal(session: session.id, afterSeq: 0, limit: 10)
        #expect(journal.map(\.seq) == [1, 2, 3])
        #expect(journal.map(\.version) == [1, 2, 3])

        // And a restart sees exactly the acknowledged changes.
        let reloaded = try #require(try await exampleManager(storage).load(id: session.id, token: token))
        #expect(try await reloaded.current("counter") == Snapshot(3, #"{"count":12}"#))
    }

    @Test("a failing commit with a snapshot due stores neither the change nor the snapshot")
    func failingSnapshotCommit() async throws {
        let storage = InMemoryStorage()
        let manager = try exampleManager(storage, settings: testSettings(snapshotEvery: 2))
        let (session, _) = try await manager.create()
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        storage.failNextCommits(1)
        let failed = await sessionFailure { () async throws(SessionFailure) in
            let store = try await session.knownStore("counter")
            let action = json(#"{"type":"increment"}"#)
            _ = try await session.change(store.featureName, .dispatch(action))
        }
        #expect(failed?.storageKind == .unavailable)
        #expect(try await storage.latestSnapshot(session: session.id, feature: "counter")?.version == 1, "only the first change's")
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        #expect(try await storage.latestSnapshot(session: session.id, feature: "counter")?.version == 2)
    }

    @Test("a refused change is a store error and touches storage not at all")
    func refusedChange() async throws {
        let storage = InMemoryStorage()
        let (session, _) = try await exampleManager(storage).create()
        let refused = await sessionFailure { () async throws(SessionFailure) in
            let store = try await session.knownStore("todos")
            let action = json(#"{"type":"toggle","id":"404"}"#)
            _ = try await session.change(store.featureName, .dispatch(action))
        }
        #expect(refused?.storeKind == .actionRejected, "\(String(describing: refused))")
        let stale = await sessionFailure { () async throws(SessionFailure) in
            let store = try await session.knownStore("counter")
            let action = json(#"{"type":"increment"}"#)
            _ = try await session.change(store.featureName, .dispatch(action), ifVersion: 5)
        }
        #expect(stale?.storeKind == .versionConflict)
        #expect(try await storage.lastSeq(session: session.id) == 0)
        #expect(session.hub.seq == 0)
    }

    @Test("a follow-up whose commit fails is not applied in memory and is reported")
    func followUpNotStored() async throws {
        let storage = InMemoryStorage()
        let notices = NoticeLog()
        let manager = try exampleManager(storage, loginCheckDelay: .milliseconds(100), notices: notices)
        let (session, token) = try await manager.create()
        try await session.dispatch("login", #"{"type":"submit","username":"ada","password":"long enough"}"#)
        storage.failNextCommits(1)  // the check's `succeeded`, 100 ms from now
        let reported = try await eventually { notices.followUpsNotStored == 1 }
        #expect(reported, "\(notices.description)")
        #expect(try await session.current("login").state["isLoading"] == .bool(true), "memory did not run ahead of the disk")
        #expect(try await session.current("login").version == 1)
        #expect(try await storage.lastSeq(session: session.id) == 1)
        // What was stored is the submit alone: a reload settles the lost check as failed.
        let reloaded = try #require(try await exampleManager(storage).load(id: session.id, token: token))
        let login = try await reloaded.current("login")
        #expect(login.version == 2)
        #expect(login.state["isLoggedIn"] == .bool(false))
        #expect(login.state["isLoading"] == .bool(false))
    }

    @Test("a failing create stores no session and keeps none in memory; a failing delete keeps the session")
    func failingCreateAndDelete() async throws {
        let storage = InMemoryStorage()
        let manager = try exampleManager(storage)
        storage.failNextCommits(1)
        do {
            _ = try await manager.create()
            Issue.record("the create succeeded on a failing disk")
        } catch {
            #expect({ if case .storage(let e) = error { e.kind == .unavailable } else { false } }())
        }
        #expect(manager.count == 0)
        #expect(try await storage.sessionCount() == 0)

        let (session, token) = try await manager.create()
        try await session.dispatch("counter", #"{"type":"increment"}"#)
        storage.failNextCommits(1)
        do {
            try await manager.delete(session)
            Issue.record("the delete succeeded on a failing disk")
        } catch {
            #expect(error.storageKind == .unavailable)
        }
        #expect(manager.isLoaded(id: session.id))
        #expect(try await storage.session(id: session.id) != nil)
        #expect(try await manager.load(id: session.id, token: token) === session)
        try await manager.delete(session)
        #expect(try await storage.session(id: session.id) == nil)
    }
}
