import Foundation

/// One server-sent event.
package struct SSEEvent: Sendable, CustomStringConvertible {
    package var id: String?
    package var event: String
    package var data: String

    /// `id` as the session's sequence number.
    package var seq: Int? { id.flatMap { Int($0) } }
    package var json: JSON? { try? JSON.parse(data) }

    package var description: String { "id: \(id ?? "-") event: \(event) data: \(data.prefix(300))" }
}

/// What a stream yields next.
package enum SSEItem: Sendable {
    case event(SSEEvent)
    /// A comment line (`: ping` gives "ping").
    case comment(String)
    /// The server ended the stream (clean end, close or reset).
    case end
}

/// Incremental `text/event-stream` parser.
package struct SSEParser {
    private var partialLine: [UInt8] = []
    private var id: String?
    private var event: String?
    private var data: [String] = []
    private var hasFields = false
    private var items: [SSEItem] = []
    private var taken = 0

    package mutating func feed(_ bytes: [UInt8]) {
        var start = bytes.startIndex
        while let newline = bytes[start...].firstIndex(of: UInt8(ascii: "\n")) {
            var end = newline
            if partialLine.isEmpty {
                if end > start, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                line(String(decoding: bytes[start..<end], as: UTF8.self))
            } else {
                partialLine += bytes[start..<newline]
                if partialLine.last == UInt8(ascii: "\r") { partialLine.removeLast() }
                line(String(decoding: partialLine, as: UTF8.self))
                partialLine.removeAll(keepingCapacity: true)
            }
            start = newline + 1
        }
        partialLine += bytes[start...]
    }

    package mutating func take() -> SSEItem? {
        guard taken < items.count else { return nil }
        defer {
            taken += 1
            if taken == items.count {
                items.removeAll(keepingCapacity: true)
                taken = 0
            }
        }
        return items[taken]
    }

    private mutating func line(_ line: String) {
        if line.isEmpty {
            if hasFields {
                items.append(.event(SSEEvent(id: id, event: event ?? "message", data: data.joined(separator: "\n"))))
            }
            id = nil
            event = nil
            data = []
            hasFields = false
            return
        }
        if line.hasPrefix(":") {
            var comment = line.dropFirst()
            if comment.hasPrefix(" ") { comment = comment.dropFirst() }
            items.append(.comment(String(comment)))
            return
        }
        let name: Substring
        var value: Substring
        if let colon = line.firstIndex(of: ":") {
            name = line[..<colon]
            value = line[line.index(after: colon)...]
            if value.hasPrefix(" ") { value = value.dropFirst() }
        } else {
            name = Substring(line)
            value = ""
        }
        hasFields = true
        switch name {
        case "id": id = String(value)
        case "event": event = String(value)
        case "data": data.append(String(value))
        default: break
        }
    }
}

/// An open `GET .../events` response read incrementally.
///
/// `@unchecked Sendable`: `parser` and `ended` are only touched inside `connection.run`, i.e. on
/// the connection's serial queue.
package final class EventStream: @unchecked Sendable {
    package let connection: HTTPConnection
    package let head: HTTPHead
    private let framing: HTTPHead.Framing
    private var parser = SSEParser()
    private var ended = false
    private var remainingLength = 0

    package var status: Int { head.status }
    package func header(_ name: String) -> String? { head.header(name) }

    package init(connection: HTTPConnection, head: HTTPHead) throws {
        self.connection = connection
        self.head = head
        self.framing = try head.framing(requestMethod: "GET")
        if case .length(let count) = framing { remainingLength = count }
    }

    /// Opens `target` and reads the response head. For a status other than 200 use
    /// `readErrorBody()`.
    package static func open(
        port: Int, target: String, headers: [Header] = [], receiveBufferSize: Int? = nil,
        timeout: Duration = .seconds(10)
    ) async throws -> EventStream {
        let connection = try await HTTPConnection.open(port: port, receiveBufferSize: receiveBufferSize)
        try await connection.send(
            HTTPConnection.serialize(method: "GET", target: target, port: port, headers: headers, body: nil))
        let head = try await connection.readHead(timeout: timeout)
        return try EventStream(connection: connection, head: head)
    }

    /// The body of a non-stream (error) response.
    package func readErrorBody(timeout: Duration = .seconds(10)) async throws -> HTTPResponse {
        let head = self.head
        let framing = self.framing
        let body = try await connection.run { socket -> [UInt8] in
            let deadline = ContinuousClock.now + timeout
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
        return HTTPResponse(head: head, body: body)
    }

    /// The next event or comment; `.end` when the server ended the stream. Throws
    /// `ClientError.timedOut` when nothing arrives within `timeout`.
    package func next(timeout: Duration = .seconds(5)) async throws -> SSEItem {
        try await connection.run { socket in
            let deadline = ContinuousClock.now + timeout
            return try self.nextOnQueue(socket, deadline: deadline)
        }
    }

    private func nextOnQueue(_ socket: BlockingSocket, deadline: ContinuousClock.Instant) throws -> SSEItem {
        while true {
            if let item = parser.take() { return item }
            if ended { return .end }
            do {
                if let bytes = try readBodyPiece(socket, deadline: deadline) {
                    parser.feed(bytes)
                } else {
                    ended = true
                }
            } catch ClientError.closedEarly {
                ended = true  // cut in the middle of a chunk: the server dropped us
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

    /// The next event, skipping comments. Fails when the stream ends first.
    package func nextEvent(timeout: Duration = .seconds(5)) async throws -> SSEEvent {
        let deadline = ContinuousClock.now + timeout
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
    package func waitForEnd(timeout: Duration = .seconds(5)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
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

    package func close() { connection.close() }
}
