// The server's routes in the test process: no process, no socket (Hummingbird's
// `app.test(.router)` shape). The contract suites of StateServerIntegrationTests run this way
// (`.inProcessServer` trait); the suites that need what only a socket shows — event streams
// over time, transport limits, raw bytes, signals — start the real binary (`.localServer`).
//
// The server is wired by the same builder `state-server` uses (`StateServerApplication`): the
// example features, a `SessionManager` over memory — or, with STATE_SERVER_TEST_STORAGE=sqlite, over a
// fresh SQLite database in a temporary directory — and a `StateServerResponder`. Requests are
// `HTTPRequest` values given to `respond(to:)`, built as MicroHTTP builds them from the wire
// (Connection.swift): path percent-decoded, query arguments split and decoded, header names
// lower-cased, a body over the limit dropped and flagged `bodyTooLarge`; no peer address (a
// request made in process), or the one `api(from:)` names, as a connection's peer would be.

import ExampleFeatures
import Foundation
import Logging
@testable import MicroHTTP
import StatePersistence
import StateServerHTTP
import StateSessions
import StateStore
import Testing

/// A server wired as `state-server` wires it, answering in the test process.
package final class InProcessServer: Sendable {
    /// The settings that differ between suites; the defaults are the binary's.
    package struct Settings: Sendable {
        package var routes = RouteSettings()
        package var sessions = SessionSettings()
        /// `login.checkDelay` (the binary's default is 0.2 s).
        package var loginCheckDelay: Duration = .milliseconds(200)

        package init() {}

        /// `http.trustedProxies`: the peers whose `X-Forwarded-For` the limits believe, each an
        /// address or a CIDR range (an entry that is neither is recorded as an issue).
        package mutating func trustProxies(_ entries: String..., sourceLocation: SourceLocation = #_sourceLocation) {
            routes.limits.trustedProxies = entries.compactMap { entry in
                let range = AddressRange(entry)
                if range == nil { Issue.record("not an address or CIDR range: \(entry)", sourceLocation: sourceLocation) }
                return range
            }
        }
    }

    package let responder: StateServerResponder
    package let sessions: SessionManager
    package let settings: Settings
    private let storage: (any SessionStorage)?
    private let directory: URL?

    /// Bodies larger than this are not drained by MicroHTTP: it answers 413 itself and closes
    /// the connection (`HTTPServer.Configuration.drainLimit`). Only a real server shows that.
    static let drainLimit = HTTPServer.Configuration().drainLimit

    /// Builds the server. With STATE_SERVER_TEST_STORAGE=sqlite the sessions live in a fresh
    /// SQLite database of their own, as the real binary's do in the suite's second pass.
    /// - Parameter registry: the features to serve; `nil`: the example features.
    package init(settings: Settings = Settings(), registry: FeatureRegistry? = nil) throws {
        self.settings = settings
        if ProcessInfo.processInfo.environment["STATE_SERVER_TEST_STORAGE"] == "sqlite" {
            let directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("state-server-tests-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            self.directory = directory
            self.storage = try SQLiteStorage(path: directory.appendingPathComponent("state.db").path)
        } else {
            self.directory = nil
            self.storage = nil
        }
        let registry = try registry ?? ExampleFeatures.registry(loginCheckDelay: settings.loginCheckDelay)
        let logger = Logger(label: "state-server-in-process") { _ in SwiftLogNoOpLogHandler() }
        let application = StateServerApplication(
            registry: registry, sessions: settings.sessions, routes: settings.routes,
            storage: storage ?? SessionManager.memoryStorage(registry, settings.sessions), logger: logger)
        sessions = application.sessions
        responder = application.responder
    }

    /// Requests with no peer address, as requests made in process have: the per-address
    /// limits (`limits.requestsPerSecond`, `limits.sessionsPerMinute`) never count them.
    package var api: API { API(transport: InProcessTransport(server: self, peer: nil)) }

    /// Requests from a client at `address`: each carries it as its peer, as MicroHTTP gives a
    /// request its connection's peer (`HTTPRequest.peer`), so the per-address limits and
    /// `X-Forwarded-For` behind trusted proxies see that client.
    package func api(from address: String, sourceLocation: SourceLocation = #_sourceLocation) throws -> API {
        let peer = try #require(IPAddress(address), "not an IP address: \(address)", sourceLocation: sourceLocation)
        return API(transport: InProcessTransport(server: self, peer: peer))
    }

    /// A server that keeps little history (3 changes, a snapshot every 2, so compaction runs),
    /// and a session with 12 counter increments: the journal no longer reaches version 1.
    package static func twelveIncrementsThreeKept() async throws -> (InProcessServer, Session) {
        var settings = Settings()
        settings.sessions.replayBuffer = 3
        settings.sessions.historyKeep = 3
        settings.sessions.snapshotEvery = 2
        let server = try InProcessServer(settings: settings)
        let session = try await server.api.createSession()
        for _ in 1...12 { try await session.dispatchOK("counter", ["type": "increment"]) }
        return (server, session)
    }

    /// Closes the storage and removes its directory.
    package func stop() async {
        await storage?.close()
        if let directory { try? FileManager.default.removeItem(at: directory) }
    }

    /// Runs `body`, then stops the server, whether `body` threw or not.
    package func stopping<T>(after body: (InProcessServer) async throws -> T) async throws -> T {
        try await runThenStop({ try await body(self) }, stop: { await stop() })
    }

    /// The request MicroHTTP would give the responder for these bytes on the wire.
    /// - Parameter peer: the connection's peer address (nil: none, as in process).
    package func request(
        _ method: String, _ target: String, headers: [Header], body: [UInt8]?, peer: IPAddress? = nil
    ) -> HTTPRequest {
        let (rawPath, rawQuery) = Self.split(target)
        var fields = [("host", "127.0.0.1")] + headers.map { ($0.name.lowercased(), $0.value) }
        if let body { fields.append(("content-length", String(body.count))) }
        let bytes = body ?? []
        let tooLarge = bytes.count > settings.routes.bodyLimit
        return HTTPRequest(
            method: method, path: String(rawPath),
            headers: fields, query: Self.arguments(rawQuery),
            body: tooLarge ? [] : bytes, bodyTooLarge: tooLarge, peer: peer)
    }

    static func split(_ target: Substring) -> (path: Substring, query: Substring?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        return (target[..<mark], target[target.index(after: mark)...])
    }

    static func split(_ target: String) -> (path: Substring, query: Substring?) { split(target[...]) }

    /// Query arguments as libmicrohttpd parses them (MicroHTTP's own parser, over
    /// `MHD_http_unescape`).
    static func arguments(_ query: Substring?) -> [(name: String, value: String?)] {
        RequestFields.queryArguments(query)
    }

    /// The responder's answer, awaiting a `later` one as MicroHTTP's task does.
    func answer(_ request: HTTPRequest) async -> MicroHTTP.HTTPResponse {
        await responder.respond(to: request).value()
    }
}

/// Requests straight to an in-process server's responder.
struct InProcessTransport: HTTPTransport {
    let server: InProcessServer
    /// The peer address every request carries (nil: none).
    let peer: IPAddress?

    var port: Int? { nil }

    func request(
        _ method: String, _ target: String, headers: [Header], body: [UInt8]?, timeout: Duration
    ) async throws -> TestSupport.HTTPResponse {
        if let body, body.count > InProcessServer.drainLimit {
            Issue.record("a body over the transport's drain limit needs a real server (.localServer)")
        }
        let response = await server.answer(server.request(method, target, headers: headers, body: body, peer: peer))
        switch response.body {
        case .bytes(let bytes):
            return TestSupport.HTTPResponse(
                head: Self.head(response, length: bytes.count), body: method == "HEAD" ? [] : bytes)
        case .stream(let stream):
            // As over a socket: the whole body is read, so a stream that does not end times out.
            let events = InProcessEventStreamBody(stream: stream)
            defer { events.close() }
            let deadline = ContinuousClock.now + timeout
            var bytes: [UInt8] = []
            while let piece = try await events.nextBytes(deadline: deadline) { bytes += piece }
            return TestSupport.HTTPResponse(head: Self.head(response, length: nil), body: bytes)
        }
    }

    func openEvents(_ target: String, headers: [Header], receiveBufferSize: Int?) async throws -> TestSupport.EventStream {
        let response = await server.answer(server.request("GET", target, headers: headers, body: nil, peer: peer))
        switch response.body {
        case .bytes(let bytes):
            return TestSupport.EventStream(head: Self.head(response, length: bytes.count), body: InProcessBytesBody(bytes: bytes))
        case .stream(let stream):
            return TestSupport.EventStream(head: Self.head(response, length: nil), body: InProcessEventStreamBody(stream: stream))
        }
    }

    /// The head libmicrohttpd sends: the response's fields, plus `Content-Length` for a body
    /// of bytes (not on 204 and 304) or chunked framing for a stream.
    static func head(_ response: MicroHTTP.HTTPResponse, length: Int?) -> HTTPHead {
        var fields: [Header] = response.headers.map { ($0.name, $0.value) }
        if let length {
            if response.status != 204 && response.status != 304 { fields.append(("Content-Length", String(length))) }
        } else {
            fields.append(("Transfer-Encoding", "chunked"))
        }
        return HTTPHead(status: response.status, headers: fields)
    }
}

/// The body of a response that is not a stream.
struct InProcessBytesBody: EventStreamBody {
    let bytes: [UInt8]

    func nextBytes(deadline: ContinuousClock.Instant) async throws -> [UInt8]? {
        throw ClientError.malformedResponse("not an event stream: \(String(decoding: bytes.prefix(300), as: UTF8.self))")
    }

    func readAll(deadline: ContinuousClock.Instant) async throws -> [UInt8] { bytes }

    func close() {}
}

/// The bytes of the server's own event stream, pulled as libmicrohttpd pulls them
/// (`EventStream.read(into:max:)`); `close()` is the client going away (`finish()`, as when
/// libmicrohttpd completes the request). With no connection to suspend, an empty queue is
/// polled until the deadline.
struct InProcessEventStreamBody: EventStreamBody {
    let stream: MicroHTTP.EventStream

    func nextBytes(deadline: ContinuousClock.Instant) async throws -> [UInt8]? {
        var buffer = [CChar](repeating: 0, count: HTTPServer.streamBlockSize)
        // Some bytes, or .some(nil) at the end of the stream; nil (keep polling) while it is empty.
        let read = try await poll(until: deadline, every: .milliseconds(2)) { () -> [UInt8]?? in
            let count = buffer.withUnsafeMutableBufferPointer { raw -> Int in
                guard let base = raw.baseAddress else { return -1 }
                return stream.read(into: base, max: raw.count)
            }
            if count < 0 { return .some(nil) }
            if count > 0 { return buffer.prefix(count).map { UInt8(bitPattern: $0) } }
            return nil
        }
        guard let read else { throw ClientError.timedOut("stream bytes") }
        return read
    }

    func readAll(deadline: ContinuousClock.Instant) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        while let piece = try await nextBytes(deadline: deadline) { bytes += piece }
        return bytes
    }

    func close() { stream.finish() }
}

/// Runs `body` against an in-process server of its own, with the settings `configure` gives,
/// and stops it afterwards (`withServer` for a real one).
package func withInProcessServer<T>(
    _ configure: (inout InProcessServer.Settings) -> Void = { _ in }, _ body: (InProcessServer) async throws -> T
) async throws -> T {
    var settings = InProcessServer.Settings()
    configure(&settings)
    return try await InProcessServer(settings: settings).stopping(after: body)
}

/// Runs a suite against one in-process server, stopped after the suite.
package struct InProcessServerTrait: SuiteTrait, TestScoping {
    package var settings: InProcessServer.Settings

    package var isRecursive: Bool { false }

    package func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        let server = try InProcessServer(settings: settings)
        do {
            try await SharedServer.$inProcess.withValue(server.api) { try await function() }
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}

extension Trait where Self == InProcessServerTrait {
    /// One in-process server for the whole suite; `configure` changes its settings.
    package static func inProcessServer(
        _ configure: @Sendable (inout InProcessServer.Settings) -> Void = { _ in }
    ) -> Self {
        var settings = InProcessServer.Settings()
        configure(&settings)
        return InProcessServerTrait(settings: settings)
    }
}
