import StorageTestSupport
import Foundation
@testable import StatePersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// SQLite-only: group commits that hit a full database, the schema migration, and the lock
/// that keeps a second owner out.
@Suite("SQLite: full groups, migration, one owner")
struct SQLiteFailureTests {
    /// A small increment for `session` at `seq`, with an idempotency reply `key`.
    static func small(_ session: String, _ seq: Int) -> [StorageWrite] {
        [.append(Rows.entry(session, seq: seq, version: seq), idempotency: ("key-\(seq)", StoredReply(status: 200, body: [1], version: seq)))]
    }

    /// A batch larger than the whole size cap: SQLITE_FULL whenever it runs.
    static func huge(_ session: String, _ seq: Int) -> [StorageWrite] {
        let payload = "{\"type\":\"add\",\"title\":\"\(String(repeating: "x", count: 600_000))\"}"
        return [
            .append(Rows.entry(session, seq: seq, feature: "todos", version: seq, payload: payload), idempotency: nil),
            .snapshot(Rows.snapshot(session, feature: "todos", version: seq, state: payload)),
        ]
    }

    /// Whether all of a batch built by `small` or `huge` is stored, none of it, or part (nil).
    static func stored(_ storage: SQLiteStorage, _ batch: [StorageWrite]) async throws -> Bool? {
        var found: [Bool] = []
        for write in batch {
            switch write {
            case .append(let entry, let idempotency):
                let entries = try await storage.journal(session: entry.session, afterSeq: entry.seq - 1, limit: 1)
                found.append(entries.first == entry)
                if let (key, reply) = idempotency {
                    found.append(try await storage.reply(session: entry.session, key: key) == reply)
                }
            case .snapshot(let snapshot):
                found.append(try await storage.latestSnapshot(session: snapshot.session, feature: snapshot.feature) == snapshot)
            default:
                Issue.record("unexpected write \(write)")
            }
        }
        if found.allSatisfy({ $0 }) { return true }
        if found.allSatisfy({ !$0 }) { return false }
        return nil
    }

    @Test("a group where one batch hits SQLITE_FULL: every batch answered failed is absent, every batch answered OK is present")
    func fullInsideAGroup() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let storage = try SQLiteStorage(path: path, maxBytes: 256 * 1024)
        try await storage.commit([.createSession(Rows.session("a")), .createSession(Rows.session("b")), .createSession(Rows.session("big"))])

