import StatePersistence
import TestSupport
import Testing

/// Memory mode's journal (issue 27 item 1): `InMemoryStorage.process`, the same storage rules
/// as the others, bounded, answered at once.
@Suite("Memory mode's journal")
struct MemoryJournalTests {
    static func journal(
        changes: Int = 1000, bytes: Int = 1 << 30, serverBytes: Int = 1 << 30, keys: Int = 1000
    ) -> InMemoryStorage {
        .process(InMemoryStorage.Bounds(
            changes: changes, bytes: bytes, serverBytes: serverBytes, keys: keys, stateVersions: ["counter": 3]))
    }

    @Test("the SessionStorage behaviour checks pass on it (bounds larger than the checks use)", arguments: StorageBehaviour.all)
    func behaviour(_ check: StorageBehaviour.Check) async throws {
        let storage = Self.journal()
        try await check.run(storage)
        await storage.close()
    }

    @Test("it lives as long as the process, and commits without waiting")
    func lifetime() throws {
        let storage = Self.journal()
        #expect(storage.lifetime == .process)
        #expect(InMemoryStorage().lifetime == .durable, "the twin of durable storage")
        try storage.commitNow([.createSession(Rows.session("s")), .append(Rows.entry("s", seq: 1, version: 1), idempotencyKey: nil)])
        let refused = storageErrorSync { () throws(StorageError) in try storage.commitNow([.append(Rows.entry("s", seq: 1, version: 1), idempotencyKey: nil)]) }
        #expect(refused?.kind == .conflict, "the same fence as the other storages")
        let gone = storageErrorSync { () throws(StorageError) in try storage.commitNow([.append(Rows.entry("t", seq: 1, version: 1), idempotencyKey: nil)]) }
        #expect(gone?.kind == .sessionGone)
    }

    @Test("past `changes` the oldest leave; the last one to leave is its feature's base, so every kept change has a state before it")
    func ringKeepsBases() async throws {
        let storage = Self.journal(changes: 3)
        try storage.commitNow([.createSession(Rows.session("s"))])
        for version in 1...7 {
            try storage.commitNow([.append(Rows.entry("s", seq: version, version: version), idempotencyKey: nil)])
        }
        let kept = try await storage.journal(session: "s", afterSeq: 0, limit: 100)
        #expect(kept.map(\.seq) == [5, 6, 7])
        let base = try await storage.latestSnapshot(session: "s", feature: "counter")
        #expect(base?.version == 4 && base?.state == Array(#"{"count":4}"#.utf8), "\(String(describing: base))")
        #expect(base?.stateVersion == 3, "the feature's state schema version")
        let initial = Array(#"{"count":0}"#.utf8)
        for version in 4...7 {
            let state = try await storage.state(session: "s", feature: "counter", at: version, initial: initial)
            #expect(state == Array(#"{"count":\#(version)}"#.utf8), "version \(version)")
        }
        #expect(try await storage.state(session: "s", feature: "counter", at: 3, initial: initial) == nil, "gone")
        #expect(try await storage.lastSeq(session: "s") == 7)
    }

    @Test("a session keeps at most `bytes` of changes (its newest always); all sessions together at most `serverBytes`, oldest first")
    func byteBounds() async throws {
        let size = Rows.entry("a", seq: 1, version: 1).size
        let perSession = Self.journal(bytes: 3 * size)
        try perSession.commitNow([.createSession(Rows.session("a"))])
        for version in 1...5 {
            try perSession.commitNow([.append(Rows.entry("a", seq: version, version: version), idempotencyKey: nil)])
        }
        #expect(try await perSession.journal(session: "a", afterSeq: 0, limit: 100).map(\.seq) == [3, 4, 5])

        let server = Self.journal(serverBytes: 4 * size)
        try server.commitNow([.createSession(Rows.session("a")), .createSession(Rows.session("b"))])
        for version in 1...3 {
            try server.commitNow([.append(Rows.entry("a", seq: version, version: version), idempotencyKey: nil)])
        }
        for version in 1...3 {
            try server.commitNow([.append(Rows.entry("b", seq: version, version: version), idempotencyKey: nil)])
        }
        // Six changes, room for four: a's two oldest left first.
        #expect(try await server.journal(session: "a", afterSeq: 0, limit: 100).map(\.seq) == [3])
        #expect(try await server.journal(session: "b", afterSeq: 0, limit: 100).map(\.seq) == [1, 2, 3])
        // A deleted session gives its room back: b's next changes push nothing of b out.
        try server.commitNow([.deleteSession(id: "a")])
        try server.commitNow([.append(Rows.entry("b", seq: 4, version: 4), idempotencyKey: nil)])
        #expect(try await server.journal(session: "b", afterSeq: 0, limit: 100).map(\.seq) == [1, 2, 3, 4])
        try server.commitNow([.append(Rows.entry("b", seq: 5, version: 5), idempotencyKey: nil)])
        #expect(try await server.journal(session: "b", afterSeq: 0, limit: 100).map(\.seq) == [2, 3, 4, 5])
    }

    @Test("remembered keys are bounded per session, the oldest forgotten first")
    func keysBounded() async throws {
        let storage = Self.journal(keys: 2)
        try storage.commitNow([.createSession(Rows.session("s"))])
        for version in 1...3 {
            try storage.commitNow([.append(Rows.entry("s", seq: version, version: version), idempotencyKey: "k\(version)")])
        }
        #expect(try await storage.rememberedKey(session: "s", key: "k1") == nil)
        #expect(try await storage.rememberedKey(session: "s", key: "k2")?.version == 2)
        #expect(try await storage.rememberedKey(session: "s", key: "k3")?.version == 3)
    }

    @Test("many sessions over a small server budget: what is kept never exceeds it, and every session keeps a base")
    func manySessions() async throws {
        let size = Rows.entry("s0", seq: 1, version: 1).size
        let storage = Self.journal(changes: 10, serverBytes: 50 * size)
        for index in 0..<40 {
            try storage.commitNow([.createSession(Rows.session("s\(index)"))])
            for version in 1...5 {
                try storage.commitNow([.append(Rows.entry("s\(index)", seq: version, version: version), idempotencyKey: nil)])
            }
        }
        var kept = 0
        for index in 0..<40 {
            let entries = try await storage.journal(session: "s\(index)", afterSeq: 0, limit: 100)
            kept += entries.count
            let state = try await storage.state(session: "s\(index)", feature: "counter", at: 5, initial: [])
            #expect(state == Array(#"{"count":5}"#.utf8), "s\(index): its last state, kept or as its base")
        }
        #expect(kept <= 50 && kept >= 45, "\(kept) changes kept")
    }
}
