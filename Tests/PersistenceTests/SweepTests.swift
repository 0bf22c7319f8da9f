import Foundation
import TestSupport
import StatePersistence
@testable import StateSessions
import StateStore
import Testing

/// Idle sessions leave memory and come back; sessions past the TTL are purged everywhere.
@Suite("Sweeping: idle eviction and TTL (memory and SQLite storage)")
struct SweepTests {
    @Test("idle sessions are evicted and reload with the same state; busy ones stay", arguments: Backend.allCases)
    func idleEviction(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(idleTimeout: .seconds(60), ttl: .seconds(3_600)))
            let (idle, idleToken) = try await manager.create()
            let (watched, _) = try await manager.create()
            for _ in 0..<3 { try await idle.dispatch("counter", #"{"type":"increment"}"#, key: UUID().uuidString) }
            try await idle.dispatch("todos", #"{"type":"add","title":"keep me"}"#)
            _ = watched.hub.subscribe(features: nil, lastEventID: nil, sink: RecordingSink())
            let before = try await idle.current("todos")

            let nothing = await manager.sweep(now: WallClock.now)
            #expect(nothing.evicted == 0 && nothing.purged == 0)

            let swept = await manager.sweep(now: WallClock.now + 120_000)
            #expect(swept.evicted == 1, "only the idle one; an event stream keeps a session busy")
            #expect(swept.purged == 0)
            #expect(!manager.isLoaded(id: idle.id))
            #expect(manager.isLoaded(id: watched.id))
            #expect(try await fixture.storage.session(id: idle.id) != nil, "eviction deletes nothing")
            // The evicted object refuses changes (a caller that looked it up just before the
            // eviction loads it again), so there are never two live copies of one session.
            let stale = await sessionFailure { () async throws(SessionFailure) in
                _ = try await idle.change("counter", .dispatch(json(#"{"type":"increment"}"#)))
            }
            #expect({ if case .retired? = stale { true } else { false } }(), "\(String(describing: stale))")

            let back = try #require(try await manager.load(id: idle.id, token: idleToken))
            #expect(back !== idle, "a fresh session object, loaded from storage")
            #expect(try await back.current("counter") == Snapshot(3, #"{"count":3}"#))
            #expect(try await back.current("todos") == before)
            #expect(back.hub.seq == 4)
            #expect(try await back.dispatch("counter", #"{"type":"increment"}"#).version == 4)
            #expect(try await fixture.storage.lastSeq(session: idle.id) == 5)
        }
    }

    @Test("sessions inactive past the TTL are purged from memory and storage, loaded or not", arguments: Backend.allCases)
    func ttlPurge(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let settings = testSettings(idleTimeout: .seconds(3_600), ttl: .seconds(10))
            let first = try exampleManager(fixture.storage, settings: settings)
            // Sweep times are taken relative to the sessions' first activity, not to when the
            // sweep runs: a slow machine cannot push them past the TTL early.
            let start = WallClock.now
            let (loaded, loadedToken) = try await first.create()
            let (stored, storedToken) = try await first.create()
            for session in [loaded, stored] {
                try await session.dispatch("counter", #"{"type":"increment"}"#, key: "k")
            }

            // A new manager holds `loaded` in memory; `stored` is only on disk.
            let second = try exampleManager(try await fixture.reopen(), settings: settings)
            let inMemory = try #require(try await second.load(id: loaded.id, token: loadedToken))
            #expect(try await inMemory.current("counter").version == 1)
            #expect(!second.isLoaded(id: stored.id))

            let early = await second.sweep(now: start + 5_000)
            #expect(early.purged == 0, "still within the TTL")

            let swept = await second.sweep(now: WallClock.now + 20_000)
            #expect(swept.purged == 2)
            #expect(!second.isLoaded(id: loaded.id))
            let storage = fixture.storage
            for id in [loaded.id, stored.id] {
                #expect(try await storage.session(id: id) == nil)
                #expect(try await storage.journal(session: id, afterSeq: 0, limit: 10).isEmpty)
                #expect(try await storage.rememberedKey(session: id, key: "k") == nil)
            }
            #expect(try await second.load(id: loaded.id, token: loadedToken) == nil)
            #expect(try await second.load(id: stored.id, token: storedToken) == nil)
            #expect(try await storage.sessionCount() == 0)
        }
    }

    @Test("a session in use is not purged by the TTL, however late its activity reaches storage", arguments: Backend.allCases)
    func activeSessionSurvivesTTL(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(fixture.storage, settings: testSettings(ttl: .seconds(1)))
            // Stored with its last activity 30 s ago, far past the 1 s TTL; the changes below do
            // not move it (SQLite writes stored activity at most once a minute; memory keeps the
            // newest, so there it is fresh again). Each sweep is told it runs 900 ms after a use
            // began, however long the use took: no time passes on the real clock for the TTL.
            let id = "in-use"
            try await fixture.storage.commit([.createSession(Rows.session(id, token: "token", createdAt: WallClock.now - 30_000))])
            var lastUse: Int64 = 0
            for expected in 1...5 {
                let used = WallClock.now
                let current = try #require(try await manager.load(id: id, token: "token"), "purged after \(expected - 1) changes")
                #expect(try await current.dispatch("counter", #"{"type":"increment"}"#).version == expected)
                lastUse = WallClock.now
                let swept = await manager.sweep(now: used + 900)
                #expect(swept.purged == 0, "a session used 900 ms before the sweep was purged after \(expected) changes")
            }
            #expect(try await fixture.storage.session(id: id) != nil)
            if backend == .sqlite {
                let stale = try await fixture.storage.sessions(inactiveBefore: lastUse - 1_000, limit: 10)
                #expect(stale == [id], "its stored activity is past the TTL all along")
            }

            // Unused for longer than the TTL after its last use: the same sweep purges it.
            let late = await manager.sweep(now: lastUse + 1_001)
            #expect(late.purged == 1)
            #expect(try await fixture.storage.session(id: id) == nil)
        }
    }

    @Test("evicting a session while its asynchronous work runs does not lose the work's follow-up", arguments: Backend.allCases)
    func evictionKeepsWorkInFlight(_ backend: Backend) async throws {
        try await withStorage(backend) { fixture in
            let manager = try exampleManager(
                fixture.storage, settings: testSettings(idleTimeout: .milliseconds(200)), loginCheckDelay: .milliseconds(800))
            // Hold no reference to the session object, as a server between requests holds none.
            func submit() async throws -> (id: String, token: String) {
                let (session, token) = try await manager.create()
                try await session.dispatch("login", #"{"type":"submit","username":"ada","password":"long enough"}"#)
                return (session.id, token)
            }
            let (id, token) = try await submit()
            // Idle past the timeout while the check runs (the sweep is told it is a second
            // later); the sweeper sees an unused session.
            let swept = await manager.sweep(now: WallClock.now + 1_000)
            // Wait for the check's follow-up to be journaled (version 2 of login, seq 2).
            let settled = try await eventually(timeout: .seconds(10)) {
                try await fixture.storage.lastSeq(session: id) >= 2
            }
            #expect(settled, "the check's result was never stored")
            let reloaded = try #require(try await manager.load(id: id, token: token))
            let login = try await reloaded.current("login")
            #expect(
                login == Snapshot(2, #"{"username":"ada","isLoading":false,"isLoggedIn":true,"error":null}"#),
                "the check succeeded while the session was \(swept.evicted == 1 ? "evicted" : "in memory"); its result must be kept: \(login)")
        }
    }
}
