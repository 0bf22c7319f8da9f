import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Presence with several nodes on one PostgreSQL: streams on every node count (a stream that
/// reaches another node is relayed from the owner, where it joins), every node lists them, and
/// a node that dies takes its streams' entries with it.
@Suite("Presence across nodes on PostgreSQL", .serialized, .postgres)
struct PresenceOnPostgresTests {
    /// The labels `GET .../presence` lists through `session`'s node.
    static func labels(_ session: Session) async throws -> [String] {
        let response = try await session.request("GET", "/presence")
        try #require(response.status == 200, "\(response)")
        return try #require(response.json?["present"]?.array).compactMap { $0["label"]?.string }
    }

    /// The next `presence` event's data.
    static func presence(_ stream: EventStream, _ what: String) async throws -> JSON {
        let event = try await nextEvent(stream, what)
        try #require(event.event == "presence" && event.id == nil, "\(what): \(event)")
        return try #require(event.json, "\(what): \(event)")
    }

    @Test("streams on three nodes: every node lists all three, each stream hears the others; a node SIGKILLed takes its stream's entry with it")
    func acrossNodes() async throws {
        try await withCluster(nodes: 3) { cluster in
            let (a, b, c) = (cluster.nodes[0], cluster.nodes[1], cluster.nodes[2])
            // Owned by B (it created it); A and C relay their streams from B.
            let owned = try await b.api.createSession()
            let onB = cluster.session(owned, on: b.api)
            let onA = cluster.session(owned, on: a.api)
            let onC = cluster.session(owned, on: c.api)

            let (streamB, _) = try await onB.subscribe(query: "presence=on-b")
            defer { streamB.close() }
            #expect(try await Self.presence(streamB, "B hears itself")["joined"]?["label"] == "on-b")
            let (streamA, _) = try await onA.subscribe(query: "presence=on-a")
            defer { streamA.close() }
            #expect(try await Self.presence(streamA, "A hears B")["joined"]?["label"] == "on-b")
            #expect(try await Self.presence(streamA, "A hears itself")["joined"]?["label"] == "on-a")
            #expect(try await Self.presence(streamB, "B hears A")["joined"]?["label"] == "on-a")
            let (streamC, _) = try await onC.subscribe(query: "presence=on-c")
            defer { streamC.close() }
            for _ in 0..<3 { _ = try await Self.presence(streamC, "C hears everyone") }
            let joinedC = try await Self.presence(streamA, "A hears C")["joined"]
            #expect(joinedC?["label"] == "on-c")
            #expect(try await Self.presence(streamB, "B hears C")["joined"] == joinedC)

            for session in [onA, onB, onC] {
                #expect(try await Self.labels(session) == ["on-b", "on-a", "on-c"])
            }
            // Presence takes no sequence number on any node: a change is still 1 everywhere.
            try await onC.dispatchOK("counter", ["type": "increment"])
            for stream in [streamA, streamB, streamC] {
                let event = try await nextEvent(stream, "the change")
                #expect(event.event == "state" && event.seq == 1, "\(event)")
            }

            // C dies: its relayed connection to B closes with it, and its stream leaves.
            let killed = ContinuousClock.now
            let exit = await c.stop(signal: SIGKILL)
            #expect(exit.bySignal, "\(exit)")
            let left = try await Self.presence(streamA, "A hears C leave")
            #expect(left["left"] == joinedC, "\(left)")
            #expect(try await Self.presence(streamB, "B hears C leave")["left"] == joinedC)
            #expect(ContinuousClock.now - killed < .seconds(5), "C's entry left after \(ContinuousClock.now - killed)")
            #expect(try await Self.labels(onA) == ["on-b", "on-a"])

            // A stream relayed through A that closes leaves at once too.
            streamA.close()
            try await waitUntil("A's stream left") { try await Self.labels(onB) == ["on-b"] }
        }
    }
}
