import Foundation
import StateClient
import Synchronization

/// One server-sent event.
package struct SSEEvent: Sendable, CustomStringConvertible {
    package var id: String?
    package var event: String
    package var data: String
    /// The `retry` field sent with the event (milliseconds), if any.
    package var retry: Int?

    package init(id: String?, event: String, data: String, retry: Int? = nil) {
        self.id = id
        self.event = event
        self.data = data
        self.retry = retry
    }

    /// An event as the client library's parser gives it.
    package init(_ event: ServerSentEvent) {
        self.init(id: event.id, event: event.type, data: event.data, retry: event.retry)
    }

    /// `id` as the session's sequence number.
    package var seq: Int? { id.flatMap { Int($0) } }
    package var json: JSON? { try? JSON.parse(data) }

    package var description: String {
        "\(retry.map { "retry: \($0) " } ?? "")id: \(id ?? "-") event: \(event) data: \(data.prefix(300))"
    }
}

/// What a stream yields next.
package enum SSEItem: Sendable {
    case event(SSEEvent)
    /// A comment line (`: ping` gives "ping").
    case comment(String)
    /// The server ended the stream (clean end, close or reset).
    case end
}

/// Where the body of an event-stream response comes from: a socket to a real server, or the
/// stream object of a server running in the test process.
package protocol EventStreamBody: Sendable {
    /// The next bytes of the body, `nil` at its end (clean end, close or reset). Throws
    /// `ClientError.timedOut` when nothing arrives before `deadline`.
    func nextBytes(deadline: ContinuousClock.Instant) async throws -> [UInt8]?
    /// The whole body of a response that is not a stream (an error).
    func readAll(deadline: ContinuousClock.Instant) async throws -> [UInt8]
    /// The client goes away.
    func close()
}

/// An open `GET .../events` response read incrementally, with the client library's SSE parser.
///
/// Read it from one task at a time; the parser state sits behind a lock.
package final class EventStream: Sendable {
    package let head: HTTPHead
    private let body: any EventStreamBody

    private struct Reading {
        var parser = ServerSentEventParser()
        var pending: [SSEItem] = []
        var ended = false
    }

    private let reading = Mutex(Reading())

    package var status: Int { head.status }
    package func header(_ name: String) -> String? { head.header(name) }

    package init(head: HTTPHead, body: any EventStreamBody) {
        self.head = head
        self.body = body
    }

    /// Opens `target` on a real server and reads the response head. For a status other than
    /// 200 use `readErrorBody()`.
    package static func open(
        port: Int, target: String, headers: [Header] = [], receiveBufferSize: Int? = nil,
        timeout: Duration = .seconds(10), source: String? = nil
    ) async throws -> EventStream {
        let connection = try await HTTPConnection.open(port: port, receiveBufferSize: receiveBufferSize, source: source)
        try await connection.send(
            HTTPConnection.serialize(method: "GET", target: target, port: port, headers: headers, body: nil))
        let head = try await connection.readHead(timeout: timeout)
        return EventStream(head: head, body: try SocketEventStreamBody(connection: connection, head: head))
    }

    /// The body of a non-stream (error) response.
    package func readErrorBody(timeout: Duration = .seconds(10)) async throws -> HTTPResponse {
        HTTPResponse(head: head, body: try await body.readAll(deadline: ContinuousClock.now + timeout.scaledForSanitizers))
    }

    /// The next event or comment; `.end` when the server ended the stream. Throws
    /// `ClientError.timedOut` when nothing arrives within `timeout`.
    package func next(timeout: Duration = .seconds(30)) async throws -> SSEItem {
        let deadline = ContinuousClock.now + timeout.scaledForSanitizers
        while true {
            let ready = reading.withLock { reading -> SSEItem? in
                if !reading.pending.isEmpty { return reading.pending.removeFirst() }
                return reading.ended ? .end : nil
            }
            if let ready { return ready }
            let bytes = try await body.nextBytes(deadline: deadline)
            try reading.withLock { reading in
                guard let bytes else {
                    reading.ended = true
                    return
                }
                do {
                    reading.pending += try reading.parser.feedItems(bytes).map { item in
                        switch item {
                        case .event(let event): SSEItem.event(SSEEvent(event))
                        case .comment(let text): SSEItem.comment(text)
                        }
                    }
                } catch {
                    throw ClientError.malformedResponse("an event-stream line longer than \(reading.parser.maximumLineLength) bytes")
                }
            }
        }
    }

    /// The next event, skipping comments. Fails when the stream ends first.
    package func nextEvent(timeout: Duration = .seconds(30)) async throws -> SSEEvent {
        let deadline = ContinuousClock.now + timeout.scaledForSanitizers
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { throw ClientError.timedOut("an event") }
            switch try await next(timeout: remaining) {
            case .event(let event): return event
            case .comment: continue
            case .end: throw ClientError.closedEarly("an event (the stream ended)")
            }
        }
    }

    /// Reads (and drops events and comments) until the stream ends. True when it ended in time.
    package func waitForEnd(timeout: Duration = .seconds(30)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout.scaledForSanitizers
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            guard remaining > .zero else { return false }
            do {
                if case .end = try await next(timeout: remaining) { return true }
            } catch ClientError.timedOut {
                return false
            }
        }
    }

    package func close() { body.close() }
}

