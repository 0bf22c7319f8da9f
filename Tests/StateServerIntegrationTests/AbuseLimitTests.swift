import Foundation
import StateServerHTTP
import TestSupport
import Testing

/// `429 rate_limited` naming `setting`, with a `Retry-After` of 1 to `maxWait` seconds.
func expectRateLimited(
    _ response: HTTPResponse, _ setting: String, maxWait: Int, sourceLocation: SourceLocation = #_sourceLocation
) {
    expectError(response, 429, "rate_limited", messageContains: setting, sourceLocation: sourceLocation)
    let wait = response.header("Retry-After").flatMap { Int($0) }
    #expect(wait.map { (1...maxWait).contains($0) } == true, "Retry-After: \(response.head)", sourceLocation: sourceLocation)
    #expect(response.header("Cache-Control") == "no-store", "\(response.head)", sourceLocation: sourceLocation)
}

/// `POST /v1/sessions` with one `X-Forwarded-For` field per entry of `forwarded`.
func createSession(_ api: API, forwardedFor forwarded: [String] = []) async throws -> HTTPResponse {
    try await api.request("POST", "/v1/sessions", headers: forwarded.map { ("X-Forwarded-For", $0) })
}

/// Issue 25 item 3: the abuse limits the routes enforce, in process. Every test has a server of
/// its own with small limits (`RouteSettings.limits`), and plays several clients by giving its
/// requests other peer addresses (`InProcessServer.api(from:)`), as MicroHTTP gives a request
/// its connection's. The token buckets refill on the real clock (the responder's
/// `ClientLimits` takes no other), so each test asserts what must hold however slow the machine
/// is (the first requests of a full bucket pass; going on as fast as possible meets a 429 well
/// before the bound of the loop) and waits for a refill by polling with a deadline. What only
/// real connections show is SocketAbuseLimitTests.
@Suite("Abuse limits: per address, per session, trusted proxies")
struct AbuseLimitTests {
    /// Sends `request` up to 60 times, as fast as it goes, until one is not `200`: the statuses
    /// seen, and that reply (nil if all 60 passed).
    static func untilRefused(
        _ request: () async throws -> HTTPResponse
    ) async throws -> (statuses: [Int], refused: HTTPResponse?) {
        var statuses: [Int] = []
        for _ in 0..<60 {
            let response = try await request()
            statuses.append(response.status)
            if response.status != 200 { return (statuses, response) }
        }
        return (statuses, nil)
    }

