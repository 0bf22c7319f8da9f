import Foundation
import TestSupport
import StatePersistence
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Start-up: quick whatever is stored, and a clear refusal when the storage cannot be used.
@Suite("Start-up with SQLite storage")
struct StartupTests {
    /// Stores `count` sessions with one counter change each, through `SQLiteStorage` (the schema
    /// the server writes). Tokens are `token-<n>`.
    static func seed(_ database: String, count: Int) async throws -> [(id: String, token: String)] {
        try await withSQLiteStorage(at: database) { storage in
            var sessions: [(id: String, token: String)] = []
            var batch: [StorageWrite] = []
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            for index in 0..<count {
                let id = "seeded-\(index)-\(UUID().uuidString.prefix(8))"
                let token = "token-\(index)"
                sessions.append((id, token))
                batch.append(.createSession(StoredSession(id: id, tokenHash: SHA256.hash(token), createdAt: now, lastActiveAt: now)))
                batch.append(.append(
                    JournalEntry(
                        session: id, seq: 1, feature: "counter", version: 1, cause: "dispatch",
                        action: Array(#"{"type":"increment"}"#.utf8), effect: nil, delta: .state(Array(#"{"count":1}"#.utf8)), time: now),
                    idempotencyKey: "seed-\(index)"))
                if batch.count >= 1_000 {
                    try await storage.commit(batch)
                    batch = []
                }
            }
            try await storage.commit(batch)
            #expect(try await storage.sessionCount() == count)
            return sessions
        }
    }

    @Test("with 3,000 sessions on disk the server is ready quickly and loads sessions on first use")
    func manySessionsStartQuickly() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let sessions = try await Self.seed(database, count: 3_000)
            let size = { (path: String) in (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }
            let bytes = size(database) + size(database + "-wal")

            let start = ContinuousClock.now
            try await withDurableServer(database) { server in
                let listening = start.duration(to: .now)
                let healthy = try await eventually(timeout: .seconds(10), every: .milliseconds(5)) { await server.api.isHealthy() }
                let ready = start.duration(to: .now)
                #expect(healthy, "/healthz never answered")
                print("start-up with \(sessions.count) sessions (\(bytes / 1024) KiB with the WAL): first line after \(seconds(listening)), /healthz after \(seconds(ready))")
                // Start-up read no session (how fast it is, is bench/'s to say, not a test's).
                #expect(try await Self.sessionsInMemory(server) == 0)

                // Sessions come back on first use, with their state, versions and replies.
                for index in [0, 1_499, 2_999] {
                    let (id, token) = sessions[index]
                    let session = Session(api: server.api, id: id, token: token)
                    #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
                    let replay = try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", "seed-\(index)")])
                    #expect(replay.header("Idempotent-Replayed") == "true", "\(replay)")
                    let next = try await session.dispatchOK("counter", ["type": "increment"])
                    #expect(next["version"] == 2)
                    #expect(next["state"] == ["count": 2])
                    let (stream, snapshot) = try await session.subscribe()
                    stream.close()
                    #expect(snapshot.seq == 2, "the event sequence continues from the journal")
                }
                #expect(try await Self.sessionsInMemory(server) == 3, "the three sessions used, and no other")
                let wrong = try await Session(api: server.api, id: sessions[7].id, token: "token-8").request("GET", "/state")
                expectError(wrong, 404, "session_not_found")
                await server.stopCleanly()
            }
        }
    }

    /// The server's `stateserver_sessions_in_memory` gauge.
    static func sessionsInMemory(_ server: ServerProcess) async throws -> Double? {
        let metrics = try await server.api.request("GET", "/metrics")
        let line = metrics.text.split(separator: "\n").first { $0.hasPrefix("stateserver_sessions_in_memory ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// Runs the server on `storage` and checks it refuses to start with one clear line.
    static func expectRefusal(
        _ storage: String, reason: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let run = try await runServerToExit(arguments: ["--storage", storage])
        #expect(!run.bySignal && run.status != 0, "\(storage): exit \(run.status); stderr: \(run.stderr)", sourceLocation: sourceLocation)
        #expect(!run.stdout.contains("listening"), "\(storage): \(run.stdout)", sourceLocation: sourceLocation)
        // One message about the storage, and it is the only error (unrelated start-up warnings,
        // such as the open-file limit of this machine, may come before it).
        let lines = run.stderr.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        let errors = lines.filter { $0.contains(" critical ") || $0.contains(" error ") }
        #expect(errors.count == 1, "one error message, not \(errors.count): \(run.stderr)", sourceLocation: sourceLocation)
        #expect(lines.filter { $0.contains(storage) }.count == 1, "one message names the storage: \(run.stderr)", sourceLocation: sourceLocation)
        #expect(run.stderr.contains(storage), "the message names the storage \(storage): \(run.stderr)", sourceLocation: sourceLocation)
        #expect(reason.contains { run.stderr.lowercased().contains($0) }, "the message gives the reason (\(reason)): \(run.stderr)", sourceLocation: sourceLocation)
    }

    @Test("a storage path that is a directory stops the server at start with one clear message")
    func directoryRefused() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.path("a-directory")
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            try await Self.expectRefusal("sqlite:\(path)", reason: ["directory"])
        }
    }

    @Test("a storage path that cannot be written stops the server at start with one clear message")
    func unwritableRefused() async throws {
        try await withTemporaryDirectory { directory in
            if geteuid() == 0 {
                // Permissions do not stop root: a file system where nobody may create files.
                try await Self.expectRefusal("sqlite:/sys/state-server-\(UUID().uuidString).db", reason: ["unable to open", "permission", "denied", "read-only"])
            } else {
                let locked = directory.path("locked")
                try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: true)
                try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: locked)
                defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: locked) }
                try await Self.expectRefusal("sqlite:\(locked)/state.db", reason: ["unable to open", "permission", "denied", "read-only"])
            }
            // A parent that is a plain file.
            let file = directory.path("plain-file")
            try Data("x".utf8).write(to: URL(fileURLWithPath: file))
            try await Self.expectRefusal("sqlite:\(file)/state.db", reason: ["unable to open", "not a directory", "cannot"])
        }
    }

    @Test("a corrupt database file stops the server at start with one clear message, and is left untouched")
    func corruptFileRefused() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.path("corrupt.db")
            var generator = SystemRandomNumberGenerator()
            let garbage = Data((0..<32_768).map { _ in UInt8.random(in: 0...255, using: &generator) })
            try garbage.write(to: URL(fileURLWithPath: path))
            try await Self.expectRefusal("sqlite:\(path)", reason: ["not a database", "corrupt", "malformed"])
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == garbage)
        }
    }

    @Test("a second server on the same database refuses to start and names the first one's pid; after SIGKILL of the first a new one starts")
    func oneProcessPerDatabase() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            let session = try await withDurableServer(database) { first in
                let session = try await first.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                try await Self.expectRefusal("sqlite:\(database)", reason: ["is in use by another process (pid \(first.pid))"])
                // The first one is untouched by the attempt.
                try await session.dispatchOK("counter", ["type": "increment"])
                // SIGKILL: no chance to unlock by itself; the kernel drops the lock.
                let exit = await first.crash()
                #expect(exit.bySignal && exit.status == SIGKILL, "\(exit)")
                return session
            }
            try await withDurableServer(database) { second in
                let restored = Session(api: second.api, id: session.id, token: session.token)
                let counter = try await restored.store("counter")
                #expect(counter == StoreState(version: 2, state: ["count": 2]))
                await second.stopCleanly()
            }
            // A clean stop releases it too.
            try await withDurableServer(database) { third in
                #expect(await third.api.isHealthy())
                await third.stopCleanly()
            }
        }
    }
}
