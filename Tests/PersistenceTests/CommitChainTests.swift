import ExampleFeatures
import Foundation
import NowOrLater
import StatePersistence
import StateSessions
import StateStore
import Synchronization
import Testing
import TestSupport

/// Durable mode over SQLite pipelines a session's commits (issue 28, item 2): change N+1 is
/// computed on top of N and handed to storage while N commits; each is applied, published and
/// answered only after its own commit; a failed commit fails everything computed on top of it
/// and the store returns to its last durable state.
///
/// The storage is a real `SQLiteStorage` behind a gate that holds batches (in order) until the
/// test lets them through, and can spoil one on the way (its append gets a sequence number far
/// ahead, which SQLite's own fence refuses): the failure, and the refusal of what was computed
/// on top of it, are SQLite's.
@Suite("Pipelined commits (SQLite)")
struct CommitChainTests {
    @Test("three changes are handed to storage before the first commits; reads and events show committed changes only; all land in order")
    func changesCommitAhead() async throws {
        try await withGatedSQLite { gate in
            let manager = try exampleManager(gate)
            let (session, _) = try await manager.create()
            try await session.dispatch("counter", #"{"type":"increment"}"#)
            let sink = RecordingSink()
            _ = session.hub.subscribe(features: nil, lastEventID: nil, sink: sink)

            gate.hold()
            let pending = (1...3).map { _ in session.submit(Self.increment) }
            // Without pipelining only the first would reach storage: the others would wait
            // in the session for its commit.
            try await waitUntil("three batches at the gate", detail: { "\(gate.heldCount) held" }) { gate.heldCount == 3 }
            #expect(try await session.current("counter") == Snapshot(1, #"{"count":1}"#), "reads show the committed state")
            #expect(session.hub.seq == 1)
            #expect(sink.events.count == 1, "only the snapshot is published: \(sink.events)")
            #expect(try await gate.lastSeq(session: session.id) == 1)

            gate.release()
            var versions: [Int] = []
            for outcome in pending {
                guard case .applied(let change, _) = await outcome.value() else {
                    Issue.record("not applied")
                    continue
                }
                versions.append(change.version)
            }
            #expect(versions == [2, 3, 4])
            #expect(try await session.current("counter") == Snapshot(4, #"{"count":4}"#))
            #expect(sink.events.map(\.seq) == [1, 2, 3, 4])
            let journal = try await gate.journal(session: session.id, afterSeq: 0, limit: 10)
            #expect(journal.map(\.seq) == [1, 2, 3, 4])
            #expect(journal.map(\.version) == [1, 2, 3, 4])
        }
    }

    @Test("a failed commit fails the changes computed on top of it with its error, the store returns to its durable state, and the next change follows it")
    func aFailedCommitFailsWhatFollows() async throws {
        try await withGatedSQLite { gate in
            let manager = try exampleManager(gate)
            let (session, token) = try await manager.create()
            try await session.dispatch("counter", #"{"type":"increment"}"#)

            gate.hold()
            let pending = (1...3).map { _ in session.submit(Self.increment) }
            try await waitUntil("three batches at the gate", detail: { "\(gate.heldCount) held" }) { gate.heldCount == 3 }
            gate.spoilFirstHeld()
            gate.release()
            var messages: [String] = []
            for outcome in pending {
                guard case .failed(.storage(let error)) = await outcome.value() else {
                    Issue.record("a change on top of a failed commit was not failed with a storage error")
                    continue
                }
                messages.append(error.message)
            }
            #expect(messages.count == 3)
            #expect(Set(messages).count == 1, "the changes on top report the first failure: \(messages)")
            #expect(try await session.current("counter") == Snapshot(1, #"{"count":1}"#), "back at the durable state")
            #expect(session.hub.seq == 1)
            #expect(try await gate.lastSeq(session: session.id) == 1)

            // The next change follows the last durable one, in memory and on disk.
            let next = try await session.dispatch("counter", #"{"type":"increment","by":5}"#)
            #expect(next.version == 2)
            #expect(try await gate.journal(session: session.id, afterSeq: 0, limit: 10).map(\.seq) == [1, 2])
            let reloaded = try #require(try await exampleManager(gate).load(id: session.id, token: token))
            #expect(try await reloaded.current("counter") == Snapshot(2, #"{"count":6}"#))
        }
    }

    @Test("a keyed change waits for the changes committing before it, and its key is answered once")
    func aKeyedChangeWaitsForTheChain() async throws {
        try await withGatedSQLite { gate in
            let manager = try exampleManager(gate)
            let (session, _) = try await manager.create()
            try await session.dispatch("counter", #"{"type":"increment"}"#)

            gate.hold()
            let plain = session.submit(Self.increment)
            try await waitUntil("one batch at the gate") { gate.heldCount == 1 }
            var keyed = Self.increment
            keyed.idempotencyKey = "once"
            let first = session.submit(keyed)
            let second = session.submit(keyed)
            #expect(gate.heldCount == 1, "the keyed change is not handed to storage while another commits")
            gate.release()
            guard case .applied(let applied, _) = await plain.value() else {
                Issue.record("not applied")
                return
            }
            #expect(applied.version == 2)
            guard case .applied(let change, _) = await first.value() else {
                Issue.record("the keyed change was not applied")
                return
            }
            #expect(change.version == 3)
            guard case .replayed(let reply) = await second.value() else {
                Issue.record("the same key was applied twice")
                return
            }
            #expect(reply.version == 3)
            #expect(try await session.current("counter") == Snapshot(3, #"{"count":3}"#))
        }
    }

    static let increment = ChangeRequest(feature: "counter", kind: .dispatch(json(#"{"type":"increment"}"#)), precondition: .none)
}

/// Runs `body` with a ``GatedStorage`` over a fresh SQLite database, closed and removed after.
private func withGatedSQLite(_ body: (GatedStorage) async throws -> Void) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let database = try SQLiteDatabase(path: directory.path("state.sqlite"))
    let gate = GatedStorage(database.storage)
    do {
        try await body(gate)
    } catch {
        gate.release()
        await database.close()
        throw error
    }
    gate.release()
    await database.close()
}

/// A real `SQLiteStorage` whose ordered commits can be held at a gate (in order) and let
/// through together; the first batch held can be spoiled (SQLite then refuses it, and its
/// fence refuses what was computed on top of it). Reads go straight to SQLite.
final class GatedStorage: SessionStorage {
    let base: SQLiteStorage
    private let gate = Mutex<(holding: Bool, held: [(batch: [StorageWrite], done: @Sendable (Result<Void, StorageError>) -> Void)])>(
        (false, []))

    init(_ base: SQLiteStorage) { self.base = base }

    var heldCount: Int { gate.withLock { $0.held.count } }

    func hold() { gate.withLock { $0.holding = true } }

    /// Lets every held batch through, in order, and stops holding.
    func release() {
        let held = gate.withLock { gate in
            defer {
                gate.held = []
                gate.holding = false
            }
            return gate.held
        }
        for (batch, done) in held { base.commit(batch, done: done) }
    }

    /// The first held batch's append gets a sequence number far ahead of the session's.
    func spoilFirstHeld() {
        gate.withLock { gate in
            guard let first = gate.held.first, case .append(let e, let key)? = first.batch.first else { return }
            let spoiled = JournalEntry(
                session: e.session, seq: e.seq + 1_000, feature: e.feature, version: e.version, cause: e.cause,
                action: e.action, effect: e.effect, delta: e.delta, time: e.time)
            gate.held[0].batch[0] = .append(spoiled, idempotencyKey: key)
        }
    }

    func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void) {
        let passes = gate.withLock { gate -> Bool in
            guard gate.holding else { return true }
            gate.held.append((batch, done))
            return false
        }
        if passes { base.commit(batch, done: done) }
    }

    var name: String { base.name }
    var lifetime: StorageLifetime { base.lifetime }
    var isShared: Bool { base.isShared }
    var ownership: (any SessionOwnership)? { base.ownership }
    func commit(_ batch: [StorageWrite]) async throws(StorageError) { try await base.commit(batch) }
    func session(id: String) async throws(StorageError) -> StoredSession? { try await base.session(id: id) }
    func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        try await base.snapshot(session: session, feature: feature, atOrBefore: version)
    }
    func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        try await base.journal(session: session, feature: feature, afterVersion: afterVersion, through: through)
    }
    func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await base.journal(session: session, afterSeq: afterSeq, limit: limit)
    }
    func grants(session: String) async throws(StorageError) -> [StoredGrant] { try await base.grants(session: session) }
    func lastSeq(session: String) async throws(StorageError) -> Int { try await base.lastSeq(session: session) }
    func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        try await base.rememberedKey(session: session, key: key)
    }
    func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        try await base.sessions(inactiveBefore: time, limit: limit)
    }
    func sessionCount() async throws(StorageError) -> Int { try await base.sessionCount() }
    func timers(session: String) async throws(StorageError) -> [StoredTimer] { try await base.timers(session: session) }
    func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference] {
        try await base.dueTimers(through: time, limit: limit)
    }
    func nextTimerDue() async throws(StorageError) -> Int64? { try await base.nextTimerDue() }
    func timerCount() async throws(StorageError) -> Int { try await base.timerCount() }
    func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        try await base.sessions(after: id, limit: limit)
    }
    func close() async { await base.close() }
    func notices() -> AsyncStream<StorageNotice> { base.notices() }
    func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        try await base.exclusively(job, body)
    }
    func ping() async throws(StorageError) { try await base.ping() }
}
