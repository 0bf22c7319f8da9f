import Synchronization
import Foundation
import StatePersistence
import StatePostgres
import TestSupport
import Testing

private func session(_ id: String) -> StoredSession {
    StoredSession(id: id, tokenHash: SHA256.hash("token-\(id)"), createdAt: 1_000, lastActiveAt: 1_000)
}

private func entry(_ session: String, seq: Int, feature: String = "counter", version: Int) -> JournalEntry {
    Rows.entry(session, seq: seq, feature: feature, version: version)
}

@Suite("PostgreSQL storage", .postgres)
struct PostgresStorageTests {
    @Test("the SessionStorage behaviour checks pass on PostgreSQL", arguments: StorageBehaviour.all)
    func behaviour(_ check: StorageBehaviour.Check) async throws {
        try await withPostgresStorage { storage, _ in try await check.run(storage) }
    }

    @Test("a server that turned read-only (SQLSTATE 25006, as after a switchover): the connection that found it is closed, so writes work again once the server takes them")
    func readOnlyConnectionsAreDropped() async throws {
        try await withPostgresStorage(poolSize: 2) { storage, url in
            let server = try TestPostgres.shared()
            let database = String(url.split(separator: "/").last ?? "")
            try await storage.commit([.createSession(session("s")), .append(entry("s", seq: 1, version: 1), idempotencyKey: nil)])
            // New connections to the database start read-only; the pool's current ones are
            // ended, so it reconnects into read-only sessions.
            try server.sql("ALTER DATABASE \(database) SET default_transaction_read_only = on", in: url)
            try server.sql(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '\(database)' AND pid <> pg_backend_pid()",
                in: url)
            var sawReadOnly = false
            #expect(try await eventually(timeout: .seconds(10), every: .milliseconds(50)) {
                let error = await storageError { () async throws(StorageError) in
                    try await storage.commit([.append(entry("s", seq: 2, version: 2), idempotencyKey: nil)])
                }
                if error?.message.contains("read-only") == true { sawReadOnly = true }
                return sawReadOnly
            }, "a write should meet the read-only server")
            #expect(try await storage.lastSeq(session: "s") == 1, "nothing written while read-only")
            // The server takes writes again (the new primary): a pool that kept its read-only
            // connections would refuse them until they idle out.
            try server.sql("BEGIN READ WRITE; ALTER DATABASE \(database) RESET default_transaction_read_only; COMMIT", in: url)
            var last: StorageError?
            #expect(try await eventually(timeout: .seconds(10), every: .milliseconds(50)) {
                last = await storageError { () async throws(StorageError) in
                    try await storage.commit([.append(entry("s", seq: 2, version: 2), idempotencyKey: nil)])
                }
                return last == nil
            }, "writes did not work again: \(String(describing: last))")
            #expect(try await storage.lastSeq(session: "s") == 2)
        }
    }

    @Test("the name is the URL without its password")
    func name() async throws {
        try await withPostgresStorage { storage, url in
            let password = try #require(try PostgresStorage.Settings(url: url).password)
            #expect(storage.name.hasPrefix("postgres://stateserver:***@127.0.0.1:"))
            #expect(!storage.name.contains(password))
        }
    }

    @Test("two nodes commit the same (session, feature, version) at once: exactly one wins, the other is a conflict")
    func raceBetweenNodes() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            try await nodeA.commit([.createSession(session("s"))])
            for version in 1...20 {
                async let a = storageError { () async throws(StorageError) in
                    try await nodeA.commit([.append(entry("s", seq: version, version: version), idempotencyKey: nil)])
                }
                async let b = storageError { () async throws(StorageError) in
                    try await nodeB.commit([.append(entry("s", seq: version, version: version), idempotencyKey: nil)])
                }
                let outcomes = await [a, b]
                #expect(outcomes.filter { $0 == nil }.count == 1, "round \(version): \(outcomes)")
                #expect(outcomes.compactMap { $0?.kind } == [.conflict], "round \(version): \(outcomes)")
            }
            let stored = try await nodeB.journal(session: "s", feature: "counter", afterVersion: 0)
            #expect(stored.map(\.version) == Array(1...20))
            #expect(try await nodeA.lastSeq(session: "s") == 20)
            await nodeB.close()
        }
    }

    @Test("every node hears each commit (the session's last seq) and each delete, after it commits; never a rollback")
    func notices() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            let heard = NoticeCollector(nodeB.notices())
            #expect(await heard.until { $0.contains(.listening) }, "\(heard.all)")
            try await nodeA.commit([.createSession(session("n"))])
            try await nodeA.commit([
                .append(entry("n", seq: 1, version: 1), idempotencyKey: nil), .append(entry("n", seq: 2, version: 2), idempotencyKey: nil),
            ])
            // A conflict rolls back: no notice for it.
            _ = await storageError { () async throws(StorageError) in
                try await nodeB.commit([.append(entry("n", seq: 2, version: 2), idempotencyKey: nil)])
            }
            try await nodeB.commit([.append(entry("n", seq: 3, version: 3), idempotencyKey: nil)])
            try await nodeA.commit([.deleteSession(id: "n")])
            #expect(await heard.until { $0.contains(.deleted(session: "n")) }, "\(heard.all)")
            // Each append announces its own seq (a batch of two: two notices, in order).
            #expect(heard.all == [
                .listening, .committed(session: "n", seq: 1), .committed(session: "n", seq: 2), .committed(session: "n", seq: 3),
                .deleted(session: "n"),
            ])
            await nodeB.close()
            #expect(await heard.until { _ in heard.finished }, "closing the storage ends its notices")
        }
    }

    @Test("one node at a time gets a named turn (advisory lock); the turn is free again after it")
    func exclusiveTurns() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            let nested = try await nodeA.exclusively("sweep") { () async -> [String] in
                var ran: [String] = []
                if case .some(.some) = try? await nodeB.exclusively("sweep", { "B swept" }) { ran.append("B swept") }
                if case .some(.some) = try? await nodeB.exclusively("other job", { "B ran another job" }) { ran.append("B ran another job") }
                return ran
            }
            #expect(nested == ["B ran another job"], "B's sweep is refused while A sweeps; another job is not")
            #expect(try await nodeB.exclusively("sweep") { "B ran" } == "B ran")
            await nodeB.close()
        }
    }

    @Test("an Idempotency-Key is unique across nodes: a second change with the same key is a conflict and stores nothing")
    func idempotencyAcrossNodes() async throws {
        try await withPostgresStorage { nodeA, url in
            let nodeB = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            try await nodeA.commit([.createSession(session("s"))])
            try await nodeA.commit([.append(entry("s", seq: 1, version: 1), idempotencyKey: "key")])
            let second = await storageError { () async throws(StorageError) in
                try await nodeB.commit([.append(entry("s", seq: 2, feature: "todos", version: 1), idempotencyKey: "key")])
            }
            #expect(second?.kind == .conflict, "\(String(describing: second))")
            #expect(try await nodeB.rememberedKey(session: "s", key: "key") == RememberedKey(feature: "counter", version: 1, time: 5_000))
            #expect(try await nodeB.lastSeq(session: "s") == 1, "the losing change left no journal entry")
            await nodeB.close()
        }
    }

    @Test("statement_timeout reaches PostgreSQL: a read stuck behind a lock is cancelled (57014) and answers unavailable")
    func statementTimeout() async throws {
        let server = try TestPostgres.shared()
        let url = try server.makeDatabase()
        var settings = try TestPostgres.settings(url)
        // Long enough for the schema's creation on a loaded machine; the stuck read below waits
        // far longer than this unless PostgreSQL cancels it.
        settings.statementTimeout = .seconds(2)
        // PostgreSQL's own cancellation is what this test reads, not the client's bound.
        settings.answerGrace = .seconds(60)
        let storage = try await PostgresStorage.open(settings: settings)
        try await storage.commit([.createSession(session("locked"))])
        // A prepared transaction holds its lock after psql has gone, until it is rolled back:
        // every statement that reads the sessions table waits behind it.
        let hold = "hold_\(UUID().uuidString.prefix(8).lowercased())"
        try server.sql("BEGIN; LOCK TABLE state_sessions IN ACCESS EXCLUSIVE MODE; PREPARE TRANSACTION '\(hold)'", in: url)
        var released = false
        defer { if !released { _ = try? server.sql("ROLLBACK PREPARED '\(hold)'", in: url) } }
        let failure = await storageError { () async throws(StorageError) in
            _ = try await storage.session(id: "locked")
        }
        #expect(failure?.kind == .unavailable, "\(String(describing: failure))")
        #expect(failure?.message.contains("57014") == true, "cancelled by statement_timeout: \(String(describing: failure))")
        try server.sql("ROLLBACK PREPARED '\(hold)'", in: url)
        released = true
        // The same pool answers once the lock is gone.
        #expect(try await storage.session(id: "locked") != nil)
        await storage.close()
    }

    @Test("a database whose schema is newer than the server knows is a clear start-up error")
    func newerSchema() async throws {
        let server = try TestPostgres.shared()
        try await withPostgresStorage { storage, url in
            #expect(try server.sql("SELECT max(version) FROM state_schema", in: url) == "\(PostgresStorage.schemaVersion)")
            try server.sql("INSERT INTO state_schema (version) VALUES (\(PostgresStorage.schemaVersion + 1))", in: url)
            let error = await storageError { () async throws(StorageError) in
                _ = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            }
            #expect(error?.kind == .unusable, "\(String(describing: error))")
            #expect(error?.message.contains("schema is version \(PostgresStorage.schemaVersion + 1), newer than this server knows") == true,
                    "\(String(describing: error))")
        }
    }

    @Test("a database written before changes were journaled (schema 1) opens and loses nothing: states, actions, effects, keys, heads")
    func migratesToChanges() async throws {
        let server = try TestPostgres.shared()
        let url = try server.makeDatabase()
        let v1 = [
            "CREATE TABLE state_schema (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
            "INSERT INTO state_schema (version) VALUES (1)",
            "CREATE TABLE state_sessions (id text PRIMARY KEY, token_hash bytea NOT NULL, created_at bigint NOT NULL, last_active bigint NOT NULL)",
            "CREATE INDEX state_sessions_by_activity ON state_sessions (last_active)",
            """
            CREATE TABLE state_journal (session text NOT NULL, seq bigint NOT NULL, feature text NOT NULL, version bigint NOT NULL,
                cause text NOT NULL, payload bytea, event bytea NOT NULL, time bigint NOT NULL, PRIMARY KEY (session, seq))
            """,
            "CREATE UNIQUE INDEX state_journal_by_store ON state_journal (session, feature, version)",
            """
            CREATE TABLE state_snapshots (session text NOT NULL, feature text NOT NULL, version bigint NOT NULL,
                state_version bigint NOT NULL, state bytea NOT NULL, time bigint NOT NULL, PRIMARY KEY (session, feature))
            """,
            """
            CREATE TABLE state_replies (session text NOT NULL, key text NOT NULL, status integer NOT NULL, body bytea NOT NULL,
                version bigint NOT NULL, time bigint NOT NULL, PRIMARY KEY (session, key))
            """,
            "INSERT INTO state_sessions VALUES ('kept', '\\x00', 1, 2)",
            #"INSERT INTO state_journal VALUES ('kept', 1, 'counter', 1, 'dispatch', NULL, convert_to('{"feature":"counter","version":1,"cause":"dispatch","action":{"type":"increment"},"state":{"count":1}}', 'UTF8'), 10)"#,
            #"INSERT INTO state_journal VALUES ('kept', 2, 'counter', 2, 'dispatch', NULL, convert_to('{"feature":"counter","version":2,"cause":"dispatch","action":{"type":"increment","by":5},"state":{"count":6},"effect":{"type":"celebrate"}}', 'UTF8'), 11)"#,
            #"INSERT INTO state_snapshots VALUES ('kept', 'counter', 1, 1, convert_to('{"count":1}', 'UTF8'), 10)"#,
            #"INSERT INTO state_replies VALUES ('kept', 'k', 200, convert_to('{"feature":"counter","version":2,"state":{"count":6}}', 'UTF8'), 2, 11)"#,
        ]
        for statement in v1 { _ = try server.sql(statement, in: url) }
        let storage = try await PostgresStorage.open(settings: TestPostgres.settings(url))
        let entries = try await storage.journal(session: "kept", feature: "counter", afterVersion: 0)
        #expect(entries.map(\.version) == [1, 2])
        #expect(entries.map(\.delta) == [.state(Array(#"{"count":1}"#.utf8)), .state(Array(#"{"count":6}"#.utf8))], "whole states, byte for byte")
        #expect(entries.map(\.action) == [Array(#"{"type":"increment"}"#.utf8), Array(#"{"type":"increment","by":5}"#.utf8)])
        #expect(entries.map(\.effect) == [nil, Array(#"{"type":"celebrate"}"#.utf8)])
        #expect(try await storage.latestSnapshot(session: "kept", feature: "counter")?.version == 1)
        #expect(try await storage.rememberedKey(session: "kept", key: "k") == RememberedKey(feature: "counter", version: 2, time: 11))
        #expect(try await storage.lastSeq(session: "kept") == 2)
        let stale = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(entry("kept", seq: 2, version: 2), idempotencyKey: nil)])
        }
        #expect(stale?.kind == .conflict, "\(String(describing: stale))")
        try await storage.commit([.append(entry("kept", seq: 3, version: 3), idempotencyKey: nil)])
        #expect(try server.sql("SELECT max(version) FROM state_schema", in: url) == "\(PostgresStorage.schemaVersion)")
        await storage.close()
    }

    @Test("opening an existing database keeps its data (the migration runs once)")
    func reopen() async throws {
        try await withPostgresStorage { storage, url in
            try await storage.commit([.createSession(session("kept"))])
            let again = try await PostgresStorage.open(settings: TestPostgres.settings(url))
            #expect(try await again.session(id: "kept") == session("kept"))
            await again.close()
        }
    }

    @Test("a wrong password is refused as unusable, and the error does not contain the password")
    func wrongPassword() async throws {
        let server = try TestPostgres.shared()
        var settings = try TestPostgres.settings(server.url)
        settings.password = "not-the-Secret-42"
        let error = await storageError { () async throws(StorageError) in
            _ = try await PostgresStorage.open(settings: settings)
        }
        #expect(error?.kind == .unusable, "\(String(describing: error))")
        #expect(error.map { !"\($0)".contains("not-the-Secret-42") && !$0.message.contains("not-the-Secret-42") } == true)
        #expect(error?.message.contains("postgres://stateserver:***@") == true, "\(String(describing: error))")
    }
}

