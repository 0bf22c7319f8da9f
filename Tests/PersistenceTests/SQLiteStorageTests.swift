import Foundation
import TestSupport
import StatePersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What only the SQLite storage has: a file, a writer thread with group commit, a size cap.
@Suite("SQLiteStorage")
struct SQLiteStorageTests {
    @Test("500 concurrent commits all land (group commit), and a reopened file sees every one")
    func concurrentCommitsLand() async throws {
        try await withSQLiteStorage { storage, database in
            let sessions = 10
            try await storage.commit((0..<sessions).map { .createSession(Rows.session("s\($0)")) })

            // Each session's changes in order (appends are fenced), the sessions concurrently.
            let failures = await withTaskGroup(of: [String].self) { group in
                for session in 0..<sessions {
                    group.addTask {
                        var failures: [String] = []
                        for version in 1...50 {
                            let index = (version - 1) * sessions + session
                            let error = await storageError { () async throws(StorageError) in
                                try await storage.commit([
                                    .append(Rows.entry("s\(session)", seq: version, version: version), idempotencyKey: "key-\(index)"),
                                    .touch(session: "s\(session)", at: Int64(10_000 + index)),
                                ])
                            }
                            if let error { failures.append("commit \(index): \(error)") }
                        }
                        return failures
                    }
                }
                var failures: [String] = []
                for await failure in group { failures += failure }
                return failures
            }
            #expect(failures.isEmpty, "\(failures.prefix(5))")

            func check(_ storage: SQLiteStorage, _ label: String) async throws {
                #expect(try await storage.sessionCount() == sessions, "\(label)")
                for index in 0..<sessions {
                    let versions = try await storage.journal(session: "s\(index)", feature: "counter", afterVersion: 0).map(\.version)
                    #expect(versions == Array(1...50), "\(label): s\(index) has \(versions.count) entries")
                    #expect(try await storage.lastSeq(session: "s\(index)") == 50, "\(label)")
                }
                #expect(try await storage.rememberedKey(session: "s3", key: "key-123")?.version == 13, "\(label)")
                #expect(try await storage.session(id: "s9")?.lastActiveAt == 10_499, "\(label)")
            }
            try await check(storage, "before reopening")
            let reopened = try await database.reopen()
            try await check(reopened, "after reopening")
            await database.close()
            #expect(try SQLiteStorage.integrityCheck(path: database.path) == "ok")
        }
    }

