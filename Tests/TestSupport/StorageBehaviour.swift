import Foundation
import StatePersistence
import Testing

/// The `SessionStorage` contract as checks on a fresh, empty storage: every storage (memory,
/// SQLite, PostgreSQL) runs all of them, from its own test target. Each check fails the running
/// test through `#expect`.
package enum StorageBehaviour {
    /// Every check, with its description, for `@Test(arguments:)`.
    package static let all: [Check] = [
        Check("sessions: create, get, count; a second create of the same id is a conflict", createAndGet),
        Check("delete removes the session with its journal, snapshots and replies; other sessions stay", deleteSession),
        Check("journal: reads by store (version order) and by session sequence (seq order, limit)", journalReads),
        Check("a batch is atomic: when one write fails, none of the batch is stored", batchIsAtomic),
        Check("a duplicate (session, feature, version) is a conflict that fails only its own batch", duplicateVersionFailsAlone),
        Check("appends are fenced: one that does not follow the session's seq and the store's version is refused, also after compaction", appendsAreFenced),
        Check("snapshots: kept per version, found at or before a version, never ahead of the journal", snapshotsPerVersion),
        Check("compact keeps a base snapshot before every entry still needed, and drops the rest", compactKeepsBases),
        Check("idempotency keys are stored with their change, read back by key, and never twice", keys),
        Check("a store's state at a version is rebuilt from its base and the patches after it", stateAtVersion),
        Check("an empty batch commits and changes nothing", emptyBatch),
        Check("sessions(inactiveBefore:) lists the least recently active first, up to the limit", inactiveBefore),
        Check("touch moves a session's last activity forward, never back", touch),
        Check("sessions(after:limit:) lists sessions in byte order of their ids, after a cursor", listed),
        Check("hasToken finds a live token of the session by its hash only: not another's, not an expired or deleted one", tokenByHash),
    ]

    package struct Check: Sendable, CustomTestStringConvertible {
        package let description: String
        package let run: @Sendable (any SessionStorage) async throws -> Void

        init(_ description: String, _ run: @escaping @Sendable (any SessionStorage) async throws -> Void) {
            self.description = description
            self.run = run
        }

        package var testDescription: String { description }
    }

    /// sessions: create, get, count; a second create of the same id is a conflict
    package static func createAndGet(_ storage: any SessionStorage) async throws {
        #expect(try await storage.session(id: "a") == nil)
        #expect(try await storage.sessionCount() == 0)
        let a = Rows.session("a", token: "secret-a", createdAt: 1_000, lastActive: 1_500)
        try await storage.commit([.createSession(a), .createSession(Rows.session("b"))])
        #expect(try await storage.session(id: "a") == a)
        #expect(try await storage.session(id: "a")?.tokenHash == SHA256.hash("secret-a"))
        #expect(try await storage.sessionCount() == 2)

        let duplicate = await storageError { () async throws(StorageError) in
            try await storage.commit([.createSession(Rows.session("a", token: "other"))])
        }
        #expect(duplicate?.kind == .conflict, "\(String(describing: duplicate))")
        #expect(try await storage.session(id: "a") == a, "the failed create changed nothing")
        #expect(try await storage.sessionCount() == 2)
    }

    /// hasToken finds a live token of the session by its hash only: not another's, not an
    /// expired or deleted one (a wrong token is looked up, never answered by reading every grant)
    package static func tokenByHash(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("a")), .createSession(Rows.session("b"))])
        func grant(_ id: String, _ token: String, session: String = "a", expiresAt: Int64? = nil) -> StoredGrant {
            StoredGrant(
                session: session, id: id, tokenHash: SHA256.hash(token), grant: Array(#"{"scope":"observe"}"#.utf8), createdAt: 1_000,
                expiresAt: expiresAt)
        }
        try await storage.commit([
            .createGrant(grant("t1", "live")), .createGrant(grant("t2", "expiring", expiresAt: 5_000)),
            .createGrant(grant("t3", "b's", session: "b")),
        ])
        #expect(try await storage.hasToken(session: "a", tokenHash: SHA256.hash("live"), now: 2_000))
        #expect(try await storage.hasToken(session: "a", tokenHash: SHA256.hash("expiring"), now: 4_999))
        #expect(try await !storage.hasToken(session: "a", tokenHash: SHA256.hash("expiring"), now: 5_000))
        #expect(try await !storage.hasToken(session: "a", tokenHash: SHA256.hash("b's"), now: 2_000))
        #expect(try await !storage.hasToken(session: "a", tokenHash: SHA256.hash("wrong"), now: 2_000))
        #expect(try await !storage.hasToken(session: "nobody", tokenHash: SHA256.hash("live"), now: 2_000))
        try await storage.commit([.deleteGrants(session: "a", ids: ["t1"])])
        #expect(try await !storage.hasToken(session: "a", tokenHash: SHA256.hash("live"), now: 2_000))
        #expect(try await storage.hasToken(session: "b", tokenHash: SHA256.hash("b's"), now: 2_000))
    }

    /// delete removes the session with its journal, snapshots and replies; other sessions stay
    package static func deleteSession(_ storage: any SessionStorage) async throws {
        for id in ["a", "b"] {
            try await storage.commit([
                .createSession(Rows.session(id)),
                .append(Rows.entry(id, seq: 1, version: 1), idempotencyKey: "k"),
                .append(Rows.entry(id, seq: 2, version: 2), idempotencyKey: nil),
                .snapshot(Rows.snapshot(id, version: 2, state: #"{"count":2}"#)),
            ])
        }
        try await storage.commit([.deleteSession(id: "a")])
        #expect(try await storage.session(id: "a") == nil)
        #expect(try await storage.journal(session: "a", feature: "counter", afterVersion: 0).isEmpty)
        #expect(try await storage.journal(session: "a", afterSeq: 0, limit: 100).isEmpty)
        #expect(try await storage.lastSeq(session: "a") == 0)
        #expect(try await storage.latestSnapshot(session: "a", feature: "counter") == nil)
        #expect(try await storage.rememberedKey(session: "a", key: "k") == nil)
        #expect(try await storage.sessionCount() == 1)

        #expect(try await storage.session(id: "b") != nil)
        #expect(try await storage.journal(session: "b", afterSeq: 0, limit: 100).count == 2)
        #expect(try await storage.latestSnapshot(session: "b", feature: "counter")?.version == 2)
        #expect(try await storage.rememberedKey(session: "b", key: "k")?.version == 1)

        // Deleting an unknown session is not an error; a deleted id can be created again.
        try await storage.commit([.deleteSession(id: "nobody")])
        try await storage.commit([.createSession(Rows.session("a"))])
        #expect(try await storage.lastSeq(session: "a") == 0)
    }

    /// journal: reads by store (version order) and by session sequence (seq order, limit)
    package static func journalReads(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s")), .createSession(Rows.session("t"))])
        // counter and todos interleaved: seq 1...6.
        let entries = [
            Rows.entry("s", seq: 1, feature: "counter", version: 1),
            Rows.entry("s", seq: 2, feature: "todos", version: 1, action: #"{"type":"add","title":"x"}"#),
            Rows.entry("s", seq: 3, feature: "counter", version: 2, cause: "rehydrate", action: nil, state: #"{"count":9}"#),
            JournalEntry(
                session: "s", seq: 4, feature: "counter", version: 3, cause: "reset", action: nil, effect: nil,
                delta: .patch(Array(#"[{"op":"replace","path":"/count","value":0}]"#.utf8)), time: 6_000),
            Rows.entry("s", seq: 5, feature: "todos", version: 2, action: #"{"type":"clearCompleted"}"#),
            JournalEntry(
                session: "s", seq: 6, feature: "counter", version: 4, cause: "dispatch", action: Array(#"{"type":"increment"}"#.utf8),
                effect: Array(#"{"type":"celebrate"}"#.utf8), delta: .patch(Array(#"[{"op":"replace","path":"/count","value":1}]"#.utf8)),
                time: 7_000),
        ]
        // Two batches, the second one of three appends.
        try await storage.commit(entries.prefix(3).map { .append($0, idempotencyKey: nil) })
        try await storage.commit(entries.suffix(3).map { .append($0, idempotencyKey: nil) })
        try await storage.commit([.append(Rows.entry("t", seq: 1, version: 1), idempotencyKey: nil)])

        let counter = try await storage.journal(session: "s", feature: "counter", afterVersion: 0)
        #expect(counter == [entries[0], entries[2], entries[3], entries[5]])
        #expect(counter.map(\.version) == [1, 2, 3, 4])
        #expect(counter[2].action == nil, "a reset has no action")
        #expect(counter[2].delta == .patch(Array(#"[{"op":"replace","path":"/count","value":0}]"#.utf8)))
        #expect(counter[3].effect == Array(#"{"type":"celebrate"}"#.utf8))
        #expect(counter[1].cause == "rehydrate")
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 2).map(\.version) == [3, 4])
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 4).isEmpty)
        #expect(try await storage.journal(session: "s", feature: "todos", afterVersion: 0) == [entries[1], entries[4]])
        #expect(try await storage.journal(session: "s", feature: "settings", afterVersion: 0).isEmpty)

        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 100) == entries)
        #expect(try await storage.journal(session: "s", afterSeq: 2, limit: 3).map(\.seq) == [3, 4, 5])
        #expect(try await storage.journal(session: "s", afterSeq: 6, limit: 10).isEmpty)
        #expect(try await storage.lastSeq(session: "s") == 6)
        #expect(try await storage.lastSeq(session: "t") == 1)
        #expect(try await storage.lastSeq(session: "nobody") == 0)
        #expect(try await storage.journal(session: "t", afterSeq: 0, limit: 10).map(\.session) == ["t"])
    }

    /// a batch is atomic: when one write fails, none of the batch is stored
    package static func batchIsAtomic(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s")), .append(Rows.entry("s", seq: 1, version: 1), idempotencyKey: nil)])
        let error = await storageError { () async throws(StorageError) in
            try await storage.commit([
                .createSession(Rows.session("new")),
                .append(Rows.entry("s", seq: 2, version: 2), idempotencyKey: "k"),
                .snapshot(Rows.snapshot("s", version: 2, state: #"{"count":2}"#)),
                .append(Rows.entry("s", seq: 3, version: 2), idempotencyKey: nil),  // duplicate version
            ])
        }
        #expect(error?.kind == .conflict, "\(String(describing: error))")
        #expect(try await storage.session(id: "new") == nil)
        #expect(try await storage.lastSeq(session: "s") == 1)
        #expect(try await storage.rememberedKey(session: "s", key: "k") == nil, "a failed batch remembers no key")
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == nil)
    }

    /// a duplicate (session, feature, version) is a conflict that fails only its own batch
    package static func duplicateVersionFailsAlone(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1), idempotencyKey: nil)])

        // A duplicate store version (new seq) and a duplicate seq (new version) both conflict.
        let sameVersion = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 2, version: 1), idempotencyKey: nil)])
        }
        #expect(sameVersion?.kind == .conflict, "\(String(describing: sameVersion))")
        let sameSeq = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 1, feature: "todos", version: 1), idempotencyKey: nil)])
        }
        #expect(sameSeq?.kind == .conflict, "\(String(describing: sameSeq))")

        // Many concurrent batches on their own sessions (they share group commits on SQLite):
        // the bad ones fail, every good one lands.
        try await storage.commit((0..<60).map { .createSession(Rows.session("o\($0)")) })
        let outcomes = await withTaskGroup(of: (Int, StorageError?).self) { group in
            for index in 0..<60 {
                group.addTask {
                    var batch: [StorageWrite] = [.append(Rows.entry("o\(index)", seq: 1, version: 1), idempotencyKey: "k\(index)")]
                    if index % 10 == 0 { batch.append(.append(Rows.entry("s", seq: 100 + index, version: 1), idempotencyKey: nil)) }
                    let error = await storageError { () async throws(StorageError) in try await storage.commit(batch) }
                    return (index, error)
                }
            }
            var all: [(Int, StorageError?)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        for (index, error) in outcomes {
            if index % 10 == 0 {
                #expect(error?.kind == .conflict, "batch \(index): \(String(describing: error))")
                #expect(try await storage.lastSeq(session: "o\(index)") == 0, "batch \(index) left nothing")
            } else {
                #expect(error == nil, "batch \(index): \(String(describing: error))")
                #expect(try await storage.rememberedKey(session: "o\(index)", key: "k\(index)")?.version == 1)
            }
        }
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 1000).map(\.seq) == [1])
    }

    /// appends are fenced: one that does not follow the session's seq and the store's version is
    /// refused, also after compaction removed the rows it would have collided with
    package static func appendsAreFenced(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        try await storage.commit((1...6).map { .append(Rows.entry("s", seq: $0, version: $0), idempotencyKey: nil) })
        try await storage.commit([.snapshot(Rows.snapshot("s", version: 6, state: #"{"count":6}"#))])
        try await storage.commit([
            .compact(session: "s", feature: "counter", upToVersion: 6, keepLast: 0, keysSince: 0, maxKeys: 100)
        ])
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 100).isEmpty, "compacted away")
        // A stale writer (it saw seq 2, version 2) tries seq 3, version 3: the rows it would
        // have collided with are gone, but the heads are not.
        for (seq, version) in [(3, 3), (7, 3), (3, 7), (8, 8), (7, 1)] {
            let error = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("s", seq: seq, version: version), idempotencyKey: nil)])
            }
            #expect(error?.kind == .conflict, "seq \(seq), version \(version): \(String(describing: error))")
        }
        // A store's first change is version 1 whatever the session's seq; a later one needs its
        // store's head.
        let skipped = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 7, feature: "todos", version: 2), idempotencyKey: nil)])
        }
        #expect(skipped?.kind == .conflict, "\(String(describing: skipped))")
        try await storage.commit([.append(Rows.entry("s", seq: 7, feature: "todos", version: 1), idempotencyKey: nil)])
        try await storage.commit([.append(Rows.entry("s", seq: 8, version: 7), idempotencyKey: nil)])
        #expect(try await storage.lastSeq(session: "s") == 8)
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 100).map(\.seq) == [7, 8])
        // A write for a session that is gone is refused as such, not as a conflict.
        let gone = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("nobody", seq: 1, version: 1), idempotencyKey: nil)])
        }
        #expect(gone?.kind == .sessionGone, "\(String(describing: gone))")
    }

    /// snapshots: kept per version, found at or before a version, never ahead of the journal
    package static func snapshotsPerVersion(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == nil)
        try await storage.commit((1...5).map { .append(Rows.entry("s", seq: $0, version: $0), idempotencyKey: nil) })
        try await storage.commit([.append(Rows.entry("s", seq: 6, feature: "todos", version: 1), idempotencyKey: nil)])
        let first = Rows.snapshot("s", version: 2, state: #"{"count":2}"#)
        let todos = Rows.snapshot("s", feature: "todos", version: 1, state: #"{"items":[],"nextId":4}"#, stateVersion: 2)
        try await storage.commit([.snapshot(first), .snapshot(todos)])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == first)
        let second = Rows.snapshot("s", version: 5, state: #"{"count":5}"#, stateVersion: 3)
        try await storage.commit([.snapshot(second)])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == second)
        #expect(try await storage.snapshot(session: "s", feature: "counter", atOrBefore: 4) == first)
        #expect(try await storage.snapshot(session: "s", feature: "counter", atOrBefore: 1) == nil)
        #expect(try await storage.latestSnapshot(session: "s", feature: "todos") == todos)
        #expect(try await storage.latestSnapshot(session: "t", feature: "counter") == nil)
        // The same version again replaces it (a state schema migrated on load).
        let migrated = Rows.snapshot("s", version: 5, state: #"{"count":5,"step":1}"#, stateVersion: 4)
        try await storage.commit([.snapshot(migrated)])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == migrated)
        // Ahead of the store's journal: a stale or confused writer; refused (PostgreSQL skips it).
        _ = await storageError { () async throws(StorageError) in
            try await storage.commit([.snapshot(Rows.snapshot("s", version: 9, state: #"{"count":9}"#))])
        }
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == migrated)
    }

    /// compact keeps a base snapshot before every entry still needed, and drops the rest
    package static func compactKeepsBases(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        // seq 1...12: counter versions 1...10 at seq 1...10, todos 1...2 at seq 11...12;
        // counter snapshots at 1, 4 and 8.
        var writes: [StorageWrite] = (1...10).map { .append(Rows.entry("s", seq: $0, version: $0), idempotencyKey: nil) }
        writes += [
            .append(Rows.entry("s", seq: 11, feature: "todos", version: 1), idempotencyKey: nil),
            .append(Rows.entry("s", seq: 12, feature: "todos", version: 2), idempotencyKey: nil),
        ]
        writes += [1, 4, 8].map { .snapshot(Rows.snapshot("s", version: $0, state: #"{"count":\#($0)}"#)) }
        try await storage.commit(writes)

        // Keep the last 5 entries of the session (seq 8...12): counter needs version 8 on, so
        // its base is the snapshot at 4 (the newest before 8); what is older goes.
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 8, keepLast: 5, keysSince: 0, maxKeys: 100)])
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 0).map(\.version) == [5, 6, 7, 8, 9, 10])
        #expect(try await storage.snapshot(session: "s", feature: "counter", atOrBefore: 3) == nil)
        #expect(try await storage.snapshot(session: "s", feature: "counter", atOrBefore: 7)?.version == 4)
        #expect(try await storage.journal(session: "s", feature: "todos", afterVersion: 0).map(\.version) == [1, 2])
        #expect(try await storage.lastSeq(session: "s") == 12)

        // A remembered key holds its change (and the base before it) in the journal.
        try await storage.commit([.append(Rows.entry("s", seq: 13, version: 11), idempotencyKey: "k")])
        try await storage.commit([.snapshot(Rows.snapshot("s", version: 11, state: #"{"count":11}"#))])
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 11, keepLast: 0, keysSince: 0, maxKeys: 100)])
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 0).map(\.version) == [9, 10, 11])
        #expect(try await storage.snapshot(session: "s", feature: "counter", atOrBefore: 10)?.version == 8)
        // Once the key expires (older than keysSince), its change goes too.
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 11, keepLast: 0, keysSince: 6_000, maxKeys: 100)])
        #expect(try await storage.rememberedKey(session: "s", key: "k") == nil)
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 0).isEmpty)
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter")?.version == 11)
        // Another feature's entries are never touched; an empty journal is not an error.
        try await storage.commit([.compact(session: "s", feature: "settings", upToVersion: 100, keepLast: 0, keysSince: 0, maxKeys: 100)])
        #expect(try await storage.journal(session: "s", feature: "todos", afterVersion: 0).map(\.version) == [1, 2])
        try await storage.commit([.createSession(Rows.session("empty"))])
        try await storage.commit([.compact(session: "empty", feature: "counter", upToVersion: 5, keepLast: 0, keysSince: 0, maxKeys: 100)])
    }

    /// idempotency keys are stored with their change, read back by key, and never twice
    package static func keys(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s")), .createSession(Rows.session("t"))])
        try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1, time: 5_001), idempotencyKey: "key-1")])
        try await storage.commit([.append(Rows.entry("s", seq: 2, version: 2), idempotencyKey: nil)])
        #expect(try await storage.rememberedKey(session: "s", key: "key-1") == RememberedKey(feature: "counter", version: 1, time: 5_001))
        #expect(try await storage.rememberedKey(session: "s", key: "key-2") == nil)
        #expect(try await storage.rememberedKey(session: "t", key: "key-1") == nil, "keys are per session")
        try await storage.commit([.append(Rows.entry("s", seq: 3, version: 3), idempotencyKey: "clé ✓ \u{1F600}")])
        #expect(try await storage.rememberedKey(session: "s", key: "clé ✓ \u{1F600}")?.version == 3)
        // The same key again (the same request on another node) is a conflict; nothing lands.
        let again = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 4, version: 4), idempotencyKey: "key-1")])
        }
        #expect(again?.kind == .conflict, "\(String(describing: again))")
        #expect(try await storage.lastSeq(session: "s") == 3)
        // At most maxKeys per session, the newest kept.
        try await storage.commit([.append(Rows.entry("s", seq: 4, version: 4, time: 9_000), idempotencyKey: "key-4")])
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 0, keepLast: 100, keysSince: 0, maxKeys: 1)])
        #expect(try await storage.rememberedKey(session: "s", key: "key-4")?.version == 4)
        #expect(try await storage.rememberedKey(session: "s", key: "key-1") == nil)
    }

    /// a store's state at a version is rebuilt from its base and the patches after it
    package static func stateAtVersion(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        var states = [#"{"items":[]}"#]
        var writes: [StorageWrite] = []
        for version in 1...6 {
            // Items long enough that a patch (one added item) is smaller than the whole list.
            let next = #"{"items":["# + (1...version).map { "\"item \($0) \(String(repeating: "x", count: 60))\"" }.joined(separator: ",") + "]}"
            let delta = StateDelta.between(version == 1 ? nil : Array(states[version - 1].utf8), Array(next.utf8))
            #expect(delta.isPatch == (version > 1), "version \(version): \(delta)")
            writes.append(.append(
                JournalEntry(
                    session: "s", seq: version, feature: "todos", version: version, cause: "dispatch", action: nil, effect: nil,
                    delta: delta, time: 1),
                idempotencyKey: nil))
            states.append(next)
        }
        writes.append(.snapshot(Rows.snapshot("s", feature: "todos", version: 3, state: states[3])))
        try await storage.commit(writes)
        let initial = Array(states[0].utf8)
        for version in 0...6 {
            let state = try await storage.state(session: "s", feature: "todos", at: version, initial: initial)
            #expect(state.map { String(decoding: $0, as: UTF8.self) } == states[version], "version \(version)")
        }
        #expect(try await storage.state(session: "s", feature: "todos", at: 7, initial: initial) == nil, "not yet")
    }

    /// sessions(inactiveBefore:) lists the least recently active first, up to the limit
    package static func inactiveBefore(_ storage: any SessionStorage) async throws {
        try await storage.commit([
            .createSession(Rows.session("c", lastActive: 300)),
            .createSession(Rows.session("a", lastActive: 100)),
            .createSession(Rows.session("d", lastActive: 400)),
            .createSession(Rows.session("b", lastActive: 200)),
        ])
        #expect(try await storage.sessions(inactiveBefore: 50, limit: 10).isEmpty)
        #expect(try await storage.sessions(inactiveBefore: 300, limit: 10) == ["a", "b"], "strictly before")
        #expect(try await storage.sessions(inactiveBefore: 301, limit: 10) == ["a", "b", "c"])
        #expect(try await storage.sessions(inactiveBefore: 1_000, limit: 2) == ["a", "b"])
        #expect(try await storage.sessions(inactiveBefore: 1_000, limit: 10) == ["a", "b", "c", "d"])
    }

    /// sessions(after:limit:) lists sessions in byte order of their ids, after a cursor
    package static func listed(_ storage: any SessionStorage) async throws {
        #expect(try await storage.sessions(after: "", limit: 10).isEmpty)
        try await storage.commit([
            .createSession(Rows.session("b-2", lastActive: 200)), .createSession(Rows.session("B1", createdAt: 50)),
            .createSession(Rows.session("a_1", createdAt: 100)), .createSession(Rows.session("b-10")),
        ])
        // Byte order: upper case before `_` before lower case; `-` before digits.
        let all = try await storage.sessions(after: "", limit: 10)
        #expect(all.map(\.id) == ["B1", "a_1", "b-10", "b-2"])
        #expect(all.first == Rows.session("B1", createdAt: 50))
        #expect(all.last?.lastActiveAt == 200)
        #expect(try await storage.sessions(after: "", limit: 2).map(\.id) == ["B1", "a_1"])
        #expect(try await storage.sessions(after: "a_1", limit: 10).map(\.id) == ["b-10", "b-2"], "strictly after")
        #expect(try await storage.sessions(after: "b-2", limit: 10).isEmpty)
        #expect(try await storage.sessions(after: "", limit: 0).isEmpty)
    }

    /// touch moves a session's last activity forward, never back
    package static func touch(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("a", createdAt: 100)), .createSession(Rows.session("b", createdAt: 150))])
        try await storage.commit([.touch(session: "a", at: 500)])
        #expect(try await storage.session(id: "a")?.lastActiveAt == 500)
        #expect(try await storage.session(id: "a")?.createdAt == 100)
        try await storage.commit([.touch(session: "a", at: 200)])
        #expect(try await storage.session(id: "a")?.lastActiveAt == 500, "an older touch does not go back")
        #expect(try await storage.sessions(inactiveBefore: 400, limit: 10) == ["b"])
        // Touching an unknown session is refused (a write for a session that is gone) and
        // creates nothing.
        do {
            try await storage.commit([.touch(session: "nobody", at: 900)])
            Issue.record("a touch of an unknown session was accepted")
        } catch {
            // `commit` throws only `StorageError` (typed throws), which a `catch let … as` would
            // test for with a warning.
            #expect((error as any Error as? StorageError)?.kind == .sessionGone, "\(error)")
        }
        #expect(try await storage.session(id: "nobody") == nil)
    }

    /// An empty batch commits and changes nothing.
    package static func emptyBatch(_ storage: any SessionStorage) async throws {
        try await storage.commit([])
        #expect(try await storage.sessionCount() == 0)
    }
}
