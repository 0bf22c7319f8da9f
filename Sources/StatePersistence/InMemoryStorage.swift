import Synchronization

/// The in-memory twin of ``SQLiteStorage``: the same tables in dictionaries, with the same
/// rules (a duplicate journal version is a `.conflict` and fails its batch alone; a write for
/// a session that does not exist is `.sessionGone`). Nothing
/// survives the process; useful for tests and for embedding the store core without a disk.
/// `failNextCommits` lets tests simulate a failing disk.
public final class InMemoryStorage: SessionStorage {
    struct Tables {
        var sessions: [String: StoredSession] = [:]
        var journal: [String: [JournalEntry]] = [:]  // by session, in seq order
        var snapshots: [String: [String: StoreSnapshot]] = [:]
        var replies: [String: [String: StoredReply]] = [:]
        var failures = 0
    }

    public let name = "memory"
    private let tables = Mutex(Tables())
    /// Several session managers in one process may share this storage, as nodes share a
    /// database (tests of several nodes).
    public let isShared: Bool
    private let listeners = Mutex<[AsyncStream<StorageNotice>.Continuation]>([])
    private let running = Mutex<Set<String>>([])

    /// - Parameter shared: whether several session managers use it as nodes (they then hear
    ///   each other's commits through ``notices()``).
    public init(shared: Bool = false) {
        isShared = shared
    }

    public func notices() -> AsyncStream<StorageNotice> {
        let (stream, continuation) = AsyncStream<StorageNotice>.makeStream()
        guard isShared else {
            continuation.finish()
            return stream
        }
        continuation.yield(.listening)
        listeners.withLock { $0.append(continuation) }
        return stream
    }

    /// Tells listeners what a committed batch changed.
    private func announce(_ batch: [StorageWrite]) {
        guard isShared else { return }
        var notices: [StorageNotice] = []
        for write in batch {
            switch write {
            case .append(let entry, _): notices.append(.committed(session: entry.session, seq: entry.seq))
            case .deleteSession(let id): notices.append(.deleted(session: id))
            default: break
            }
        }
        guard !notices.isEmpty else { return }
        for listener in listeners.withLock({ $0 }) {
            for notice in notices { listener.yield(notice) }
        }
    }

    /// Tells every listener that notices may have been missed (as a lost database connection
    /// would).
    public func loseNotices() {
        for listener in listeners.withLock({ $0 }) { listener.yield(.lost) }
    }

    /// Tells every listener that notices flow again (after ``loseNotices()``).
    public func resumeNotices() {
        for listener in listeners.withLock({ $0 }) { listener.yield(.listening) }
    }

    /// Makes the next `count` commits fail as if the disk were full.
    public func failNextCommits(_ count: Int) {
        tables.withLock { $0.failures = count }
    }

    public func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        try tables.withLock { (t: inout Tables) throws(StorageError) in
            if t.failures > 0 {
                t.failures -= 1
                throw StorageError(.unavailable, "simulated disk failure")
            }
            var copy = t
            for write in batch { try Self.apply(write, to: &copy) }
            t = copy
        }
        announce(batch)
    }

    private static func requireSession(_ id: String, in t: Tables) throws(StorageError) {
        guard t.sessions[id] != nil else { throw StorageError(.sessionGone, "session \(id) does not exist (deleted or expired)") }
    }

    private static func apply(_ write: StorageWrite, to t: inout Tables) throws(StorageError) {
        switch write {
        case .createSession(let s):
            guard t.sessions[s.id] == nil else { throw StorageError(.conflict, "session \(s.id) exists") }
            t.sessions[s.id] = s
        case .deleteSession(let id):
            t.sessions[id] = nil
            t.journal[id] = nil
            t.snapshots[id] = nil
            t.replies[id] = nil
        case .append(let e, let idempotency):
            try requireSession(e.session, in: t)
            let entries = t.journal[e.session, default: []]
            if entries.contains(where: { $0.seq == e.seq || ($0.feature == e.feature && $0.version == e.version) }) {
                throw StorageError(.conflict, "journal entry \(e.session)/\(e.feature)@\(e.version) exists")
            }
            t.journal[e.session, default: []].append(e)
            if let (key, reply) = idempotency { t.replies[e.session, default: [:]][key] = reply }
        case .snapshot(let s):
            try requireSession(s.session, in: t)
            t.snapshots[s.session, default: [:]][s.feature] = s
        case .touch(let session, let at):
            guard var s = t.sessions[session] else { throw StorageError(.sessionGone, "session \(session) does not exist (deleted or expired)") }
            s.lastActiveAt = max(s.lastActiveAt, at)
            t.sessions[session] = s
        case .compact(let session, let feature, let upToVersion, let keepLast):
            try requireSession(session, in: t)
            guard let entries = t.journal[session], let last = entries.last?.seq else { return }
            t.journal[session] = entries.filter {
                !($0.feature == feature && $0.version <= upToVersion && $0.seq <= last - keepLast)
            }
        }
    }

    public func session(id: String) async throws(StorageError) -> StoredSession? {
        tables.withLock { $0.sessions[id] }
    }

    public func latestSnapshot(session: String, feature: String) async throws(StorageError) -> StoreSnapshot? {
        tables.withLock { $0.snapshots[session]?[feature] }
    }

    public func journal(session: String, feature: String, afterVersion: Int) async throws(StorageError) -> [JournalEntry] {
        tables.withLock { t in
            (t.journal[session] ?? []).filter { $0.feature == feature && $0.version > afterVersion }
                .sorted { $0.version < $1.version }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        tables.withLock { t in
            Array((t.journal[session] ?? []).filter { $0.seq > afterSeq }.sorted { $0.seq < $1.seq }.prefix(limit))
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        tables.withLock { $0.journal[session]?.map(\.seq).max() ?? 0 }
    }

    public func reply(session: String, key: String) async throws(StorageError) -> StoredReply? {
        tables.withLock { $0.replies[session]?[key] }
    }

    public func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        tables.withLock { t in
            Array(t.sessions.values.filter { $0.lastActiveAt < time }.sorted { $0.lastActiveAt < $1.lastActiveAt }
                .prefix(limit).map(\.id))
        }
    }

    public func sessionCount() async throws(StorageError) -> Int {
        tables.withLock { $0.sessions.count }
    }

    /// Ends every notice stream.
    public func close() async {
        for listener in listeners.withLock({ l in defer { l = [] }; return l }) { listener.finish() }
    }

    /// Shared: one job of a name at a time, over every manager using this storage.
    public func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        guard isShared else { return await body() }
        guard running.withLock({ $0.insert(job).inserted }) else { return nil }
        defer { running.withLock { _ = $0.remove(job) } }
        return await body()
    }
}
