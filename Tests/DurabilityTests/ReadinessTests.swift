import Foundation
import TestSupport
import Testing

/// Issue 16 §4 (item 10): `/readyz` tells the truth about SQLite storage. A database file that
/// was deleted or replaced under the running server, or that cannot be written, makes `/readyz`
/// answer `503 storage_unavailable`, and writes are refused (503) instead of acknowledged into
/// a file nobody will open again.
@Suite("Readiness tells the truth about storage")
struct ReadinessTests {
    func expectNotReady(_ server: ServerProcess, messageContains: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let ready = try await server.api.request("GET", "/readyz")
        expectError(ready, 503, "storage_unavailable", sourceLocation: sourceLocation)
        #expect(ready.header("Retry-After") == "1", "\(ready)", sourceLocation: sourceLocation)
        let logged = try await eventually { server.output.stderrText.contains(messageContains) }
        #expect(logged, "a log line saying why: \(server.output.stderrText.suffix(2000))", sourceLocation: sourceLocation)
        #expect(await server.api.isHealthy(), "liveness is not readiness", sourceLocation: sourceLocation)
    }

    @Test("the database file deleted under the server: /readyz 503, writes refused, and it stays so")
    func deleted() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            try await withDurableServer(database) { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                #expect(try await server.api.request("GET", "/readyz").status == 200)
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
                try await expectNotReady(server, messageContains: "was deleted")
                let write = try await session.dispatch("counter", ["type": "increment"])
                expectError(write, 503, "storage_unavailable")
                expectError(try await server.api.request("POST", "/v1/sessions"), 503, "storage_unavailable")
                #expect(try await session.store("counter").version == 1, "the refused change was not applied")
                #expect(try await server.api.request("GET", "/readyz").status == 503)
            }
        }
    }

    @Test("the database file deleted: writes alone find it out within about a second (a timer looks at the file every second), no /readyz needed")
    func deletedFoundByWrites() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            try await withDurableServer(database) { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: database + suffix) }
                let started = ContinuousClock.now
                var refused: HTTPResponse?
                try await waitUntil("a write refused once the file is gone") {
                    let write = try await session.dispatch("counter", ["type": "increment"])
                    if write.status != 200 { refused = write }
                    return refused != nil
                }
                expectError(try #require(refused), 503, "storage_unavailable")
                #expect(try await server.api.request("GET", "/readyz").status == 503)
                print("writes refused \(ContinuousClock.now - started) after the file was deleted")
                // It stays refused.
                expectError(try await session.dispatch("counter", ["type": "increment"]), 503, "storage_unavailable")
            }
        }
    }

    @Test("the database file replaced by another file: /readyz 503 and writes refused")
    func replaced() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            try await withDurableServer(database) { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                let copy = directory.path("copy.db")
                try FileManager.default.copyItem(atPath: database, toPath: copy)
                #expect(rename(copy, database) == 0)
                try await expectNotReady(server, messageContains: "was replaced")
                expectError(try await session.dispatch("counter", ["type": "increment"]), 503, "storage_unavailable")
            }
        }
    }

    @Test("a database file that cannot be written (immutable): /readyz 503 and writes refused, until it can again")
    func notWritable() async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            try await withDurableServer(database) { server in
                let session = try await server.api.createSession()
                try await session.dispatchOK("counter", ["type": "increment"])
                // chmod does not stop root; the immutable attribute does (and access(W_OK) says so).
                let set = try await runCommand("/usr/bin/chattr", ["+i", database])
                guard set.status == 0 else {
                    // A file system without the attribute: nothing to check here.
                    print("chattr +i is not supported here: \(set)")
                    return
                }
                do {
                    try await expectNotReady(server, messageContains: "not writable")
                    expectError(try await session.dispatch("counter", ["type": "increment"]), 503, "storage_unavailable")
                } catch {
                    // The folder must stay removable whatever failed.
                    _ = try? await runCommand("/usr/bin/chattr", ["-i", database])
                    throw error
                }
                #expect(try await runCommand("/usr/bin/chattr", ["-i", database]).status == 0)
                #expect(try await server.api.request("GET", "/readyz").status == 200)
                #expect(try await session.dispatch("counter", ["type": "increment"]).status == 200)
            }
        }
    }
}
