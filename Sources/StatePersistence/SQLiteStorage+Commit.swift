// SQLiteStorage's writes: commit and group commit, and the single writer thread that runs every batch.
import CSQLite
import CoreMetrics
import DequeModule
import Dispatch
import Foundation
import StateStore
import Synchronization

extension SQLiteStorage {
    public func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void) {
        if let problem = health.recentProblem() { return writer.answer(done, .failure(problem)) }
        writer.submit(batch, done: done)
    }

    public func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        guard !batch.isEmpty else { return }
        if let problem = health.recentProblem() { throw problem }
        let result: Result<Void, StorageError> = await withCheckedContinuation { continuation in
            writer.submit(batch) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// Commits `batches` in one group commit, as if they had been submitted concurrently: each
    /// is atomic on its own and gets its own answer (in order), exact like ``commit(_:)``'s.
    /// For bulk loads, and for tests that need a group of a known shape.
    public func commit(group batches: [[StorageWrite]]) async -> [Result<Void, StorageError>] {
        guard !batches.isEmpty else { return [] }
        if let problem = health.recentProblem() { return batches.map { _ in .failure(problem) } }
        let collected = GroupResults(count: batches.count)
        return await withCheckedContinuation { continuation in
            writer.submit(group: batches) { index, result in
                if let all = collected.set(index, result) { continuation.resume(returning: all) }
            }
        }
    }
}

/// The answers of a group submitted with ``SQLiteStorage/commit(group:)``, as they arrive.
private final class GroupResults: Sendable {
    private let state: Mutex<(results: [Result<Void, StorageError>?], pending: Int)>

    init(count: Int) {
        state = Mutex((Array(repeating: nil, count: count), count))
    }

    /// Records one answer; all of them, in order, once the last one is in.
    func set(_ index: Int, _ result: Result<Void, StorageError>) -> [Result<Void, StorageError>]? {
        state.withLock { state in
            state.results[index] = result
            state.pending -= 1
            return state.pending == 0 ? state.results.compactMap { $0 } : nil
        }
    }
}

// MARK: - Writer

extension SQLiteStorage {
    /// The single writer: a thread that commits every waiting batch in one transaction.
    final class Writer: @unchecked Sendable {
        // @unchecked: `connection` is touched only by the writer thread; everything else sits
        // behind `queue`'s lock.
        typealias Completion = @Sendable (Result<Void, StorageError>) -> Void

        private struct Queue {
            var jobs = Deque<(batch: [StorageWrite], done: Completion)>()
            var stopping = false
            var onStopped: (@Sendable () -> Void)?
        }

        private let connection: SQLiteConnection
        private let queue = Mutex(Queue())
        /// Where every batch is answered, in the order the batches were submitted: a group's
        /// answers go there together after its COMMIT (one hop per group, not per batch), so the
        /// writer thread goes on to the next group at once.
        private let answers = DispatchQueue(label: "sqlite-commit-answers")
        private let wake = DispatchSemaphore(value: 0)
        /// Heads of the sessions written lately (writer thread only).
        private var heads = SQLiteHeads()
        /// An append writes the session row's activity only when what it holds is older than
        /// this (milliseconds): at most one session-row write a minute for a busy session.
        static let activityInterval: Int64 = 60_000

        /// Rows in `recent_changes` (writer thread only; an over-count after a rollback only
        /// brings the next merge forward).
        private var unmerged = 0
        /// When the next merge is due (``SQLiteStorage/mergeEvery`` rows, later after a failed one).
        private var mergeAt: Int
        private let mergeEvery: Int
        /// The next part of the merge under way (``mergeNextPart()``); nil: none under way.
        private var mergeStep: Int?
        /// The stores with rows in `recent_changes`, and a lower bound of their versions there:
        /// compaction looks in the log only for these.
        private var recentStores: [StoreKey: Int] = [:]

