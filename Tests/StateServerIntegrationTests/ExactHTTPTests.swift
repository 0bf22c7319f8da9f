import Foundation
import TestSupport
import Testing

/// Issue 16, "HTTP framing still has holes", items 1-13: each over a raw socket against the real
/// binary. Every test here failed on a4e1b46.
@Suite("Exact HTTP (issue 16)", .localServer())
struct ExactHTTPTests {
    /// A complete dispatch of `increment` to the session's counter, as raw bytes.
    func hiddenDispatch(_ session: Session) -> String {
        let body = #"{"feature":"counter","action":{"type":"increment"}}"#
        return "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\n"
            + "Authorization: Bearer \(session.token)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
    }

    /// Sends `bytes` on a fresh connection; requires one `400 invalid_request` with
    /// `Connection: close`, then the close with nothing after it, and the counter unchanged.
    func expectRefused(
        _ bytes: [UInt8], session: Session, method: String = "GET", messageContains: String? = nil,
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
        if let messageContains {
            #expect(response.errorMessage?.contains(messageContains) == true, "\(response)", sourceLocation: sourceLocation)
        }
        #expect(response.header("Connection")?.lowercased() == "close", "\(response)", sourceLocation: sourceLocation)
        let (rest, closed) = try await connection.readUntilClosed()
        #expect(closed, "the connection is closed after the 400", sourceLocation: sourceLocation)
        #expect(rest.isEmpty, "nothing after the 400: \(String(decoding: rest, as: UTF8.self))", sourceLocation: sourceLocation)
        #expect(try await session.store("counter", sourceLocation: sourceLocation) == before, "the hidden dispatch did not run", sourceLocation: sourceLocation)
    }

    // MARK: 1

