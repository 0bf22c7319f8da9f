import Foundation
import TestSupport
@testable import StatePersistence
import Synchronization
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
        [.append(Rows.entry(session, seq: seq, version: seq), idempotencyKey: "key-\(seq)")]
    }

    /// A batch larger than the whole size cap: SQLITE_FULL whenever it runs.
    static func huge(_ session: String, _ seq: Int) -> [StorageWrite] {
        let payload = "{\"type\":\"add\",\"title\":\"\(String(repeating: "x", count: 600_000))\"}"
        return [
            .append(Rows.entry(session, seq: seq, feature: "todos", version: seq, action: payload), idempotencyKey: nil),
            .snapshot(Rows.snapshot(session, feature: "todos", version: seq, state: payload)),
        ]
    }

    /// Whether all of a batch built by `small` or `huge` is stored, none of it, or part (nil).
    static func stored(_ storage: SQLiteStorage, _ batch: [StorageWrite]) async throws -> Bool? {
        var found: [Bool] = []
        for write in batch {
            switch write {
            case .append(let entry, let key):
                let entries = try await storage.journal(session: entry.session, afterSeq: entry.seq - 1, limit: 1)
                found.append(entries.first == entry)
                if let key {
                    found.append(try await storage.rememberedKey(session: entry.session, key: key)?.version == entry.version)
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
        try await withSQLiteStorage(maxBytes: 256 * 1024) { storage, database in
            try await storage.commit([.createSession(Rows.session("a")), .createSession(Rows.session("b")), .createSession(Rows.session("big"))])

            // The huge batch first, in the middle, last; and twice.
            var seqA = 0, seqB = 0, seqBig = 0
            func a() -> [StorageWrite] { seqA += 1; return Self.small("a", seqA) }
            func b() -> [StorageWrite] { seqB += 1; return Self.small("b", seqB) }
            // Never stored (too big): always the next seq after what is stored.
            func big() -> [StorageWrite] { Self.huge("big", seqBig + 1) }
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
            await database.close()
            #expect(try SQLiteStorage.integrityCheck(path: database.path) == "ok")
        }
    }

    @Test("many concurrent commits while the database is full: each answer matches what is stored")
    func concurrentWhileFull() async throws {
        try await withSQLiteStorage(maxBytes: 256 * 1024) { storage, _ in
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
        }
    }

    /// The tables a4e1b46 wrote (schema versions 0 and 1): a whole state in every journal
    /// row's event, one snapshot per store, replies copied whole.
    static let schemaVersion1 = """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, token_hash BLOB NOT NULL, created_at INTEGER NOT NULL,
            last_active INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE journal (session TEXT NOT NULL, seq INTEGER NOT NULL, feature TEXT NOT NULL, version INTEGER NOT NULL,
            cause TEXT NOT NULL, payload BLOB, event BLOB NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (session, seq)) WITHOUT ROWID;
        CREATE TABLE snapshots (session TEXT NOT NULL, feature TEXT NOT NULL, version INTEGER NOT NULL,
            state_version INTEGER NOT NULL, state BLOB NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (session, feature)) WITHOUT ROWID;
        CREATE TABLE idempotency (session TEXT NOT NULL, key TEXT NOT NULL, status INTEGER NOT NULL, body BLOB NOT NULL,
            version INTEGER NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (session, key)) WITHOUT ROWID;
        """

    @Test("a database written before changes were journaled (schema 0 or 1) opens and loses nothing: states, actions, effects, keys, heads; orphans are purged")
    func migratesToChanges() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("state.sqlite")
        let states = (0...4).map { count in #"{"items":["# + (0..<count).map { #"{"done":false,"title":"t\#($0) \#(String(repeating: "x", count: 100))"}"# }.joined(separator: ",") + "]}" }
        do {
            let db = try SQLiteConnection(path: path, readOnly: false)
            try db.exec(Self.schemaVersion1)
            try db.exec("INSERT INTO sessions VALUES ('kept', x'00', 1, 2), ('other', x'00', 1, 2);")
            for version in 1...4 {
                let event = #"{"feature":"todos","version":\#(version),"cause":"dispatch","action":{"type":"add","title":"t\#(version - 1)"},"state":\#(states[version])\#(version == 4 ? #","effect":{"type":"added"}"# : "")}"#
                try db.run(
                    "INSERT INTO journal VALUES ('kept', ?, 'todos', ?, 'dispatch', NULL, ?, ?)",
                    [.int(Int64(version)), .int(Int64(version)), .blob(Array(event.utf8)), .int(Int64(100 + version))])
            }
            try db.exec("""
                INSERT INTO journal VALUES ('other', 1, 'counter', 1, 'reset', NULL, CAST('{"feature":"counter","version":1,"cause":"reset","state":{"count":0}}' AS BLOB), 7);
                INSERT INTO snapshots VALUES ('kept', 'todos', 2, 1, CAST('\(states[2])' AS BLOB), 9);
                INSERT INTO idempotency VALUES ('kept', 'key-3', 200, CAST('{"feature":"todos","version":3,"state":{}}' AS BLOB), 3, 50);
                INSERT INTO journal VALUES ('orphan', 1, 'counter', 1, 'dispatch', NULL, x'7B7D', 1);
                INSERT INTO snapshots VALUES ('orphan', 'counter', 1, 1, x'7B7D', 1);
                INSERT INTO idempotency VALUES ('orphan', 'k', 200, x'7B7D', 1, 1);
                PRAGMA user_version = 0;
                """)
        }
        try await withSQLiteStorage(at: path) { storage in
            // Orphans purged.
            #expect(try await storage.journal(session: "orphan", afterSeq: 0, limit: 10).isEmpty)
            #expect(try await storage.latestSnapshot(session: "orphan", feature: "counter") == nil)
            #expect(try await storage.rememberedKey(session: "orphan", key: "k") == nil)
            // Every change kept, with its action and effect; later ones as patches.
            let entries = try await storage.journal(session: "kept", feature: "todos", afterVersion: 0)
            #expect(entries.map(\.version) == [1, 2, 3, 4])
            #expect(entries.map(\.delta.isPatch) == [false, true, true, true])
            #expect(entries.last?.effect == Array(#"{"type":"added"}"#.utf8))
            #expect(entries.first?.action == Array(#"{"title":"t0","type":"add"}"#.utf8) || entries.first?.action == Array(#"{"type":"add","title":"t0"}"#.utf8))
            for version in 0...4 {
                let state = try await storage.state(session: "kept", feature: "todos", at: version, initial: Array(states[0].utf8))
                #expect(state.map { String(decoding: $0, as: UTF8.self) } == states[version], "version \(version)")
            }
            #expect(try await storage.latestSnapshot(session: "kept", feature: "todos")?.version == 2)
            #expect(try await storage.rememberedKey(session: "kept", key: "key-3") == RememberedKey(feature: "todos", version: 3, time: 50))
            #expect(try await storage.lastSeq(session: "kept") == 4)
            #expect(try await storage.journal(session: "other", afterSeq: 0, limit: 10).first?.delta == .state(Array(#"{"count":0}"#.utf8)))
            // The heads were carried over: the next change follows them, a stale one is refused.
            let stale = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("kept", seq: 4, feature: "todos", version: 4), idempotencyKey: nil)])
            }
            #expect(stale?.kind == .conflict, "\(String(describing: stale))")
            try await storage.commit([.append(Rows.entry("kept", seq: 5, feature: "todos", version: 5, state: states[4]), idempotencyKey: nil)])
            try await storage.commit([.append(Rows.entry("other", seq: 2, version: 2), idempotencyKey: nil)])
        }
        let db = try SQLiteConnection(path: path, readOnly: true)
        #expect(try db.query("PRAGMA user_version", []) { $0.int(0) } == [Int64(SQLiteStorage.schemaVersion)])
        #expect(try db.query("SELECT count(*) FROM sqlite_master WHERE name IN ('journal', 'snapshots', 'idempotency')", []) { $0.int(0) } == [0])
    }

    @Test("a database from a newer schema version is unusable, and left as it was")
    func newerSchemaRefused() async throws {
        try await withSQLiteStorage { _, database in
            await database.close()
            let path = database.path
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
    }

    @Test("a second open of an open database is unusable and names the holder; after close it opens")
    func oneOwner() async throws {
        try await withSQLiteStorage { first, database in
            let path = database.path
            try await first.commit([.createSession(Rows.session("s"))])
            let error = storageErrorSync { () throws(StorageError) in _ = try SQLiteStorage(path: path) }
            #expect(error?.kind == .unusable, "\(String(describing: error))")
            #expect(error?.message.contains("\(path) is in use by") == true, "\(String(describing: error))")
            #expect(error?.message.contains("(pid \(getpid()))") == true, "\(String(describing: error))")
            let second = try await database.reopen()
            #expect(try await second.session(id: "s") != nil)
        }
    }

    @Test("a lock released while another thread spawns a child process is taken again, not refused")
    func reopenWhileSpawning() async throws {
        try await withSQLiteStorage { first, database in
            try await first.commit([.createSession(Rows.session("s"))])
            // A child between fork and exec holds a copy of every descriptor, the lock's too.
            let spawning = Atomic<Bool>(true)
            let spawner = Thread {
                // glibc's system() (fork or clone, exec, wait), not Foundation's Process: its
                // run() crashed once copying memory while other tests launched servers at once.
                while spawning.load(ordering: .relaxed) { _ = system("/bin/true") }
            }
            spawner.start()
            defer { spawning.store(false, ordering: .relaxed) }
            for round in 0..<150 {
                let storage = try await database.reopen()
                #expect(try await storage.session(id: "s") != nil, "round \(round)")
            }
        }
    }
}