        init(connection: SQLiteConnection, mergeEvery: Int) throws(StorageError) {
            self.connection = connection
            self.mergeEvery = max(1, mergeEvery)
            self.mergeAt = self.mergeEvery
            let logged = try connection.query(
                "SELECT session, feature, min(version), count(*) FROM recent_changes GROUP BY session, feature", []
            ) { ($0.text(0), $0.text(1), Int($0.int(2)), Int($0.int(3))) }
            for (session, feature, version, count) in logged {
                recentStores[StoreKey(session: session, feature: feature)] = version
                unmerged += count
            }
            let thread = Thread { [self] in loop() }
            thread.name = "sqlite-writer"
            thread.start()
        }

        func submit(_ batch: [StorageWrite], done: @escaping Completion) {
            let accepted = queue.withLock { q -> Bool in
                guard !q.stopping else { return false }
                q.jobs.append((batch, done))
                return true
            }
            if accepted {
                wake.signal()
            } else {
                answer(done, .failure(StorageError(.unavailable, "the storage is closing")))
            }
        }

        /// Answers one batch on the answer queue, after every batch answered before.
        func answer(_ done: @escaping Completion, _ result: Result<Void, StorageError>) {
            answers.async { done(result) }
        }

        /// Queues `batches` together, so the writer takes them into one group.
        func submit(group batches: [[StorageWrite]], done: @escaping @Sendable (Int, Result<Void, StorageError>) -> Void) {
            let accepted = queue.withLock { q -> Bool in
                guard !q.stopping else { return false }
                for (index, batch) in batches.enumerated() {
                    q.jobs.append((batch, { done(index, $0) }))
                }
                return true
            }
            if accepted {
                wake.signal()
            } else {
                answers.async {
                    for index in batches.indices { done(index, .failure(StorageError(.unavailable, "the storage is closing"))) }
                }
            }
        }

        func stop(_ done: @escaping @Sendable () -> Void) {
            queue.withLock { q in
                q.stopping = true
                q.onStopped = done
            }
            wake.signal()
        }

        private func loop() {
            while true {
                wake.wait()
                let (jobs, stopping, onStopped) = queue.withLock { q in
                    defer { q.jobs.removeAll() }
                    return (Array(q.jobs), q.stopping, q.onStopped)
                }
                if !jobs.isEmpty { commit(jobs) }
                if mergeStep != nil || unmerged >= mergeAt { mergeNextPart() }
                if stopping && queue.withLock({ $0.jobs.isEmpty }) {
                    // After the last answers.
                    answers.async { onStopped?() }
                    return
                }
            }
        }

        /// Time from BEGIN to the end of COMMIT (the fsync) of each group.
        private let commitTimer = Timer(label: "stateserver_storage_commit_duration_seconds")
        private let groupSize = Recorder(label: "stateserver_storage_commit_batches")

        private func commit(_ jobs: [(batch: [StorageWrite], done: Completion)]) {
            let started = ContinuousClock.now
            defer {
                commitTimer.recordNanoseconds(Self.nanoseconds(since: started))
                groupSize.record(jobs.count)
            }
            let results: [Result<Void, StorageError>]
            // A lone batch needs no savepoint: the transaction is its boundary.
            if jobs.count == 1 {
                results = [commitAlone(jobs[0].batch)]
            } else {
                switch commitTogether(jobs.map(\.batch)) {
                case .committed(let each): results = each
                case .notBegun(let error): results = jobs.map { _ in .failure(error) }
                case .lost:
                    heads.rollBack()
                    // Nothing of the group is stored. Each batch again, alone: one that does not
                    // fit fails by itself, and none is answered for another's failure.
                    results = jobs.map { commitAlone($0.batch) }
                }
            }
            answers.async {
                for (job, result) in zip(jobs, results) { job.done(result) }
            }
        }