@Suite("PostgreSQL outages")
struct PostgresOutageTests {
    @Test("PostgreSQL stopped: commits and reads fail as unavailable; started again: the same storage serves")
    func stopAndStart() async throws {
        let server = try TestPostgres.start()
        defer { server.destroy() }
        let storage = try await PostgresStorage.open(settings: TestPostgres.settings(server.url))
        try await storage.commit([.createSession(session("s")), .append(entry("s", seq: 1, version: 1), idempotencyKey: nil)])

        try server.stop()
        let commit = await storageError { () async throws(StorageError) in
            try await storage.commit([.append(entry("s", seq: 2, version: 2), idempotencyKey: nil)])
        }
        #expect(commit?.kind == .unavailable, "\(String(describing: commit))")
        let read = await storageError { () async throws(StorageError) in _ = try await storage.lastSeq(session: "s") }
        #expect(read?.kind == .unavailable, "\(String(describing: read))")
        let password = try #require(try PostgresStorage.Settings(url: server.url).password)
        #expect(commit.map { !$0.message.contains(password) } == true)

        try server.startAgain()
        // The pool reconnects with backoff: poll until a commit lands (deadline 30 s).
        let deadline = ContinuousClock.now + .seconds(30)
        var last: StorageError?
        repeat {
            last = await storageError { () async throws(StorageError) in
                try await storage.commit([.append(entry("s", seq: 2, version: 2), idempotencyKey: nil)])
            }
            if last == nil { break }
            try await Task.sleep(for: .milliseconds(100))
        } while ContinuousClock.now < deadline
        #expect(last == nil, "no commit after PostgreSQL came back: \(String(describing: last))")
        #expect(try await storage.journal(session: "s", afterSeq: 0, limit: 10).map(\.seq) == [1, 2])
        await storage.close()
    }