/// An event-stream body read from a socket, framed as its head says.
///
/// `@unchecked Sendable`: `remainingLength` is only touched inside `connection.run`, i.e. on
/// the connection's serial queue; the other properties are immutable.
final class SocketEventStreamBody: EventStreamBody, @unchecked Sendable {
    let connection: HTTPConnection
    private let framing: HTTPHead.Framing
    private var remainingLength = 0

    init(connection: HTTPConnection, head: HTTPHead) throws {
        self.connection = connection
        self.framing = try head.framing(requestMethod: "GET")
        if case .length(let count) = framing { remainingLength = count }
    }

    func readAll(deadline: ContinuousClock.Instant) async throws -> [UInt8] {
        let framing = self.framing
        return try await connection.run { socket -> [UInt8] in
            switch framing {
            case .none: return []
            case .length(let count): return try socket.readExactly(count, deadline: deadline, what: "an error body")
            case .chunked:
                var body: [UInt8] = []
                while let piece = try HTTPConnection.readChunk(socket, deadline: deadline) { body += piece }
                return body
            case .untilClose: return try socket.readToEnd(deadline: deadline, what: "an error body")
            }
        }
    }

    func nextBytes(deadline: ContinuousClock.Instant) async throws -> [UInt8]? {
        try await connection.run { socket in
            do {
                return try self.readBodyPiece(socket, deadline: deadline)
            } catch ClientError.closedEarly {
                return nil  // cut in the middle of a chunk: the server dropped us
            }
        }
    }

    private func readBodyPiece(_ socket: BlockingSocket, deadline: ContinuousClock.Instant) throws -> [UInt8]? {
        switch framing {
        case .none:
            return nil
        case .chunked:
            return try HTTPConnection.readChunk(socket, deadline: deadline)
        case .length:
            if remainingLength == 0 { return nil }
            if socket.buffer.isEmpty {
                guard try socket.fill(deadline: deadline, what: "stream bytes") else { return nil }
            }
            let count = min(remainingLength, socket.buffer.count)
            remainingLength -= count
            let bytes = Array(socket.buffer[..<count])
            socket.buffer.removeSubrange(..<count)
            return bytes
        case .untilClose:
            if socket.buffer.isEmpty {
                guard try socket.fill(deadline: deadline, what: "stream bytes") else { return nil }
            }
            let bytes = socket.buffer
            socket.buffer.removeAll()
            return bytes
        }
    }

    func close() { connection.close() }
}