        /// Moves the rows of `recent_changes` into `changes`, in ``mergeParts`` parts (by the
        /// first character of the session id), one after each group commit, so commits wait for
        /// an eighth of the work at a time. Each part is one transaction that inserts its rows,
        /// sorted by session and seq so each session's rows land on its pages together, and
        /// deletes them from the log (a row is in one table or the other, never both). A failure
        /// leaves the rows in the log, where reads find them, and tries again after another
        /// ``SQLiteStorage/mergeEvery`` changes.
        private func mergeNextPart() {
            let started = ContinuousClock.now
            let part = mergeStep ?? 0
            let inPart = "coalesce(unicode(session), 0) % \(Self.mergeParts) = \(part)"
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
                let columns = SQLiteStorage.changeColumns
                try connection.run(
                    "INSERT INTO changes (\(columns)) SELECT \(columns) FROM recent_changes WHERE \(inPart) ORDER BY session, seq", [])
                try connection.run("DELETE FROM recent_changes WHERE \(inPart)", [])
                let moved = connection.changes
                try connection.run("COMMIT", [])
                unmerged = max(0, unmerged - moved)
                recentStores = recentStores.filter { Self.mergePart(of: $0.key.session) != part }
                mergeStep = part + 1 < Self.mergeParts ? part + 1 : nil
                if mergeStep == nil { mergeAt = mergeEvery }
                mergeTimer.recordNanoseconds(Self.nanoseconds(since: started))
            } catch {
                endTransaction()
                mergeStep = nil
                mergeAt = unmerged + mergeEvery
                mergeFailures.increment()
            }
        }

        /// The parts a merge moves the log in, one per group commit.
        static let mergeParts = 8

        /// The part of ``mergeNextPart()`` a session's rows belong to (`unicode(session) % parts`).
        static func mergePart(of session: String) -> Int {
            Int(session.unicodeScalars.first?.value ?? 0) % mergeParts
        }

        private let mergeTimer = Timer(label: "stateserver_storage_merge_duration_seconds")
        private let mergeFailures = Counter(label: "stateserver_storage_merge_failures_total")

        static func nanoseconds(since start: ContinuousClock.Instant) -> Int64 {
            let elapsed = ContinuousClock.now - start
            return elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
        }

        struct StoreKey: Hashable {
            let session: String
            let feature: String
        }

        private enum GroupOutcome {
            /// COMMIT succeeded: one result per batch (failed ones were rolled back to their
            /// savepoint and left nothing).
            case committed([Result<Void, StorageError>])
            /// BEGIN failed: nothing was written.
            case notBegun(StorageError)
            /// The transaction was rolled back as a whole (by SQLite itself, or by us after a
            /// failed savepoint operation or COMMIT): nothing of the group is stored.
            case lost
        }

