import TestSupport
import Testing

/// Malformed traffic must never crash, hang or change the server: after each test `/healthz`
/// still answers 200 and a bystander session is unchanged.
// Its clients all come from 127.0.0.1: one more than `limits.connectionsPerAddress` (100) is
// open at once in "many connections"; the limit itself is SocketAbuseLimitTests'.
@Suite("Robustness", .localServer(environment: ["STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS": "1000"]))
struct RobustnessTests {
    /// Sends raw bytes on a fresh connection and returns the status of the answer, or nil when the
    /// server closed without answering. Fails the test when it neither answers nor closes.
    func sendRaw(
        _ bytes: [UInt8], _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> Int? {
        let api = try SharedServer.api()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        do {
            try await connection.send(bytes)
        } catch ClientError.closedEarly {}
        let answer: [UInt8]
        do {
            (answer, _) = try await connection.readHeadOrClose(timeout: .seconds(5))
        } catch ClientError.timedOut {
            Issue.record("the server neither answered nor closed: \(comment?.rawValue ?? "")", sourceLocation: sourceLocation)
            return nil
        }
        if answer.isEmpty { return nil }
        let text = String(decoding: answer.prefix(200), as: UTF8.self)
        let status = text.hasPrefix("HTTP/1.") ? Int(text.dropFirst(9).prefix(3)) : nil
        #expect(status != nil, "not an HTTP answer: \(text.debugDescription)", sourceLocation: sourceLocation)
        return status
    }

    /// Sends bytes that do not end a request, half-closes, then closes (a client that gives up).
    func sendAndHangUp(_ bytes: [UInt8]) async throws {
        let connection = try await HTTPConnection.open(port: try SharedServer.api().port)
        do {
            try await connection.send(bytes)
        } catch ClientError.closedEarly {}
        try await connection.shutdownWrite()
        // The server has read everything once it closes its side (after an error answer, or
        // at once): the checks that follow then see what it made of these bytes.
        _ = try await connection.readUntilClosed(timeout: .seconds(5))
        connection.close()
    }

    func expectHealthy(_ bystander: Session, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(await bystander.api.isHealthy(), "healthz after the test", sourceLocation: sourceLocation)
        #expect(
            try await bystander.store("counter") == StoreState(version: 1, state: ["count": 1]),
            sourceLocation: sourceLocation)
    }

    func bystander() async throws -> Session {
        let session = try await SharedServer.api().createSession()
        try await session.dispatchOK("counter", ["type": "increment"])
        return session
    }

    @Test("garbage bytes get a 4xx or a close")
    func garbage() async throws {
        let session = try await bystander()
        // Complete (if invalid) requests must be answered or closed as they are.
        let complete: [[UInt8]] = [
            Array("HELLO\r\n\r\n".utf8),
            Array("GET\r\n\r\n".utf8),
            Array("GET / HTTP/9.9\r\nHost: x\r\n\r\n".utf8),
            Array("GET /healthz HTTP/1.1\r\nthis is not a header\r\n\r\n".utf8),
            Array("GET /he\u{0}althz HTTP/1.1\r\nHost: x\r\n\r\n".utf8),
            Array("POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\nContent-Length: abc\r\n\r\n{}".utf8),
            Array("POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\nContent-Length: -5\r\n\r\n{}".utf8),
            (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) },
        ]
        for (index, bytes) in complete.enumerated() {
            let status = try await sendRaw(bytes, Comment(rawValue: "input \(index)"))
            if let status { #expect((400..<600).contains(status), "input \(index) got \(status)") }
        }
        // Input without a line end may legitimately wait for more: the client hangs up.
        let unterminated: [[UInt8]] = [
            [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03] + [UInt8](repeating: 0xAB, count: 500),  // a TLS hello
            Array("\r\n\r\n".utf8),
            [0x00, 0x00, 0x00, 0x00],
        ]
        for bytes in unterminated { try await sendAndHangUp(bytes) }
        try await expectHealthy(session)
    }

