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
        Check("snapshots: the latest replaces the previous one, per (session, feature)", snapshotsReplace),
        Check("compact drops a store's entries covered by a snapshot, keeping the session's last N", compactKeepsLastN),
        Check("idempotency replies are stored with their change and read back by key", replies),
        Check("an empty batch commits and changes nothing", emptyBatch),
        Check("sessions(inactiveBefore:) lists the least recently active first, up to the limit", inactiveBefore),
        Check("touch moves a session's last activity forward, never back", touch),
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

    /// delete removes the session with its journal, snapshots and replies; other sessions stay
    package static func deleteSession(_ storage: any SessionStorage) async throws {
        for id in ["a", "b"] {
            try await storage.commit([
                .createSession(Rows.session(id)),
                .append(Rows.entry(id, seq: 1, version: 1), idempotency: ("k", StoredReply(status: 200, body: Array("r".utf8), version: 1))),
                .append(Rows.entry(id, seq: 2, version: 2), idempotency: nil),
                .snapshot(Rows.snapshot(id, version: 2, state: #"{"count":2}"#)),
            ])
        }
        try await storage.commit([.deleteSession(id: "a")])
        #expect(try await storage.session(id: "a") == nil)
        #expect(try await storage.journal(session: "a", feature: "counter", afterVersion: 0).isEmpty)
        #expect(try await storage.journal(session: "a", afterSeq: 0, limit: 100).isEmpty)
        #expect(try await storage.lastSeq(session: "a") == 0)
        #expect(try await storage.latestSnapshot(session: "a", feature: "counter") == nil)
        #expect(try await storage.reply(session: "a", key: "k") == nil)
        #expect(try await storage.sessionCount() == 1)

        #expect(try await storage.session(id: "b") != nil)
        #expect(try await storage.journal(session: "b", afterSeq: 0, limit: 100).count == 2)
        #expect(try await storage.latestSnapshot(session: "b", feature: "counter")?.version == 2)
        #expect(try await storage.reply(session: "b", key: "k")?.version == 1)

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
            Rows.entry("s", seq: 2, feature: "todos", version: 1, payload: #"{"type":"add","title":"x"}"#),
            Rows.entry("s", seq: 3, feature: "counter", version: 2, cause: "rehydrate", payload: #"{"count":9}"#),
            Rows.entry("s", seq: 4, feature: "counter", version: 3, cause: "reset", payload: nil),
            Rows.entry("s", seq: 5, feature: "todos", version: 2, payload: #"{"type":"clearCompleted"}"#),
            Rows.entry("s", seq: 6, feature: "counter", version: 4),
        ]
        // Two batches, the second one in two appends, out of order within the batch.
        try await storage.commit(entries.prefix(3).map { .append($0, idempotency: nil) })
        try await storage.commit([.append(entries[4], idempotency: nil), .append(entries[3], idempotency: nil), .append(entries[5], idempotency: nil)])
        try await storage.commit([.append(Rows.entry("t", seq: 1, version: 1), idempotency: nil)])

        let counter = try await storage.journal(session: "s", feature: "counter", afterVersion: 0)
        #expect(counter == [entries[0], entries[2], entries[3], entries[5]])
        #expect(counter.map(\.version) == [1, 2, 3, 4])
        #expect(counter[2].payload == nil, "a reset has no payload")
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
        try await storage.commit([.createSession(Rows.session("s")), .append(Rows.entry("s", seq: 1, version: 1), idempotency: nil)])
        let error = await storageError { () async throws(StorageError) in
            try await storage.commit([
                .createSession(Rows.session("new")),
                .append(Rows.entry("s", seq: 2, version: 2), idempotency: ("k", StoredReply(status: 200, body: [1], version: 2))),
                .snapshot(Rows.snapshot("s", version: 2, state: #"{"count":2}"#)),
                .append(Rows.entry("s", seq: 3, version: 2), idempotency: nil),  // duplicate version
            ])
        }
        #expect(error?.kind == .conflict, "\(String(describing: error))")
        #expect(try await storage.session(id: "new") == nil)
        #expect(try await storage.lastSeq(session: "s") == 1)
        #expect(try await storage.reply(session: "s", key: "k") == nil, "a failed batch remembers no reply")
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == nil)
    }

    /// a duplicate (session, feature, version) is a conflict that fails only its own batch
    package static func duplicateVersionFailsAlone(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s")), .createSession(Rows.session("other"))])
        try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1), idempotency: nil)])

        // A duplicate store version (new seq) and a duplicate seq (new version) both conflict.
        let sameVersion = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 2, version: 1), idempotency: nil)])
        }
        #expect(sameVersion?.kind == .conflict, "\(String(describing: sameVersion))")
        let sameSeq = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(Rows.entry("s", seq: 1, feature: "todos", version: 1), idempotency: nil)])
        }
        #expect(sameSeq?.kind == .conflict, "\(String(describing: sameSeq))")

        // Many concurrent batches (they share group commits on SQLite): the bad ones fail,
        // every good one lands.
        let outcomes = await withTaskGroup(of: (Int, StorageError?).self) { group in
            for index in 0..<60 {
                group.addTask {
                    let batch: [StorageWrite]
                    if index % 10 == 0 {
                        batch = [
                            .append(Rows.entry("other", seq: 10_000 + index, feature: "settings", version: 10_000 + index), idempotency: nil),
                            .append(Rows.entry("s", seq: 100 + index, version: 1), idempotency: nil),  // duplicate
                        ]
                    } else {
                        batch = [.append(Rows.entry("other", seq: index, version: index), idempotency: ("k\(index)", StoredReply(status: 200, body: [], version: index)))]
                    }
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
            } else {
                #expect(error == nil, "batch \(index): \(String(describing: error))")
            }
        }
        let stored = try await storage.journal(session: "other", afterSeq: 0, limit: 1000)
        #expect(stored.map(\.seq) == (1..<60).filter { $0 % 10 != 0 }, "the good batches landed, the bad ones left nothing")
        #expect(try await storage.reply(session: "other", key: "k7")?.version == 7)
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 1000).map(\.seq) == [1])
    }

    /// snapshots: the latest replaces the previous one, per (session, feature)
    package static func snapshotsReplace(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == nil)
        let first = Rows.snapshot("s", version: 100, state: #"{"count":100}"#)
        let todos = Rows.snapshot("s", feature: "todos", version: 3, state: #"{"items":[],"nextId":4}"#, stateVersion: 2)
        try await storage.commit([.snapshot(first), .snapshot(todos)])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == first)
        let second = Rows.snapshot("s", version: 200, state: #"{"count":7}"#, stateVersion: 3)
        try await storage.commit([.snapshot(second)])
        #expect(try await storage.latestSnapshot(session: "s", feature: "counter") == second)
        #expect(try await storage.latestSnapshot(session: "s", feature: "todos") == todos)
        #expect(try await storage.latestSnapshot(session: "t", feature: "counter") == nil)
    }

    /// compact drops a store's entries covered by a snapshot, keeping the session's last N
    package static func compactKeepsLastN(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s"))])
        // seq 1...12: counter versions 1...10 at seq 1...10, todos 1...2 at seq 11...12.
        var writes: [StorageWrite] = (1...10).map { .append(Rows.entry("s", seq: $0, version: $0), idempotency: nil) }
        writes += [
            .append(Rows.entry("s", seq: 11, feature: "todos", version: 1), idempotency: nil),
            .append(Rows.entry("s", seq: 12, feature: "todos", version: 2), idempotency: nil),
        ]
        try await storage.commit(writes)

        // Keep the last 5 entries of the session (seq 8...12): counter entries up to
        // version 8 with seq ≤ 7 go.
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 8, keepLast: 5)])
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 0).map(\.version) == [8, 9, 10])
        #expect(try await storage.journal(session: "s", feature: "todos", afterVersion: 0).map(\.version) == [1, 2])
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 100).map(\.seq) == [8, 9, 10, 11, 12])
        #expect(try await storage.lastSeq(session: "s") == 12)

        // keepLast 0: everything up to the snapshot's version goes, the rest stays.
        try await storage.commit([.compact(session: "s", feature: "counter", upToVersion: 9, keepLast: 0)])
        #expect(try await storage.journal(session: "s", feature: "counter", afterVersion: 0).map(\.version) == [10])
        // Another feature's entries are never touched.
        try await storage.commit([.compact(session: "s", feature: "settings", upToVersion: 100, keepLast: 0)])
        #expect(try await storage.journal(session: "s", feature: "todos", afterVersion: 0).map(\.version) == [1, 2])
        // A compact of an empty journal is not an error.
        try await storage.commit([.createSession(Rows.session("empty"))])
        try await storage.commit([.compact(session: "empty", feature: "counter", upToVersion: 5, keepLast: 0)])
    }

    /// idempotency replies are stored with their change and read back by key
    package static func replies(_ storage: any SessionStorage) async throws {
        try await storage.commit([.createSession(Rows.session("s")), .createSession(Rows.session("t"))])
        let reply = StoredReply(status: 200, body: Array(#"{"feature":"counter","version":1}"#.utf8), version: 1)
        try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1), idempotency: ("key-1", reply))])
        try await storage.commit([.append(Rows.entry("s", seq: 2, version: 2), idempotency: nil)])
        #expect(try await storage.reply(session: "s", key: "key-1") == reply)
        #expect(try await storage.reply(session: "s", key: "key-2") == nil)
        #expect(try await storage.reply(session: "t", key: "key-1") == nil, "keys are per session")
        let unicode = StoredReply(status: 200, body: Array("{}".utf8), version: 3)
        try await storage.commit([.append(Rows.entry("s", seq: 3, version: 3), idempotency: ("clé ✓ \u{1F600}", unicode))])
        #expect(try await storage.reply(session: "s", key: "clé ✓ \u{1F600}") == unicode)
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
        } catch let error as StorageError {
            #expect(error.kind == .sessionGone, "\(error)")
        }
        #expect(try await storage.session(id: "nobody") == nil)
    }

    /// An empty batch commits and changes nothing.
    package static func emptyBatch(_ storage: any SessionStorage) async throws {
        try await storage.commit([])
        #expect(try await storage.sessionCount() == 0)
    }
}