        /// All batches in one transaction, a savepoint each.
        private func commitTogether(_ batches: [[StorageWrite]]) -> GroupOutcome {
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
            } catch {
                return .notBegun(error)
            }
            var results: [Result<Void, StorageError>] = []
            for batch in batches {
                do {
                    try connection.run("SAVEPOINT batch", [])
                    try apply(batch)
                    try connection.run("RELEASE batch", [])
                    heads.releaseBatch()
                    results.append(.success(()))
                } catch {
                    // SQLITE_FULL and I/O errors may have rolled back the whole transaction:
                    // then a SAVEPOINT of the next batch would start a transaction of its own
                    // and RELEASE would commit it for real.
                    guard connection.inTransaction else { return .lost }
                    do {
                        try connection.run("ROLLBACK TO batch", [])
                        try connection.run("RELEASE batch", [])
                        heads.rollBackBatch()
                    } catch {
                        endTransaction()
                        return .lost
                    }
                    results.append(.failure(error))
                }
            }
            do {
                try connection.run("COMMIT", [])
            } catch {
                endTransaction()
                return .lost
            }
            heads.commit()
            return .committed(results)
        }

        /// One batch in a transaction of its own.
        private func commitAlone(_ batch: [StorageWrite]) -> Result<Void, StorageError> {
            endTransaction()
            do {
                try connection.run("BEGIN IMMEDIATE", [])
                try apply(batch)
                try connection.run("COMMIT", [])
                heads.commit()
                return .success(())
            } catch {
                endTransaction()
                heads.rollBack()
                return .failure(error)
            }
        }

        /// Rolls back a transaction left open (after a failure); nothing when there is none.
        private func endTransaction() {
            if connection.inTransaction { try? connection.run("ROLLBACK", []) }
        }

        /// The writes of one batch, in order. Every write naming a session checks, once per
        /// batch and inside the batch's transaction, that the session exists.
        private func apply(_ batch: [StorageWrite]) throws(StorageError) {
            var existing: Set<String> = []
            for write in batch {
                switch write {
                case .createSession(let s):
                    try apply(write)
                    existing.insert(s.id)
                    continue
                case .deleteSession(let id):
                    try apply(write)
                    existing.remove(id)
                    continue
                case .append(let e, _):
                    // The append's own fence (the session row at seq - 1) finds the session:
                    // no query of its own.
                    try apply(write)
                    existing.insert(e.session)
                    continue
                case .snapshot(let s): try requireSession(s.session, &existing)
                case .touch(let session, _): try requireSession(session, &existing)
                case .compact(let session, _, _, _, _, _): try requireSession(session, &existing)
                case .createGrant(let grant): try requireSession(grant.session, &existing)
                case .deleteGrants(let session, _): try requireSession(session, &existing)
                case .timers(let session, _, _): try requireSession(session, &existing)
                }
                try apply(write)
            }
        }

        private func requireSession(_ id: String, _ existing: inout Set<String>) throws(StorageError) {
            guard !existing.contains(id) else { return }
            let found = try connection.query("SELECT 1 FROM sessions WHERE id = ?", [.text(id)]) { _ in true }
            guard !found.isEmpty else {
                throw StorageError(.sessionGone, "session \(id) does not exist (deleted or expired)")
            }
            existing.insert(id)
        }

        private func apply(_ write: StorageWrite) throws(StorageError) {
            let db = connection
            switch write {
            case .createSession(let s):
                try db.run(
                    "INSERT INTO sessions (id, token_hash, created_at, last_active) VALUES (?, ?, ?, ?)",
                    [.text(s.id), .blob(s.tokenHash), .int(s.createdAt), .int(s.lastActiveAt)])
                heads.set(s.id, SQLiteHeads.Head(seq: 0, stores: [:], storedActivity: s.lastActiveAt))
            case .deleteSession(let id):
                for table in ["changes", "recent_changes", "stores", "bases", "remembered_keys", "tokens", "timers"] {
                    try db.run("DELETE FROM \(table) WHERE session = ?", [.text(id)])
                }
                try db.run("DELETE FROM sessions WHERE id = ?", [.text(id)])
                heads.set(id, nil)
            case .append(let e, let key):
                // Fenced: the entry must follow the session's last seq and the store's last
                // version, whatever compaction removed (heads known to the writer, or read).
                var head = try sessionHead(e.session)
                guard e.seq == head.seq + 1 else { throw Self.notNext(e) }
                guard try e.version == storeVersion(e.session, e.feature) + 1 else { throw Self.notNext(e) }
                try db.run(
                    """
                    INSERT INTO recent_changes (\(SQLiteStorage.changeColumns))
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(e.session), .int(Int64(e.seq)), .text(e.feature), .int(Int64(e.version)), .text(e.cause),
                        e.action.map { .blob($0) } ?? .null, e.effect.map { .blob($0) } ?? .null,
                        .int(e.delta.isPatch ? 1 : 0), .blob(e.delta.bytes), .int(e.time),
                    ])
                unmerged += 1
                let store = StoreKey(session: e.session, feature: e.feature)
                recentStores[store] = min(recentStores[store] ?? e.version, e.version)
                if let key {
                    try db.run(
                        "INSERT INTO remembered_keys (session, key, feature, version, time) VALUES (?, ?, ?, ?, ?)",
                        [.text(e.session), .text(key), .text(e.feature), .int(Int64(e.version)), .int(e.time)])
                }
                head.seq = e.seq
                head.stores[e.feature] = e.version
                if e.time - head.storedActivity >= Self.activityInterval {
                    // The session row keeps a lower bound of the head seq (exact once written
                    // here or by compaction); readers take the newest of it and the journal's.
                    try db.run(
                        "UPDATE sessions SET head_seq = max(head_seq, ?), last_active = max(last_active, ?) WHERE id = ?",
                        [.int(Int64(e.seq)), .int(e.time), .text(e.session)])
                    head.storedActivity = e.time
                }
                heads.set(e.session, head)
            case .snapshot(let s):
                let head = try storeVersion(s.session, s.feature)
                guard s.version <= head else {
                    throw StorageError(.conflict, "snapshot \(s.session)/\(s.feature)@\(s.version) is ahead of the journal (\(head))")
                }
                try db.run(
                    """
                    INSERT OR REPLACE INTO bases (session, feature, version, state_version, state, time)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                    [
                        .text(s.session), .text(s.feature), .int(Int64(s.version)), .int(Int64(s.stateVersion)),
                        .blob(s.state), .int(s.time),
                    ])
            case .touch(let session, let at):
                try db.run("UPDATE sessions SET last_active = max(last_active, ?) WHERE id = ?", [.int(at), .text(session)])
                if var head = heads.head(of: session) ?? nil {
                    head.storedActivity = max(head.storedActivity, at)
                    heads.set(session, head)
                }
            case .compact(let session, let feature, let upToVersion, let keepLast, let keysSince, let maxKeys):
                // The journal's newest seq may go: the session row keeps the head first.
                let headSeq = try sessionHead(session).seq
                try db.run("UPDATE sessions SET head_seq = ? WHERE id = ? AND head_seq < ?", [.int(Int64(headSeq)), .text(session), .int(Int64(headSeq))])
                try db.run("DELETE FROM remembered_keys WHERE session = ? AND time < ?", [.text(session), .int(keysSince)])
                try db.run(
                    """
                    DELETE FROM remembered_keys WHERE session = ? AND key NOT IN (
                        SELECT key FROM remembered_keys WHERE session = ? ORDER BY time DESC, key DESC LIMIT ?)
                    """, [.text(session), .text(session), .int(Int64(max(0, maxKeys)))])
                // The oldest version still needed: of the entries in the replay window (in the
                // log too when the store has rows there), of the remembered keys, or just after
                // the snapshot.
                let store = StoreKey(session: session, feature: feature)
                let inLog = recentStores[store] != nil
                let needFrom = try db.query(
                    """
                    SELECT min(v) FROM (
                        SELECT ?1 AS v
                        UNION ALL SELECT min(version) FROM changes WHERE session = ?2 AND feature = ?3 AND seq > ?4
                        \(inLog ? "UNION ALL SELECT min(version) FROM recent_changes WHERE session = ?2 AND feature = ?3 AND seq > ?4" : "")
                        UNION ALL SELECT min(version) FROM remembered_keys WHERE session = ?2 AND feature = ?3)
                    """,
                    [.int(Int64(upToVersion + 1)), .text(session), .text(feature), .int(Int64(headSeq - keepLast))]
                ) { $0.int(0) }.first ?? Int64(upToVersion + 1)
                let base = try db.query(
                    "SELECT max(version) FROM bases WHERE session = ? AND feature = ? AND version <= ?",
                    [.text(session), .text(feature), .int(needFrom - 1)]
                ) { $0.int(0) }.first ?? 0
                guard base > 0 else { return }
                try db.run("DELETE FROM bases WHERE session = ? AND feature = ? AND version < ?", [.text(session), .text(feature), .int(base)])
                try db.run("DELETE FROM changes WHERE session = ? AND feature = ? AND version <= ?", [.text(session), .text(feature), .int(base)])
                if let lowest = recentStores[store], lowest <= base {
                    // A busy store: what compaction drops may not be merged yet (a scan of the log).
                    try db.run(
                        "DELETE FROM recent_changes WHERE session = ? AND feature = ? AND version <= ?",
                        [.text(session), .text(feature), .int(base)])
                    unmerged = max(0, unmerged - db.changes)
                    recentStores[store] = Int(base) + 1
                }
            case .createGrant(let g):
                try db.run(
                    "INSERT INTO tokens (session, id, token_hash, grant_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [.text(g.session), .text(g.id), .blob(g.tokenHash), .blob(g.grant), .int(g.createdAt), g.expiresAt.map { .int($0) } ?? .null])
            case .deleteGrants(let session, let ids):
                for id in ids {
                    try db.run("DELETE FROM tokens WHERE session = ? AND id = ?", [.text(session), .text(id)])
                }
            case .timers(let session, let feature, let changes):
                if changes.clearsAll {
                    try db.run("DELETE FROM timers WHERE session = ? AND feature = ?", [.text(session), .text(feature)])
                }
                for id in changes.removed {
                    try db.run("DELETE FROM timers WHERE session = ? AND feature = ? AND id = ?", [.text(session), .text(feature), .text(id)])
                }
                for timer in changes.set {
                    try db.run(
                        """
                        INSERT OR REPLACE INTO timers (session, feature, id, action, public_action, due, scheduled_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                        [
                            .text(session), .text(feature), .text(timer.id), .blob(timer.action), .blob(timer.publicAction),
                            .int(timer.due), .int(timer.scheduledAt),
                        ])
                }
            }
        }

        /// The session's heads: as the writer knows them, or read (`.sessionGone` when there is no
        /// such session).
        private func sessionHead(_ session: String) throws(StorageError) -> SQLiteHeads.Head {
            switch heads.head(of: session) {
            case .some(.some(let head)): return head
            case .some(.none), .none: break
            }
            let found = try connection.query(
                "SELECT \(SQLiteStorage.headSeqColumn), last_active FROM sessions WHERE id = ?1", [.text(session)]
            ) { SQLiteHeads.Head(seq: Int($0.int(0)), stores: [:], storedActivity: $0.int(1)) }
            guard let head = found.first else {
                throw StorageError(.sessionGone, "session \(session) does not exist (deleted or expired)")
            }
            heads.set(session, head)
            return head
        }

        /// A store's last version, as the writer knows it or read.
        private func storeVersion(_ session: String, _ feature: String) throws(StorageError) -> Int {
            var head = try sessionHead(session)
            if let version = head.stores[feature] { return version }
            let version = try Self.storeHead(connection, session, feature)
            head.stores[feature] = version
            heads.set(session, head)
            return version
        }

        /// A store's last version: the newest of its changes and bases (0: none yet).
        static func storeHead(_ db: SQLiteConnection, _ session: String, _ feature: String) throws(StorageError) -> Int {
            try db.query(
                """
                SELECT max(coalesce((SELECT max(version) FROM changes WHERE session = ?1 AND feature = ?2), 0),
                    coalesce((SELECT max(version) FROM recent_changes WHERE session = ?1 AND feature = ?2), 0),
                    coalesce((SELECT max(version) FROM bases WHERE session = ?1 AND feature = ?2), 0))
                """, [.text(session), .text(feature)]
            ) { Int($0.int(0)) }.first ?? 0
        }

        static func notNext(_ e: JournalEntry) -> StorageError {
            StorageError(.conflict, "journal entry \(e.session)/\(e.feature)@\(e.version) (seq \(e.seq)) does not follow the journal's head")
        }
    }
}
