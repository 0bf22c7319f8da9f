import Foundation
import TestSupport
import Testing

/// Event streams leave libmicrohttpd once answered and are written on sockets of their own
/// (MicroHTTP's StreamSockets, issue 28). What a client sees must not change: the same head,
/// chunked for HTTP/1.1 with the last chunk at the end, plain for HTTP/1.0 with the end at the
/// close; and the streams still count as connections for the connection limits.
@Suite("Event streams on their own sockets")
struct StreamSocketTests {
    /// Reads from `connection` until `needle` is among the bytes after the head; returns them
    /// all (they stay unread: a later read sees them again).
    static func read(_ connection: HTTPConnection, until needle: String) async throws -> [UInt8] {
        let wanted = Array(needle.utf8)
        return try await connection.run { socket in
            let deadline = ContinuousClock.now + .seconds(10)
            while true {
                let all = socket.buffer
                if all.count >= wanted.count, (0...(all.count - wanted.count)).contains(where: { Array(all[$0..<$0 + wanted.count]) == wanted }) {
                    return all
                }
                guard try socket.fill(deadline: deadline, what: needle) else { return all }
            }
        }
    }

    @Test("HTTP/1.1: the head as before (chunked, no Content-Length); events as chunks; a deleted session ends the body with the last chunk, then the close")
    func chunkedToTheEnd() async throws {
        try await withServer { server in
            let session = try await server.api.createSession()
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            try await connection.send(Array("GET \(session.path)/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n\r\n".utf8))
            let head = try await connection.readHead()
            #expect(head.status == 200)
            #expect(head.header("Content-Type") == "text/event-stream", "\(head)")
            #expect(head.header("Cache-Control") == "no-cache", "\(head)")
            #expect(head.header("X-Accel-Buffering") == "no", "\(head)")
            #expect(head.header("Transfer-Encoding")?.lowercased() == "chunked", "\(head)")
            #expect(head.header("Content-Length") == nil, "\(head)")
            #expect(head.header("Date") != nil, "\(head)")
            _ = try await Self.read(connection, until: "event: snapshot")
            try await session.dispatchOK("counter", ["type": "increment"])
            let live = try await Self.read(connection, until: "\"count\":1")
            #expect(String(decoding: live, as: UTF8.self).contains("event: state"))
            #expect(try await session.delete().status == 204)
            let (all, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            #expect(closed, "the stream of a deleted session did not end")
            let body = String(decoding: all, as: UTF8.self)
            #expect(body.hasSuffix("\r\n0\r\n\r\n"), "the body does not end with the last chunk: \(body.suffix(80).debugDescription)")
            // Every chunk's size matches its bytes: the body decodes to the events.
            let decoded = try Self.dechunk(all)
            #expect(decoded.contains("event: snapshot") && decoded.contains("event: state"), "\(decoded)")
        }
    }

    @Test("HTTP/1.0: not chunked, Connection: close; the events as they are; the end is the close")
    func http10() async throws {
        try await withServer { server in
            let session = try await server.api.createSession()
            let connection = try await HTTPConnection.open(port: server.port)
            defer { connection.close() }
            try await connection.send(Array("GET \(session.path)/events HTTP/1.0\r\nAuthorization: Bearer \(session.token)\r\n\r\n".utf8))
            let head = try await connection.readHead()
            #expect(head.status == 200)
            #expect(head.header("Transfer-Encoding") == nil, "\(head)")
            #expect(head.header("Connection")?.lowercased() == "close", "\(head)")
            let snapshot = try await Self.read(connection, until: "\n\n")
            #expect(String(decoding: snapshot, as: UTF8.self).hasPrefix("id: 0\nevent: snapshot\ndata: {"), "\(String(decoding: snapshot, as: UTF8.self))")
            try await session.dispatchOK("counter", ["type": "increment"])
            _ = try await Self.read(connection, until: "\"count\":1")
            #expect(try await session.delete().status == 204)
            let (_, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            #expect(closed)
        }
    }

    @Test("limits.connectionsPerAddress counts an address's streams: one more connection is closed unanswered; a stream that ends frees its place")
    func streamsPerAddress() async throws {
        try await withServer(environment: ["STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS": "3"]) { server in
            let session = try await server.api.createSession()
            let api = API(port: server.port, source: "127.0.0.2")
            var streams: [EventStream] = []
            defer { for stream in streams { stream.close() } }
            for _ in 0..<3 { streams.append(try await Self.subscribe(Session(api: api, id: session.id, token: session.token))) }
            let fourth = try await HTTPConnection.open(port: server.port, source: "127.0.0.2")
            await #expect(throws: (any Error).self, "a fourth connection from 127.0.0.2 was served beside three streams") {
                _ = try await fourth.request("GET", "/healthz", timeout: .seconds(5))
            }
            fourth.close()
            #expect(try await API(port: server.port, source: "127.0.0.3").request("GET", "/healthz").status == 200)
            // The streams still work.
            try await session.dispatchOK("counter", ["type": "increment"])
            for stream in streams { #expect(try await stream.nextEvent().json?["version"] == 1) }
            streams.removeFirst().close()
            let again = try await eventually(timeout: .seconds(10)) {
                (try? await api.request("GET", "/healthz", timeout: .seconds(2)))?.status == 200
            }
            #expect(again, "the place of a closed stream was never given again")
        }
    }

    @Test("http.connectionLimit counts streams with libmicrohttpd's connections: at the limit a new connection is closed unanswered; a stream that ends frees its place")
    func connectionLimit() async throws {
        try await withServer(environment: ["STATE_SERVER_HTTP_CONNECTION_LIMIT": "4"]) { server in
            let session = try await server.api.createSession()
            var streams: [EventStream] = []
            defer { for stream in streams { stream.close() } }
            for _ in 0..<4 { streams.append(try await Self.subscribe(session)) }
            let extra = try await HTTPConnection.open(port: server.port)
            await #expect(throws: (any Error).self, "a connection was served beside four streams at a limit of 4") {
                _ = try await extra.request("GET", "/healthz", timeout: .seconds(5))
            }
            extra.close()
            streams.removeFirst().close()
            let again = try await eventually(timeout: .seconds(10)) {
                (try? await server.api.request("GET", "/healthz", timeout: .seconds(2)))?.status == 200
            }
            #expect(again, "the place of a closed stream was never given again")
            // One place is free: a refused connection (one just closed, not yet seen closed)
            // applied nothing, so the dispatch is tried again.
            let dispatched = try await eventually(timeout: .seconds(10)) {
                (try? await session.request("POST", "/dispatch", body: Array(#"{"feature":"counter","action":{"type":"increment"}}"#.utf8)))?.status == 200
            }
            #expect(dispatched)
            for stream in streams { #expect(try await stream.nextEvent().json?["version"] == 1) }
        }
    }

    /// Opens a stream, trying again while the server refuses the connection: a connection the
    /// test closed just before is counted until libmicrohttpd reads its end.
    static func subscribe(_ session: Session) async throws -> EventStream {
        var opened: EventStream?
        _ = try await eventually(timeout: .seconds(10)) {
            opened = try? await session.subscribe().stream
            return opened != nil
        }
        return try #require(opened, "no stream opened in 10 s")
    }

    /// A chunked body, decoded; throws when a chunk's size line does not match its bytes.
    static func dechunk(_ bytes: [UInt8]) throws -> String {
        struct BadChunk: Error {}
        var index = 0
        var body: [UInt8] = []
        while index < bytes.count {
            guard let lineEnd = bytes[index...].firstIndex(of: 13), lineEnd + 1 < bytes.count, bytes[lineEnd + 1] == 10,
                let size = Int(String(decoding: bytes[index..<lineEnd], as: UTF8.self), radix: 16)
            else { throw BadChunk() }
            index = lineEnd + 2
            if size == 0 { break }
            guard index + size + 2 <= bytes.count, bytes[index + size] == 13, bytes[index + size + 1] == 10 else { throw BadChunk() }
            body += bytes[index..<index + size]
            index += size + 2
        }
        return String(decoding: body, as: UTF8.self)
    }
}