    @Test("1: HEAD on the event stream is 405 with Allow: GET and no body bytes; the next reply on the connection is intact")
    func headOnEvents() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let head = "HEAD \(session.path)/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n\r\n"
        let next = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        try await connection.send(Array((head + next).utf8))
        let response = try await connection.readResponse(method: "HEAD")
        #expect(response.status == 405, "\(response)")
        #expect(response.header("Allow") == "GET", "\(response)")
        #expect(response.header("Transfer-Encoding") == nil, "\(response)")
        // Had the HEAD answer carried a chunked terminator, this would read "0\r\n\r\nHTTP/1.1 ...".
        let second = try await connection.readResponse()
        #expect(second.status == 200, "\(second)")
        #expect(second.json?["status"]?.string == "ok", "\(second)")
    }

    // MARK: 2

    @Test("2: a NUL inside a header field that is not the last is refused (Content-Length and Transfer-Encoding)")
    func nulInsideField() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let hidden = hiddenDispatch(session)
        let length = "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\u{0}38\r\nX-After: y\r\n\r\n"
        try await expectRefused(Array((length + hidden).utf8), session: session, messageContains: "NUL")
        let coding = "POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\u{0}, gzip\r\nX-After: y\r\n\r\n0\r\n\r\n"
        try await expectRefused(Array((coding + hidden).utf8), session: session, method: "POST", messageContains: "NUL")
    }

    // MARK: 3

    @Test("3: HTTP/1.0 with Transfer-Encoding: chunked is refused with 400 and the connection closed")
    func http10Chunked() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let head = "POST /healthz HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        try await expectRefused(Array((head + hiddenDispatch(session)).utf8), session: session, method: "POST", messageContains: "HTTP/1.0")
    }

    // MARK: 4

    @Test("4: a bare CR inside a header value is refused")
    func bareCR() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\rContent-Length: 5\r\n\r\n"
        try await expectRefused(Array((head + hiddenDispatch(session)).utf8), session: session, messageContains: "control character")
    }

    // MARK: 5

    @Test("5: 300 query arguments get a 400 at once (not silence until the idle timeout); 64 are served")
    func manyQueryArguments() async throws {
        let api = try SharedServer.api()
        let many = (0..<300).map { "a\($0)=\($0)" }.joined(separator: "&")
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array("GET /healthz?\(many) HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        let response = try await connection.readResponse(timeout: .seconds(10))
        #expect(response.status == 400, "\(response)")
        #expect(response.errorCode == "invalid_request", "\(response)")
        #expect(response.errorMessage?.contains("query arguments") == true, "\(response)")
        let server = try #require(SharedServer.current)
        let logged = try await eventually { server.output.stderrText.contains("http.refused=the request target has more than 64 query arguments") }
        #expect(logged, "a log line says why: \(server.output.stderrText.suffix(2000))")
        let allowed = (0..<64).map { "a=\($0)" }.joined(separator: "&")
        let ok = try await api.request("GET", "/healthz?\(allowed)")
        #expect(ok.status == 200, "\(ok)")
        #expect(await api.isHealthy())
    }

    @Test("5: 63 long query arguments (a 6 KB target, schemathesis found it on .../history) get a 400 at once, not silence; 2,048 bytes are served")
    func longQueryTarget() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let long = (0..<63).map { _ in "limit=\(String(repeating: "9", count: 90))" }.joined(separator: "&")
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array("GET \(session.path)/history?\(long) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n\r\n".utf8))
        let response = try await connection.readResponse(timeout: .seconds(10))
        #expect(response.status == 400, "\(response)")
        #expect(response.errorCode == "invalid_request", "\(response)")
        #expect(response.errorMessage?.contains("at most 2048 bytes") == true, "\(response)")
        // A target of exactly 2,048 bytes is the longest with a query that is read.
        let prefix = "/healthz?a="
        let ok = try await api.request("GET", prefix + String(repeating: "b", count: 2048 - prefix.utf8.count))
        #expect(ok.status == 200, "\(ok)")
        let over = try await api.request("GET", prefix + String(repeating: "b", count: 2049 - prefix.utf8.count))
        #expect(over.status == 400 && over.errorMessage?.contains("at most 2048 bytes") == true, "\(over)")
        #expect(await api.isHealthy())
    }

    // MARK: 6

    @Test("6: the path is split before it is percent-decoded: ID%2Fstate is one segment")
    func encodedSlash() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        // One segment: the session route, whose id would be "ID/state" (GET is not allowed there).
        let smuggled = try await api.request("GET", "/v1/sessions/\(session.id)%2Fstate", headers: session.auth)
        #expect(smuggled.status == 405, "\(smuggled)")
        #expect(smuggled.header("Allow") == "DELETE", "\(smuggled)")
        let lower = try await api.request("GET", "/v1/sessions/\(session.id)%2fstate%2fcounter", headers: session.auth)
        #expect(lower.status == 405, "\(lower)")
        // DELETE on it names the session "ID/state", which does not exist: the real one stays.
        let delete = try await api.request("DELETE", "/v1/sessions/\(session.id)%2Fstate", headers: session.auth)
        #expect(delete.status == 404, "\(delete)")
        #expect(try await session.store("counter").version == 0)
        // Each segment is still decoded: %73tate is "state".
        let decoded = try await api.request("GET", "/v1/sessions/\(session.id)/%73tate/counter", headers: session.auth)
        #expect(decoded.status == 200, "\(decoded)")
        #expect(decoded.json?["feature"]?.string == "counter", "\(decoded)")
    }

    // MARK: 7

    @Test("7: Expect: 100-continue gets 401 (no credentials) or 413 (too large) instead of 100 Continue")
    func expectContinue() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        for (headers, status) in [("", 401), ("Authorization: Bearer \(session.token)\r\n", 413)] {
            let connection = try await HTTPConnection.open(port: api.port)
            defer { connection.close() }
            let head = "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\n\(headers)Content-Type: application/json\r\n"
                + "Content-Length: 10000000\r\nExpect: 100-continue\r\n\r\n"
            try await connection.send(Array(head.utf8))
            let response = try await connection.readResponse(method: "POST")
            #expect(response.status == status, "\(response)")
            #expect(try await connection.readUntilClosed().closed)
        }
        // The control: an authorized request of a fitting size is invited, then answered.
        let body = #"{"feature":"counter","action":{"type":"increment"}}"#
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        let head = "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n"
            + "Content-Length: \(body.utf8.count)\r\nExpect: 100-continue\r\n\r\n"
        try await connection.send(Array(head.utf8))
        let interim = try await connection.readHead()
        #expect(interim.status == 100, "\(interim)")
        try await connection.send(Array(body.utf8))
        #expect(try await connection.readResponse(method: "POST").status == 200)
    }

    // MARK: 8

    @Test("8: Idempotency-Key length is counted in UTF-8 bytes, not characters")
    func idempotencyKeyBytes() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let key = "a" + String(repeating: "\u{0301}", count: 1500)
        #expect(key.count == 1)
        let response = try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", key)])
        expectError(response, 400, "invalid_request", messageContains: "bytes")
        let fits = String(repeating: "é", count: 100)  // 200 bytes
        #expect(try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", fits)]).status == 200)
        let over = String(repeating: "é", count: 101)  // 202 bytes, 101 characters
        expectError(try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", over)]), 400, "invalid_request")
    }

    // MARK: 9

    @Test("9: a method with control characters is refused, and the text log escapes it")
    func controlCharactersInMethod() async throws {
        let server = try #require(SharedServer.current)
        let api = server.api
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array("G\u{1b}[2J\u{7f}ET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        let response = try await connection.readResponse()
        #expect(response.status == 400, "\(response)")
        let logged = try await eventually { server.output.stderrText.contains(#"G\u001b[2J\u007fET"#) }
        #expect(logged, "the access log line of the refused request, escaped: \(server.output.stderrText.suffix(2000))")
        #expect(!server.output.stderrText.contains("\u{1b}"), "a raw ESC reached the log")
        #expect(!server.output.stderrText.contains("\u{7f}"), "a raw DEL reached the log")
    }

    // MARK: 12

    @Test("12: Cache-Control per kind of reply; the page, its client and the OpenAPI file revalidate to 304")
    func caching() async throws {
        let api = try SharedServer.api()
        let created = try await api.request("POST", "/v1/sessions")
        #expect(created.status == 201)
        #expect(created.header("Cache-Control") == "no-store", "the token reply: \(created)")
        let session = try await api.createSession()
        let dispatched = try await session.dispatch("counter", ["type": "increment"])
        #expect(dispatched.header("Cache-Control") == "no-store", "\(dispatched)")
        let all = try await session.request("GET", "/state")
        #expect(all.header("Cache-Control") == "no-store", "\(all)")
        let read = try await session.request("GET", "/state/counter")
        #expect(read.header("Cache-Control") == "private, no-cache", "\(read)")
        #expect(read.header("ETag") == "\"1\"", "\(read)")
        let error = try await api.request("GET", "/nowhere")
        #expect(error.header("Cache-Control") == "no-store", "\(error)")
        for path in ["/", "/client.js", "/openapi.json", "/v1/features"] {
            let first = try await api.request("GET", path)
            #expect(first.status == 200, "\(path): \(first)")
            #expect(first.header("Cache-Control") == "no-cache", "\(path): \(first.head)")
            let tag = try #require(first.header("ETag"), "\(path): \(first.head)")
            let again = try await api.request("GET", path, headers: [("If-None-Match", tag)])
            #expect(again.status == 304, "\(path): \(again)")
            #expect(again.body.isEmpty)
            #expect(again.header("ETag") == tag)
            let other = try await api.request("GET", path, headers: [("If-None-Match", #""other""#)])
            #expect(other.status == 200, "\(path): \(other.head)")
        }
    }

    // MARK: 13

    @Test("13: an invalid Host value is refused", arguments: ["a b", "x/y", "[::1", "h:8o", "a@b", "\u{e9}"])
    func invalidHost(_ host: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let head = "GET /healthz HTTP/1.1\r\nHost: \(host)\r\n\r\n"
        try await expectRefused(Array((head + hiddenDispatch(session)).utf8), session: session, messageContains: "Host")
    }

    @Test("13: valid Host values are served", arguments: ["x", "127.0.0.1:8080", "[::1]:80", "example.com", "h:", "my-host_1.local"])
    func validHost(_ host: String) async throws {
        let api = try SharedServer.api()
        let connection = try await HTTPConnection.open(port: api.port)
        defer { connection.close() }
        try await connection.send(Array("GET /healthz HTTP/1.1\r\nHost: \(host)\r\n\r\n".utf8))
        #expect(try await connection.readResponse().status == 200)
    }

    @Test("13: two Authorization fields are refused, not resolved by taking the first")
    func twoAuthorizations() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let other = try await api.createSession()
        let body = #"{"feature":"counter","action":{"type":"increment"}}"#
        let head = "POST \(session.path)/dispatch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(session.token)\r\n"
            + "Authorization: Bearer \(other.token)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        try await expectRefused(Array(head.utf8), session: session, method: "POST", messageContains: "Authorization")
    }

    // MARK: Fuzz findings (make fuzz, fuzz/seeds/framing/finding-*)

    @Test("fuzz findings: NULs in the request line or after a value that the first framing pass let through", arguments: [
        "PD\u{0}\u{0}\u{0}OST /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        "POST\u{0}\u{0}\u{0}\u{0} /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\u{0}\u{0}\u{0}\u{0}\u{0}\r\nX-After: y\r\n\r\n",
        "GET /healthz\rx HTTP/1.1\r\nHost: x\r\n\r\n",
    ])
    func fuzzFindings(_ head: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        try await expectRefused(Array((head + hiddenDispatch(session)).utf8), session: session, method: head.hasPrefix("P") ? "POST" : "GET")
    }

    @Test("fuzz findings, not fixed: a line libmicrohttpd takes for the head's end, next to a bare LF", arguments: [
        "GET /healthz HTTP/1.1\r\nHost: x\n:\r\n",
        "GET /healthz HTTP/1.0\r\n\u{0}\n",
    ])
    func headEndNextToBareLF(_ head: String) async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        // libmicrohttpd 0.9.75 ends the head at ":" and leaves its buffer exactly as for
        // "Host: x\r\n\r\n" (four NULs after the value), so the framing pass cannot tell; the
        // documented deployment's nginx refuses the empty name itself. See docs/ARCHITECTURE.md.
        await withKnownIssue("indistinguishable after libmicrohttpd's in-place parse") {
            try await expectRefused(Array((head + hiddenDispatch(session)).utf8), session: session)
        }
    }
}

