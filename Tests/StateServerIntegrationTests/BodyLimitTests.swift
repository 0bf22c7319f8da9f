import TestSupport
import Testing

@Suite("Body limit (STATE_SERVER_BODY_LIMIT=256) and the order of checks", .inProcessServer { $0.routes.bodyLimit = 256 })
struct BodyLimitTests {
    static let increment: JSON = ["feature": "counter", "action": ["type": "increment"]]

    @Test("a body of exactly the limit is accepted; one byte more is 413 payload_too_large")
    func limit() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let ok = try await session.request("POST", "/dispatch", body: padded(Self.increment, to: 256))
        #expect(ok.status == 200, "\(ok)")
        let before = try await session.allStores()
        let over = try await session.request("POST", "/dispatch", body: padded(Self.increment, to: 257))
        expectError(over, 413, "payload_too_large")
        let big = try await session.request("POST", "/dispatch", body: padded(Self.increment, to: 10_000))
        expectError(big, 413, "payload_too_large")
        let put = try await session.request("PUT", "/state/counter", body: padded(["state": ["count": 5]], to: 300))
        expectError(put, 413, "payload_too_large", "PUT state")
        #expect(try await session.allStores() == before)
        #expect(before["counter"] == StoreState(version: 1, state: ["count": 1]))
        #expect(await api.isHealthy())
    }

    @Test("order: route/method → credentials → session → size → JSON → feature → action")
    func orderOfChecks() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let huge = [UInt8](repeating: UInt8(ascii: "x"), count: 1000)

        // Method before everything.
        expectError(try await api.request("PUT", session.path + "/dispatch", body: huge), 405, "method_not_allowed")
        // Credentials before session and size.
        expectError(try await api.request("POST", "/v1/sessions/nope/dispatch", body: huge), 401, "unauthorized")
        // Session and token before size.
        expectError(try await api.request("POST", session.path + "/dispatch", headers: other.auth, body: huge), 404, "session_not_found")
        expectError(try await api.request("POST", "/v1/sessions/nope/dispatch", headers: session.auth, body: huge), 404, "session_not_found")
        // Size before JSON.
        expectError(try await session.request("POST", "/dispatch", body: huge), 413, "payload_too_large")
        expectError(try await session.request("PUT", "/state/nope", body: huge), 413, "payload_too_large")
        // JSON before feature.
        expectError(try await session.request("PUT", "/state/nope", body: Array("{".utf8)), 400, "malformed_json")
        // Feature before action/state.
        expectError(try await session.dispatch("nope", ["type": "explode"]), 404, "unknown_feature")
        expectError(try await session.request("PUT", "/state/nope", body: jsonBytes(["state": 1])), 404, "unknown_feature")
        // Then the action.
        expectError(try await session.dispatch("counter", ["type": "explode"]), 422, "invalid_action")
        #expect(try await session.allStores().values.allSatisfy { $0.version == 0 })
        #expect(await api.isHealthy())
    }
}

/// Chunked transfer coding is framing on the wire: only a real server shows it.
@Suite("Body limit of chunked bodies (STATE_SERVER_BODY_LIMIT=256)", .localServer(environment: ["STATE_SERVER_BODY_LIMIT": "256"]))
struct BodyLimitSocketTests {
    static let increment = BodyLimitTests.increment

    @Test("a chunked body (no Content-Length) over the limit is 413 too")
    func chunkedOverLimit() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let body = padded(Self.increment, to: 1000)
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        var request = Array(
            "POST \(session.path)/dispatch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(session.token)\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".utf8)
        for start in stride(from: 0, to: body.count, by: 100) {
            let piece = body[start..<min(start + 100, body.count)]
            request += Array(String(piece.count, radix: 16).utf8) + [13, 10] + piece + [13, 10]
        }
        request += Array("0\r\n\r\n".utf8)
        do {
            try await connection.send(request)
        } catch ClientError.closedEarly {}
        let response = try await connection.readResponse(method: "POST")
        expectError(response, 413, "payload_too_large")
        #expect(try await session.store("counter").version == 0)

        // Within the limit, chunked works.
        let small = try await HTTPConnection.open(port: api.port)
        defer { small.close() }
        let text = Self.increment.bytes
        try await small.send(
            Array("POST \(session.path)/dispatch HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(session.token)\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)
                + Array(String(text.count, radix: 16).utf8) + [13, 10] + text + Array("\r\n0\r\n\r\n".utf8))
        let accepted = try await small.readResponse(method: "POST")
        #expect(accepted.status == 200, "\(accepted)")
        #expect(try await session.store("counter").version == 1)
    }
}
