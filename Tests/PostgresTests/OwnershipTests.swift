import Foundation
import StatePersistence
import StatePostgres
import TestSupport
import Testing

/// One owner per session (issue 15 item 1), on a real PostgreSQL: memberships with epochs,
/// claims, appends fenced on the owner, release on leave, takeover after expiry.
@Suite("Session ownership on PostgreSQL", .postgres)
struct OwnershipTests {
    private static func open(_ url: String, lease: Duration = .seconds(10)) async throws -> PostgresStorage {
        var settings = try TestPostgres.settings(url)
        settings.lease = lease
        return try await PostgresStorage.open(settings: settings)
    }

    private static func append(_ storage: PostgresStorage, seq: Int) async -> StorageError? {
        await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: seq, feature: "counter", version: seq), idempotencyKey: nil)])
        }
    }

    @Test("a session belongs to the node that created it: another node's claim names the owner's URL, its appends are refused and write nothing")
    func oneOwner() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await Self.open(url)
            try await nodeA.join(advertising: "http://node-a:8080")
            try await nodeB.join(advertising: "http://node-b:8080")
            #expect(nodeA.epoch > 0 && nodeB.epoch > nodeA.epoch, "epochs grow: \(nodeA.epoch), \(nodeB.epoch)")
            #expect(nodeA.isMember && nodeB.isMember)
            try await nodeA.commit([.createSession(Rows.session("s"))])

            #expect(try await nodeA.claim(session: "s") == .mine(tookOver: false))
            #expect(try await nodeB.claim(session: "s") == .elsewhere(url: "http://node-a:8080"))
            #expect(try await nodeB.claim(session: "nope") == .gone)

            #expect(await Self.append(nodeA, seq: 1) == nil)
            let refused = await Self.append(nodeB, seq: 2)
            #expect(refused?.kind == .notOwner, "\(String(describing: refused))")
            #expect(try await nodeA.lastSeq(session: "s") == 1)
            await nodeB.close()
        }
    }

    @Test("a node that leaves frees its sessions at once: the next claim takes over, and the former owner can no longer append")
    func leaveFreesSessions() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await Self.open(url)
            try await nodeA.join(advertising: "http://node-a:8080")
            try await nodeB.join(advertising: "http://node-b:8080")
            try await nodeA.commit([.createSession(Rows.session("s"))])
            #expect(await Self.append(nodeA, seq: 1) == nil)

            await nodeA.leave()
            #expect(!nodeA.isMember && nodeA.epoch == 0)
            #expect(try await nodeB.claim(session: "s") == .mine(tookOver: true))
            let stale = await Self.append(nodeA, seq: 2)
            #expect(stale?.kind == .notOwner, "\(String(describing: stale))")
            #expect(await Self.append(nodeB, seq: 2) == nil)
            #expect(try await nodeB.journal(session: "s", afterSeq: 0, limit: 10).map(\.seq) == [1, 2])
            await nodeB.close()
        }
    }

    @Test("a node that stops renewing: another node takes over only once the lease expired by PostgreSQL's clock; the old owner is fenced")
    func takeoverAfterExpiry() async throws {
        try await withPostgresStorage { nodeA, url in
            // A lease long enough that A's first claim below comes before it ends, also on a
            // loaded machine (2 s was seen to run out first with both cores busy).
            let nodeB = try await Self.open(url, lease: .seconds(6))
            try await nodeA.join(advertising: "http://node-a:8080")
            try await nodeB.join(advertising: "http://node-b:8080")
            try await nodeB.commit([.createSession(Rows.session("s"))])
            #expect(await Self.append(nodeB, seq: 1) == nil)
            // B stops renewing but lives on, its liveness lock held (as a paused node): its
            // row stays until it expires.
            let stopped = ContinuousClock.now
            await nodeB.stopRenewing()
            #expect(try await nodeA.claim(session: "s") == .elsewhere(url: "http://node-b:8080"))
            var claim: OwnershipClaim?
            #expect(try await eventually(timeout: .seconds(20), every: .milliseconds(100)) {
                claim = try await nodeA.claim(session: "s")
                return claim != .elsewhere(url: "http://node-b:8080")
            })
            #expect(claim == .mine(tookOver: true))
            // Not before B's lease (6 s from its last renewal, at most 1.5 s before it stopped).
            #expect(ContinuousClock.now - stopped >= .milliseconds(4400), "taken over after \(ContinuousClock.now - stopped)")
            // B's own clock gave up even earlier: 3/4 of the lease after its last renewal.
            #expect(!nodeB.isMember)
            #expect(await Self.append(nodeA, seq: 2) == nil)
            #expect(try await nodeA.lastSeq(session: "s") == 2)
            await nodeB.close()
        }
    }

    @Test("a node whose connections end without leaving (its process died): another node takes over within a second or two, long before its lease, and appends")
    func takeoverOfADeadNode() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await Self.open(url, lease: .seconds(30))
            try await nodeA.join(advertising: "http://node-a:8080")
            try await nodeB.join(advertising: "http://node-b:8080")
            try await nodeB.commit([.createSession(Rows.session("s"))])
            #expect(await Self.append(nodeB, seq: 1) == nil)
            // Closed without leaving: its row stays, its lock connection is gone.
            let ended = ContinuousClock.now
            await nodeB.close()
            var claim: OwnershipClaim?
            #expect(try await eventually(timeout: .seconds(20), every: .milliseconds(20)) {
                claim = try await nodeA.claim(session: "s")
                return claim != .elsewhere(url: "http://node-b:8080")
            })
            let took = ContinuousClock.now - ended
            #expect(claim == .mine(tookOver: true))
            #expect(took < .seconds(10), "taken over after \(took) (the lease is 30 s)")
            #expect(!nodeB.isMember)
            #expect(await Self.append(nodeA, seq: 2) == nil)
            let members = try await nodeA.members()
            #expect(members.map(\.url) == ["http://node-a:8080"] && members.first?.holdsLock == true, "\(members)")
        }
    }
}
