// Issue 10 §7: a server that shuts down gracefully ends each stream with `retry:` and
// `event: shutdown` (no id). The client reconnects after that delay — not after its backoff —
// with Last-Event-ID, and delivers nothing for the event itself.

import ExampleFeatures
import Foundation
import TestSupport
import MicroHTTP
import StateClient
import Synchronization
import Testing

@Suite("changes(): the server's shutdown event", .timeLimit(.minutes(5)))
struct ShutdownEventTests {
    /// A backoff far longer than any wait of these tests: a reconnection in time can only come
    /// from the shutdown event's delay. (The waits are long because the whole suite shares two
    /// threads at its start: a test may wait many seconds for its turn.)
    static let slowBackoff = ReconnectPolicy(initialDelay: .seconds(3600), maximumDelay: .seconds(3600), multiplier: 1)

    @Test("the shutdown event's retry wins over the backoff; the next connection sends Last-Event-ID; nothing is delivered for it")
    func retryHintAndLastEventID() async throws {
        let farewell = "retry: 200\nevent: shutdown\ndata: {\"reason\":\"shutdown\",\"retryAfterMs\":200}\n\n"
        let server = try ScriptedEventServer(connections: [
            .init(Self.snapshot(id: 0, count: 0) + Self.change(id: 1, version: 1) + farewell, thenEnd: true),
            .init(Self.change(id: 2, version: 2), thenEnd: false),
        ])
        defer { Task { await server.stop() } }
        let store = StateServerClient(baseURL: server.baseURL)
            .store(CounterFeature(), credentials: SessionCredentials(id: "s", token: "t"))
        let recorder = EventRecorder(store.changes(reconnect: Self.slowBackoff))
        let events = try await recorder.wait(for: "the change after the shutdown", timeout: .seconds(60), detail: { server.requestLog }) {
            $0.last?.version == 2
        }
        #expect(events.map(\.version) == [0, 1, 2])
        #expect(events.map(\.eventID) == [0, 1, 2])
        #expect(events.filter(\.isSnapshot).count == 1)
        #expect(server.lastEventIDs == [nil, "1"], "the shutdown event has no id: resume after the last change")
        try await recorder.stop()
        #expect(recorder.error == nil)
    }

    @Test("a shutdown event without retry: the delay of its data; with ReconnectPolicy.never the stream just ends")
    func dataDelayAndNever() async throws {
        let farewell = "event: shutdown\ndata: {\"reason\":\"shutdown\",\"retryAfterMs\":100}\n\n"
        let server = try ScriptedEventServer(connections: [
            .init(Self.snapshot(id: 3, count: 5) + farewell, thenEnd: true),
            .init(Self.change(id: 4, version: 6), thenEnd: false),
            .init(Self.snapshot(id: 4, count: 6) + farewell, thenEnd: true),
        ])
        defer { Task { await server.stop() } }
        let store = StateServerClient(baseURL: server.baseURL)
            .store(CounterFeature(), credentials: SessionCredentials(id: "s", token: "t"))
        let recorder = EventRecorder(store.changes(reconnect: Self.slowBackoff))
        try await recorder.wait(for: "the change after the shutdown", timeout: .seconds(60), detail: { server.requestLog }) { $0.last?.version == 6 }
        try await recorder.stop()
        #expect(server.lastEventIDs == [nil, "3"])

        let once = EventRecorder(store.changes(reconnect: .never))
        try await once.waitUntilFinished()
        #expect(once.error == nil)
        #expect(once.events.map(\.version) == [6])
        #expect(server.lastEventIDs == [nil, "3", nil])
    }

    @Test("SIGTERM, then a new server on the same database: the stream resumes there with no gap and no snapshot")
    func resumesOnTheNextServer() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let arguments = ["--storage", "sqlite:\(directory.path)/state.db"]
        let environment = ["STATE_SERVER_STREAMS_SHUTDOWN_RETRY": "0.5"]
        let first = try await ServerProcess.start(arguments: arguments, environment: environment)
        var servers = [first]
        defer {
            let running = servers
            Task { for server in running { await server.stop() } }
        }

