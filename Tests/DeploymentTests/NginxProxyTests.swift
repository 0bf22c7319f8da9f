import Foundation
import TestSupport
import Testing

/// A real nginx (deploy/nginx/stateserver.conf.template) in front of real state-server
/// processes: requests, event streams, the body limit and failover go through it.
@Suite("Through nginx")
struct NginxProxyTests {
    @Test("a dispatch and its event arrive through nginx, unbuffered")
    func dispatchAndStream() async throws {
        try await withCluster { nginx, _ in
            let session = try await nginx.api.createSession()
            let (stream, snapshot) = try await session.subscribe()
            defer { stream.close() }
            #expect(snapshot.json?["features"]?["counter"]?["state"]?["count"]?.int == 0, "\(snapshot)")
            let reply = try await session.dispatchOK("counter", ["type": "increment", "by": 3])
            #expect(reply["version"]?.int == 1, "\(reply)")
            // The event must arrive while the stream stays open: a buffering proxy would hold it.
            let event = try await stream.nextEvent(timeout: .seconds(5))
            #expect(event.event == "state", "\(event)")
            #expect(event.json?["state"]?["count"]?.int == 3, "\(event)")
            #expect(stream.header("Content-Type")?.hasPrefix("text/event-stream") == true, "\(stream.head)")
        }
    }

    @Test("a client's forwarding header and MAC never reach a node: nginx clears both (issue 24 item 5)", arguments: ["round-robin", "hash"])
    func forwardingHeadersCleared(balance: String) async throws {
        // A backend of our own that answers once and hands back the head it received.
        let (listener, backendPort) = try loopbackSocket(listening: true)
        defer { close(listener) }
        let nginx = try await NginxProcess.start(upstreams: [backendPort], balance: balance)
        defer { Task { await nginx.stop() } }
        let received = Task { try await onThread { try Self.acceptOneHead(listener, timeout: 10) } }
        let response = try await nginx.api.request(
            "GET", "/v1/sessions/abc/state",
            headers: [("Authorization", "Bearer t"), ("StateServer-Forwarded", "2"), ("StateServer-Forwarded-MAC", "1.00"),
                      ("X-Probe", "kept")])
        #expect(response.status == 200, "\(response)")
        let head = try await received.value.lowercased()
        #expect(head.contains("x-probe: kept"), "the probe header should pass: \(head)")
        #expect(!head.contains("stateserver-forwarded"), "nginx passed a forwarding header on: \(head)")
        await nginx.stop()
    }