        // The huge batch first, in the middle, last; and twice.
        var seqA = 0, seqB = 0, seqBig = 0
        func a() -> [StorageWrite] { seqA += 1; return Self.small("a", seqA) }
        func b() -> [StorageWrite] { seqB += 1; return Self.small("b", seqB) }
        func big() -> [StorageWrite] { seqBig += 1; return Self.huge("big", seqBig) }
        let shapes: [[[StorageWrite]]] = [
            [a(), big(), b()],
            [big(), a(), b()],
            [a(), b(), big()],
            [a(), big(), b(), big(), a()],
        ]
        for (index, group) in shapes.enumerated() {
            let results = await storage.commit(group: group)
            #expect(results.count == group.count)
            for (batch, result) in zip(group, results) {
                let present = try await Self.stored(storage, batch)
                switch result {
                case .success:
                    #expect(present == true, "group \(index): a batch answered OK is not (wholly) stored")
                case .failure(let error):
                    #expect(present == false, "group \(index): a batch answered failed (\(error)) is (partly) stored")
                    #expect(error.kind == .unavailable, "\(error)")
                }
            }
            // The small batches fit: none of them fails for the huge one's sake.
            for (batch, result) in zip(group, results) where batch.count == 1 {
                if case .failure(let error) = result { Issue.record("group \(index): a small batch failed: \(error)") }
            }
            // Seqs go on from what is stored: a failed batch leaves no key behind to collide with.
            seqBig = try await storage.lastSeq(session: "big")
        }
        // And after the full ones, the storage takes ordinary commits again.
        try await storage.commit(a())
        #expect(try await storage.lastSeq(session: "a") == seqA)
        await storage.close()
        #expect(try SQLiteStorage.integrityCheck(path: path) == "ok")
    }

    @Test("many concurrent commits while the database is full: each answer matches what is stored")
    func concurrentWhileFull() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let storage = try SQLiteStorage(path: path, maxBytes: 256 * 1024)
        let sessions = (0..<8).map { "s\($0)" }
        try await storage.commit(sessions.map { .createSession(Rows.session($0)) } + [.createSession(Rows.session("big"))])
        let outcomes = await withTaskGroup(of: ([StorageWrite], Result<Void, StorageError>).self) { group in
            for session in sessions {
                group.addTask {
                    var results: [([StorageWrite], Result<Void, StorageError>)] = []
                    for seq in 1...30 {
                        let batch = Self.small(session, seq)
                        let error = await storageError { () async throws(StorageError) in try await storage.commit(batch) }
                        results.append((batch, error.map { .failure($0) } ?? .success(())))
                        if error != nil { break }  // the next seq would be a gap
                    }
                    return results.last ?? (Self.small(session, 1), .success(()))
                }
            }
            for seq in 1...6 {
                group.addTask {
                    let batch = Self.huge("big", seq)
                    let error = await storageError { () async throws(StorageError) in try await storage.commit(batch) }
                    return (batch, error.map { .failure($0) } ?? .success(()))
                }
            }
            var all: [([StorageWrite], Result<Void, StorageError>)] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        for (batch, result) in outcomes {
            let present = try await Self.stored(storage, batch)
            switch result {
            case .success: #expect(present == true, "answered OK, not stored: \(batch.count) writes")
            case .failure(let error): #expect(present == false, "answered failed (\(error)), stored")
            }
        }
        await storage.close()
    }

    @Test("opening a database at schema version 0 purges rows of sessions that are gone and moves it to version 1")
    func migrationPurgesOrphans() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let storage = try SQLiteStorage(path: path)
        try await storage.commit([
            .createSession(Rows.session("kept")),
            .append(Rows.entry("kept", seq: 1, version: 1), idempotency: ("k", StoredReply(status: 200, body: [1], version: 1))),
            .snapshot(Rows.snapshot("kept", version: 1, state: #"{"count":1}"#)),
        ])
        await storage.close()
        // What an older server left behind: rows whose session was deleted, no schema version.
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            #expect(try db.query("PRAGMA user_version", []) { $0.int(0) } == [1])
            try db.exec("""
                INSERT INTO journal VALUES ('orphan', 1, 'counter', 1, 'dispatch', NULL, x'7B7D', 1);
                INSERT INTO snapshots VALUES ('orphan', 'counter', 1, 1, x'7B7D', 1);
                INSERT INTO idempotency VALUES ('orphan', 'k', 200, x'7B7D', 1, 1);
                PRAGMA user_version = 0;
                """)
        }
        let reopened = try SQLiteStorage(path: path)
        #expect(try await reopened.journal(session: "orphan", afterSeq: 0, limit: 10).isEmpty)
        #expect(try await reopened.latestSnapshot(session: "orphan", feature: "counter") == nil)
        #expect(try await reopened.reply(session: "orphan", key: "k") == nil)
        #expect(try await reopened.journal(session: "kept", afterSeq: 0, limit: 10).map(\.seq) == [1])
        #expect(try await reopened.latestSnapshot(session: "kept", feature: "counter")?.version == 1)
        #expect(try await reopened.reply(session: "kept", key: "k")?.version == 1)
        await reopened.close()
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.query("PRAGMA user_version", []) { $0.int(0) } == [Int64(SQLiteStorage.schemaVersion)])
    }

    @Test("a database from a newer schema version is unusable, and left as it was")
    func newerSchemaRefused() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let storage = try SQLiteStorage(path: path)
        await storage.close()
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            try db.exec("PRAGMA user_version = 99;")
        }
        let error = storageErrorSync { () throws(StorageError) in _ = try SQLiteStorage(path: path) }
        #expect(error?.kind == .unusable, "\(String(describing: error))")
        #expect(error?.message.contains("99") == true && error?.message.contains(path) == true, "\(String(describing: error))")
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.query("PRAGMA user_version", []) { $0.int(0) } == [99])
    }

    @Test("a second open of an open database is unusable and names the holder; after close it opens")
    func oneOwner() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let first = try SQLiteStorage(path: path)
        try await first.commit([.createSession(Rows.session("s"))])
        let error = storageErrorSync { () throws(StorageError) in _ = try SQLiteStorage(path: path) }
        #expect(error?.kind == .unusable, "\(String(describing: error))")
        #expect(error?.message.contains("\(path) is in use by") == true, "\(String(describing: error))")
        #expect(error?.message.contains("(pid \(getpid()))") == true, "\(String(describing: error))")
        await first.close()
        let second = try SQLiteStorage(path: path)
        #expect(try await second.session(id: "s") != nil)
        await second.close()
    }
}
