import Foundation
import TestSupport
import Testing

/// Request smuggling (issue 11 item 6): a request head whose framing is ambiguous is answered
/// `400 invalid_request` and its connection is closed, so a second request hidden behind it is
/// never read. Each test hides an `increment` dispatch behind the bad head and checks that the
/// counter did not move.
@Suite("Request smuggling", .localServer())
struct SmugglingTests {
    /// A complete dispatch of `increment` to the session's counter, as raw bytes.
    func smuggledDispatch(_ session: Session, port: Int) -> String {
        let body = #"{"feature":"counter","action":{"type":"increment"}}"#
        return "POST \(session.path)/dispatch HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n"
            + "Authorization: Bearer \(session.token)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    /// Sends `bytes` on a fresh connection; requires one `400 invalid_request` reply, then the
    /// close with nothing after it; then requires the counter unchanged.
    func expectRefused(
        _ bytes: [UInt8], session: Session, method: String = "GET",
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let before = try await session.store("counter", sourceLocation: sourceLocation)
        let connection = try await HTTPConnection.open(port: session.api.port)
        defer { connection.close() }
        do {
            try await connection.send(bytes)
        } catch ClientError.closedEarly {}
        let response = try await connection.readResponse(method: method)
        #expect(response.status == 400, "\(response)", sourceLocation: sourceLocation)
        #expect(response.errorCode == "invalid_request", "\(response)", sourceLocation: sourceLocation)
        #expect(response.header("Connection")?.lowercased() == "close", "\(response)", sourceLocation: sourceLocation)
        let (rest, closed) = try await connection.readUntilClosed()
        #expect(closed, "the connection is closed after the 400", sourceLocation: sourceLocation)
        #expect(rest.isEmpty, "nothing after the 400: \(String(decoding: rest, as: UTF8.self))", sourceLocation: sourceLocation)
        #expect(try await session.store("counter", sourceLocation: sourceLocation) == before, "the smuggled dispatch did not run", sourceLocation: sourceLocation)
    }

    @Test("the smuggled dispatch runs when it is merely pipelined (the check's control)")
    func pipelinedRequestRuns() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let first = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        try await connection.send(Array((first + smuggledDispatch(session, port: api.port)).utf8))
        #expect(try await connection.readResponse().status == 200)
        #expect(try await connection.readResponse(method: "POST").status == 200)
        #expect(try await session.store("counter").version == 1)
    }

    @Test("two Content-Length fields with different values")
    func conflictingContentLength() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        let head = "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: \(hidden.utf8.count)\r\n\r\n"
        try await expectRefused(Array((head + hidden).utf8), session: session, method: "POST")
    }

    @Test("a header line with an empty field name")
    func emptyFieldName() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        for line in [": x", ":", "\u{0}: x"] {
            let head = "GET /healthz HTTP/1.1\r\nHost: x\r\n\(line)\r\n"
            try await expectRefused(Array((head + hidden).utf8), session: session)
        }
    }

    @Test("Content-Length together with Transfer-Encoding")
    func lengthAndChunked() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        let head = "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: \(5 + hidden.utf8.count)\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        try await expectRefused(Array((head + hidden).utf8), session: session, method: "POST")
    }

    @Test("a transfer coding other than one final chunked", arguments: ["foo", "gzip, chunked", "chunked, chunked", "chunked, gzip"])
    func unsupportedCoding(_ coding: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        let head = "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \(coding)\r\n\r\n0\r\n\r\n"
        try await expectRefused(Array((head + hidden).utf8), session: session, method: "POST")
    }

    @Test("invalid field names", arguments: ["Transfer-Encoding ", "X y", "X\u{1}", "X(y)"])
    func invalidFieldName(_ name: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        let head = "POST /healthz HTTP/1.1\r\nHost: x\r\n\(name): chunked\r\nContent-Length: 0\r\n\r\n"
        try await expectRefused(Array((head + hidden).utf8), session: session, method: "POST")
    }

    @Test("a missing or repeated Host on HTTP/1.1")
    func hostRules() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        try await expectRefused(Array(("GET /healthz HTTP/1.1\r\n\r\n" + hidden).utf8), session: session)
        try await expectRefused(Array(("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + hidden).utf8), session: session)
        // HTTP/1.0 needs no Host.
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array("GET /healthz HTTP/1.0\r\n\r\n".utf8))
        #expect(try await connection.readResponse().status == 200)
    }

    @Test("a raw NUL in the request target")
    func nulInTarget() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = smuggledDispatch(session, port: api.port)
        try await expectRefused(Array(("GET /healthz\u{0}/x HTTP/1.1\r\nHost: x\r\n\r\n" + hidden).utf8), session: session)
    }

    @Test("a Content-Length between 2^63 and 2^64-1 gets the early 413 and a close")
    func hugeContentLength() async throws {
        let api = try SharedServer.api()
        for length in ["9223372036854775808", "18446744073709551615", "99999999999999999999999"] {
            let connection = try await HTTPConnection.open(port: api.port)
            defer { connection.close() }
            try await connection.send(Array("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: \(length)\r\n\r\n".utf8))
            let response = try await connection.readResponse(method: "POST")
            #expect(response.status == 413 || response.status == 400, "\(length): \(response)")
            if length != "99999999999999999999999" { #expect(response.status == 413, "\(length): \(response)") }
            #expect(try await connection.readUntilClosed().closed, "\(length)")
        }
    }

    @Test("legitimate framings still work: chunked body, HEAD, blanks around a value, bare LF")
    func legitimateFramings() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let body = #"{"feature":"counter","action":{"type":"increment"}}"#
        let hex = String(body.utf8.count, radix: 16)
        let chunked = "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n"
            + "Content-Type: application/json\r\nTransfer-Encoding: Chunked\r\n\r\n\(hex)\r\n\(body)\r\n0\r\n\r\n"
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array(chunked.utf8))
        #expect(try await connection.readResponse(method: "POST").status == 200)
        try await connection.send(Array("HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        #expect(try await connection.readResponse(method: "HEAD").status == 200)
        try await connection.send(Array("GET /healthz?a=%41 HTTP/1.1\nHost:   x  \nX-Empty:\n\n".utf8))
        #expect(try await connection.readResponse().status == 200)
        #expect(try await session.store("counter").version == 1)
    }
}

/// Issue 10 item 1a: a second server on a port in use fails to start, naming the port.
@Suite("Port in use")
struct PortInUseTests {
    @Test("a second server on the same port exits non-zero with a message naming the port")
    func secondServerFails() async throws {
        try await withServer { first in
            let binary = try #require(ServerBinary.locate())
            let (process, output) = try ServerProcess.launch(
                binary, arguments: ["--host", "127.0.0.1", "--port", String(first.port), "--storage", "memory"], environment: [:])
            _ = try await eventually(timeout: .seconds(20), every: .milliseconds(10)) { !process.isRunning }
            if process.isRunning { process.terminate() }
            #expect(!process.isRunning, "the second server keeps running")
            process.waitUntilExit()
            #expect(process.terminationStatus != 0)
            #expect(output.stderrText.contains("port \(first.port)"), "stderr: \(output.stderrText)")
            #expect(output.stderrText.contains("in use"), "stderr: \(output.stderrText)")
            #expect(await first.api.isHealthy())
        }
    }

    @Test("with http.reusePort on both, two servers share the port")
    func reusePortShares() async throws {
        let environment = ["STATE_SERVER_HTTP_REUSE_PORT": "true"]
        try await withServer(environment: environment) { first in
            let second = try await ServerProcess.start(port: first.port, environment: environment)
            await second.stop()
        }
    }
}