    /// Accepts one connection on `listener` (within `timeout` seconds), reads its request head,
    /// answers `200` with an empty body and closes; returns the head.
    static func acceptOneHead(_ listener: Int32, timeout: Int32) throws -> String {
        var ready = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&ready, 1, timeout * 1000) == 1 else { throw ClientError.timedOut("a connection from nginx") }
        let connection = accept(listener, nil, nil)
        guard connection >= 0 else { throw ClientError.system("accept", errno) }
        defer { close(connection) }
        var head: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !head.suffix(4).elementsEqual(Array("\r\n\r\n".utf8)) {
            var wait = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            guard poll(&wait, 1, timeout * 1000) == 1 else { throw ClientError.timedOut("the request head from nginx") }
            let count = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            head += chunk[0..<count]
        }
        let reply = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".utf8)
        _ = reply.withUnsafeBytes { write(connection, $0.baseAddress, $0.count) }
        return String(decoding: head, as: UTF8.self)
    }

    @Test("bodies just over the server's limit get the server's 413; far over, nginx's 413 in the same JSON shape")
    func bodyLimit() async throws {
        try await withCluster { nginx, _ in
            let session = try await nginx.api.createSession()
            let over = padded(["feature": "counter", "action": ["type": "increment"]], to: 65537)
            expectError(try await session.request("POST", "/dispatch", body: over), 413, "payload_too_large", "from the server")
            let farOver = padded(["feature": "counter", "action": ["type": "increment"]], to: 300_000)
            let response = try await session.request("POST", "/dispatch", body: farOver)
            expectError(response, 413, "payload_too_large", "from nginx")
            #expect(response.header("Content-Type")?.hasPrefix("application/json") == true, "\(response)")
        }
    }

    @Test("round robin over the nodes; a stopped node is skipped for GET and for a POST it never received")
    func roundRobinAndFailover() async throws {
        try await withCluster(nodes: 2) { nginx, servers in
            // Memory storage: each session lives on the node that created it.
            var sessions: [Session] = []
            for _ in 0..<4 { sessions.append(try await nginx.api.createSession()) }
            var perNode: [Int] = []
            for server in servers {
                var count = 0
                for session in sessions {
                    let direct = Session(api: server.api, id: session.id, token: session.token)
                    if try await direct.request("GET", "/state/counter").status == 200 { count += 1 }
                }
                perNode.append(count)
            }
            #expect(perNode == [2, 2], "sessions per node: \(perNode)")

            await servers[1].stop()
            for _ in 0..<6 {
                let health = try await nginx.api.request("GET", "/healthz")
                #expect(health.status == 200, "\(health)")
                // Connection refused: the POST was never sent, so nginx may and does try the next node.
                let created = try await nginx.api.request("POST", "/v1/sessions")
                #expect(created.status == 201, "\(created)")
            }
        }
    }

    @Test("a dispatch a node received and died on is not sent to another node; a GET is")
    func noSecondDispatch() async throws {
        let dead = try DeadNode()
        defer { dead.stop() }
        try await withServer(arguments: ["--storage", "memory"]) { server in
            let nginx = try await NginxProcess.start(upstreams: [dead.port, server.port])
            do {
                try await Self.checkRetries(nginx: nginx, server: server, dead: dead)
            } catch {
                await nginx.stop()
                throw error
            }
            await nginx.stop()
        }
    }

    private static func checkRetries(nginx: NginxProcess, server: ServerProcess, dead: DeadNode) async throws {
        // The session lives on the real node; through nginx, round robin alternates.
        let session = try await server.api.createSession()
        let proxied = Session(api: nginx.api, id: session.id, token: session.token)
        var statuses: [Int] = []
        for _ in 0..<2 {
            statuses.append(try await proxied.dispatch("counter", ["type": "increment"]).status)
        }
        #expect(statuses.sorted() == [200, 502], "dispatch statuses: \(statuses)")
        let posts = dead.requestLines.filter { $0.hasPrefix("POST ") }
        #expect(posts.count == 1, "the dead node got \(dead.requestLines)")
        // Only the dispatch the live node got ran: the one the dead node took was not re-sent.
        #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))

        for _ in 0..<2 {
            let read = try await proxied.request("GET", "/state/counter")
            #expect(read.status == 200, "GET through nginx: \(read)")
        }
        #expect(dead.requestLines.contains { $0.hasPrefix("GET ") }, "no GET was tried on the dead node: \(dead.requestLines)")
    }
}

/// Issue 16 items 1 and 11 through the shipped nginx configuration.
@Suite("Through nginx: exact HTTP")
struct NginxExactHTTPTests {
    @Test("11: the access log has no query strings (EventSource's access_token)")
    func accessLogWithoutToken() async throws {
        try await withCluster { nginx, _ in
            let session = try await nginx.api.createSession()
            let (stream, _) = try await session.subscribe(query: "access_token=\(session.token)")
            stream.close()
            let read = try await nginx.api.request("GET", "/v1/sessions/\(session.id)/state?access_token=\(session.token)&marker=1", headers: session.auth)
            #expect(read.status == 200, "\(read)")
            let log = nginx.prefix.appendingPathComponent("logs/access.log")
            let text: () -> String = { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
            let logged = try await eventually { text().contains("/v1/sessions/\(session.id)/state ") }
            #expect(logged, "the access log has the request: \(text())")
            #expect(!text().contains(session.token), "the token is in nginx's access log: \(text())")
            #expect(!text().contains("marker=1"), "query strings are in nginx's access log: \(text())")
        }
    }

    @Test("1: HEAD on the event stream through nginx's upstream keep-alive leaves the next replies intact")
    func headOnEventsKeepsUpstreamFraming() async throws {
        try await withCluster { nginx, _ in
            let session = try await nginx.api.createSession()
            for _ in 0..<5 {
                let head = try await nginx.api.request("HEAD", "/v1/sessions/\(session.id)/events", headers: session.auth)
                #expect(head.status == 405, "\(head)")
                #expect(head.header("Allow") == "GET", "\(head)")
                for _ in 0..<4 {
                    let read = try await session.request("GET", "/state/counter")
                    #expect(read.status == 200, "\(read)")
                    #expect(read.json?["feature"]?.string == "counter", "\(read)")
                }
            }
        }
    }
}
