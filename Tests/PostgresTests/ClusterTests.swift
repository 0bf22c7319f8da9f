import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Three real `state-server` nodes on one real PostgreSQL database, behind a real nginx
/// (issue 9): no lost or doubled change under concurrent load from every entry point, events
/// across nodes, `Last-Event-ID` on another node, and a node SIGKILLed under load.
/// PostgreSQL stopped under load is in `NodesOnPostgresTests.outage`.
///
/// Every wait polls for its condition with a deadline; the load is bounded in requests.
@Suite("A cluster: three nodes on PostgreSQL behind nginx", .serialized, .postgres)
struct ClusterTests {
    @Test("concurrent increments through three nodes and nginx: every one applied once, versions 1...N in replies and journal")
    func concurrentIncrements() async throws {
        // 192 increments of one session within a second or two: a load test, not a client, so
        // without limits.dispatchesPerSecond.
        try await withCluster(environment: ["STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0"]) { cluster in
            let (a, b, c) = (cluster.nodes[0].api, cluster.nodes[1].api, cluster.nodes[2].api)
            let session = try await a.createSession()
            let entries: [(name: String, api: API)] = [("A", a), ("B", b), ("C", c), ("nginx", cluster.nginx.api)]
            let workersPerEntry = 6
            let perWorker = 8
            let total = entries.count * workersPerEntry * perWorker
            let load = Load()
            await withTaskGroup(of: Void.self) { group in
                for entry in entries {
                    for _ in 0..<workersPerEntry {
                        group.addTask { await Self.incrementUntilApplied(entry, session, times: perWorker, load: load) }
                    }
                }
            }
            let answers = load.all
            let refused = answers.filter { !$0.acknowledged && $0.code != "write_contention" }
            #expect(refused.isEmpty, "answers other than 200 and 503 write_contention: \(refused.prefix(5))")
            let versions = load.acknowledged().compactMap(\.version).sorted()
            #expect(versions == Array(1...total), "reply versions: \(versions.count) of \(total), duplicates: \(Self.duplicates(versions))")
            for (name, api) in entries {
                let store = try await cluster.session(session, on: api).store("counter")
                #expect(store == StoreState(version: total, state: ["count": .int(total)]), "read through \(name)")
            }
            let journal = try cluster.counterJournal(session.id)
            #expect(journal.map(\.version) == Array(1...total), "journal versions")
            #expect(journal.map(\.seq) == Array(1...total), "journal sequence numbers")
        }
    }

    @Test("a stream on node B gets a change made on node A at once; so does a stream through nginx")
    func liveAcrossNodes() async throws {
        try await withCluster { cluster in
            let (a, b, c) = (cluster.nodes[0].api, cluster.nodes[1].api, cluster.nodes[2].api)
            let session = try await a.createSession()
            let (onB, _) = try await cluster.session(session, on: b).subscribe()
            defer { onB.close() }
            let (throughNginx, _) = try await cluster.session(session, on: cluster.nginx.api).subscribe()
            defer { throughNginx.close() }

            try await session.dispatchOK("counter", ["type": "increment"])
            let first = try await nextEvent(onB, "B: the change made on A")
            #expect(first.seq == 1 && first.event == "state", "\(first)")
            #expect(first.json?["state"]?["count"]?.int == 1, "\(first)")

            // Changes on two other nodes, in turn: B sees both, in order.
            try await cluster.session(session, on: c).dispatchOK("counter", ["type": "increment"])
            try await session.dispatchOK("counter", ["type": "increment", "by": 5])
            let next = [try await nextEvent(onB, "B: the change made on C"), try await nextEvent(onB, "B: the second change made on A")]
            #expect(next.map(\.seq) == [2, 3], "\(next)")
            #expect(next.last?.json?["state"]?["count"]?.int == 7, "\(next)")

            // The stream through nginx is on one of the nodes; it sees all three, whichever.
            var seen: [Int] = []
            for n in 1...3 { seen.append(try await nextEvent(throughNginx, "through nginx: change \(n)").seq ?? -1) }
            #expect(seen == [1, 2, 3])
        }
    }

