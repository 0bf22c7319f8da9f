import Foundation
import TestSupport
import Testing

/// Issue 36: clients slow on purpose, over real sockets. An event stream whose client never
/// reads holds a bounded kernel send buffer (`streams.socketBuffer`), and once the server drops
/// it for slowness its socket is reset, its queued bytes freed at once (not an orphan draining
/// megabytes); a request head trickled a byte at a time is cut off at `http.headTimeout`.
@Suite("Slow clients: a stream's kernel buffer, a request head's deadline")
struct SlowClientTests {
    /// `stateserver_event_streams_open` of `GET /metrics`.
    static func openStreams(_ api: API) async throws -> Int? {
        let response = try await api.request("GET", "/metrics")
        for line in response.text.split(separator: "\n") where line.hasPrefix("stateserver_event_streams_open ") {
            return line.split(separator: " ").last.flatMap { Double($0) }.map { Int($0) }
        }
        return nil
    }

    @Test("streams.socketBuffer: a stream whose client never reads takes a bounded number of bytes before it is dropped, and the drop is a reset: the client reads little, then ECONNRESET")
    func nonReadingStream() async throws {
        let bufferLimit = 65_536
        let socketBuffer = 16_384
        let environment = [
            "STATE_SERVER_STREAMS_BUFFER_LIMIT": "\(bufferLimit)", "STATE_SERVER_STREAMS_SOCKET_BUFFER": "\(socketBuffer)",
            "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0", "STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "0",
        ]
        try await withServer(environment: environment) { server in
            let session = try await server.api.createSession()
            let title = String(repeating: "a todo title long enough ", count: 20)
            for index in 1...40 {
                try await session.dispatchOK("todos", ["type": "add", "title": .string(String("\(index) \(title)".prefix(500)))])
            }
            // Every change below is one `state` event with the whole list: at least this many bytes.
            let eventSize = try await session.request("GET", "/state/todos").body.count
            try #require(eventSize > 19_000)

            // The client that never reads: a small receive buffer, the request, then nothing.
            let reader = try await HTTPConnection.open(port: server.port, receiveBufferSize: 4096)
            defer { reader.close() }
            try await reader.send(Array(
                "GET \(session.path)/events?feature=todos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n\r\n".utf8))
            try await waitUntil("the stream to open") { try await Self.openStreams(server.api) == 1 }

            // Changes until the server drops the stream (its queue past streams.bufferLimit). What
            // it took until then is what the kernel (its send buffer), the client's receive
            // buffer and the queue held for it: bounded by the settings, whatever the kernel's
            // own autotuning would give a socket (megabytes on loopback).
            // The events after the drop, until the metric shows it, count too: a few more, with slack.
            let bound = bufferLimit + 4 * socketBuffer + 64 * 1024 + 8 * eventSize
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            let toggle = jsonBytes(["feature": "todos", "action": ["type": "toggle", "id": "1"]])
            var pushed = 0
            var dropped = false
            while !dropped, pushed < 12 << 20 {
                let response = try await connection.request("POST", session.path + "/dispatch", headers: session.auth, body: toggle)
                try #require(response.status == 200, "\(response)")
                pushed += eventSize
                dropped = try await Self.openStreams(server.api) == 0
            }
            try #require(dropped, "the stream was never dropped, after \(pushed) bytes of events")
            #expect(pushed <= bound, "the non-reading stream took \(pushed) bytes of events before it was dropped (bound \(bound))")

            // The client reads now: the end is a reset, after at most what its own receive
            // buffer held — not the megabytes a kernel kept sending before an orderly close.
            let (received, reset, closed) = try await reader.run { socket -> (Int, Bool, Bool) in
                let deadline = ContinuousClock.now + .seconds(30)
                var received = 0
                do {
                    while try socket.fill(deadline: deadline, what: "the end of the dropped stream") {
                        received += socket.buffer.count
                        socket.buffer.removeAll()
                    }
                } catch ClientError.timedOut {
                    return (received, socket.wasReset, false)
                }
                return (received, socket.wasReset, true)
            }
            #expect(closed, "the dropped stream's connection never ended (\(received) bytes read)")
            #expect(reset, "the dropped stream ended with an orderly close after \(received) bytes, not a reset")
            #expect(received <= bound, "the client of the dropped stream could still read \(received) bytes")
            #expect(await server.api.isHealthy())
        }
    }

