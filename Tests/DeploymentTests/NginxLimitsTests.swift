import Foundation
import TestSupport
import Testing

/// Issue 25 item 3 through the shipped nginx (deploy/nginx, a real nginx in front of a real
/// server): /metrics and the admin routes only on the internal listener, the client's address
/// carried to the server in X-Forwarded-For (and a forged one of no use), and nginx's
/// connections-per-address limit. Clients play other addresses of 127.0.0.0/8 (nginx reaches
/// the server from 127.0.0.1, the one trusted proxy).
@Suite("Through nginx: abuse limits and the internal listener")
struct NginxLimitsTests {
    static let adminToken = "nginx-admin-token"
    /// `printf %s nginx-admin-token | sha256sum`
    static let adminHash = "f656c10b8da4c019f5a58f095c14ecbf652189f523b6dd92a5d08b9b0afafeaf"

    /// A server trusting nginx (127.0.0.1) behind a real nginx; both stopped after `body`.
    static func behindNginx<T>(
        environment: [String: String], connectionsPerAddress: Int? = nil,
        _ body: (NginxProcess, ServerProcess) async throws -> T
    ) async throws -> T {
        try await withServer(
            arguments: ["--storage", "memory"],
            environment: ["STATE_SERVER_HTTP_TRUSTED_PROXIES": "127.0.0.1"].merging(environment) { $1 }
        ) { server in
            let nginx = try await NginxProcess.start(upstreams: [server.port], connectionsPerAddress: connectionsPerAddress)
            do {
                let result = try await body(nginx, server)
                await nginx.stop()
                return result
            } catch {
                await nginx.stop()
                throw error
            }
        }
    }

    @Test("/metrics and /v1/admin/... are 404 on the public listener, however the path is spelled, and served on the internal one")
    func internalListener() async throws {
        try await Self.behindNginx(environment: ["STATE_SERVER_ADMIN_TOKEN_HASH": Self.adminHash]) { nginx, server in
            let admin: [Header] = [("Authorization", "Bearer \(Self.adminToken)")]
            // The server itself answers both (so a 404 below is nginx's doing).
            #expect(try await server.api.request("GET", "/metrics").status == 200)
            #expect(try await server.api.request("GET", "/v1/admin/sessions", headers: admin).status == 200)
            for path in ["/metrics", "/metrics?x=1", "/%6Detrics", "/v1/admin/sessions", "/v1//admin/sessions", "/v1/%61dmin/sessions",
                         "/v1/admin%2Fsessions", "/v1/./admin/sessions", "/x/../v1/admin/sessions"] {
                for method in ["GET", "HEAD"] {
                    let response = try await nginx.api.request(method, path, headers: admin)
                    #expect(response.status == 404, "\(method) \(path) on the public listener: \(response)")
                    if method == "GET" { #expect(response.errorCode == "not_found", "\(path): \(response)") }
                }
            }
            let metrics = try await nginx.internalAPI.request("GET", "/metrics")
            #expect(metrics.status == 200 && metrics.text.contains("stateserver_http_requests_total"), "\(metrics.head)")
            let sessions = try await nginx.internalAPI.request("GET", "/v1/admin/sessions", headers: admin)
            #expect(sessions.status == 200 && sessions.json?["sessions"] != nil, "\(sessions)")
            // The internal listener serves nothing else.
            expectError(try await nginx.internalAPI.request("POST", "/v1/sessions"), 404, "not_found")
            // The public listener still serves the API and the page.
            #expect(try await nginx.api.request("POST", "/v1/sessions").status == 201)
            #expect(try await nginx.api.request("GET", "/").status == 200)
        }
    }

    @Test("the server counts the address nginx got the request from: a forged X-Forwarded-For changes nothing")
    func forwardedFor() async throws {
        try await Self.behindNginx(environment: ["STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE": "2"]) { nginx, _ in
            let client = API(port: nginx.port, source: "127.0.0.2")
            var statuses: [Int] = []
            for index in 0..<3 {
                let forged: [Header] = [("X-Forwarded-For", "198.51.100.\(index + 1)")]
                let response = try await client.request("POST", "/v1/sessions", headers: forged)
                statuses.append(response.status)
                if index == 2 {
                    expectError(response, 429, "rate_limited", messageContains: "limits.sessionsPerMinute")
                    #expect(response.header("Retry-After") != nil, "\(response.head)")
                }
            }
            #expect(statuses == [201, 201, 429], "\(statuses)")
            // Another client of the same nginx is another bucket.
            #expect(try await API(port: nginx.port, source: "127.0.0.3").request("POST", "/v1/sessions").status == 201)
        }
    }

    @Test("connections per address: past nginx's limit_conn, 429 rate_limited in the server's JSON shape; another address is served")
    func connectionsPerAddress() async throws {
        try await Self.behindNginx(environment: [:], connectionsPerAddress: 2) { nginx, _ in
            let client = API(port: nginx.port, source: "127.0.0.2")
            let session = try await client.createSession()
            // Two event streams from 127.0.0.2: two requests in progress.
            let (first, _) = try await session.subscribe()
            defer { first.close() }
            let (second, _) = try await session.subscribe()
            defer { second.close() }
            let third = try await session.request("GET", "/state/counter")
            expectError(third, 429, "rate_limited", messageContains: "connections")
            #expect(third.header("Retry-After") == "5" && third.header("Content-Type")?.hasPrefix("application/json") == true, "\(third.head)")
            let other = Session(api: API(port: nginx.port, source: "127.0.0.3"), id: session.id, token: session.token)
            #expect(try await other.request("GET", "/state/counter").status == 200, "another address is served")
            // A stream that ends frees its place.
            first.close()
            let freed = try await eventually(timeout: .seconds(10)) {
                try await session.request("GET", "/state/counter").status == 200
            }
            #expect(freed, "the place of a closed stream was never given back")
        }
    }
}
