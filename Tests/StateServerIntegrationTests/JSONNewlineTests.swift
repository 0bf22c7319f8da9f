import TestSupport
import Testing

/// Every JSON reply ends with one newline, so a shell prompt after `curl` starts on its own
/// line, and a replayed idempotent reply is the first one byte for byte. The replies' bodies,
/// in process; that `Content-Length` counts the newline, over a socket (`SocketContractTests`).
@Suite("JSON replies end with a newline", .inProcessServer())
struct JSONNewlineTests {
    static func expectOneNewline(_ response: HTTPResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.body.last == UInt8(ascii: "\n"), "\(response)", sourceLocation: sourceLocation)
        #expect(response.body.dropLast().last != UInt8(ascii: "\n"), "two newlines: \(response)", sourceLocation: sourceLocation)
        #expect(response.json != nil, "not JSON: \(response)", sourceLocation: sourceLocation)
    }

    @Test("discovery, session, state, dispatch and error replies")
    func everyKind() async throws {
        let api = try SharedServer.api()
        Self.expectOneNewline(try await api.request("GET", "/healthz"))
        Self.expectOneNewline(try await api.request("GET", "/v1/features"))
        Self.expectOneNewline(try await api.request("GET", "/openapi.json"))
        Self.expectOneNewline(try await api.request("POST", "/v1/sessions"))
        let session = try await api.createSession()
        Self.expectOneNewline(try await session.dispatch("counter", ["type": "increment"]))
        Self.expectOneNewline(try await session.request("GET", "/state/counter"))
        Self.expectOneNewline(try await session.request("GET", "/state"))
        Self.expectOneNewline(try await session.dispatch("counter", ["type": "nope"]))
        Self.expectOneNewline(try await api.request("GET", "/v1/sessions/nope/state"))
    }

    @Test("an idempotent replay is the first reply byte for byte, with one newline")
    func replay() async throws {
        let session = try await SharedServer.api().createSession()
        let key: [Header] = [("Idempotency-Key", "newline-1")]
        let first = try await session.dispatch("counter", ["type": "increment"], headers: key)
        let again = try await session.dispatch("counter", ["type": "increment"], headers: key)
        #expect(first.status == 200 && again.status == 200)
        #expect(again.header("Idempotent-Replayed") == "true")
        Self.expectOneNewline(first)
        Self.expectOneNewline(again)
        #expect(first.body == again.body)
    }
}

extension SocketContractTests {
    @Test("over a socket, Content-Length counts a JSON reply's newline (a success, an error, a replay)")
    func newlineOnTheWire() async throws {
        let api = try SharedServer.api()
        let session = try await api.createSession()
        let key: [Header] = [("Idempotency-Key", "newline-socket")]
        let replies = [
            try await session.dispatch("counter", ["type": "increment"], headers: key),
            try await session.dispatch("counter", ["type": "increment"], headers: key),
            try await api.request("GET", "/v1/sessions/nope/state"),
        ]
        #expect(replies[1].header("Idempotent-Replayed") == "true", "\(replies[1])")
        for response in replies {
            // The client reads Content-Length bytes: the newline is there only if it is counted.
            JSONNewlineTests.expectOneNewline(response)
            #expect(response.header("Content-Length") == String(response.body.count), "\(response)")
        }
    }
}
