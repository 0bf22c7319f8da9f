import Foundation
import TestSupport
import Synchronization
import Testing

/// Real `state-server` processes on one fresh database of a real PostgreSQL, with a real nginx
/// in front of them (deploy/nginx's template: round robin, no proxy buffering, long read
/// timeout on streams), all on 127.0.0.1 and ports the processes chose themselves.
final class Cluster: Sendable {
    let postgres: TestPostgres
    /// The database's URL as psql takes it (no query).
    let databaseURL: String
    /// What every node gets as `--storage`.
    let storage: String
    let nodes: [ServerProcess]
    let nginx: NginxProcess

    private init(postgres: TestPostgres, databaseURL: String, storage: String, nodes: [ServerProcess], nginx: NginxProcess) {
        self.postgres = postgres
        self.databaseURL = databaseURL
        self.storage = storage
        self.nodes = nodes
        self.nginx = nginx
    }

    /// Starts `count` nodes on a new database of `postgres` (with `environment` added to
    /// theirs, and `perNode[i]` to node `i`'s), then nginx in front of them.
    static func start(
        nodes count: Int = 3, on postgres: TestPostgres, environment: [String: String] = [:], perNode: [Int: [String: String]] = [:]
    ) async throws -> Cluster {
        let databaseURL = try postgres.makeDatabase()
        let storage = databaseURL + "?sslmode=disable"
        var nodes: [ServerProcess] = []
        do {
            for index in 0..<count {
                // A short lease: a dead node's sessions move within seconds. The nodes and nginx
                // connect from 127.0.0.1: trusted as proxies, as a deployment lists its nodes'
                // network (a node's relayed streams are not one client's connections).
                nodes.append(try await ServerProcess.start(
                    arguments: ["--storage", storage],
                    environment: ["STATE_SERVER_CLUSTER_LEASE": "2", "STATE_SERVER_HTTP_TRUSTED_PROXIES": "127.0.0.1"]
                        .merging(environment) { $1 }.merging(perNode[index] ?? [:]) { $1 }))
            }
            let nginx = try await NginxProcess.start(upstreams: nodes.map(\.port))
            return Cluster(postgres: postgres, databaseURL: databaseURL, storage: storage, nodes: nodes, nginx: nginx)
        } catch {
            for node in nodes { await node.stop() }
            throw error
        }
    }

    /// Stops nginx and every node still running (SIGTERM, then SIGKILL).
    func stop() async {
        await nginx.stop()
        for node in nodes { await node.stop() }
    }

    /// The same session as seen through another entry point.
    func session(_ session: Session, on api: API) -> Session {
        Session(api: api, id: session.id, token: session.token)
    }

    /// The counter's journal rows of a session, read from PostgreSQL with psql, in `seq` order.
    func counterJournal(_ session: String) throws -> [(seq: Int, version: Int)] {
        try pairs("SELECT seq, version FROM state_changes WHERE session = '\(session)' AND feature = 'counter'")
            .map { (seq: $0.0, version: $0.1) }
    }