        let client = StateServerClient(baseURL: first.baseURL)
        let credentials = try await client.createSession()
        let counter = client.store(CounterFeature(), credentials: credentials)
        try await counter.dispatch(.increment(by: 1))
        // Should the next server not be up yet after the event's delay, retry every second.
        let recorder = EventRecorder(counter.changes(reconnect: ReconnectTests.slowFirstRetry))
        try await recorder.wait(for: "the snapshot") { !$0.isEmpty }
        try await counter.dispatch(.increment(by: 1))
        try await recorder.wait(for: "version 2") { $0.last?.version == 2 }

        let exit = await first.stop(signal: SIGTERM)
        #expect(exit.exitedByItself && exit.status == 0, "\(exit)")
        let second = try await ReconnectTests.restart(port: first.port, arguments: arguments, environment: environment)
        servers.append(second)
        let other = StateServerClient(baseURL: second.baseURL).store(CounterFeature(), credentials: credentials)
        try await other.dispatch(.increment(by: 10))
        try await recorder.wait(for: "version 3", timeout: .seconds(60)) { $0.last?.version == 3 }
        try await counter.dispatch(.increment(by: 100))

        let events = try await recorder.wait(for: "version 4") { $0.last?.version == 4 }
        #expect(events.filter(\.isSnapshot).count == 1 && events[0].isSnapshot)
        #expect(events.map(\.version) == [1, 2, 3, 4])
        #expect(events.map(\.state.count) == [1, 2, 12, 112])
        let ids = events.compactMap(\.eventID)
        #expect(ids == Array(ids[0]..<ids[0] + 4), "\(ids)")
        try await recorder.stop()
        #expect(recorder.error == nil)
    }

    static func snapshot(id: Int, count: Int) -> String {
        "id: \(id)\nevent: snapshot\ndata: {\"features\":{\"counter\":{\"version\":\(count),\"state\":{\"count\":\(count)}}}}\n\n"
    }

    static func change(id: Int, version: Int) -> String {
        "id: \(id)\nevent: state\ndata: {\"feature\":\"counter\",\"version\":\(version),\"cause\":\"dispatch\","
            + "\"action\":{\"type\":\"increment\",\"by\":1},\"state\":{\"count\":\(version)},\"effect\":null}\n\n"
    }
}

/// An event-stream server that answers its n-th `GET` with the n-th script's bytes, then ends
/// the stream or holds it open, and records the `Last-Event-ID` of each request. Requests past
/// the scripts get 503.
final class ScriptedEventServer: Sendable {
    struct Connection: Sendable {
        var bytes: String
        var thenEnd: Bool

        init(_ bytes: String, thenEnd: Bool) {
            self.bytes = bytes
            self.thenEnd = thenEnd
        }
    }

    private final class Script: HTTPResponder {
        let connections: [Connection]
        let requests = Mutex<[String?]>([])
        /// What happened when, for the message of a test that timed out.
        let log = Mutex<[String]>([])
        let started = ContinuousClock.now

        init(_ connections: [Connection]) { self.connections = connections }

        func note(_ what: String) {
            let elapsed = ContinuousClock.now - started
            log.withLock { $0.append("\(elapsed.formatted(.units(allowed: [.milliseconds]))): \(what)") }
        }

        func respond(to request: HTTPRequest) -> HTTPResult {
            let index = requests.withLock { requests in
                requests.append(request.header("last-event-id"))
                return requests.count - 1
            }
            note("request \(index) \(request.method) \(request.path) Last-Event-ID \(request.header("last-event-id") ?? "none")")
            guard connections.indices.contains(index) else { return .now(HTTPResponse(status: 503)) }
            let connection = connections[index]
            let stream = EventStream(bufferLimit: 1 << 20)
            stream.onFinish { [weak self] in self?.note("stream \(index) finished") }
            stream.send(Array(connection.bytes.utf8))
            if connection.thenEnd { stream.close() }
            return .now(HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream")], body: .stream(stream)))
        }
    }

    private let script: Script
    private let server: HTTPServer
    let port: Int

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    /// The `Last-Event-ID` of each request, in order.
    var lastEventIDs: [String?] { script.requests.withLock { $0 } }
    /// The requests and the ends of their streams, with the time since the server started.
    var requestLog: String { "server: [" + script.log.withLock { $0 }.joined(separator: "; ") + "]" }

    init(connections: [Connection]) throws {
        script = Script(connections)
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threads = 1
        configuration.heartbeat = nil
        server = HTTPServer(configuration: configuration, responder: script)
        port = try server.start()
    }

    func stop() async {
        await server.stop(grace: .milliseconds(100))
    }
}