    @Test("http.headTimeout: a head trickled a byte every 200 ms is answered 408 and closed after about the deadline, while others are served; idle time before and between requests does not count")
    func trickledHead() async throws {
        try await withServer(environment: ["STATE_SERVER_HTTP_HEAD_TIMEOUT": "1"]) { server in
            // Idle connections, checked at the end: one that has sent nothing yet, one between
            // two keep-alive requests.
            let idle = try await HTTPConnection.open(port: server.port)
            defer { idle.close() }
            let keepAlive = try await HTTPConnection.open(port: server.port)
            defer { keepAlive.close() }
            #expect(try await keepAlive.request("GET", "/healthz").status == 200)
            let idleSince = ContinuousClock.now

            // The trickled head would take about 30 s at this pace, far past the deadline of 1 s.
            let head = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: \(String(repeating: "s", count: 110))\r\n\r\n".utf8)
            let slow = try await HTTPConnection.open(port: server.port)
            defer { slow.close() }
            let first = try await Self.trickle(head, on: slow) {
                #expect(await server.api.isHealthy(), "another client is served while a head trickles")
            }
            Self.expectCut(first, of: head, "the first head of a connection")

            // The same on a keep-alive connection, for the head after a request.
            let again = try await HTTPConnection.open(port: server.port)
            defer { again.close() }
            #expect(try await again.request("GET", "/healthz").status == 200)
            let second = try await Self.trickle(head, on: again) {}
            Self.expectCut(second, of: head, "the second head of a keep-alive connection")
            #expect(await server.api.isHealthy())

            // Idle connections are http.connectionTimeout's (60 s): past three head deadlines of
            // idleness, a whole request is still answered on both.
            let idleFor = Duration.seconds(3) - (ContinuousClock.now - idleSince)
            if idleFor > .zero { try await Task.sleep(for: idleFor) }
            #expect(try await idle.request("GET", "/healthz").status == 200, "a connection idle before its first request")
            #expect(try await keepAlive.request("GET", "/healthz").status == 200, "a keep-alive connection idle between requests")
        }
    }

    /// What a trickled head got: the bytes of it sent, what the server answered, whether it closed.
    struct Trickled {
        var sent: Int
        var answer: [UInt8]
        var closed: Bool
    }

    /// Sends `head` a byte every 200 ms, until the server answers or closes (or the head is
    /// sent); `meanwhile` runs after the third byte. Then reads to the close (10 s at most).
    static func trickle(_ head: [UInt8], on connection: HTTPConnection, meanwhile: () async throws -> Void) async throws -> Trickled {
        var sent = 0
        while sent < head.count {
            do {
                try await connection.send([head[sent]])
            } catch ClientError.closedEarly {
                break
            }
            sent += 1
            if sent == 3 { try await meanwhile() }
            // Up to 200 ms (the pace of the trickle) for an answer or the end.
            let answered = try await connection.run { socket -> Bool in
                do {
                    return try !socket.fill(deadline: ContinuousClock.now + .milliseconds(200), what: "an answer") || !socket.buffer.isEmpty
                } catch ClientError.timedOut {
                    return false
                }
            }
            if answered { break }
        }
        let (answer, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
        return Trickled(sent: sent, answer: answer, closed: closed)
    }

    /// The server cut the trickled head: before its end, with `408` (or just the close), and closed.
    static func expectCut(_ trickled: Trickled, of head: [UInt8], _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let answer = String(decoding: trickled.answer, as: UTF8.self)
        #expect(
            trickled.sent < head.count,
            "\(what): the server waited for the whole head, \(head.count) bytes a byte every 200 ms; it answered \(answer.prefix(40).debugDescription)",
            sourceLocation: sourceLocation)
        #expect(trickled.closed, "\(what): the trickling connection was not closed", sourceLocation: sourceLocation)
        #expect(
            trickled.answer.isEmpty || answer.hasPrefix("HTTP/1.1 408 "),
            "\(what): a cut head gets 408 or just the close: \(answer.prefix(200).debugDescription)", sourceLocation: sourceLocation)
    }
}