    /// A stream of `session` that ended with its node (read by `before`): the client resumes on
    /// `api` with `Last-Event-ID`, `settle` stops the load, and one more change on `api` marks
    /// the end (A's stream has then caught up with every node's last change, whether or not
    /// changes made on other nodes reach it live). Every change arrives once, in order, over
    /// the two streams.
    func expectResumed(
        _ session: Session, after before: StreamReader, on api: API, settle: () async -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        #expect(try await eventually(timeout: .seconds(10)) { before.ended != nil }, "the stream did not end", sourceLocation: sourceLocation)
        let lastRead = try #require(before.seqs.last, sourceLocation: sourceLocation)
        // As a client does: again after a 503 (the session's owner is changing).
        var refusals: [String] = []
        let opened = try await poll(timeout: .seconds(20), every: .milliseconds(50)) { () -> EventStream? in
            let stream = try await self.session(session, on: api).events(headers: [("Last-Event-ID", "\(lastRead)")])
            if stream.status == 200 { return stream }
            refusals.append("\(stream.status)" + (stream.status == 503 ? "" : " \((try? await stream.readErrorBody()).map { "\($0)" } ?? "")"))
            stream.close()
            return nil
        }
        let resumed = try #require(opened, "the stream could not be resumed: \(refusals)", sourceLocation: sourceLocation)
        #expect(refusals.allSatisfy { $0.hasPrefix("503") }, "refusals before the resume: \(refusals)", sourceLocation: sourceLocation)
        let after = StreamReader(resumed)
        defer { after.stop() }
        await settle()
        try await self.session(session, on: api).dispatchOK("counter", ["type": "increment"])
        let finalSeq = try #require(try sequence(session.id).last, sourceLocation: sourceLocation)
        #expect(try await eventually(timeout: .seconds(60)) { after.seqs.last == finalSeq },
            "resumed stream reached \(after.seqs.last ?? 0) of \(finalSeq)", sourceLocation: sourceLocation)
        #expect(before.seqs == Array(1...lastRead), "the stream that ended: \(ClusterTests.gaps(before.seqs))", sourceLocation: sourceLocation)
        #expect(after.seqs == Array((lastRead + 1)..<(finalSeq + 1)), "the resumed stream: \(ClusterTests.gaps(after.seqs))",
            sourceLocation: sourceLocation)
    }

    /// The history of counter increments kept: each session's counter journal is versions
    /// 1...N with nothing twice, every acknowledged version is in it (and acknowledged once),
    /// and every node of `readBy` reads version N.
    func expectCountersKept(
        _ sessions: [Session], acknowledged: [LoadAnswer], readBy nodes: [ServerProcess], sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        for session in sessions {
            let versions = try counterJournal(session.id).map(\.version)
            #expect(versions == Array(1..<(versions.count + 1)), "journal of \(session.id): \(ClusterTests.gaps(versions))",
                sourceLocation: sourceLocation)
            let acked = acknowledged.filter { $0.session == session.id }.compactMap(\.version)
            #expect(Set(acked).isSubset(of: Set(versions)),
                "acknowledged but not in PostgreSQL: \(Set(acked).subtracting(versions).sorted())", sourceLocation: sourceLocation)
            #expect(acked.count == Set(acked).count, "a version acknowledged twice in \(session.id)", sourceLocation: sourceLocation)
            for node in nodes {
                let store = try await self.session(session, on: node.api).store("counter")
                #expect(store == StoreState(version: versions.count, state: ["count": .int(versions.count)]), sourceLocation: sourceLocation)
            }
        }
    }

    /// Every `seq` of a session's journal, in order.
    func sequence(_ session: String) throws -> [Int] {
        try pairs("SELECT seq, seq FROM state_changes WHERE session = '\(session)'").map(\.0)
    }

    /// Rows of two integer columns `seq, x` of `query`, ordered by `seq`: aggregated by
    /// PostgreSQL into one line (TestPostgres.sql gives psql's last line).
    private func pairs(_ query: String) throws -> [(Int, Int)] {
        let line = try postgres.sql(
            "SELECT coalesce(string_agg(a || ':' || b, ',' ORDER BY a), '') FROM (\(query)) AS rows(a, b)", in: databaseURL)
        return line.split(separator: ",").compactMap { pair in
            let parts = pair.split(separator: ":").compactMap { Int($0) }
            return parts.count == 2 ? (parts[0], parts[1]) : nil
        }
    }
}

/// The next event of `stream`, or an error that says which event of which stream was missing.
func nextEvent(_ stream: EventStream, _ what: String, timeout: Duration = .seconds(10)) async throws -> SSEEvent {
    do {
        return try await stream.nextEvent(timeout: timeout)
    } catch {
        throw MissingEvent(description: "\(what): \(error)")
    }
}

struct MissingEvent: Error, CustomStringConvertible {
    var description: String
}

/// Runs `body` on a three-node cluster on the suite's PostgreSQL (the `.postgres` trait), then
/// stops it whatever happens. `perNode[i]` is added to node `i`'s environment.
func withCluster<T>(
    nodes: Int = 3, environment: [String: String] = [:], perNode: [Int: [String: String]] = [:], _ body: (Cluster) async throws -> T
) async throws -> T {
    try await withCluster(nodes: nodes, on: try TestPostgres.shared(), environment: environment, perNode: perNode, body)
}

/// Runs `body` on a cluster on `postgres`, then stops it whatever happens.
func withCluster<T>(
    nodes: Int = 3, on postgres: TestPostgres, environment: [String: String] = [:], perNode: [Int: [String: String]] = [:],
    _ body: (Cluster) async throws -> T
) async throws -> T {
    let cluster = try await Cluster.start(nodes: nodes, on: postgres, environment: environment, perNode: perNode)
    do {
        let result = try await body(cluster)
        await cluster.stop()
        return result
    } catch {
        await cluster.stop()
        throw error
    }
}