    @Test("a request cut off before the end of its headers, then a half-close and close")
    func halfOpen() async throws {
        let session = try await bystander()
        try await sendAndHangUp(Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n".utf8))
        try await sendAndHangUp(Array("GET /healthz HTTP/1.1".utf8))
        // A body shorter than its Content-Length.
        try await sendAndHangUp(Array(
            "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\nContent-Length: 100\r\n\r\n{\"feature\"".utf8))
        try await expectHealthy(session)

        // Partial requests left open do not block anyone else.
        let api = try SharedServer.api()
        var idle: [HTTPConnection] = []
        for _ in 0..<20 {
            let connection = try await HTTPConnection.open(port: api.port)
            try await connection.send(Array("GET /healthz HTTP/1.1\r\nHost: x\r\n".utf8))
            idle.append(connection)
        }
        defer { idle.forEach { $0.close() } }
        try await expectHealthy(session)
        try await session.dispatchOK("todos", ["type": "add", "title": "still working"])

        // A body cut short, then the client waits: the dispatch is not applied.
        let waiting = try await HTTPConnection.open(port: api.port)
        defer { waiting.close() }
        try await waiting.send(Array(
            "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\nContent-Length: 60\r\n\r\n{\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}}".utf8))
        // The client gives up: once the server has closed the connection it has read all the
        // bytes there were, and the dispatch must not have been applied.
        try await waiting.shutdownWrite()
        _ = try await waiting.readUntilClosed(timeout: .seconds(5))
        #expect(try await session.store("counter").version == 1, "an incomplete body was applied")
    }

    @Test("a very long header, and very many headers: an error or a close, and the server stays healthy")
    func hugeHeaders() async throws {
        let session = try await bystander()
        for size in [16 * 1024, 100 * 1024, 1024 * 1024] {
            let request = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Long: ".utf8)
                + [UInt8](repeating: UInt8(ascii: "a"), count: size) + Array("\r\n\r\n".utf8)
            if let status = try await sendRaw(request) {
                #expect(status == 200 || (400..<500).contains(status), "\(size) bytes got \(status)")
            }
        }
        var many = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
        for index in 0..<5000 { many += "X-Header-\(index): value\r\n" }
        if let status = try await sendRaw(Array((many + "\r\n").utf8)) {
            #expect(status == 200 || (400..<500).contains(status), "many headers got \(status)")
        }
        let longPath = "/v1/sessions/" + String(repeating: "p", count: 200_000) + "/state"
        if let status = try await sendRaw(Array("GET \(longPath) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)) {
            #expect((400..<500).contains(status), "long path got \(status)")
        }
        try await expectHealthy(session)
    }

    @Test("deeply nested JSON inside the 64 KiB limit is 400 and does not crash the server")
    func deepNesting() async throws {
        let session = try await bystander()
        let brackets = [UInt8](repeating: UInt8(ascii: "["), count: 50_000)
        expectError(try await session.request("POST", "/dispatch", body: brackets), 400, "malformed_json", "50,000 [")
        let objects = Array(String(repeating: "{\"a\":", count: 12_000).utf8)
        expectError(try await session.request("POST", "/dispatch", body: objects), 400, "malformed_json", "12,000 {\"a\":")
        expectError(
            try await session.request("PUT", "/state/counter", body: brackets), 400, "malformed_json", "PUT 50,000 [")

        let balanced = [UInt8](repeating: UInt8(ascii: "["), count: 32_000) + [UInt8](repeating: UInt8(ascii: "]"), count: 32_000)
        let response = try await session.request("POST", "/dispatch", body: balanced)
        #expect(response.status == 400, "32,000 balanced arrays: \(response)")
        #expect(["malformed_json", "invalid_request"].contains(response.errorCode ?? ""), "\(response)")

        let depth = 20_000
        let nestedValue = Array("{\"feature\": \"counter\", \"action\": {\"type\": \"set\", \"value\": ".utf8)
            + [UInt8](repeating: UInt8(ascii: "["), count: depth) + [UInt8](repeating: UInt8(ascii: "]"), count: depth)
            + Array("}}".utf8)
        let inAction = try await session.request("POST", "/dispatch", body: nestedValue)
        #expect([400, 422].contains(inAction.status), "deep value inside an action: \(inAction)")
        try await expectHealthy(session)
    }

    @Test("malformed UTF-8 in the body, path and headers")
    func malformedUTF8() async throws {
        let session = try await bystander()
        let body = Array("{\"feature\": \"counter\", \"action\": {\"type\": \"set\", \"value\": 5, \"x\": \"".utf8)
            + [0xC0, 0xAF, 0xFF] + Array("\"}}".utf8)
        expectError(try await session.request("POST", "/dispatch", body: body), 400, "malformed_json")
        let overlong = Array("{\"feature\": \"".utf8) + [0xC1, 0x81] + Array("\", \"action\": {\"type\": \"increment\"}}".utf8)
        expectError(try await session.request("POST", "/dispatch", body: overlong), 400, "malformed_json")

        let api = try SharedServer.api()
        let encoded = try await api.request("GET", "/v1/sessions/%FF%FE/state", headers: session.auth)
        #expect([400, 404].contains(encoded.status), "\(encoded)")
        if let status = try await sendRaw(
            Array("GET /v1/sessions/".utf8) + [0xFF, 0xFE]
                + Array("/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer \(session.token)\r\n\r\n".utf8))
        {
            #expect([400, 404].contains(status), "raw bytes in the path: \(status)")
        }
        if let status = try await sendRaw(
            Array("GET \(session.path)/state HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ".utf8)
                + [0xFF, 0xFE, 0x80] + Array("\r\n\r\n".utf8))
        {
            #expect([400, 401, 404].contains(status), "raw bytes in Authorization: \(status)")
        }
        try await expectHealthy(session)
    }

    @Test("numbers too large for Int are 422 invalid_action")
    func hugeNumbers() async throws {
        let session = try await bystander()
        for number in ["9223372036854775808", "-9223372036854775809", "123456789012345678901234567890"] {
            let body = Array("{\"feature\": \"counter\", \"action\": {\"type\": \"set\", \"value\": \(number)}}".utf8)
            let response = try await session.request("POST", "/dispatch", body: body)
            expectError(response, 422, "invalid_action", messageContains: "value", "value \(number.prefix(30))")
        }
        try await expectHealthy(session)
    }

    @Test("an unknown method on a known path is 405; pipelined requests are answered in order")
    func methodsAndPipelining() async throws {
        let session = try await bystander()
        let api = try SharedServer.api()
        let unknown = try await api.request("BREW", "/healthz")
        expectError(unknown, 405, "method_not_allowed")
        #expect(allowedMethods(unknown).contains("GET"))

        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let one = HTTPConnection.serialize(method: "GET", target: "/healthz", port: api.port, headers: [], body: nil)
        let two = HTTPConnection.serialize(
            method: "GET", target: session.path + "/state/counter", port: api.port, headers: session.auth, body: nil)
        try await connection.send(one + two)
        let first = try await connection.readResponse()
        let second = try await connection.readResponse()
        #expect(first.json == ["status": "ok"], "\(first)")
        #expect(second.json?["version"] == 1, "\(second)")
        try await expectHealthy(session)
    }

    @Test("many connections at once, some idle, do not starve the API")
    func manyConnections() async throws {
        let session = try await bystander()
        let api = try SharedServer.api()
        var open: [HTTPConnection] = []
        for _ in 0..<100 { open.append(try await HTTPConnection.open(port: api.port)) }
        defer { open.forEach { $0.close() } }
        for connection in open.prefix(10) {
            #expect(try await connection.request("GET", "/healthz").status == 200)
        }
        try await expectHealthy(session)
    }
}
