import Dispatch
import Foundation

/// A request or response header field.
package typealias Header = (name: String, value: String)

/// Status line and headers of a response.
package struct HTTPHead: Sendable {
    package var status: Int
    package var headers: [Header]

    package init(status: Int, headers: [Header]) {
        self.status = status
        self.headers = headers
    }

    /// The first value of a header (names are case-insensitive).
    package func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// How the body is delimited.
    package enum Framing: Sendable {
        case none
        case length(Int)
        case chunked
        case untilClose
    }

    package func framing(requestMethod: String) throws -> Framing {
        if requestMethod == "HEAD" || (100..<200).contains(status) || status == 204 || status == 304 {
            return .none
        }
        if let encoding = header("Transfer-Encoding"), encoding.lowercased().contains("chunked") {
            return .chunked
        }
        if let length = header("Content-Length") {
            guard let count = Int(length.trimmingCharacters(in: .whitespaces)), count >= 0 else {
                throw ClientError.malformedResponse("Content-Length \(length)")
            }
            return .length(count)
        }
        return .untilClose
    }
}

/// A complete response.
package struct HTTPResponse: Sendable, CustomStringConvertible {
    package var head: HTTPHead
    package var body: [UInt8]

    package init(head: HTTPHead, body: [UInt8]) {
        self.head = head
        self.body = body
    }

    package var status: Int { head.status }
    package var headers: [Header] { head.headers }

    package func header(_ name: String) -> String? { head.header(name) }

    /// The body parsed as JSON, nil when it is not JSON.
    package var json: JSON? { try? JSON.parse(body) }

    package var text: String { String(decoding: body, as: UTF8.self) }

    /// The `error.code` of an error body.
    package var errorCode: String? { json?["error"]?["code"]?.string }
    package var errorMessage: String? { json?["error"]?["message"]?.string }

    package var description: String {
        let shown = body.count > 600 ? String(decoding: body.prefix(600), as: UTF8.self) + "…" : text
        return "HTTP \(status) \(headers.map { "\($0.name): \($0.value)" }) \(shown)"
    }
}