    @Test("Last-Event-ID: a client that read part of the events on node B resumes on node C, and through nginx, with no gap and no duplicate")
    func resumeOnAnotherNode() async throws {
        try await withCluster { cluster in
            let (a, b, c) = (cluster.nodes[0].api, cluster.nodes[1].api, cluster.nodes[2].api)
            let session = try await a.createSession()
            let onB = cluster.session(session, on: b)
            let onC = cluster.session(session, on: c)
            let (streamB, _) = try await onB.subscribe()
            for _ in 0..<3 { try await onB.dispatchOK("counter", ["type": "increment"]) }
            var read: [Int] = []
            for n in 1...3 { read.append(try await nextEvent(streamB, "B: its own change \(n)").seq ?? -1) }
            #expect(read == [1, 2, 3])
            streamB.close()

            // Meanwhile changes land on A and C.
            try await session.dispatchOK("counter", ["type": "increment"])
            try await onC.dispatchOK("todos", ["type": "add", "title": "on C"])
            try await session.dispatchOK("counter", ["type": "increment"])
            try await onC.dispatchOK("counter", ["type": "increment"])

            let resumed = try await onC.events(headers: [("Last-Event-ID", "3")])
            defer { resumed.close() }
            #expect(resumed.status == 200, "\(resumed.head)")
            var replayed: [SSEEvent] = []
            for n in 4...7 { replayed.append(try await nextEvent(resumed, "C: replay of \(n)")) }
            #expect(replayed.map(\.seq) == [4, 5, 6, 7], "\(replayed)")
            #expect(replayed.allSatisfy { $0.event == "state" }, "no snapshot on a resume: \(replayed)")
            #expect(replayed[1].json?["feature"]?.string == "todos", "\(replayed[1])")
            #expect(replayed[3].json?["state"]?["count"]?.int == 6, "\(replayed[3])")
            // The next change comes next: nothing replayed twice.
            try await onC.dispatchOK("counter", ["type": "increment"])
            let live = try await nextEvent(resumed, "C: its own change after the replay")
            #expect(live.seq == 8, "\(live)")

            // Through nginx, from wherever it lands.
            let proxied = try await cluster.session(session, on: cluster.nginx.api).events(headers: [("Last-Event-ID", "5")])
            defer { proxied.close() }
            #expect(proxied.status == 200, "\(proxied.head)")
            var viaNginx: [Int] = []
            for n in 6...8 { viaNginx.append(try await nextEvent(proxied, "through nginx: replay of \(n)").seq ?? -1) }
            #expect(viaNginx == [6, 7, 8])
        }
    }