/// One answer a load worker got (or the error instead of one).
struct LoadAnswer: Sendable, CustomStringConvertible {
    /// Which entry point was asked ("A", "B", "C", "nginx").
    var entry: String
    var session: String
    var status: Int?
    /// The reply's `version` on 200.
    var version: Int?
    var code: String?
    var retryAfter: String?
    var error: String?
    var at: ContinuousClock.Instant

    var acknowledged: Bool { status == 200 && version != nil }

    var description: String {
        if let error { return "\(entry): \(error)" }
        return "\(entry): \(status ?? 0) \(code ?? "") v\(version ?? 0) Retry-After: \(retryAfter ?? "-")"
    }
}

/// Bounded load: workers that increment counters until told to stop, recording every answer.
final class Load: Sendable {
    private let answers = Mutex<[LoadAnswer]>([])
    private let stopped = Atomic<Bool>(false)

    /// Every answer so far.
    var all: [LoadAnswer] { answers.withLock { $0 } }

    /// Acknowledged changes (200 with a version), optionally only those after `instant`.
    func acknowledged(after instant: ContinuousClock.Instant? = nil) -> [LoadAnswer] {
        answers.withLock { list in
            list.filter { answer in answer.acknowledged && (instant.map { answer.at > $0 } ?? true) }
        }
    }

    func stop() { stopped.store(true, ordering: .relaxed) }
    var isStopped: Bool { stopped.load(ordering: .relaxed) }

    private func record(_ answer: LoadAnswer) { answers.withLock { $0.append(answer) } }

    /// One increment of the session's counter through `entry`; recorded, and returned.
    @discardableResult
    func increment(_ session: Session, through entry: (name: String, api: API)) async -> LoadAnswer {
        let target = Session(api: entry.api, id: session.id, token: session.token)
        let answer: LoadAnswer
        do {
            let response = try await target.dispatch("counter", ["type": "increment"])
            answer = LoadAnswer(
                entry: entry.name, session: session.id, status: response.status,
                version: response.status == 200 ? response.json?["version"]?.int : nil,
                code: response.errorCode, retryAfter: response.header("Retry-After"), error: nil, at: .now)
        } catch {
            answer = LoadAnswer(
                entry: entry.name, session: session.id, status: nil, version: nil, code: nil, retryAfter: nil,
                error: "\(error)", at: .now)
        }
        record(answer)
        return answer
    }

    /// A worker: increments the sessions' counters in turn through `entries[0]` until `stop()`
    /// or `limit` requests. A connection error moves it to the next entry point (a client
    /// whose node died reconnects elsewhere). `pause` spaces its requests (light load).
    func worker(
        _ entries: [(name: String, api: API)], sessions: [Session], limit: Int, pause: Duration? = nil
    ) async {
        var current = 0
        var sent = 0
        while !isStopped, sent < limit {
            let answer = await increment(sessions[sent % sessions.count], through: entries[current])
            sent += 1
            if answer.error != nil, current + 1 < entries.count { current += 1 }
            if let pause { try? await Task.sleep(for: pause) }
        }
    }
}

/// Reads a stream's events into a list on a task of its own, until the stream ends or fails
/// or `stop()` is called.
final class StreamReader: Sendable {
    private let events = Mutex<[SSEEvent]>([])
    private let ending = Mutex<String?>(nil)
    private let stopping = Atomic<Bool>(false)
    private let stream: EventStream

    init(_ stream: EventStream) {
        self.stream = stream
        Task { [self] in
            while !stopping.load(ordering: .relaxed) {
                do {
                    // Short waits, so a stop is seen soon (the socket is read on its own queue).
                    switch try await stream.next(timeout: .seconds(1)) {
                    case .event(let event): events.withLock { $0.append(event) }
                    case .comment: continue
                    case .end:
                        ending.withLock { $0 = "ended" }
                        return
                    }
                } catch ClientError.timedOut {
                    continue
                } catch {
                    ending.withLock { $0 = "\(error)" }
                    return
                }
            }
            ending.withLock { $0 = "stopped" }
            stream.close()
        }
    }

    var received: [SSEEvent] { events.withLock { $0 } }
    /// The `seq` of every state event received, in order.
    var seqs: [Int] { received.filter { $0.event == "state" }.compactMap(\.seq) }
    /// Why reading stopped ("ended", "stopped" or the error); `nil` while it goes on.
    var ended: String? { ending.withLock { $0 } }

    /// Stops reading (within a second) and closes the stream.
    func stop() { stopping.store(true, ordering: .relaxed) }
}
