import TestSupport
@testable import MicroHTTP
import Testing

/// Issue 28: a streaming response's block size (``HTTPServer/streamBlockSize``) is kept small,
/// because libmicrohttpd holds it for every open stream. Events larger than a block, and
/// larger than the connection's memory pool, still arrive whole: chunked to an HTTP/1.1
/// client (written into the pool), in several reads of a block to an HTTP/1.0 client.
@Suite("HTTPServer stream bodies")
struct StreamBodyTests {
    /// Answers every request with a stream that holds `event` and then ends.
    struct OneEventResponder: HTTPResponder {
        let event: [UInt8]

        func respond(to request: HTTPRequest) -> HTTPResult {
            let stream = EventStream(bufferLimit: event.count * 2)
            stream.send(event)
            stream.close()
            return .now(HTTPResponse(status: 200, headers: [("Content-Type", "text/event-stream")], body: .stream(stream), route: "events"))
        }
    }

    /// An event of `count` bytes whose content shows any byte lost, repeated or reordered.
    static func event(count: Int) -> [UInt8] {
        var text = "data: "
        var line = 0
        while text.utf8.count < count - 2 {
            text += "\(line)-"
            line += 1
        }
        return Array(text.utf8.prefix(count - 2)) + Array("\n\n".utf8)
    }

    static func withServer(_ event: [UInt8], _ body: (Int) async throws -> Void) async throws {
        var configuration = HTTPServer.Configuration()
        configuration.port = 0
        configuration.threads = 1
        configuration.heartbeat = nil
        let server = HTTPServer(configuration: configuration, responder: OneEventResponder(event: event))
        let port = try server.start()
        do {
            try await body(port)
        } catch {
            await server.stop(grace: .milliseconds(50))
            throw error
        }
        await server.stop(grace: .milliseconds(50))
    }

    /// Splits a raw reply into its head and body at the first empty line.
    static func split(_ bytes: [UInt8]) -> (head: String, body: [UInt8])? {
        let separator = Array("\r\n\r\n".utf8)
        guard bytes.count >= separator.count else { return nil }
        for index in 0...(bytes.count - separator.count) where Array(bytes[index..<index + separator.count]) == separator {
            return (String(decoding: bytes[..<index], as: UTF8.self), Array(bytes[(index + separator.count)...]))
        }
        return nil
    }

    /// The payload of a chunked body, or nil when its framing is broken or it has no last chunk.
    static func dechunk(_ body: [UInt8]) -> [UInt8]? {
        var payload: [UInt8] = []
        var index = 0
        while true {
            guard let lineEnd = (index..<max(index, body.count - 1)).first(where: { body[$0] == 13 && body[$0 + 1] == 10 }),
                let size = Int(String(decoding: body[index..<lineEnd], as: UTF8.self), radix: 16)
            else { return nil }
            index = lineEnd + 2
            if size == 0 { return payload }
            guard index + size + 2 <= body.count, body[index + size] == 13, body[index + size + 1] == 10 else { return nil }
            payload += body[index..<index + size]
            index += size + 2
        }
    }

    @Test("HTTP/1.1: an event larger than the block size and than the memory pool arrives whole, chunked",
          arguments: [HTTPServer.streamBlockSize + 1, 3 * HTTPServer.streamBlockSize + 7, 20_000])
    func chunkedLargeEvent(size: Int) async throws {
        let event = Self.event(count: size)
        try await Self.withServer(event) { port in
            let connection = try await HTTPConnection.open(port: port)
            defer { connection.close() }
            try await connection.send(Array("GET /events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
            let (bytes, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            #expect(closed)
            let reply = try #require(Self.split(bytes))
            #expect(reply.head.hasPrefix("HTTP/1.1 200"), "\(reply.head)")
            #expect(reply.head.lowercased().contains("transfer-encoding: chunked"), "\(reply.head)")
            let payload = try #require(Self.dechunk(reply.body))
            #expect(payload == event)
        }
    }

    @Test("HTTP/1.0: an event larger than the block size arrives whole, unchunked, and the connection ends",
          arguments: [HTTPServer.streamBlockSize + 1, 3 * HTTPServer.streamBlockSize + 7, 20_000])
    func http10LargeEvent(size: Int) async throws {
        let event = Self.event(count: size)
        try await Self.withServer(event) { port in
            let connection = try await HTTPConnection.open(port: port)
            defer { connection.close() }
            try await connection.send(Array("GET /events HTTP/1.0\r\n\r\n".utf8))
            let (bytes, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            #expect(closed)
            let reply = try #require(Self.split(bytes))
            #expect(reply.head.hasPrefix("HTTP/1."), "\(reply.head)")
            #expect(reply.head.contains(" 200 "), "\(reply.head)")
            #expect(!reply.head.lowercased().contains("transfer-encoding"), "\(reply.head)")
            #expect(reply.body == event)
        }
    }
}
