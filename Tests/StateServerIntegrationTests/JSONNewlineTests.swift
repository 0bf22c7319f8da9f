import TestSupport
import Testing

/// Every JSON reply ends with one newline, so a shell prompt after `curl` starts on its own
/// line; `Content-Length` counts it, and a replayed idempotent reply is the first one byte for byte.
@Suite("JSON replies end with a newline")
struct JSONNewlineTests {
    private func expectOneNewline(_ response: HTTPResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.body.last == UInt8(ascii: "\n"), "\(response)", sourceLocation: sourceLocation)
        #expect(response.body.dropLast().last != UInt8(ascii: "\n"), "two newlines: \(response)", sourceLocation: sourceLocation)
        #expect(response.header("Content-Length") == String(response.body.count), "\(response)", sourceLocation: sourceLocation)
        #expect(response.json != nil, "not JSON: \(response)", sourceLocation: sourceLocation)
    }

    @Test("discovery, session, state, dispatch and error replies")
    func everyKind() async throws {
        try await withServer { server in
            let api = server.api
            expectOneNewline(try await api.request("GET", "/healthz"))
            expectOneNewline(try await api.request("GET", "/v1/features"))
            expectOneNewline(try await api.request("GET", "/openapi.json"))
            expectOneNewline(try await api.request("POST", "/v1/sessions"))
            let session = try await api.createSession()
            expectOneNewline(try await session.dispatch("counter", ["type": "increment"]))
            expectOneNewline(try await session.request("GET", "/state/counter"))
            expectOneNewline(try await session.request("GET", "/state"))
            expectOneNewline(try await session.dispatch("counter", ["type": "nope"]))
            expectOneNewline(try await api.request("GET", "/v1/sessions/nope/state"))
        }
    }

    @Test("an idempotent replay is the first reply byte for byte, with one newline")
    func replay() async throws {
        try await withServer { server in
            let session = try await server.api.createSession()
            let key: [Header] = [("Idempotency-Key", "newline-1")]
            let first = try await session.dispatch("counter", ["type": "increment"], headers: key)
            let again = try await session.dispatch("counter", ["type": "increment"], headers: key)
            #expect(first.status == 200 && again.status == 200)
            #expect(again.header("Idempotent-Replayed") == "true")
            expectOneNewline(first)
            expectOneNewline(again)
            #expect(first.body == again.body)
        }
    }
}
