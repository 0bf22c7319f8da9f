import CoreMetrics
import Metrics
import StatePersistence

/// A storage that times each `commit` (`stateserver_storage_commit_latency_seconds`: from the
/// call until the batch is durable or refused, waiting for a group commit included) and
/// forwards everything else, unchanged, to the storage it wraps.
///
/// Every requirement of `SessionStorage` is forwarded, those with default implementations
/// too (`isShared`, `ownership`, `notices`, `exclusively`, `ping`): the defaults would hide PostgreSQL's.
///
struct TimedStorage: SessionStorage {
    let base: any SessionStorage
    let commitTimer = Timer(label: MetricCatalog.storageCommitLatency)

    init(_ base: any SessionStorage) {
        self.base = base
    }

    var name: String { base.name }
    var lifetime: StorageLifetime { base.lifetime }
    var isShared: Bool { base.isShared }
    var ownership: (any SessionOwnership)? { base.ownership }

    func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        let started = ContinuousClock.now
        defer { commitTimer.record(duration: ContinuousClock.now - started) }
        try await base.commit(batch)
    }

    /// The change path's ordered commit, timed the same way: from the call until the answer.
    func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void) {
        let started = ContinuousClock.now
        let timer = commitTimer
        base.commit(batch) { result in
            timer.record(duration: ContinuousClock.now - started)
            done(result)
        }
    }

    func session(id: String) async throws(StorageError) -> StoredSession? {
        try await base.session(id: id)
    }

    func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        try await base.snapshot(session: session, feature: feature, atOrBefore: version)
    }

    func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        try await base.journal(session: session, feature: feature, afterVersion: afterVersion, through: through)
    }

    func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        try await base.journal(session: session, afterSeq: afterSeq, limit: limit)
    }

    func grants(session: String) async throws(StorageError) -> [StoredGrant] {
        try await base.grants(session: session)
    }

    func hasToken(session: String, tokenHash: [UInt8], now: Int64) async throws(StorageError) -> Bool {
        try await base.hasToken(session: session, tokenHash: tokenHash, now: now)
    }

    func lastSeq(session: String) async throws(StorageError) -> Int {
        try await base.lastSeq(session: session)
    }

    func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        try await base.rememberedKey(session: session, key: key)
    }

    func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        try await base.sessions(inactiveBefore: time, limit: limit)
    }

    func sessionCount() async throws(StorageError) -> Int {
        try await base.sessionCount()
    }

    func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        try await base.sessions(after: id, limit: limit)
    }

    func timers(session: String) async throws(StorageError) -> [StoredTimer] {
        try await base.timers(session: session)
    }

    func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference] {
        try await base.dueTimers(through: time, limit: limit)
    }

    func nextTimerDue() async throws(StorageError) -> Int64? {
        try await base.nextTimerDue()
    }

    func timerCount() async throws(StorageError) -> Int {
        try await base.timerCount()
    }

    func close() async {
        await base.close()
    }

    func notices() -> AsyncStream<StorageNotice> {
        base.notices()
    }

    func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        try await base.exclusively(job, body)
    }

    func ping() async throws(StorageError) {
        try await base.ping()
    }
}
