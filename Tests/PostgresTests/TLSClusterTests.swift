import Foundation
import TestSupport
import Testing

/// Several nodes that serve HTTPS themselves (issue 25 item 5): each advertises an `https://`
/// URL, and forwards to the others over TLS, verifying their certificates against
/// `cluster.caFile`. Each node has its own throwaway self-signed certificate (for 127.0.0.1);
/// clients speak to the nodes through curl, verifying them too.
@Suite("Nodes serving HTTPS on PostgreSQL", .serialized, .postgres)
struct TLSClusterTests {
    /// Two nodes on a fresh database, each with its own certificate; with `trustEachOther`,
    /// both get a `cluster.caFile` holding both certificates.
    func withTLSNodes(trustEachOther: Bool, _ body: (_ a: API, _ b: API, _ database: String) async throws -> Void) async throws {
        let postgres = try TestPostgres.shared()
        let database = try postgres.makeDatabase()
        try await withTemporaryDirectory { directory in
            let certificates = [try await TestCertificate.make(in: directory, name: "a"), try await TestCertificate.make(in: directory, name: "b")]
            let bundle = directory.path("nodes.pem")
            var pem = Data()
            for certificate in certificates { pem += try Data(contentsOf: URL(fileURLWithPath: certificate.certificatePath)) }
            try pem.write(to: URL(fileURLWithPath: bundle))
            var nodes: [ServerProcess] = []
            do {
                for certificate in certificates {
                    nodes.append(try await ServerProcess.start(
                        arguments: ["--storage", database + "?sslmode=disable"] + certificate.serverArguments,
                        environment: ["STATE_SERVER_CLUSTER_LEASE": "2"].merging(trustEachOther ? ["STATE_SERVER_CLUSTER_CA_FILE": bundle] : [:]) { $1 }))
                }
                let apis = zip(nodes, certificates).map { API(transport: CurlTransport(port: $0.port, caFile: $1.certificatePath)) }
                try await body(apis[0], apis[1], database)
            } catch {
                for node in nodes { await node.stop() }
                throw error
            }
            for node in nodes {
                let exit = await node.stop()
                #expect(exit.exitedByItself && exit.status == 0, "\(exit); stderr: \(node.output.stderrText.suffix(2000))")
            }
        }
    }

    @Test("nodes advertise https://, and forward requests and event streams to each other over TLS when cluster.caFile trusts their certificates")
    func forwardingOverTLS() async throws {
        try await withTLSNodes(trustEachOther: true) { a, b, database in
            let urls = try TestPostgres.shared().sql("SELECT string_agg(url, ',' ORDER BY url) FROM state_nodes", in: database)
            let expected = [a.port, b.port].map { "https://127.0.0.1:\($0)" }.sorted().joined(separator: ",")
            #expect(urls == expected, "advertised: \(urls)")

            // A session owned by B, used through A: every request crosses from A to B over TLS.
            let owned = try await b.createSession()
            let throughA = Session(api: a, id: owned.id, token: owned.token)
            let (stream, snapshot) = try await throughA.subscribe()
            defer { stream.close() }
            #expect(snapshot.seq == 0)
            let reply = try await throughA.dispatchOK("counter", ["type": "increment", "by": 5])
            #expect(reply["version"] == 1, "\(reply)")
            #expect(try await owned.store("counter") == StoreState(version: 1, state: ["count": 5]))
            let event = try await nextEvent(stream, "the change, relayed from B through A")
            #expect(event.event == "state" && event.seq == 1, "\(event)")
        }
    }

    @Test("a node that does not trust the owner's certificate answers 503 owner_unavailable and applies nothing")
    func untrustedOwner() async throws {
        try await withTLSNodes(trustEachOther: false) { a, b, _ in
            let owned = try await b.createSession()
            let throughA = Session(api: a, id: owned.id, token: owned.token)
            let refused = try await throughA.dispatch("counter", ["type": "increment"])
            expectError(refused, 503, "owner_unavailable")
            #expect(try await owned.store("counter") == StoreState(version: 0, state: ["count": 0]))
        }
    }
}
