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

    @Test("stop with a slow pending answer: the client gets 503 and the late answer resumes nothing")
    func stopWithPendingAnswer() async throws {
        let (release, releaseNow) = AsyncStream<Void>.makeStream()
        let responder = SlowResponder(release: release)
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threads = 1
        configuration.heartbeat = nil
        let server = HTTPServer(configuration: configuration, responder: responder)
        let port = try server.start()

        let connection = try await HTTPConnection.open(port: port)
        defer { connection.close() }
        try await connection.send(Array("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        let deadline = ContinuousClock.now + .seconds(10)
        while server.suspendedRequestCount == 0 {
            try #require(ContinuousClock.now < deadline, "the request was never suspended")
            try await Task.sleep(for: .milliseconds(5))
        }

        await server.stop(grace: .milliseconds(50))
        #expect(server.suspendedRequestCount == 0)
        let (bytes, _) = try await connection.readUntilClosed()
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.isEmpty || text.hasPrefix("HTTP/1.1 503"), "\(text)")

        // The late answer arrives after the daemon is gone: it must not touch the connection.
        releaseNow.yield()
        releaseNow.finish()
        while !responder.finished.withLock({ $0 }) {
            try #require(ContinuousClock.now < deadline, "the slow answer never finished")
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(server.suspendedRequestCount == 0)
    }

    /// Issue 24 item 8: the stop closes the door through the accept policy (MHD_quiesce_daemon
    /// could abort the process). A connection made while the server stops is accepted and
    /// closed at once, without a reply, while the stop still waits for a request in progress.
    @Test("while stopping: a new connection is closed without a reply; the stop ends")
    func newConnectionWhileStopping() async throws {
        let (release, releaseNow) = AsyncStream<Void>.makeStream()
        let responder = SlowResponder(release: release)
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threads = 2
        configuration.heartbeat = nil
        let server = HTTPServer(configuration: configuration, responder: responder)
        let port = try server.start()

        // A request that keeps the stop in its grace period until it is released.
        let pending = try await HTTPConnection.open(port: port)
        defer { pending.close() }
        try await pending.send(Array("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        let deadline = ContinuousClock.now + .seconds(10)
        while server.suspendedRequestCount == 0 {
            try #require(ContinuousClock.now < deadline, "the request was never suspended")
            try await Task.sleep(for: .milliseconds(5))
        }

        let stopped = Task { await server.stop(grace: .seconds(10)) }
        while server.accepting.load(ordering: .sequentiallyConsistent) {
            try #require(ContinuousClock.now < deadline, "the stop never began")
            try await Task.sleep(for: .milliseconds(5))
        }
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