    @Test("PostgreSQL stopped: the notices say .lost; started again: .listening, and commits are heard again")
    func noticesAcrossAnOutage() async throws {
        let server = try TestPostgres.start()
        defer { server.destroy() }
        let storage = try await PostgresStorage.open(settings: TestPostgres.settings(server.url))
        let heard = NoticeCollector(storage.notices())
        #expect(await heard.until { $0 == [.listening] }, "\(heard.all)")
        try server.stop()
        #expect(await heard.until { $0.contains(.lost) }, "\(heard.all)")
        try server.startAgain()
        #expect(await heard.until { $0.filter { $0 == .listening }.count == 2 }, "\(heard.all)")
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            do throws(StorageError) {
                try await storage.commit([.createSession(session("back"))])
                break
            } catch {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        try await storage.commit([.append(entry("back", seq: 1, version: 1), idempotencyKey: nil)])
        #expect(await heard.until { $0.contains(.committed(session: "back", seq: 1)) }, "\(heard.all)")
        #expect(heard.all.prefix(3) == [.listening, .lost, .listening], "one .lost per outage, however many reconnect attempts")
        await storage.close()
    }

    @Test("no PostgreSQL at the address: opening fails as unavailable, quickly")
    func nothingListening() async throws {
        // Port 1: nothing listens there.
        var settings = try TestPostgres.settings("postgres://u:secret-pw@127.0.0.1:1/db")
        settings.connectionWait = .seconds(1)
        let error = await storageError { () async throws(StorageError) in
            _ = try await PostgresStorage.open(settings: settings)
        }
        #expect(error?.kind == .unavailable, "\(String(describing: error))")
        #expect(error?.message.contains("secret-pw") == false)
    }
}

@Suite("PostgreSQL URLs")
struct PostgresURLTests {
    @Test("postgres:// and postgresql:// URLs, with and without password and port")
    func parses() throws {
        let full = try PostgresStorage.Settings(url: "postgres://alice:s3cr%40t@db.example:6543/state")
        #expect(full.host == "db.example")
        #expect(full.port == 6543)
        #expect(full.user == "alice")
        #expect(full.password == "s3cr@t")
        #expect(full.database == "state")
        #expect(full.poolSize == 10)
        let short = try PostgresStorage.Settings(url: "postgresql://bob@localhost/app?sslmode=disable&pool_size=3")
        #expect(short.port == 5432)
        #expect(short.password == nil)
        #expect(short.tls == .disable)
        #expect(short.poolSize == 3)
        #expect(full.statementTimeout == .seconds(5), "bounded by default")
        let bounded = try PostgresStorage.Settings(url: "postgres://bob@localhost/app?statement_timeout=250")
        #expect(bounded.statementTimeout == .milliseconds(250))
        #expect(try PostgresStorage.Settings(url: "postgres://bob@localhost/app?statement_timeout=0").statementTimeout == .zero)
        #expect(short.redacted == "postgres://bob@localhost:5432/app")
        let v6 = try PostgresStorage.Settings(url: "postgres://u:p@[::1]:5433/d")
        #expect(v6.host == "::1")
        #expect(v6.redacted == "postgres://u:***@[::1]:5433/d")
    }

