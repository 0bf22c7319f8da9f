import Foundation
import StatePersistence
import TestSupport
import Testing

/// The journal's two tables on SQLite (schema 3): each change is appended to `recent_changes`
/// and moved into `changes` in bulk every `mergeEvery` changes. Reads, fences, compaction and
/// deletes must see one journal whichever table a change is in.
@Suite("SQLite journal log and its merges")
struct SQLiteLogTests {
    @Test(
        "the SessionStorage behaviour checks pass when the log is merged after every change and after every 3",
        arguments: StorageBehaviour.all, [1, 3])
    func behaviour(_ check: StorageBehaviour.Check, mergeEvery: Int) async throws {
        try await withTemporaryDirectory { directory in
            let storage = try SQLiteStorage(path: directory.path("state.sqlite"), mergeEvery: mergeEvery)
            do {
                try await check.run(storage)
                await storage.close()
            } catch {
                await storage.close()
                throw error
            }
        }
    }

    @Test(
        "changes read the same before and after merges, across a reopen, with compaction on both sides of a merge; a session's delete removes its rows from both tables",
        arguments: [1, 4, 1_000])
    func oneJournal(mergeEvery: Int) async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.path("state.sqlite")
            var storage = try SQLiteStorage(path: path, mergeEvery: mergeEvery)
            let sessions = ["a", "b", "c"]
            try await storage.commit(sessions.map { .createSession(Rows.session($0)) })
            // Interleaved over the sessions, two stores each: seq n is the counter's version
            // (n + 1) / 2 on odd n and the todos' n / 2 on even n.
            for n in 1...20 {
                for id in sessions {
                    let feature = n % 2 == 1 ? "counter" : "todos"
                    try await storage.commit([.append(Rows.entry(id, seq: n, feature: feature, version: (n + 1) / 2), idempotencyKey: nil)])
                }
            }
            // A base at the counter's version 6 and compaction keeping the last 8 seqs: the
            // counter's versions up to 6 go (6 is in the base), newer ones stay.
            try await storage.commit([
                .snapshot(Rows.snapshot("a", version: 6, state: #"{"count":6}"#)),
                .compact(session: "a", feature: "counter", upToVersion: 6, keepLast: 8, keysSince: 0, maxKeys: 10),
            ])
            func check(_ storage: SQLiteStorage, _ label: String) async throws {
                let a = try await storage.journal(session: "a", afterSeq: 0, limit: 100)
                #expect(a.map(\.seq) == Array(1...20).filter { !($0 % 2 == 1 && ($0 + 1) / 2 <= 6) }, "\(label): \(a.map(\.seq))")
                let counter = try await storage.journal(session: "a", feature: "counter", afterVersion: 0, through: .max)
                #expect(counter.map(\.version) == Array(7...10), "\(label)")
                for id in ["b", "c"] {
                    #expect(try await storage.journal(session: id, afterSeq: 0, limit: 100).map(\.seq) == Array(1...20), "\(label)")
                    #expect(try await storage.journal(session: id, afterSeq: 15, limit: 3).map(\.seq) == [16, 17, 18], "\(label)")
                    let todos = try await storage.journal(session: id, feature: "todos", afterVersion: 3, through: 7)
                    #expect(todos.map(\.version) == [4, 5, 6, 7], "\(label)")
                    #expect(try await storage.lastSeq(session: id) == 20, "\(label)")
                }
            }
            try await check(storage, "written")
            // The fence finds each store's head in either table: a repeated version is refused.
            let repeated = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("b", seq: 21, feature: "todos", version: 10), idempotencyKey: nil)])
            }
            #expect(repeated?.kind == .conflict, "\(String(describing: repeated))")
            await storage.close()
            storage = try SQLiteStorage(path: path, mergeEvery: mergeEvery)
            try await check(storage, "reopened")
            // After a reopen the heads come from the database (both tables).
            let stale = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("c", seq: 20, feature: "counter", version: 11), idempotencyKey: nil)])
            }
            #expect(stale?.kind == .conflict, "\(String(describing: stale))")
            try await storage.commit([.append(Rows.entry("c", seq: 21, feature: "counter", version: 11), idempotencyKey: nil)])
            try await storage.commit([.deleteSession(id: "b")])
            #expect(try await storage.journal(session: "b", afterSeq: 0, limit: 100).isEmpty)
            #expect(try await storage.journal(session: "c", afterSeq: 19, limit: 100).map(\.seq) == [20, 21])
            await storage.close()
            #expect(try SQLiteStorage.integrityCheck(path: path) == "ok")
        }
    }
}