    @Test("the writer's heads follow the transaction: a batch rolled back in a group leaves no head behind; compaction and reopening keep the seq")
    func headsFollowTheTransaction() async throws {
        try await withSQLiteStorage { storage, database in
            try await storage.commit([.createSession(Rows.session("s"))])
            try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1), idempotencyKey: nil)])

            // One group: the first batch appends seq 2 then fails (a snapshot ahead of its store);
            // its savepoint is rolled back, so the second batch's seq 2 is the one that follows.
            let results = await storage.commit(group: [
                [.append(Rows.entry("s", seq: 2, version: 2), idempotencyKey: nil), .snapshot(Rows.snapshot("s", version: 9, state: #"{"count":9}"#))],
                [.append(Rows.entry("s", seq: 2, feature: "todos", version: 1), idempotencyKey: nil)],
            ])
            #expect(results.map { (try? $0.get()) != nil } == [false, true], "\(results)")
            #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 10).map(\.feature) == ["counter", "todos"])
            // The counter's head is still 1: version 2 at seq 3 follows, version 3 does not.
            let skipped = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("s", seq: 3, version: 3), idempotencyKey: nil)])
            }
            #expect(skipped?.kind == .conflict, "\(String(describing: skipped))")
            try await storage.commit([.append(Rows.entry("s", seq: 3, version: 2), idempotencyKey: nil)])

            // A lone batch that fails after its append leaves no head either.
            let failed = await storageError { () async throws(StorageError) in
                try await storage.commit([
                    .append(Rows.entry("s", seq: 4, version: 3), idempotencyKey: nil), .createSession(Rows.session("s")),
                ])
            }
            #expect(failed?.kind == .conflict, "\(String(describing: failed))")
            try await storage.commit([.append(Rows.entry("s", seq: 4, version: 3), idempotencyKey: nil)])

            // Compaction may take the newest change: the session's seq survives it and a reopen.
            try await storage.commit([.snapshot(Rows.snapshot("s", version: 3, state: #"{"count":3}"#))])
            try await storage.commit([
                .compact(session: "s", feature: "counter", upToVersion: 3, keepLast: 0, keysSince: 0, maxKeys: 100)
            ])
            #expect(try await storage.journal(session: "s", afterSeq: 3, limit: 10).isEmpty, "compacted away")
            #expect(try await storage.lastSeq(session: "s") == 4)
            let reopened = try await database.reopen()
            #expect(try await reopened.lastSeq(session: "s") == 4)
            let stale = await storageError { () async throws(StorageError) in
                try await reopened.commit([.append(Rows.entry("s", seq: 4, version: 4), idempotencyKey: nil)])
            }
            #expect(stale?.kind == .conflict, "\(String(describing: stale))")
            try await reopened.commit([.append(Rows.entry("s", seq: 5, version: 4), idempotencyKey: nil)])
            #expect(try await reopened.lastSeq(session: "s") == 5)
        }
    }

    @Test("an append writes the session's stored activity at most once a minute (one row write less per change)")
    func activityAtMostOnceAMinute() async throws {
        try await withSQLiteStorage { storage, _ in
            try await storage.commit([.createSession(Rows.session("s", createdAt: 1_000))])
            try await storage.commit([.append(Rows.entry("s", seq: 1, version: 1, time: 30_000), idempotencyKey: nil)])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 1_000, "within a minute of what is stored")
            try await storage.commit([.append(Rows.entry("s", seq: 2, version: 2, time: 61_000), idempotencyKey: nil)])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 61_000, "a minute later")
            try await storage.commit([.append(Rows.entry("s", seq: 3, version: 3, time: 62_000), idempotencyKey: nil)])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 61_000)
            // A touch writes at once, and the next append counts its minute from there.
            try await storage.commit([.touch(session: "s", at: 100_000)])
            try await storage.commit([.append(Rows.entry("s", seq: 4, version: 4, time: 150_000), idempotencyKey: nil)])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 100_000)
            try await storage.commit([.append(Rows.entry("s", seq: 5, version: 5, time: 160_000), idempotencyKey: nil)])
            #expect(try await storage.session(id: "s")?.lastActiveAt == 160_000)
        }
    }

    @Test("close waits for pending commits; a commit after close fails as unavailable")
    func closeDrainsThenRefuses() async throws {
        try await withSQLiteStorage { storage, database in
            try await storage.commit([.createSession(Rows.session("s"))])
            await database.close()
            let late = await storageError { () async throws(StorageError) in
                try await storage.commit([.createSession(Rows.session("late"))])
            }
            #expect(late?.kind == .unavailable, "\(String(describing: late))")
            let reopened = try await database.reopen()
            #expect(try await reopened.session(id: "s") != nil)
            #expect(try await reopened.session(id: "late") == nil)
        }
    }

    @Test(
        "the database file deleted or replaced: commits are refused from the next look at the file (a timer's, every second; commits do not look), and stay refused",
        arguments: [false, true])
    func fileGoneRefusesCommits(replaced: Bool) async throws {
        try await withSQLiteStorage { storage, database in
            try await storage.commit([.createSession(Rows.session("s"))])
            if replaced {
                let copy = database.path + ".copy"
                try FileManager.default.copyItem(atPath: database.path, toPath: copy)
                #expect(rename(copy, database.path) == 0)
            } else {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database.path + suffix) }
            }
            func touch() async -> StorageError? {
                await storageError { () async throws(StorageError) in try await storage.commit([.touch(session: "s", at: 2_000)]) }
            }
            var refused: StorageError?
            try await waitUntil("a commit refused once the file was \(replaced ? "replaced" : "deleted")") {
                refused = await touch()
                return refused != nil
            }
            #expect(refused?.kind == .unavailable, "\(String(describing: refused))")
            #expect(refused?.message.contains(replaced ? "was replaced" : "was deleted") == true, "\(String(describing: refused))")
            let again = await touch()
            #expect(again?.kind == .unavailable, "it stays refused: \(String(describing: again))")
        }
    }

    @Test("a missing parent directory is created")
    func createsParentDirectory() async throws {
        try await withSQLiteStorage("a/b/state.sqlite") { storage, database in
            try await storage.commit([.createSession(Rows.session("s"))])
            await database.close()
            #expect(FileManager.default.fileExists(atPath: database.path))
        }
    }

    @Test("a path that is a directory is unusable, and the message names the path")
    func directoryIsUnusable() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("db")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let error = Self.openError(path)
        #expect(error?.kind == .unusable, "\(String(describing: error))")
        #expect(error?.message.contains(path) == true, "\(String(describing: error))")
    }

    @Test("a path that cannot be written is unusable, and the message names the path")
    func unwritableIsUnusable() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        var paths: [String] = []
        if geteuid() == 0 {
            // Permissions do not stop root: use a file system nobody may create files in.
            paths.append("/sys/state-server-test-\(UUID().uuidString).sqlite")
        } else {
            let locked = directory.path("locked")
            try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: true)
            try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: locked)
            paths.append(locked + "/state.sqlite")
        }
        // A parent that is a regular file cannot hold the database either.
        let file = directory.path("plain-file")
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        paths.append(file + "/state.sqlite")
        for path in paths {
            let error = Self.openError(path)
            #expect(error?.kind == .unusable, "\(path): \(String(describing: error))")
            #expect(error?.message.contains(path) == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    @Test("a file of garbage bytes is unusable, the message names the path, and the file is left as it was")
    func garbageIsUnusable() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = directory.path("garbage.sqlite")
        var generator = SystemRandomNumberGenerator()
        let garbage = (0..<16_384).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try Data(garbage).write(to: URL(fileURLWithPath: path))
        let error = Self.openError(path)
        #expect(error?.kind == .unusable, "\(String(describing: error))")
        #expect(error?.message.contains(path) == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(garbage), "the file was not overwritten")
    }

    @Test("a database whose schema page is damaged is unusable")
    func damagedSchemaIsUnusable() async throws {
        try await withSQLiteStorage { storage, database in
            let path = database.path
            try await storage.commit([.createSession(Rows.session("s"))])
            await database.close()
            // Keep the 100-byte header (so SQLite recognises the file) and scribble over the rest
            // of page 1, where the schema lives.
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
            try handle.seek(toOffset: 100)
            try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096 - 100))
            try handle.close()
            try? FileManager.default.removeItem(atPath: path + "-wal")
            try? FileManager.default.removeItem(atPath: path + "-shm")
            let error = Self.openError(path)
            #expect(error?.kind == .unusable, "\(String(describing: error))")
            #expect(error?.message.contains(path) == true, "\(String(describing: error))")
        }
    }

    @Test("past maxBytes commits fail as unavailable; deleting a session frees room and commits work again")
    func sizeCap() async throws {
        try await withSQLiteStorage(maxBytes: 128 * 1024) { storage, database in
            try await storage.commit([.createSession(Rows.session("big")), .createSession(Rows.session("small"))])
            try await storage.commit([.append(Rows.entry("small", seq: 1, version: 1), idempotencyKey: nil)])

            let payload = "{\"type\":\"add\",\"title\":\"\(String(repeating: "x", count: 3000))\"}"
            var version = 0
            var failure: StorageError?
            while version < 1_000, failure == nil {
                let next = version + 1
                failure = await storageError { () async throws(StorageError) in
                    try await storage.commit([.append(Rows.entry("big", seq: next, feature: "todos", version: next, action: payload), idempotencyKey: nil)])
                }
                if failure == nil { version = next }
            }
            let full = try #require(failure, "128 KiB never filled up")
            #expect(full.kind == .unavailable, "\(full)")
            #expect(version > 5, "the cap left room for only \(version) entries")
            // Nothing of the failed batch is stored.
            #expect(try await storage.lastSeq(session: "big") == version)

            // Still full for everyone.
            let small = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(Rows.entry("small", seq: 2, version: 2, action: payload), idempotencyKey: nil)])
            }
            #expect(small?.kind == .unavailable, "\(String(describing: small))")
            #expect(try await storage.lastSeq(session: "small") == 1)

            // Deleting the big session frees its pages: commits succeed again, same storage.
            try await storage.commit([.deleteSession(id: "big")])
            try await storage.commit([.append(Rows.entry("small", seq: 2, version: 2, action: payload), idempotencyKey: nil)])
            #expect(try await storage.lastSeq(session: "small") == 2)
            await database.close()
            #expect(try SQLiteStorage.integrityCheck(path: database.path) == "ok")
        }
    }

    @Test("integrityCheck says ok for a sound database, and fails for a path that is not one")
    func integrityCheck() async throws {
        try await withSQLiteStorage { storage, database in
            let path = database.path
            try await storage.commit([.createSession(Rows.session("s"))])
            await database.close()
            #expect(try SQLiteStorage.integrityCheck(path: path) == "ok")
            let missing = storageErrorSync { () throws(StorageError) in _ = try SQLiteStorage.integrityCheck(path: path + "-missing") }
            #expect(missing != nil)
        }
    }

    static func openError(_ path: String) -> StorageError? {
        do {
            let storage = try SQLiteStorage(path: path)
            Issue.record("\(path) opened as \(storage.name)")
            return nil
        } catch {
            return error
        }
    }
}