    @Test("the password never shows in descriptions", arguments: ["hunter2-xyz", "p@ss:w/rd"])
    func redacted(_ password: String) throws {
        let escaped = password.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? password
        let settings = try PostgresStorage.Settings(url: "postgres://alice:\(escaped)@127.0.0.1:5432/state")
        #expect(settings.password == password)
        var dumped = ""
        dump(settings, to: &dumped)
        for text in [settings.redacted, settings.description, settings.debugDescription, "\(settings)", String(reflecting: settings), dumped] {
            #expect(!text.contains(password), "\(text)")
            #expect(!text.contains(escaped), "\(text)")
        }
        #expect(settings.redacted == "postgres://alice:***@127.0.0.1:5432/state")
    }

    @Test("bad URLs are unusable and their errors do not quote the URL", arguments: [
        "mysql://u:hunter2-xyz@h/d", "postgres://u:hunter2-xyz@h", "postgres://u:hunter2-xyz@h:99999/d",
        "postgres://u:hunter2-xyz@/d", "postgres://h:5432/d", "postgres://u:hunter2-xyz@h/d?sslmode=maybe",
        "postgres://u:hunter2-xyz%zz@h/d",
        // One connection deadlocked the sweep (its lock holds the connection its queries need).
        "postgres://u:hunter2-xyz@h/d?pool_size=1", "postgres://u:hunter2-xyz@h/d?statement_timeout=-1",
        "postgres://u:hunter2-xyz@h/d?statement_timeout=soon",
    ])
    func badURLs(_ url: String) {
        do {
            _ = try PostgresStorage.Settings(url: url)
            Issue.record("accepted \(url)")
        } catch {
            #expect(error.kind == .unusable)
            #expect(!error.message.contains("hunter2"), "\(error.message)")
        }
    }
}

/// Collects a notice stream in the background.
final class NoticeCollector: Sendable {
    private let notices = Mutex<[StorageNotice]>([])
    private let ended = Atomic<Bool>(false)

    init(_ stream: AsyncStream<StorageNotice>) {
        Task { [self] in
            for await notice in stream { notices.withLock { $0.append(notice) } }
            ended.store(true, ordering: .sequentiallyConsistent)
        }
    }

    var all: [StorageNotice] { notices.withLock { $0 } }
    var finished: Bool { ended.load(ordering: .sequentiallyConsistent) }

    /// Waits (at most 30 s) until `condition` holds for what was heard.
    func until(_ condition: ([StorageNotice]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if condition(all) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition(all)
    }
}
