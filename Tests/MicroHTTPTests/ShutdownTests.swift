import TestSupport
@testable import MicroHTTP
import Synchronization
import Testing

/// Issue 11 item 7b: stopping with a `later` answer still computing after the grace period.
/// libmicrohttpd 0.9.75 aborts the process (MHD_PANIC "MHD_stop_daemon() called while we have
/// suspended connections") when stopped with a suspended connection, and the stop frees the
/// connection that the late answer would then resume (use after free). The server answers such
/// requests 503 and resumes them itself, under the lock the late answer takes.
@Suite("HTTPServer shutdown")
struct ShutdownTests {
    final class SlowResponder: HTTPResponder {
        let release: AsyncStream<Void>
        let finished = Mutex(false)

        init(release: AsyncStream<Void>) { self.release = release }

        func respond(to request: HTTPRequest) -> HTTPResult {
            .later { [self] in
                for await _ in release { break }
                finished.withLock { $0 = true }
                return HTTPResponse(status: 200, route: "slow")
            }
        }
    }

    /// A server on a free port with one `GET /slow` in progress (suspended until `releaseNow`
    /// yields), and the connection that sent it.
    static func slowRequestPending(threads: Int) async throws -> (
        server: HTTPServer, responder: SlowResponder, releaseNow: AsyncStream<Void>.Continuation, port: Int,
        connection: HTTPConnection
    ) {
        let (release, releaseNow) = AsyncStream<Void>.makeStream()
        let responder = SlowResponder(release: release)
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threads = threads
        configuration.heartbeat = nil
        let server = HTTPServer(configuration: configuration, responder: responder)
        let port = try server.start()
        let connection = try await HTTPConnection.open(port: port)
        try await connection.send(Array("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        try await waitUntil("the request to be suspended", timeout: .seconds(10), every: .milliseconds(5)) { server.suspendedRequestCount > 0 }
        return (server, responder, releaseNow, port, connection)
    }

    @Test("stop with a slow pending answer: the client gets 503 and the late answer resumes nothing")
    func stopWithPendingAnswer() async throws {
        let (server, responder, releaseNow, _, connection) = try await Self.slowRequestPending(threads: 1)
        defer { connection.close() }
        let deadline = ContinuousClock.now + .seconds(10)

        await server.stop(grace: .milliseconds(50))
        #expect(server.suspendedRequestCount == 0)
        let (bytes, _) = try await connection.readUntilClosed()
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.isEmpty || text.hasPrefix("HTTP/1.1 503"), "\(text)")

        // The late answer arrives after the daemon is gone: it must not touch the connection.
        releaseNow.yield()
        releaseNow.finish()
        try await waitUntil("the slow answer to finish", until: deadline, every: .milliseconds(5)) { responder.finished.withLock { $0 } }
        #expect(server.suspendedRequestCount == 0)
    }

    /// Issue 24 item 8: the stop closes the door through the accept policy (MHD_quiesce_daemon
    /// could abort the process). A connection made while the server stops is accepted and
    /// closed at once, without a reply, while the stop still waits for a request in progress.
    @Test("while stopping: a new connection is closed without a reply; the stop ends")
    func newConnectionWhileStopping() async throws {
        // A request that keeps the stop in its grace period until it is released.
        let (server, _, releaseNow, port, pending) = try await Self.slowRequestPending(threads: 2)
        defer { pending.close() }
        let deadline = ContinuousClock.now + .seconds(10)

        let stopped = Task { await server.stop(grace: .seconds(10)) }
        try await waitUntil("the stop to begin", until: deadline, every: .milliseconds(5)) { !server.accepting.load(ordering: .sequentiallyConsistent) }
        // (Nothing sent on it: bytes the server never read would turn its close into a reset.)
        let late = try await HTTPConnection.open(port: port)
        defer { late.close() }
        let (bytes, closed) = try await late.readUntilClosed(timeout: .seconds(5))
        #expect(closed, "a connection made while stopping stayed open (waiting in the backlog?)")
        #expect(bytes.isEmpty, "a connection made while stopping got \(String(decoding: bytes, as: UTF8.self))")
        #expect(server.suspendedRequestCount == 1, "the stop must still be waiting for the slow request")

        releaseNow.yield()
        releaseNow.finish()
        await stopped.value
        #expect(server.suspendedRequestCount == 0)
    }
}
