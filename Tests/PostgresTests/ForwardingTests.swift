import Foundation
import StatePersistence
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Forwarding between real nodes on one real PostgreSQL (issue 24 items 4 to 6): relayed event
/// streams do not starve requests, a forward that never left the node says nothing was
/// applied, only a peer may say it is forwarding, and the body limit holds on the way to the
/// owner; issue 36 item 11: a forwarding MAC is believed once, and a node forwards the client
/// address it determined, never the client's own `X-Forwarded-For`.
@Suite("Forwarding between nodes on PostgreSQL", .serialized, .postgres)
struct ForwardingTests {
    static let adminToken = "forwarding-admin-token"

    // MARK: Item 4: relayed event streams

    @Test("more event streams relayed through A than its request pool holds: a read and a dispatch of another session through A still succeed; relayed streams count in A's streams.total")
    func streamsDoNotStarveRequests() async throws {
        // 72 streams: more than the 64 connections A keeps per owner for requests, and exactly
        // streams.total on every node.
        try await withCluster(nodes: 2, environment: ["STATE_SERVER_STREAMS_TOTAL": "72"]) { cluster in
            let (a, b) = (cluster.nodes[0].api, cluster.nodes[1].api)
            var watched: [Session] = []
            for _ in 0..<3 { watched.append(try await b.createSession()) }
            var streams: [EventStream] = []
            defer { for stream in streams { stream.close() } }
            for index in 0..<72 {
                let (stream, _) = try await cluster.session(watched[index % 3], on: a).subscribe()
                streams.append(stream)
            }

            // Another session owned by B, read and changed through A.
            let other = try await b.createSession()
            let throughA = cluster.session(other, on: a)
            let started = ContinuousClock.now
            #expect(try await throughA.store("counter") == StoreState(version: 0, state: ["count": 0]))
            let reply = try await throughA.dispatchOK("counter", ["type": "increment", "by": 2])
            #expect(reply["version"]?.int == 1, "\(reply)")
            #expect(ContinuousClock.now - started < .seconds(1), "no wait for a pooled connection: \(ContinuousClock.now - started)")
            #expect(try await cluster.session(other, on: b).store("counter") == StoreState(version: 1, state: ["count": 2]))

            // The streams still flow: a change reaches one relayed through A.
            try await cluster.session(watched[0], on: b).dispatchOK("counter", ["type": "increment"])
            let event = try await nextEvent(streams[0], "a relayed stream: the change made on B")
            #expect(event.event == "state" && event.seq == 1, "\(event)")

            // A counts the 72 it relays: its own session's stream is refused by A.
            let mine = try await a.createSession()
            let refused = try await mine.events()
            #expect(refused.status == 429, "\(refused.head)")
            expectError(try await refused.readErrorBody(), 429, "too_many_streams")

            // Closed, they give their slots back.
            for stream in streams { stream.close() }
            streams = []
            #expect(try await eventually(timeout: .seconds(10)) {
                let stream = try await mine.events()
                defer { stream.close() }
                return stream.status == 200
            }, "A's slots were never given back")
        }
    }

    @Test("a forward that never left A (no pooled connection came free: the owner is stopped with every connection busy) is 503 owner_unavailable, nothing applied — never outcome_unknown")
    func unsentForwardIsOwnerUnavailable() async throws {
        // A long lease: the stopped owner stays the owner while the test runs.
        try await withCluster(nodes: 2, environment: ["STATE_SERVER_CLUSTER_LEASE": "10"]) { cluster in
            let (a, b) = (cluster.nodes[0], cluster.nodes[1])
            let read = try await b.api.createSession()
            let changed = try await b.api.createSession()

            kill(b.pid, SIGSTOP)
            var resumed = false
            defer { if !resumed { kill(b.pid, SIGCONT) } }
            // 64 reads through A: each holds one of A's pooled connections to B (the kernel
            // accepts them; B does not answer while stopped).
            let reads = Task {
                await withTaskGroup(of: Int?.self) { group in
                    for _ in 0..<64 {
                        group.addTask {
                            try? await cluster.session(read, on: a.api).request("GET", "/state/counter").status
                        }
                    }
                    var statuses: [Int?] = []
                    for await status in group { statuses.append(status) }
                    return statuses
                }
            }
            #expect(try await eventually(timeout: .seconds(10)) { Self.establishedConnections(toPort: b.port) >= 64 },
                "A never held 64 connections to B: \(Self.establishedConnections(toPort: b.port))")

            let started = ContinuousClock.now
            let dispatch = try await cluster.session(changed, on: a.api).dispatch("counter", ["type": "increment"])
            let waited = ContinuousClock.now - started
            expectError(dispatch, 503, "owner_unavailable", messageContains: "nothing was applied")
            #expect(waited < .seconds(5), "answered after the pool's wait, not the reply timeout: \(waited)")

            kill(b.pid, SIGCONT)
            resumed = true
            let statuses = await reads.value
            #expect(statuses.allSatisfy { $0 == 200 }, "the reads were sent and answered once B resumed: \(statuses)")
            #expect(try await cluster.session(changed, on: b.api).store("counter") == StoreState(version: 0, state: ["count": 0]))
        }
    }

    /// Established TCP connections (IPv4) whose remote port is `port`, from /proc/net/tcp.
    static func establishedConnections(toPort port: Int) -> Int {
        // Read to the end (a /proc file says its size is 0).
        guard let data = try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/net/tcp")).readToEnd() else { return 0 }
        let table = String(decoding: data, as: UTF8.self)
        let wanted = String(format: "%04X", port)
        return table.split(separator: "\n").dropFirst().filter { line in
            let fields = line.split(separator: " ")
            guard fields.count > 3 else { return false }
            return fields[2].hasSuffix(":" + wanted) && fields[3] == "01"
        }.count
    }

    // MARK: Item 5: the forwarding header

    /// The epoch of the node advertising `port`, from PostgreSQL.
    static func epoch(of node: ServerProcess, in cluster: Cluster) throws -> Int {
        try epoch(advertisedOn: node.port, in: cluster)
    }

    /// The epoch of the node whose advertised URL has `port`, from PostgreSQL.
    static func epoch(advertisedOn port: Int, in cluster: Cluster) throws -> Int {
        let line = try cluster.postgres.sql(
            "SELECT epoch FROM state_nodes WHERE url LIKE '%:\(port)'", in: cluster.databaseURL)
        return try #require(Int(line.trimmingCharacters(in: .whitespaces)), "epoch of node on \(port): \(line)")
    }

    /// The owner (an epoch) of a session, from PostgreSQL.
    static func owner(of session: Session, in cluster: Cluster) throws -> Int? {
        let line = try cluster.postgres.sql("SELECT owner FROM state_sessions WHERE id = '\(session.id)'", in: cluster.databaseURL)
        return Int(line.trimmingCharacters(in: .whitespaces))
    }

    @Test("a forged StateServer-Forwarded (no MAC, a made-up MAC) with the session's token or the admin token is served as the client's own request and never moves the session; real forwarding still does")
    func forgedHeaderMovesNothing() async throws {
        let hash = SHA256.hash(Self.adminToken).map { String(format: "%02x", $0) }.joined()
        try await withCluster(nodes: 2, environment: ["STATE_SERVER_ADMIN_TOKEN_HASH": hash]) { cluster in
            let (a, b) = (cluster.nodes[0], cluster.nodes[1])
            let (epochA, epochB) = (try Self.epoch(of: a, in: cluster), try Self.epoch(of: b, in: cluster))
            let session = try await a.api.createSession()
            let admin = Session(api: a.api, id: session.id, token: Self.adminToken)
            #expect(try Self.owner(of: session, in: cluster) == epochA)

            let now = Int(Date().timeIntervalSince1970)
            let forgeries: [[Header]] = [
                [("StateServer-Forwarded", "\(epochB)")],
                [("StateServer-Forwarded", "\(epochB)"), ("StateServer-Forwarded-MAC", "\(now).\(String(repeating: "ab", count: 32))")],
                [("StateServer-Forwarded", "\(epochB)"), ("StateServer-Forwarded-MAC", "garbage")],
            ]
            for headers in forgeries {
                for _ in 0..<4 {
                    let read = try await session.request("GET", "/state/counter", headers: headers)
                    #expect(read.status == 200, "served as the client's request: \(read)")
                    let history = try await admin.request("GET", "/history", headers: headers)
                    #expect(history.status == 200, "the admin's read served: \(history)")
                }
            }
            let dispatched = try await session.request(
                "POST", "/dispatch", headers: forgeries[0], body: JSON.object(["feature": "counter", "action": ["type": "increment"]]).bytes)
            #expect(dispatched.status == 200, "\(dispatched)")

            // Real forwarding moves a session after three requests: once another session has
            // moved that way (its handover queued after every forged request's answer), the
            // forged ones had their chance.
            let control = try await a.api.createSession()
            for _ in 0..<3 { _ = try await cluster.session(control, on: b.api).store("counter") }
            #expect(try await eventually(timeout: .seconds(10)) { try Self.owner(of: control, in: cluster) == epochB },
                "the control session did not move to B")
            #expect(try Self.owner(of: session, in: cluster) == epochA, "a forged header moved the session")
            #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
        }
    }

    // MARK: Issue 36 item 11: a forwarded request's MAC is good once, for that request

    @Test("a forwarded dispatch caught on the wire, delivered to the owner, then replayed 30 times as it was and 30 times with new Idempotency-Keys: only the first is believed; every replay is the sender's own request, counted by limits.requestsPerSecond, and the session stays")
    func replayedForwardIsNotBelieved() async throws {
        // B advertises the recorder: what A forwards to B lands there, and B never sees it.
        let recorder = try RecordingNode()
        defer { recorder.stop() }
        try await withCluster(
            nodes: 2, environment: ["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "2"],
            perNode: [1: ["STATE_SERVER_CLUSTER_ADVERTISE_URL": recorder.url]]
        ) { cluster in
            let (a, b) = (cluster.nodes[0], cluster.nodes[1])
            // Each role its own address, so its own bucket: the owner's reads, the client, the
            // one who replays.
            let owner = try await API(port: b.port, source: "127.0.0.3").createSession()
            let client = Session(api: API(port: a.port, source: "127.0.0.2"), id: owner.id, token: owner.token)
            let dispatch = JSON.object(["feature": "counter", "action": ["type": "increment"]]).bytes
            let sent = try await client.request("POST", "/dispatch", headers: [("Idempotency-Key", "k-0")], body: dispatch)
            #expect(sent.status == 200, "the recorder's answer, relayed by A: \(sent)")
            let captured = try #require(recorder.requests.first, "A forwarded nothing to B's advertised URL")
            #expect(captured.header("StateServer-Forwarded-MAC") != nil, "\(captured.headers)")

            // Delivered to B once: A's MAC is valid and fresh.
            let first = try await captured.send(toPort: b.port, from: "127.0.0.4")
            #expect(first.status == 200 && first.json?["version"]?.int == 1, "\(first)")

            var replays: [Int] = []
            for _ in 0..<30 { replays.append(try await captured.send(toPort: b.port, from: "127.0.0.4").status) }
            var rekeyed: [HTTPResponse] = []
            for index in 1...30 {
                rekeyed.append(try await captured.replacing("Idempotency-Key", with: "k-\(index)").send(toPort: b.port, from: "127.0.0.4"))
            }
            #expect(replays.contains(429), "a replay skipped limits.requestsPerSecond: \(replays)")
            #expect(replays.allSatisfy { $0 == 200 || $0 == 429 }, "\(replays)")
            #expect(rekeyed.contains { $0.status == 429 }, "a replay skipped limits.requestsPerSecond: \(rekeyed.map(\.status))")
            for response in rekeyed where response.status != 200 { expectError(response, 429, "rate_limited") }
            // What passed was the sender's own request (its token is in it): applied once each.
            let applied = rekeyed.filter { $0.status == 200 }.count
            #expect(try await owner.store("counter") == StoreState(version: 1 + applied, state: ["count": .int(1 + applied)]))
            // Believed once, never three times in a row from A: the session stays on B.
            #expect(try Self.owner(of: owner, in: cluster) == Self.epoch(advertisedOn: recorder.port, in: cluster))
        }
    }

    @Test("a client's own X-Forwarded-For sent to A is not passed on: A states the address it got the request from, and B, when it cannot verify A's MAC, counts the request for that address")
    func clientForwardedForNotPassedOn() async throws {
        // On the wire: B advertises the recorder.
        let recorder = try RecordingNode()
        defer { recorder.stop() }
        try await withCluster(nodes: 2, perNode: [1: ["STATE_SERVER_CLUSTER_ADVERTISE_URL": recorder.url]]) { cluster in
            let (a, b) = (cluster.nodes[0], cluster.nodes[1])
            let owner = try await b.api.createSession()
            let client = Session(api: API(port: a.port, source: "127.0.0.2"), id: owner.id, token: owner.token)
            _ = try await client.request("GET", "/state/counter", headers: [("X-Forwarded-For", "198.51.100.7")])
            let forwarded = try #require(recorder.requests.first, "A forwarded nothing to B's advertised URL")
            #expect(!forwarded.headers.contains { $0.value.contains("198.51.100.7") }, "the client's own address passed on: \(forwarded.headers)")
            #expect(forwarded.values("X-Forwarded-For") == ["127.0.0.2"], "\(forwarded.headers)")
        }
        // B's count. B has another cluster.secret, so it never believes A's MAC (as after a
        // clock skew past 60 s): A's forwards are requests from a trusted proxy (127.0.0.1 is
        // listed), counted for the address its X-Forwarded-For names.
        try await withCluster(
            nodes: 2, environment: ["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "1"],
            perNode: [
                0: ["STATE_SERVER_LIMITS_REQUESTS_PER_SECOND": "1000"],
                1: ["STATE_SERVER_CLUSTER_SECRET": "another-cluster-secret-0123456789abcdef-0123456789"],
            ]
        ) { cluster in
            let (a, b) = (cluster.nodes[0], cluster.nodes[1])
            let owner = try await API(port: b.port, source: "127.0.0.3").createSession()
            let direct = Session(api: API(port: b.port, source: "127.0.0.2"), id: owner.id, token: owner.token)
            let throughA = Session(api: API(port: a.port, source: "127.0.0.2"), id: owner.id, token: owner.token)
            // 127.0.0.2's bucket on B emptied, then at once a request of 127.0.0.2 through A
            // that names a new address of its own each time: B refuses it.
            var attempt = 0
            var seen: [Int] = []
            let refused = try await eventually(timeout: .seconds(10)) {
                attempt += 1
                var emptied = false
                for _ in 0..<10 where !emptied { emptied = try await direct.request("GET", "/state/counter").status == 429 }
                guard emptied else { return false }
                let through = try await throughA.request(
                    "GET", "/state/counter", headers: [("X-Forwarded-For", "198.51.100.\(attempt % 250 + 1)")])
                seen.append(through.status)
                return through.status == 429
            }
            #expect(refused, "B counted A's forwards for the addresses the client wrote: \(seen)")
        }
    }

    @Test("a node on PostgreSQL without cluster.secret, or with one too short, refuses to start and says why")
    func secretRequired() async throws {
        let postgres = try TestPostgres.shared()
        let storage = try postgres.makeDatabase() + "?sslmode=disable"
        for (secret, said) in [("", "'cluster.secret' is required"), ("short", "cluster.secret")] {
            do {
                let server = try await ServerProcess.start(
                    arguments: ["--storage", storage], environment: ["STATE_SERVER_CLUSTER_SECRET": secret])
                await server.stop()
                Issue.record("started with cluster.secret \(secret.debugDescription)")
            } catch let error as ServerStartError {
                #expect(error.description.contains(said), "\(error)")
                #expect(!error.description.contains(ServerProcess.clusterSecret))
            }
        }
    }

    // MARK: Item 6: the body limit on the way to the owner

    @Test("over the body limit through a node that does not own the session: DELETE and dispatch are 413 payload_too_large, and nothing happens")
    func bodyLimitThroughNonOwner() async throws {
        try await withCluster(nodes: 2) { cluster in
            let (a, b) = (cluster.nodes[0].api, cluster.nodes[1].api)
            let session = try await a.createSession()
            try await session.dispatchOK("counter", ["type": "increment"])
            let throughB = cluster.session(session, on: b)
            let body = padded(["feature": "counter", "action": ["type": "increment"]], to: 70_000)

            expectError(try await throughB.request("DELETE", "", body: body), 413, "payload_too_large")
            expectError(try await throughB.request("POST", "/dispatch", body: body), 413, "payload_too_large")
            // The same as straight to the owner.
            expectError(try await session.request("DELETE", "", body: body), 413, "payload_too_large")
            expectError(try await session.request("POST", "/dispatch", body: body), 413, "payload_too_large")

            #expect(try await session.store("counter") == StoreState(version: 1, state: ["count": 1]))
            #expect(try await throughB.store("counter") == StoreState(version: 1, state: ["count": 1]))
        }
    }
}
