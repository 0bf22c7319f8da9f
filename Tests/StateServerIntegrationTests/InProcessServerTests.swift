import Foundation
import TestSupport
import Testing

/// The in-process server the contract suites run on is the real one wired the same way: the
/// storage the pass asks for, requests built as MicroHTTP builds them, and the same answers as
/// the binary over a socket.
@Suite("In-process server: the same server without a socket")
struct InProcessServerTests {
    @Test("it keeps sessions where the pass asks (SQLite when STATE_SERVER_TEST_STORAGE=sqlite)")
    func storage() async throws {
        let server = try InProcessServer()
        let sqlite = ProcessInfo.processInfo.environment["STATE_SERVER_TEST_STORAGE"] == "sqlite"
        #expect(server.sessions.holdsEverySession == !sqlite)
        await server.stop()
    }

    @Test("requests are built as MicroHTTP builds them from the wire")
    func requests() async throws {
        var settings = InProcessServer.Settings()
        settings.routes.bodyLimit = 4
        let server = try InProcessServer(settings: settings)
        let request = server.request(
            "GET", "/v1/a%20b%2Fc%zz?feature=a+b&flag&x=%41%3D&&y=", headers: [("X-Thing", "1")], body: nil)
        // The path as sent: the router splits it at `/`, then decodes each segment.
        #expect(request.path == "/v1/a%20b%2Fc%zz")
        #expect(request.query.map(\.name) == ["feature", "flag", "x", "y"])
        #expect(request.query.map(\.value) == ["a b", nil, "A=", ""])
        #expect(request.header("x-thing") == "1")
        #expect(request.headers.contains { $0.name == "x-thing" })
        let fits = server.request("POST", "/", headers: [], body: Array("1234".utf8))
        #expect(!fits.bodyTooLarge && fits.body == Array("1234".utf8))
        #expect(fits.header("content-length") == "4")
        let over = server.request("POST", "/", headers: [], body: Array("12345".utf8))
        #expect(over.bodyTooLarge && over.body.isEmpty)
        await server.stop()
    }
}

/// The in-process server against the binary.
extension SocketContractTests {
    /// Requests whose answers do not depend on a session's random id.
    static let requests: [(method: String, target: String, body: [UInt8]?)] = [
        ("GET", "/healthz", nil), ("HEAD", "/healthz", nil), ("GET", "/v1/features", nil),
        ("GET", "/nope", nil), ("PATCH", "/v1/sessions", Array("{}".utf8)), ("DELETE", "/healthz", nil),
        ("GET", "/v1/sessions/no-such-session/state", nil), ("GET", "/v1/sessions/x/events?feature=a+b", nil),
        ("GET", "/v1/%73essions/x/state", nil), ("GET", "/v1/sessions/x/state/counter?access_token=t", nil),
    ]

    @Test("it answers as the binary does over a socket: status, fields and body")
    func sameAnswers() async throws {
        let socket = try SharedServer.api()
        let server = try InProcessServer()
        let inProcess = server.api
        for (method, target, body) in Self.requests {
            let real = try await socket.request(method, target, body: body)
            let local = try await inProcess.request(method, target, body: body)
            #expect(local.status == real.status, "\(method) \(target): \(local) vs \(real)")
            #expect(local.body == real.body, "\(method) \(target): \(local) vs \(real)")
            // libmicrohttpd adds Date and Connection of its own.
            let fields = { (response: HTTPResponse) in
                Set(response.headers.filter { !["date", "connection"].contains($0.name.lowercased()) }.map { "\($0.name.lowercased()): \($0.value)" })
            }
            #expect(fields(local) == fields(real), "\(method) \(target)")
        }
        await server.stop()
    }
}
