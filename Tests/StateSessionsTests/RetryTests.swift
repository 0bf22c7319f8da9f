// The session layer's retries (SessionManager+Retries.swift): a change whose session left
// memory is submitted to the session looked up again; every store is loaded again after a
// catch-up dropped one.

import ExampleFeatures
import StatePersistence
@testable import StateSessions
import StateStore
import Testing

@Suite("Retries of the session layer")
struct RetryTests {
    static let increment = ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)))

    @Test("a change refused as retired (the copy was evicted) is applied to the session loaded again, after the changes before it")
    func retiredIsSubmittedAgain() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, token) = try await manager.create()
        _ = try await session.store("counter")
        guard case .applied = await session.submit(Self.increment).value() else {
            Issue.record("the first increment was not applied")
            return
        }
        // Idle past idleTimeout: the sweep retires the copy in memory.
        let (evicted, _) = await manager.sweep(now: WallClock.now + SessionManager.milliseconds(testSettings().idleTimeout) + 1_000)
        #expect(evicted == 1)
        guard case .failed(.retired) = await session.submit(Self.increment).value() else {
            Issue.record("the retired copy took a change")
            return
        }
        let again = try await manager.submitAgain(Self.increment, id: session.id, token: token, admin: false)
        guard case .outcome(.applied(let change, _)) = again else {
            Issue.record("not applied again: \(again)")
            return
        }
        #expect(change.version == 2, "after the change journaled before the eviction")
        #expect(manager.isLoaded(id: session.id))
    }

    @Test("SessionManager.submit answers a change to a copy evicted meanwhile with its outcome on the session loaded again, never retired")
    func submitThroughTheManager() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, token) = try await manager.create()
        _ = try await session.store("counter")
        let first = await manager.submit(Self.increment, to: session, token: token, admin: false).value()
        guard case .outcome(.applied) = first else {
            Issue.record("not applied: \(first)")
            return
        }
        let (evicted, _) = await manager.sweep(now: WallClock.now + SessionManager.milliseconds(testSettings().idleTimeout) + 1_000)
        #expect(evicted == 1)
        let again = await manager.submit(Self.increment, to: session, token: token, admin: false).value()
        guard case .outcome(.applied(let change, _)) = again else {
            Issue.record("not applied to the session loaded again: \(again)")
            return
        }
        #expect(change.version == 2)
        // The copy in hand is the evicted one still: looked up again, another token finds nothing.
        guard case .notFound = await manager.submit(Self.increment, to: session, token: "another", admin: false).value() else {
            Issue.record("another token reached the session")
            return
        }
    }

    @Test("a change for a session deleted meanwhile is not found; with another token too")
    func deletedIsNotFound() async throws {
        let manager = try exampleManager(InMemoryStorage())
        let (session, token) = try await manager.create()
        guard case .notFound = try await manager.submitAgain(Self.increment, id: session.id, token: "another", admin: false) else {
            Issue.record("another token found the session")
            return
        }
        try await manager.delete(session)
        guard case .notFound = try await manager.submitAgain(Self.increment, id: session.id, token: token, admin: false) else {
            Issue.record("a deleted session took a change")
            return
        }
    }

    @Test("loadEveryStore loads every feature's store from storage")
    func loadEveryStore() async throws {
        let storage = InMemoryStorage()
        let manager = try exampleManager(storage)
        let (session, token) = try await manager.create()
        _ = try await session.store("counter")
        _ = await session.submit(Self.increment).value()
        let other = try exampleManager(storage)
        let loaded = try #require(try await other.load(id: session.id, token: token))
        #expect(loaded.storeCount == 0)
        #expect(try await loaded.loadEveryStore())
        #expect(loaded.holdsEveryStore)
        #expect(try loaded.allStates().first { $0.feature == "counter" }?.version == 1)
    }
}
