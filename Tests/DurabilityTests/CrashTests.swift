import Foundation
import TestSupport
import StatePersistence
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Kill -9 at any moment under load loses no acknowledged change and leaves no half-applied one.
@Suite("Crash under load (SIGKILL while clients dispatch)")
struct CrashTests {
    static let clients = 8
    static let sessions = 3
    /// Small snapshots so crashes land around snapshot writes too; a replay buffer large enough
    /// that `Last-Event-ID` can replay a whole round; no dispatch rate limit (8 clients on 3
    /// sessions pass 100 dispatches a session a second on a fast machine: 429, not this claim).
    static let environment = [
        "STATE_SERVER_PERSISTENCE_SNAPSHOT_EVERY": "10",
        "STATE_SERVER_REPLAY_BUFFER": "100000",
        "STATE_SERVER_LOG_LEVEL": "warning",
        "STATE_SERVER_LIMITS_DISPATCHES_PER_SECOND": "0",
    ]

    /// What the clients of one round saw.
    struct Round: Sendable {
        /// (session index, version, idempotency key) of every 200 answer.
        let acknowledged = Tally<(Int, Int, String)>()
        /// (session index, idempotency key) of requests sent but not answered (cut by the kill).
        let unanswered = Tally<(Int, String)>()
        /// Anything but a 200 while the server was up.
        let unexpected = Tally<String>()
        /// (session index, version) of every event seen live.
        let observed = Tally<(Int, Int)>()

        func highest(_ session: Int) -> Int {
            acknowledged.all.filter { $0.0 == session }.map(\.1).max() ?? 0
        }
    }