/// A keep-alive HTTP/1.1 client connection over a POSIX socket.
///
/// Every blocking socket call runs on the connection's own serial dispatch queue (which gets its
/// own thread when needed), never on Swift's cooperative pool, and is bounded by a deadline.
///
/// `@unchecked Sendable`: the mutable socket state is only touched from `queue`, one job at a
/// time; the stored properties are immutable.
package final class HTTPConnection: @unchecked Sendable {
    package let port: Int
    private let queue: DispatchQueue
    private let socket: BlockingSocket

    private init(port: Int, socket: BlockingSocket) {
        self.port = port
        self.socket = socket
        self.queue = DispatchQueue(label: "test-connection-\(port)")
    }

    package static func open(port: Int, receiveBufferSize: Int? = nil, source: String? = nil) async throws -> HTTPConnection {
        let socket = try await onThread { try BlockingSocket(port: port, receiveBufferSize: receiveBufferSize, source: source) }
        return HTTPConnection(port: port, socket: socket)
    }

    /// Runs blocking work on the connection's queue.
    package func run<T: Sendable>(_ body: @escaping @Sendable (BlockingSocket) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try body(self.socket) })
            }
        }
    }

    package static func serialize(
        method: String, target: String, port: Int, headers: [Header], body: [UInt8]?
    ) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
        for header in headers { text += "\(header.name): \(header.value)\r\n" }
        if let body { text += "Content-Length: \(body.count)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + (body ?? [])
    }

    /// Sends one request and reads its response. `body` adds a `Content-Length`. With
    /// `streamHeadOnly`, an event stream's response is read up to its headers (its body is empty).
    package func request(
        _ method: String, _ target: String, headers: [Header] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10), streamHeadOnly: Bool = false
    ) async throws -> HTTPResponse {
        let bytes = Self.serialize(method: method, target: target, port: port, headers: headers, body: body)
        return try await run { socket in
            let deadline = ContinuousClock.now + timeout
            do {
                try socket.send(bytes, deadline: deadline)
            } catch ClientError.closedEarly {
                // The server may answer (413, 400) and close before reading everything:
                // the response can still be waiting in our receive buffer.
            }
            return try Self.readResponse(socket, method: method, deadline: deadline, streamHeadOnly: streamHeadOnly)
        }
    }

    /// Sends raw bytes as they are.
    package func send(_ bytes: [UInt8], timeout: Duration = .seconds(10)) async throws {
        try await run { socket in try socket.send(bytes, deadline: ContinuousClock.now + timeout) }
    }

    /// Reads one response (after `send`).
    package func readResponse(method: String = "GET", timeout: Duration = .seconds(10)) async throws -> HTTPResponse {
        try await run { socket in
            try Self.readResponse(socket, method: method, deadline: ContinuousClock.now + timeout)
        }
    }

    /// Reads the status line and headers only (for streams).
    package func readHead(timeout: Duration = .seconds(10)) async throws -> HTTPHead {
        try await run { socket in try Self.readHead(socket, deadline: ContinuousClock.now + timeout) }
    }

    /// Reads and discards until the server closes the connection. Returns the bytes read and
    /// whether the end came before the deadline.
    package func readUntilClosed(timeout: Duration = .seconds(5)) async throws -> (bytes: [UInt8], closed: Bool) {
        try await run { socket in
            let deadline = ContinuousClock.now + timeout
            do {
                let bytes = try socket.readToEnd(deadline: deadline, what: "the server to close")
                return (bytes, true)
            } catch ClientError.timedOut {
                let bytes = socket.buffer
                socket.buffer.removeAll()
                return (bytes, false)
            }
        }
    }

    /// Reads until a response head has arrived or the server closes. Returns the bytes read
    /// and whether the server closed; throws `timedOut` when neither happens in time.
    package func readHeadOrClose(timeout: Duration = .seconds(5)) async throws -> (bytes: [UInt8], closed: Bool) {
        try await run { socket in
            let deadline = ContinuousClock.now + timeout
            let end: [UInt8] = [13, 10, 13, 10]
            while true {
                if let headEnd = socket.buffer.indices.dropLast(3).first(where: { Array(socket.buffer[$0..<$0 + 4]) == end }) {
                    return (Array(socket.buffer[..<(headEnd + 4)]), false)
                }
                if try !socket.fill(deadline: deadline, what: "a response head or a close") {
                    return (socket.buffer, true)
                }
            }
        }
    }

    /// Half-closes our side: the server sees end of input.
    package func shutdownWrite() async throws {
        try await run { socket in socket.shutdownWrite() }
    }

    package func close() {
        queue.async { self.socket.close() }
    }

    // MARK: Parsing (on the queue)

    package static func readHead(_ socket: BlockingSocket, deadline: ContinuousClock.Instant) throws -> HTTPHead {
        var statusLine = try socket.readLine(deadline: deadline, what: "a status line")
        while statusLine.isEmpty {  // tolerate stray CRLF between messages
            statusLine = try socket.readLine(deadline: deadline, what: "a status line")
        }
        let text = String(decoding: statusLine, as: UTF8.self)
        let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let status = Int(parts[1]) else {
            throw ClientError.malformedResponse("status line \(text.debugDescription)")
        }
        var headers: [Header] = []
        while true {
            let line = try socket.readLine(deadline: deadline, what: "headers")
            if line.isEmpty { break }
            let field = String(decoding: line, as: UTF8.self)
            guard let colon = field.firstIndex(of: ":") else {
                throw ClientError.malformedResponse("header line \(field.debugDescription)")
            }
            headers.append((
                String(field[..<colon]).trimmingCharacters(in: .whitespaces),
                String(field[field.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
            ))
        }
        return HTTPHead(status: status, headers: headers)
    }

    package static func readResponse(
        _ socket: BlockingSocket, method: String, deadline: ContinuousClock.Instant, streamHeadOnly: Bool = false
    ) throws -> HTTPResponse {
        let head = try readHead(socket, deadline: deadline)
        if streamHeadOnly, head.header("Content-Type")?.hasPrefix("text/event-stream") == true {
            return HTTPResponse(head: head, body: [])
        }
        var body: [UInt8] = []
        switch try head.framing(requestMethod: method) {
        case .none:
            break
        case .length(let count):
            body = try socket.readExactly(count, deadline: deadline, what: "a body of \(count) bytes")
        case .chunked:
            while let piece = try readChunk(socket, deadline: deadline) { body += piece }
        case .untilClose:
            body = try socket.readToEnd(deadline: deadline, what: "a body ended by close")
        }
        return HTTPResponse(head: head, body: body)
    }

    /// One chunk of a chunked body, nil after the last chunk (and its trailers).
    package static func readChunk(_ socket: BlockingSocket, deadline: ContinuousClock.Instant) throws -> [UInt8]? {
        let sizeLine = String(decoding: try socket.readLine(deadline: deadline, what: "a chunk size"), as: UTF8.self)
        let sizeText = sizeLine.split(separator: ";").first.map(String.init) ?? ""
        guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size >= 0 else {
            throw ClientError.malformedResponse("chunk size \(sizeLine.debugDescription)")
        }
        if size == 0 {
            while try !socket.readLine(deadline: deadline, what: "chunk trailers").isEmpty {}
            return nil
        }
        let data = try socket.readExactly(size, deadline: deadline, what: "a chunk of \(size) bytes")
        let end = try socket.readLine(deadline: deadline, what: "a chunk end")
        guard end.isEmpty else { throw ClientError.malformedResponse("chunk not followed by CRLF") }
        return data
    }
}

/// Runs blocking work on a thread of its own, off Swift's cooperative pool.
package func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}
