import Foundation
import TestSupport
import Testing

/// Issue 11 §6: libmicrohttpd 0.9.75 lets some ambiguous framings hide a second request. The
/// documented deployment puts nginx in front, which must refuse each of them: 400 (501 for an
/// unknown transfer coding), the connection closed, and the hidden dispatch never run.
@Suite("Request smuggling through nginx")
struct SmugglingTests {
    /// A request whose framing is ambiguous, with a complete dispatch hidden in or behind it.
    struct Payload: Sendable, CustomTestStringConvertible {
        let name: String
        /// Status nginx must answer with.
        let statuses: Set<Int>
        /// Builds the bytes around the hidden request.
        let build: @Sendable (_ hidden: [UInt8]) -> [UInt8]
        var testDescription: String { name }
    }

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    static let payloads: [Payload] = [
        Payload(name: "two Content-Length headers with different values", statuses: [400]) { hidden in
            bytes("GET /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Length: \(hidden.count)\r\n\r\n") + hidden
        },
        Payload(name: "Content-Length together with Transfer-Encoding: chunked", statuses: [400]) { hidden in
            bytes("POST /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: \(5 + hidden.count)\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n") + hidden
        },
        Payload(name: "Transfer-Encoding: foo", statuses: [400, 501]) { hidden in
            bytes("GET /healthz HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: foo\r\n\r\n") + hidden
        },
        Payload(name: "Transfer-Encoding: chunked, foo", statuses: [400, 501]) { hidden in
            bytes("POST /healthz HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, foo\r\n\r\n0\r\n\r\n") + hidden
        },
        Payload(name: "a space before the colon (Transfer-Encoding : chunked)", statuses: [400]) { hidden in
            bytes("POST /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: \(5 + hidden.count)\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n") + hidden
        },
        Payload(name: "a header line with an empty name", statuses: [400]) { hidden in
            bytes("GET /healthz HTTP/1.1\r\nHost: h\r\n: x\r\n") + hidden
        },
        Payload(name: "a raw NUL in the target", statuses: [400]) { hidden in
            bytes("GET /healthz") + [0] + bytes("/x HTTP/1.1\r\nHost: h\r\n\r\n") + hidden
        },
        Payload(name: "two Host headers", statuses: [400]) { hidden in
            bytes("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") + hidden
        },
        Payload(name: "no Host on HTTP/1.1", statuses: [400]) { hidden in
            bytes("GET /healthz HTTP/1.1\r\n\r\n") + hidden
        },
        Payload(name: "Content-Length of 2^64-1", statuses: [400]) { hidden in
            bytes("POST /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551615\r\n\r\n") + hidden
        },
        Payload(name: "an obs-fold continuation line carrying Transfer-Encoding", statuses: [400]) { hidden in
            bytes("POST /healthz HTTP/1.1\r\nHost: h\r\nContent-Length: \(hidden.count)\r\nX: y\r\n Transfer-Encoding: chunked\r\n\r\n") + hidden
        },
    ]

    @Test("nginx refuses the framing, closes, and the hidden dispatch never runs", arguments: payloads)
    func refused(payload: Payload) async throws {
        try await withCluster { nginx, servers in
            let session = try await nginx.api.createSession()
            let body = JSON.object(["feature": "counter", "action": ["type": "increment", "by": 7]]).bytes
            let hidden = Self.bytes(
                "POST \(session.path)/dispatch HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(session.token)\r\n"
                    + "Content-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n") + body

            let connection = try await HTTPConnection.open(port: nginx.port)
            defer { connection.close() }
            do {
                try await connection.send(payload.build(hidden))
            } catch ClientError.closedEarly {
                // nginx may answer and close before taking every byte: the answer is still read below.
            }
            let (bytes, closed) = try await connection.readUntilClosed(timeout: .seconds(10))
            let text = String(decoding: bytes, as: UTF8.self)
            let statusLines = text.components(separatedBy: "\r\n").filter { $0.hasPrefix("HTTP/1.") }
            #expect(closed, "nginx kept the connection open: \(text.prefix(500))")
            #expect(statusLines.count == 1, "one answer expected: \(statusLines)")
            let status = statusLines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") }
            #expect(status.map(payload.statuses.contains) == true, "answered \(statusLines)")

            // Everything nginx forwarded was answered before it closed, so the store is final now.
            let direct = Session(api: servers[0].api, id: session.id, token: session.token)
            #expect(try await direct.store("counter") == StoreState(version: 0, state: ["count": 0]), "the hidden dispatch ran")

            // The hidden request on its own does dispatch: the payload was a real threat.
            let alone = try await HTTPConnection.open(port: nginx.port)
            defer { alone.close() }
            try await alone.send(hidden)
            let response = try await alone.readResponse(method: "POST")
            #expect(response.status == 200, "\(response)")
            #expect(try await direct.store("counter") == StoreState(version: 1, state: ["count": 7]))
        }
    }
}