    /// With keys, each change waits for the ones committing before it; without, a session's
    /// changes are pipelined (computed while the one before commits): both are killed.
    @Test(
        "every acknowledged change survives SIGKILL at three moments of the load; versions stay contiguous; the database stays sound",
        arguments: [true, false])
    func killUnderLoad(keyed: Bool) async throws {
        try await withTemporaryDirectory { directory in
            let database = directory.path("state.db")
            var server = try await ServerProcess.durable(database, environment: Self.environment)
            var sessions: [Session] = []
            for _ in 0..<Self.sessions { sessions.append(try await server.api.createSession()) }
            var baseline = [Int](repeating: 0, count: Self.sessions)
            // Kill right as the load starts, in the middle, and later on.
            let delays: [Duration] = [.zero, .milliseconds(300), .milliseconds(900)]

            for (roundIndex, delay) in delays.enumerated() {
                let round = Round()
                let stop = Flag()
                let api = server.api
                let current = sessions.map { Session(api: api, id: $0.id, token: $0.token) }

                // Live observers: everything they see was acknowledged to someone, so it must survive.
                var observers: [Task<Void, Never>] = []
                for (index, session) in current.enumerated() {
                    let (stream, _) = try await session.subscribe()
                    observers.append(Task {
                        defer { stream.close() }
                        while let event = try? await stream.nextEvent(timeout: .seconds(20)) {
                            if let version = event.json?["version"]?.int { round.observed.append((index, version)) }
                        }
                    })
                }

                let load = Task {
                    await withTaskGroup(of: Void.self) { group in
                        for client in 0..<Self.clients {
                            group.addTask {
                                let index = client % Self.sessions
                                let session = current[index]
                                var n = 0
                                while !stop.isSet {
                                    n += 1
                                    let key = "r\(roundIndex)-c\(client)-\(n)"
                                    do {
                                        let response = try await session.request(
                                            "POST", "/dispatch", headers: keyed ? [("Idempotency-Key", key)] : [],
                                            body: jsonBytes(["feature": "counter", "action": ["type": "increment"]]))
                                        if response.status == 200, let version = response.json?["version"]?.int {
                                            round.acknowledged.append((index, version, key))
                                        } else {
                                            round.unexpected.append("\(key): \(response)")
                                        }
                                    } catch {
                                        // The server is gone: this request may or may not have been applied.
                                        round.unanswered.append((index, key))
                                        return
                                    }
                                }
                            }
                        }
                    }
                }

                let started = try await eventually(timeout: .seconds(20), every: .milliseconds(5)) { round.acknowledged.count >= 10 }
                try #require(started, "round \(roundIndex): the load never got going; stderr: \(server.output.stderrText.suffix(2000))")
                try await Task.sleep(for: delay)
                let acknowledgedAtKill = round.acknowledged.count
                let exit = await server.crash()
                #expect(exit.bySignal && exit.status == SIGKILL, "round \(roundIndex): \(exit)")
                stop.set()
                await load.value
                for observer in observers { await observer.value }
                #expect(round.unexpected.all.isEmpty, "round \(roundIndex): \(round.unexpected.all.prefix(3))")

                // The crashed database is sound as it lies on disk.
                #expect(try SQLiteStorage.integrityCheck(path: database) == "ok", "round \(roundIndex), after SIGKILL")

                server = try await ServerProcess.durable(database, environment: Self.environment)
                let restarted = sessions.map { Session(api: server.api, id: $0.id, token: $0.token) }
                var recovered: [Int] = []
                for (index, session) in restarted.enumerated() {
                    let counter = try await session.store("counter")
                    recovered.append(counter.version)
                    let versions = round.acknowledged.all.filter { $0.0 == index }.map(\.1)
                    #expect(Set(versions).count == versions.count, "round \(roundIndex), session \(index): a version acknowledged twice")
                    #expect(counter.version >= round.highest(index),
                        "round \(roundIndex), session \(index): acknowledged up to \(round.highest(index)), recovered \(counter.version)")
                    let seen = round.observed.all.filter { $0.0 == index }.map(\.1).max() ?? 0
                    #expect(counter.version >= seen, "round \(roundIndex), session \(index): observed \(seen), recovered \(counter.version)")
                    #expect(counter.state == ["count": .int(counter.version)], "round \(roundIndex), session \(index): no half-applied change: \(counter)")

                    // Contiguous: the journal replays every version of this round exactly once, in order.
                    let missing = counter.version - baseline[index]
                    if missing > 0 {
                        let stream = try await session.events(headers: [("Last-Event-ID", String(baseline[index]))])
                        defer { stream.close() }
                        #expect(stream.status == 200)
                        var expected = baseline[index] + 1
                        for _ in 0..<missing {
                            let event = try await stream.nextEvent()
                            guard event.event == "state", event.seq == expected, event.json?["version"]?.int == expected,
                                event.json?["state"] == ["count": .int(expected)]
                            else {
                                Issue.record("round \(roundIndex), session \(index): expected version \(expected), got \(event)")
                                break
                            }
                            expected += 1
                        }
                    }
                }

                // Retries of the requests cut by the kill apply at most once: a replay when the
                // change was stored, a fresh change when it was not.
                for (index, key) in keyed ? round.unanswered.all : [] {
                    let response = try await restarted[index].request(
                        "POST", "/dispatch", headers: [("Idempotency-Key", key)],
                        body: jsonBytes(["feature": "counter", "action": ["type": "increment"]]))
                    #expect(response.status == 200, "\(response)")
                    let version = response.json?["version"]?.int ?? -1
                    if response.header("Idempotent-Replayed") == "true" {
                        #expect(version <= recovered[index], "a replayed answer names a stored version: \(response)")
                    } else {
                        #expect(version > recovered[index], "\(response)")
                    }
                }
                // Acknowledged keys replay their first answer, applying nothing.
                for (index, version, key) in keyed ? Array(round.acknowledged.all.suffix(5)) : [] {
                    let response = try await restarted[index].request(
                        "POST", "/dispatch", headers: [("Idempotency-Key", key)],
                        body: jsonBytes(["feature": "counter", "action": ["type": "increment"]]))
                    #expect(response.status == 200, "\(response)")
                    #expect(response.header("Idempotent-Replayed") == "true", "\(key): \(response)")
                    #expect(response.json?["version"]?.int == version, "\(key): \(response)")
                }
                for (index, session) in restarted.enumerated() {
                    let counter = try await session.store("counter")
                    #expect(counter.state == ["count": .int(counter.version)], "after retries: \(counter)")
                    baseline[index] = counter.version
                }
                print(
                    "crash round \(roundIndex) (kill \(delay) after the first 10 acks): \(acknowledgedAtKill) acknowledged at the kill, "
                        + "\(round.acknowledged.count) in all, \(round.unanswered.count) cut; highest acknowledged "
                        + "\((0..<Self.sessions).map { round.highest($0) }), recovered \(recovered)")
            }

            await server.stopCleanly()
            #expect(try SQLiteStorage.integrityCheck(path: database) == "ok")
            // The journal itself holds every version once, in order.
            try await withSQLiteStorage(at: database) { storage in
                for (index, session) in sessions.enumerated() {
                    let versions = try await storage.journal(session: session.id, feature: "counter", afterVersion: 0).map(\.version)
                    #expect(versions == Array(1...max(1, baseline[index])), "session \(index): \(versions.count) entries for \(baseline[index]) versions")
                    let seqs = try await storage.journal(session: session.id, afterSeq: 0, limit: 1_000_000).map(\.seq)
                    #expect(seqs == Array(1...max(1, baseline[index])))
                }
            }
        }
    }
}