    @Test("SIGKILL of a node under load: every acknowledged change is in PostgreSQL, the other nodes keep serving, its stream resumes elsewhere with no gap")
    func nodeKilledUnderLoad() async throws {
        try await withCluster { cluster in
            let (a, b, victim) = (cluster.nodes[0], cluster.nodes[1], cluster.nodes[2])
            var created: [Session] = []
            for _ in 0..<4 { created.append(try await a.api.createSession()) }
            let sessions = created
            let watched = sessions[0]

            // A client of the victim watches a session there.
            let (victimStream, _) = try await cluster.session(watched, on: victim.api).subscribe()
            let beforeKill = StreamReader(victimStream)
            defer { beforeKill.stop() }

            // Clients of every entry point; the victim's move to A once it is gone.
            let load = Load()
            let entryPoints: [[(name: String, api: API)]] = [
                [("A", a.api)], [("B", b.api)], [("C", victim.api), ("A", a.api)], [("nginx", cluster.nginx.api)],
            ]
            let workers = Task {
                await withTaskGroup(of: Void.self) { group in
                    for entries in entryPoints {
                        for _ in 0..<3 {
                            group.addTask { await load.worker(entries, sessions: sessions.shuffled(), limit: 2_000) }
                        }
                    }
                }
            }
            defer { load.stop() }

            let warm = try await eventually(timeout: .seconds(30)) {
                load.acknowledged().count >= 100 && load.acknowledged().contains { $0.entry == "C" }
                    && beforeKill.seqs.count >= 3
            }
            try #require(warm, "no load before the kill: \(load.all.suffix(5)); stream: \(beforeKill.seqs)")

            let killedAt = ContinuousClock.now
            let exit = await victim.stop(signal: SIGKILL)
            #expect(exit.bySignal && exit.status == SIGKILL, "\(exit)")

            // The other nodes, and nginx, keep acknowledging changes.
            let serving = try await eventually(timeout: .seconds(30)) {
                let after = load.acknowledged(after: killedAt)
                return ["A", "B", "nginx"].allSatisfy { name in after.filter { $0.entry == name }.count >= 30 }
            }
            #expect(serving, "after the kill: \(Dictionary(grouping: load.acknowledged(after: killedAt), by: \.entry).mapValues(\.count))")

            // The victim's stream ended; its client resumes on A from the last event it read.
            try await cluster.expectResumed(watched, after: beforeKill, on: a.api) {
                load.stop()
                await workers.value
            }

            try await cluster.expectCountersKept(sessions, acknowledged: load.acknowledged(), readBy: [a, b])
            let unexpected = load.all.filter { answer in
                // 502: nginx had sent the request to the victim when it died (never re-sent).
                // The victim's sessions, until its lease expired: `owner_unavailable` (nothing
                // applied) or, for a change forwarded to it as it died, `outcome_unknown` —
                // both 503 with Retry-After.
                let honest = answer.status == 503 && answer.retryAfter != nil
                    && (answer.code == "owner_unavailable" || answer.code == "outcome_unknown")
                return !answer.acknowledged && !honest && answer.status != 502 && answer.error == nil
            }
            #expect(unexpected.isEmpty, "\(unexpected.prefix(5))")
            let failed = load.all.filter { $0.error != nil }
            #expect(failed.allSatisfy { $0.entry == "C" }, "connection errors away from the victim: \(failed.filter { $0.entry != "C" }.prefix(3))")
            #expect(try await a.api.request("GET", "/readyz").status == 200)
            #expect(try await b.api.request("GET", "/readyz").status == 200)
        }
    }

    @Test("asynchronous work started on node A is settled by A's own follow-up, not 'recovered' by node B that reads meanwhile")
    func workStaysWithItsNode() async throws {
        // A 2 s credential check, so node B surely reads while node A's check runs.
        try await withCluster(environment: ["STATE_SERVER_LOGIN_CHECK_DELAY": "2"]) { cluster in
            let (a, b) = (cluster.nodes[0].api, cluster.nodes[1].api)
            let session = try await a.createSession()
            try await session.dispatchOK("login", ["type": "submit", "username": "ada", "password": "short"])
            let onB = cluster.session(session, on: b)
            let during = try await onB.store("login")
            #expect(during.state["isLoading"] == .bool(true), "B reads while A's check runs: \(during)")
            let settled = try await eventually(timeout: .seconds(15), every: .milliseconds(100)) {
                try await onB.store("login").state["isLoading"] == .bool(false)
            }
            #expect(settled, "node B sees the check's result")
            // Node B did not settle A's work as if it had been lost in a restart: A's own result
            // is the second and last change.
            let login = try await onB.store("login")
            #expect(login.state["error"] == .string("The password must have at least 8 characters."), "\(login)")
            #expect(login.version == 2, "one change for the submit, one for its result: \(login)")
        }
    }

    // MARK: - Helpers

    /// Increments through one entry point `times` times, trying again on `503 write_contention`
    /// (nothing was applied) as a client would.
    static func incrementUntilApplied(_ entry: (name: String, api: API), _ session: Session, times: Int, load: Load) async {
        for _ in 0..<times {
            for _ in 0..<50 {
                let answer = await load.increment(session, through: entry)
                if answer.code != "write_contention" { break }
            }
        }
    }

    static func duplicates(_ values: [Int]) -> [Int] {
        Dictionary(grouping: values, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
    }

    /// A short description of where a sequence is not 1, 2, 3...
    static func gaps(_ values: [Int]) -> String {
        var problems: [String] = []
        for (index, pair) in zip(values, values.dropFirst()).enumerated() where pair.1 != pair.0 + 1 {
            problems.append("\(pair.0)→\(pair.1) at \(index + 1)")
        }
        return "\(values.count) values \(values.first ?? 0)...\(values.last ?? 0); breaks: \(problems.prefix(10))"
    }
}
