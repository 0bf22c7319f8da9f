// The stream survives a server restart: it reconnects with backoff, resumes with Last-Event-ID,
// and delivers every change once, effects included.

import ExampleFeatures
import Foundation
import TestSupport
import StateClient
import Testing

@Suite("changes(): reconnection", .timeLimit(.minutes(5)))
struct ReconnectTests {
    /// Reconnects 1 s after the stream ends (no jitter), and every 1 s while the
    /// server is away: the changes made right after the restart are almost always made before
    /// the stream is back, so they come through the Last-Event-ID replay. (Made after it, they
    /// would come live; the expectations hold either way.)
    static let slowFirstRetry = ReconnectPolicy(
        initialDelay: .seconds(1), maximumDelay: .seconds(1), multiplier: 1, jitter: 0)

    @Test("a server restart on the same database: the stream resumes with no duplicate and no gap")
    func resumesAfterRestart() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let arguments = ["--storage", "sqlite:\(directory.path)/state.db"]
        let first = try await ServerProcess.start(arguments: arguments)
        var servers = [first]
        defer {
            let running = servers
            Task { for server in running { await server.stop() } }
        }

        let client = StateServerClient(baseURL: first.baseURL)
        let credentials = try await client.createSession()
        let counter = client.store(CounterFeature(), credentials: credentials)
        try await counter.dispatch(.increment(by: 1))

        let recorder = EventRecorder(counter.changes(reconnect: Self.slowFirstRetry))
        try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
        try await counter.dispatch(.increment(by: 1))
        try await counter.dispatch(.increment(by: 1))
        try await recorder.wait(for: "version 3") { $0.last?.version == 3 }

        // Restart on the same port and database while the stream is open.
        await first.stop()
        let second = try await Self.restart(port: first.port, arguments: arguments)
        servers.append(second)

        // Changes made while (or right after) the stream is away: replayed through
        // Last-Event-ID when they happen before it reconnects, live otherwise.
        let other = StateServerClient(baseURL: second.baseURL).store(CounterFeature(), credentials: credentials)
        try await other.dispatch(.increment(by: 10))
        try await other.dispatch(.increment(by: 10))
        try await recorder.wait(for: "version 5", timeout: .seconds(60)) { $0.last?.version == 5 }
        // The first client's own connections recover too.
        try await counter.dispatch(.increment(by: 100))

        let events = try await recorder.wait(for: "version 6") { $0.last?.version == 6 }
        // One snapshot, at the start: the reconnection resumed from Last-Event-ID rather than
        // starting over with a snapshot.
        #expect(events.filter(\.isSnapshot).count == 1 && events[0].isSnapshot)
        #expect(events.map(\.version) == [1, 2, 3, 4, 5, 6])
        #expect(events.map(\.state.count) == [1, 2, 3, 13, 23, 123])
        let ids = events.compactMap(\.eventID)
        #expect(ids.count == 6 && zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 })
        try await recorder.stop()
        #expect(recorder.error == nil)
    }

    @Test("an effect made while the stream is away arrives once after the restart")
    func effectOnceAcrossRestart() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let arguments = ["--storage", "sqlite:\(directory.path)/state.db"]
        let environment = ["STATE_SERVER_LOGIN_CHECK_DELAY": "0.05"]
        let first = try await ServerProcess.start(arguments: arguments, environment: environment)
        var servers = [first]
        defer {
            let running = servers
            Task { for server in running { await server.stop() } }
        }

        let client = StateServerClient(baseURL: first.baseURL)
        let login = client.store(LoginFeature(), credentials: try await client.createSession())
        let recorder = EventRecorder(login.changes(reconnect: Self.slowFirstRetry))
        try await recorder.wait(for: "the snapshot") { !$0.isEmpty }

        await first.stop()
        let second = try await Self.restart(port: first.port, arguments: arguments, environment: environment)
        servers.append(second)
        try await login.dispatch(.submit(username: "", password: "whatever-long"))

        let events = try await recorder.wait(for: "the failed check", timeout: .seconds(60)) { $0.last?.version == 2 }
        #expect(events.compactMap(\.effect) == [.toast(message: "Enter a username.")])
        // A second restart: the replay must not deliver the toast again.
        await second.stop()
        let third = try await Self.restart(port: first.port, arguments: arguments, environment: environment)
        servers.append(third)
        try await login.dispatch(.logout)
        let all = try await recorder.wait(for: "the logout", timeout: .seconds(60)) { $0.last?.version == 3 }
        #expect(all.compactMap(\.effect) == [.toast(message: "Enter a username.")])
        #expect(all.map(\.version) == [0, 1, 2, 3])
        try await recorder.stop()
    }

    @Test("a silent connection is replaced after idleTimeout, resuming where it was")
    func idleTimeout() async throws {
        // Heartbeats a minute apart: the client's 1 s idle timeout fires first, again and again.
        try await withServer(arguments: ["--heartbeat", "60"]) { server in
            let client = StateServerClient(baseURL: server.baseURL)
            let counter = client.store(CounterFeature(), credentials: try await client.createSession())
            let policy = ReconnectPolicy(initialDelay: .milliseconds(50), maximumDelay: .milliseconds(100), idleTimeout: .seconds(1))
            let recorder = EventRecorder(counter.changes(reconnect: policy))
            try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
            // Two event-stream requests answered 200 show that the client gave up on the silent
            // stream and opened another (the server closes abandoned streams at once).
            try await waitForEventStreamRequests(atLeast: 2, at: server.baseURL)
            try await counter.dispatch(.increment(by: 1))
            try await counter.dispatch(.increment(by: 1))
            let events = try await recorder.wait(for: "two changes") { $0.last?.version == 2 }
            #expect(events.map(\.version) == [0, 1, 2])
            #expect(events.filter(\.isSnapshot).count == 1)
            try await recorder.stop()
        }
    }

    @Test("with ReconnectPolicy.never the stream ends with its connection")
    func neverReconnects() async throws {
        let server = try await ServerProcess.start()
        let client = StateServerClient(baseURL: server.baseURL)
        let counter = client.store(CounterFeature(), credentials: try await client.createSession())
        let recorder = EventRecorder(counter.changes(reconnect: .never))
        try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
        await server.stop()
        try await recorder.waitUntilFinished()
        #expect(recorder.events.count == 1)
    }

    @Test("when the server stays away, the stream fails after maximumAttempts")
    func givesUp() async throws {
        let server = try await ServerProcess.start()
        let client = StateServerClient(baseURL: server.baseURL)
        let counter = client.store(CounterFeature(), credentials: try await client.createSession())
        let policy = ReconnectPolicy(initialDelay: .milliseconds(20), maximumDelay: .milliseconds(50), maximumAttempts: 3)
        let recorder = EventRecorder(counter.changes(reconnect: policy))
        try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
        await server.stop()
        try await recorder.waitUntilFinished()
        let error = try #require(recorder.error as? StateClientError)
        #expect(error.kind == .transport)
    }

    /// Starts the server again on `port`, retrying while the port is not free yet.
    static func restart(port: Int, arguments: [String], environment: [String: String] = [:]) async throws -> ServerProcess {
        var lastError: (any Error)?
        let restarted = try await poll(timeout: .seconds(10), every: .milliseconds(250)) { () async -> ServerProcess? in
            do {
                return try await ServerProcess.start(port: port, arguments: arguments, environment: environment)
            } catch {
                lastError = error
                return nil
            }
        }
        guard let restarted else { throw lastError ?? ServerStartError(description: "could not restart on port \(port)") }
        return restarted
    }
}