    @Test("limits.requestsPerSecond: one address past its bucket gets 429 with Retry-After; another address is served; the bucket refills")
    func requestsPerAddress() async throws {
        try await withInProcessServer({ $0.routes.limits.requestsPerSecond = 2 }) { server in
            let first = try server.api(from: "198.51.100.2")
            let started = ContinuousClock.now
            let (statuses, refused) = try await Self.untilRefused { try await first.request("GET", "/healthz") }
            let elapsed = ContinuousClock.now - started
            // A full bucket: the first two pass whatever the timing.
            #expect(statuses.prefix(2) == [200, 200], "\(statuses)")
            let limited = try #require(refused, "no 429 in \(statuses.count) requests: \(statuses)")
            expectRateLimited(limited, "limits.requestsPerSecond", maxWait: 1)
            // At most the burst plus what refilled meanwhile (2 a second) were served.
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            #expect(Double(statuses.count - 1) <= 2 + 2 * seconds + 1, "\(statuses.count - 1) served in \(elapsed)")
            // Any route counts, before its path is even looked at.
            let unknown = try await first.request("GET", "/nowhere")
            if unknown.status != 404 { expectRateLimited(unknown, "limits.requestsPerSecond", maxWait: 1) }

            let second = try server.api(from: "198.51.100.3")
            #expect(try await second.request("GET", "/healthz").status == 200, "another address has its own bucket")
            // A request without a peer (made in process) is never limited by address.
            for _ in 0..<10 { #expect(try await server.api.request("GET", "/healthz").status == 200) }
            let refilled = try await eventually {
                try await first.request("GET", "/healthz").status == 200
            }
            #expect(refilled, "the first address was never served again")
        }
    }

    @Test("limits.sessionsPerMinute: a fourth session (or recording import) from one address is 429; another address creates")
    func sessionsPerAddress() async throws {
        try await withInProcessServer({ $0.routes.limits.sessionsPerMinute = 3 }) { server in
            let client = try server.api(from: "198.51.100.2")
            var created: [Session] = []
            for _ in 0..<3 {
                let response = try await createSession(client)
                #expect(response.status == 201, "\(response)")
                let body = try #require(response.json)
                created.append(Session(api: client, id: try #require(body["id"]?.string), token: try #require(body["token"]?.string)))
            }
            let refused = try await createSession(client)
            // One token every 20 s: the wait is at most that.
            expectRateLimited(refused, "limits.sessionsPerMinute", maxWait: 20)
            #expect(refused.json?["id"] == nil && refused.header("Location") == nil, "\(refused)")
            // An import creates a session too.
            let recording: JSON = ["format": "stateserver-recording", "version": 1, "features": [:], "changes": []]
            let imported = try await client.request("POST", "/v1/recordings", json: recording)
            expectRateLimited(imported, "limits.sessionsPerMinute", maxWait: 20)
            // The limit is on creating: the address's sessions still work.
            try await created[0].dispatchOK("counter", ["type": "increment"])
            // Another address creates at once.
            let other = try await createSession(try server.api(from: "198.51.100.3"))
            #expect(other.status == 201, "\(other)")
            // IPv6 peers count by /64: another address of the same /64 is the same client,
            // another /64 another.
            for _ in 0..<3 { #expect(try await createSession(try server.api(from: "2001:db8:1:2::1")).status == 201) }
            expectRateLimited(try await createSession(try server.api(from: "2001:db8:1:2::2")), "limits.sessionsPerMinute", maxWait: 20)
            #expect(try await createSession(try server.api(from: "2001:db8:1:3::1")).status == 201, "another /64")
        }
    }

    @Test("limits.dispatchesPerSecond: a refused dispatch applies nothing (state, version, history, Idempotency-Key); other sessions are not held back")
    func dispatchesPerSession() async throws {
        try await withInProcessServer({ $0.routes.limits.dispatchesPerSecond = 2 }) { server in
            let session = try await server.api.createSession()
            var accepted = 0
            var refused: (response: HTTPResponse, key: String)?
            for index in 0..<60 {
                let key = "dispatch-\(index)"
                let response = try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", key)])
                if response.status == 200 {
                    accepted += 1
                    #expect(response.json?["version"]?.int == accepted, "\(response)")
                } else {
                    refused = (response, key)
                    break
                }
            }
            #expect(accepted >= 2, "a full bucket lets the first two through")
            let (limited, key) = try #require(refused, "no 429 in \(accepted) dispatches")
            expectRateLimited(limited, "limits.dispatchesPerSecond", maxWait: 1)
            #expect(limited.errorMessage?.contains("nothing was applied") == true, "\(limited)")
            // Nothing of the refused dispatch: not the state, not the version, not the journal.
            #expect(try await session.store("counter") == StoreState(version: accepted, state: ["count": .int(accepted)]))
            let history = try await session.request("GET", "/history?feature=counter")
            #expect(history.json?["changes"]?.array?.count == accepted, "\(history)")
            // Another session is not held back by this one's bucket.
            let other = try await server.api.createSession()
            try await other.dispatchOK("counter", ["type": "increment"])
            // The refused request's key was not remembered: once the bucket has a token again,
            // the same request is applied as a new one (not replayed).
            var retried: HTTPResponse?
            let applied = try await eventually {
                let response = try await session.dispatch("counter", ["type": "increment"], headers: [("Idempotency-Key", key)])
                retried = response
                return response.status == 200
            }
            #expect(applied, "the retry was never applied: \(String(describing: retried))")
            #expect(retried?.json?["version"]?.int == accepted + 1, "\(String(describing: retried))")
            #expect(retried?.header("Idempotent-Replayed") != "true", "\(String(describing: retried))")
        }
    }

    @Test("behind a trusted proxy its X-Forwarded-For names the client (right-most untrusted, IPv6 by /64); an untrusted peer's is ignored")
    func trustedProxies() async throws {
        try await withInProcessServer({ settings in
            settings.routes.limits.sessionsPerMinute = 2
            settings.trustProxies("192.0.2.4", "10.0.0.0/8")
        }) { server in
            let proxy = try server.api(from: "192.0.2.4")
            // One client behind the proxy: two sessions, then 429.
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.1"]).status == 201)
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.1"]).status == 201)
            expectRateLimited(try await createSession(proxy, forwardedFor: ["198.51.100.1"]), "limits.sessionsPerMinute", maxWait: 30)
            // Another client behind the same proxy is another bucket.
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.2"]).status == 201)
            // The right-most address that is not a trusted proxy counts: what a client puts in
            // front of it, and the trusted hops after it, change nothing.
            for forwarded in [["203.0.113.9, 198.51.100.1"], ["198.51.100.1, 10.1.2.3"], ["198.51.100.1", "10.9.9.9"]] {
                let response = try await createSession(proxy, forwardedFor: forwarded)
                expectRateLimited(response, "limits.sessionsPerMinute", maxWait: 30)
            }
            // IPv6 clients count by /64; brackets and a port are read.
            #expect(try await createSession(proxy, forwardedFor: ["2001:db8::1"]).status == 201)
            #expect(try await createSession(proxy, forwardedFor: ["[2001:db8::2]:443"]).status == 201)
            expectRateLimited(try await createSession(proxy, forwardedFor: ["2001:db8::3"]), "limits.sessionsPerMinute", maxWait: 30)
            #expect(try await createSession(proxy, forwardedFor: ["2001:db8:0:1::1"]).status == 201, "another /64")
            // A value that is not an address ends the walk: the proxy itself is the client.
            #expect(try await createSession(proxy, forwardedFor: ["not-an-address"]).status == 201)
            #expect(try await createSession(proxy, forwardedFor: ["not-an-address"]).status == 201)
            expectRateLimited(try await createSession(proxy, forwardedFor: ["not-an-address"]), "limits.sessionsPerMinute", maxWait: 30)

            // A peer that is not a trusted proxy is its own client, whatever it says.
            let direct = try server.api(from: "198.51.100.5")
            #expect(try await createSession(direct, forwardedFor: ["198.51.100.7"]).status == 201)
            #expect(try await createSession(direct, forwardedFor: ["198.51.100.8"]).status == 201)
            expectRateLimited(try await createSession(direct, forwardedFor: ["198.51.100.9"]), "limits.sessionsPerMinute", maxWait: 30)
        }
    }
}

/// The abuse limits over real connections: the connection limit is the transport's (MicroHTTP
/// counts a peer's open connections), and, end to end, the binary's `limits.*` and
/// `http.trustedProxies` reach the routes, which see each connection's own peer address. The
/// test plays several clients by connecting from other addresses of 127.0.0.0/8
/// (`API(port:source:)`): the server sees 127.0.0.2, 127.0.0.3, ... as different clients.
@Suite("Abuse limits over a socket: connections per address, the binary's settings")
struct SocketAbuseLimitTests {
    @Test("limits.connectionsPerAddress: one more connection from a full address is closed unanswered; others connect; a closed one frees a place")
    func connectionsPerAddress() async throws {
        try await withServer(environment: ["STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS": "3"]) { server in
            // Three connections held open, each answered once (so the server has counted them).
            var held: [HTTPConnection] = []
            defer { for connection in held { connection.close() } }
            for _ in 0..<3 {
                let connection = try await HTTPConnection.open(port: server.port, source: "127.0.0.2")
                #expect(try await connection.request("GET", "/healthz").status == 200)
                held.append(connection)
            }
            let fourth = try await HTTPConnection.open(port: server.port, source: "127.0.0.2")
            await #expect(throws: (any Error).self, "the fourth connection from 127.0.0.2 was served") {
                _ = try await fourth.request("GET", "/healthz", timeout: .seconds(5))
            }
            fourth.close()
            let other = API(port: server.port, source: "127.0.0.3")
            #expect(try await other.request("GET", "/healthz").status == 200, "another address connects")
            // The held connections still work.
            #expect(try await held[0].request("GET", "/healthz").status == 200)
            held.removeFirst().close()
            let again = try await eventually(timeout: .seconds(10)) {
                let response = try? await API(port: server.port, source: "127.0.0.2").request("GET", "/healthz", timeout: .seconds(2))
                return response?.status == 200
            }
            #expect(again, "a place freed by a closed connection was never given again")
        }
    }

    @Test("over a socket: limits.requestsPerSecond counts each connection's peer address; past the bucket 429 with Retry-After, another address is served")
    func requestsOverSocket() async throws {
        try await withServer(environment: ["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "2"]) { server in
            let first = API(port: server.port, source: "127.0.0.2")
            let (statuses, refused) = try await AbuseLimitTests.untilRefused { try await first.request("GET", "/healthz") }
            #expect(statuses.prefix(2) == [200, 200], "\(statuses)")
            let limited = try #require(refused, "no 429 in \(statuses.count) requests: \(statuses)")
            expectRateLimited(limited, "limits.requestsPerSecond", maxWait: 1)
            let second = API(port: server.port, source: "127.0.0.3")
            #expect(try await second.request("GET", "/healthz").status == 200, "another address has its own bucket")
        }
    }

    @Test("over a socket: limits.sessionsPerMinute per peer address and behind http.trustedProxies per X-Forwarded-For client; limits.dispatchesPerSecond; a trusted proxy is not held to limits.connectionsPerAddress")
    func trustedProxyOverSocket() async throws {
        let environment = [
            "STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE": "2", "STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS": "2",
            "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "2", "STATE_SERVER_HTTP_TRUSTED_PROXIES": "127.0.0.4, 10.0.0.0/8",
        ]
        try await withServer(environment: environment) { server in
            // A direct client: two sessions, then 429; another address of the machine creates.
            let client = API(port: server.port, source: "127.0.0.2")
            let first = try await createSession(client)
            #expect(first.status == 201, "\(first)")
            #expect(try await createSession(client).status == 201)
            expectRateLimited(try await createSession(client), "limits.sessionsPerMinute", maxWait: 30)
            #expect(try await createSession(API(port: server.port, source: "127.0.0.3")).status == 201, "another address")
            // Behind the trusted proxy, X-Forwarded-For names the client.
            let proxy = API(port: server.port, source: "127.0.0.4")
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.1"]).status == 201)
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.1"]).status == 201)
            expectRateLimited(try await createSession(proxy, forwardedFor: ["198.51.100.1"]), "limits.sessionsPerMinute", maxWait: 30)
            #expect(try await createSession(proxy, forwardedFor: ["198.51.100.2"]).status == 201, "another client behind the proxy")

            // limits.dispatchesPerSecond: one session as fast as it goes meets a 429. The
            // dispatches share one connection, so that no closing one is still counted against
            // connectionsPerAddress when the next opens.
            let body = try #require(first.json)
            let session = Session(api: client, id: try #require(body["id"]?.string), token: try #require(body["token"]?.string))
            let connection = try await HTTPConnection.open(port: server.port, source: "127.0.0.6")
            defer { connection.close() }
            let increment = JSON.object(["feature": "counter", "action": ["type": "increment"]]).bytes
            let (statuses, refused) = try await AbuseLimitTests.untilRefused {
                try await connection.request("POST", session.path + "/dispatch", headers: session.auth, body: increment)
            }
            #expect(statuses.prefix(2) == [200, 200], "\(statuses)")
            expectRateLimited(try #require(refused, "no 429 in 60 dispatches"), "limits.dispatchesPerSecond", maxWait: 1)

            // The proxy holds more connections than connectionsPerAddress (2) allows a client.
            var held: [HTTPConnection] = []
            defer { for connection in held { connection.close() } }
            for index in 0..<5 {
                let connection = try await HTTPConnection.open(port: server.port, source: "127.0.0.4")
                let response = try await connection.request("GET", "/healthz")
                #expect(response.status == 200, "proxy connection \(index): \(response)")
                held.append(connection)
            }
        }
    }

    @Test("0 turns every limit off: 50 sessions and 200 fast requests from one address are all served")
    func zeroMeansNoLimit() async throws {
        let environment = [
            "STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE": "0", "STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "0",
            "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0", "STATE_SERVER_LIMITS_CONNECTIONS_PER_ADDRESS": "0",
        ]
        try await withServer(environment: environment) { server in
            let client = API(port: server.port, source: "127.0.0.2")
            for _ in 0..<50 { _ = try await client.createSession() }
            let session = try await client.createSession()
            for _ in 0..<150 { try await session.dispatchOK("counter", ["type": "increment"]) }
            #expect(try await session.store("counter").version == 150)
        }
    }

    @Test("a limit setting that is not a number in range, a proxy that is not an address, an origin with a path: refused at start, naming the key",
          arguments: [
            ("STATE_SERVER_LIMITS_REQUESTS_PER_SECOND", "-1", "limits.requestsPerSecond"),
            ("STATE_SERVER_LIMITS_SESSIONS_PER_MINUTE", "many", "limits.sessionsPerMinute"),
            ("STATE_SERVER_HTTP_TRUSTED_PROXIES", "10.0.0.0/8, proxy.example", "http.trustedProxies"),
            ("STATE_SERVER_HTTP_TRUSTED_PROXIES", "10.0.0.0/33", "http.trustedProxies"),
            ("STATE_SERVER_CORS_ALLOWED_ORIGINS", "https://app.example/path", "cors.allowedOrigins"),
            ("STATE_SERVER_CORS_ALLOWED_ORIGINS", "app.example", "cors.allowedOrigins"),
          ])
    func invalidSettings(_ variable: String, _ value: String, _ key: String) async throws {
        let binary = try #require(ServerBinary.locate())
        let (process, output) = try ServerProcess.launch(binary, arguments: ["--port", "0"], environment: [variable: value])
        let ended = try await eventually(timeout: .seconds(30)) { !process.isRunning && output.allClosed }
        if !ended { process.terminate() }
        #expect(ended, "the server kept running with \(variable)=\(value): \(output.stdoutText)")
        #expect(process.terminationStatus == 64, "exit status with \(variable)=\(value)")
        #expect(output.stderrText.contains("'\(key)'"), "\(output.stderrText)")
    }
}
