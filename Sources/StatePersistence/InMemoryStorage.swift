import DequeModule
import Synchronization

/// The in-memory twin of ``SQLiteStorage``: the same tables in dictionaries, with the same
/// rules (an append that does not follow the session's last seq and the store's last version,
/// or a key remembered already, is a `.conflict` and fails its batch alone; a write for a
/// session that does not exist is `.sessionGone`). Nothing survives the process.
///
/// Two uses:
/// - `InMemoryStorage()` keeps everything: tests of durable behaviour run on it
///   (`failNextCommits` simulates a failing disk; `shared` plays several nodes).
/// - ``process(_:)`` is memory mode's journal: a bounded ring of each session's last changes
///   with whole states, committed synchronously (``commitNow(_:)``), whose oldest change leaves
///   as its feature's base snapshot — so history, recordings, travel and resumed streams read
///   it through the same protocol as SQLite's.
public final class InMemoryStorage: SessionStorage {
    /// What a ``process(_:)`` journal keeps.
    public struct Bounds: Sendable {
        /// Changes kept per session (the newest).
        public var changes: Int
        /// Bytes of changes kept per session (``JournalEntry/size``).
        public var bytes: Int
        /// Bytes of changes kept by all sessions together: past it, the oldest changes of the
        /// server leave first.
        public var serverBytes: Int
        /// Idempotency keys remembered per session (the newest).
        public var keys: Int
        /// Each feature's state schema version, for the base snapshots made from changes that
        /// leave the ring.
        public var stateVersions: [String: Int]

        public init(changes: Int, bytes: Int, serverBytes: Int, keys: Int, stateVersions: [String: Int]) {
            self.changes = changes
            self.bytes = bytes
            self.serverBytes = serverBytes
            self.keys = keys
            self.stateVersions = stateVersions
        }
    }

    struct Tables {
        var sessions: [String: StoredSession] = [:]
        var journal: [String: Deque<JournalEntry>] = [:]  // by session, in seq order
        /// By session and feature, in version order.
        var snapshots: [String: [String: [StoreSnapshot]]] = [:]
        var keys: [String: [String: RememberedKey]] = [:]
        /// By session, in the order minted.
        var grants: [String: [StoredGrant]] = [:]
        /// The last seq of each session, and the last version of each store: what a fenced
        /// append must follow.
        var headSeq: [String: Int] = [:]
        var headVersion: [String: [String: Int]] = [:]
        var failures = 0
        /// Bounded (``process(_:)``): bytes of changes kept per session and in all, every
        /// change kept in the order appended (records of changes gone are skipped, and dropped
        /// when they outnumber the kept ones), and each session's keys in the order remembered.
        var journalBytes: [String: Int] = [:]
        var totalBytes = 0
        var kept = 0
        var order = Deque<(session: String, seq: Int)>()
        var keyOrder: [String: Deque<String>] = [:]
    }

    public let name = "memory"
    public let lifetime: StorageLifetime
    let bounds: Bounds?
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
        lifetime = .durable
        bounds = nil
    }

    private init(bounds: Bounds) {
        isShared = false
        lifetime = .process
        self.bounds = bounds
    }

    /// Memory mode's journal: keeps what `bounds` allows, lives as long as the process.
    public static func process(_ bounds: Bounds) -> InMemoryStorage {
        InMemoryStorage(bounds: bounds)
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
        try commitNow(batch)
    }

    /// ``commit(_:)`` without waiting: the batch is stored (or refused) when this returns.
    public func commitNow(_ batch: [StorageWrite]) throws(StorageError) {
        try tables.withLock { (t: inout Tables) throws(StorageError) in
            if t.failures > 0 {
                t.failures -= 1
                throw StorageError(.unavailable, "simulated disk failure")
            }
            if batch.count == 1 {
                // One write checks everything before it changes anything: applied in place.
                try apply(batch[0], to: &t)
            } else {
                var copy = t
                for write in batch { try apply(write, to: &copy) }
                t = copy
            }
        }
        announce(batch)
    }

    private static func requireSession(_ id: String, in t: Tables) throws(StorageError) {
        guard t.sessions[id] != nil else { throw StorageError(.sessionGone, "session \(id) does not exist (deleted or expired)") }
    }

    private func apply(_ write: StorageWrite, to t: inout Tables) throws(StorageError) {
        switch write {
        case .createSession(let s):
            guard t.sessions[s.id] == nil else { throw StorageError(.conflict, "session \(s.id) exists") }
            t.sessions[s.id] = s
        case .deleteSession(let id):
            t.sessions[id] = nil
            let removed = t.journal.removeValue(forKey: id)
            if bounds != nil { t.kept -= removed?.count ?? 0 }
            t.snapshots[id] = nil
            t.keys[id] = nil
            t.grants[id] = nil
            t.headSeq[id] = nil
            t.headVersion[id] = nil
            t.keyOrder[id] = nil
            if let bytes = t.journalBytes.removeValue(forKey: id) { t.totalBytes -= bytes }
        case .append(let e, let key):
            try Self.requireSession(e.session, in: t)
            let seq = t.headSeq[e.session] ?? 0
            let version = t.headVersion[e.session]?[e.feature] ?? 0
            guard e.seq == seq + 1, e.version == version + 1 else {
                throw StorageError(
                    .conflict,
                    "journal entry \(e.session)/\(e.feature)@\(e.version) (seq \(e.seq)) does not follow seq \(seq), version \(version)")
            }
            if let key {
                guard t.keys[e.session]?[key] == nil else { throw StorageError(.conflict, "idempotency key exists") }
                t.keys[e.session, default: [:]][key] = RememberedKey(feature: e.feature, version: e.version, time: e.time)
            }
            t.journal[e.session, default: []].append(e)
            t.headSeq[e.session] = e.seq
            t.headVersion[e.session, default: [:]][e.feature] = e.version
            if var s = t.sessions[e.session], s.lastActiveAt < e.time {
                s.lastActiveAt = e.time
                t.sessions[e.session] = s
            }
            if let bounds { Self.bound(after: e, key: key, bounds, &t) }
        case .snapshot(let s):
            try Self.requireSession(s.session, in: t)
            guard s.version <= t.headVersion[s.session]?[s.feature] ?? 0 else {
                throw StorageError(.conflict, "snapshot \(s.session)/\(s.feature)@\(s.version) is ahead of the journal")
            }
            var list = t.snapshots[s.session]?[s.feature] ?? []
            list.removeAll { $0.version == s.version }
            list.append(s)
            list.sort { $0.version < $1.version }
            t.snapshots[s.session, default: [:]][s.feature] = list
        case .touch(let session, let at):
            guard var s = t.sessions[session] else { throw StorageError(.sessionGone, "session \(session) does not exist (deleted or expired)") }
            s.lastActiveAt = max(s.lastActiveAt, at)
            t.sessions[session] = s
        case .compact(let session, let feature, let upToVersion, let keepLast, let keysSince, let maxKeys):
            try Self.requireSession(session, in: t)
            var keys = (t.keys[session] ?? [:]).filter { $0.value.time >= keysSince }
            if keys.count > maxKeys {
                let newest = keys.sorted { ($0.value.time, $0.key) > ($1.value.time, $1.key) }.prefix(max(0, maxKeys))
                keys = Dictionary(uniqueKeysWithValues: newest.map { ($0.key, $0.value) })
            }
            t.keys[session] = keys
            let entries = t.journal[session] ?? []
            let window = (t.headSeq[session] ?? 0) - keepLast
            var needFrom = upToVersion + 1
            for entry in entries where entry.feature == feature && entry.seq > window { needFrom = min(needFrom, entry.version) }
            for key in keys.values where key.feature == feature { needFrom = min(needFrom, key.version) }
            let snapshots = t.snapshots[session]?[feature] ?? []
            guard let base = snapshots.last(where: { $0.version <= needFrom - 1 })?.version else { return }
            t.snapshots[session]?[feature] = snapshots.filter { $0.version >= base }
            let kept = Deque(entries.filter { !($0.feature == feature && $0.version <= base) })
            if bounds != nil {
                let bytes = kept.reduce(0) { $0 + $1.size }
                t.totalBytes += bytes - (t.journalBytes[session] ?? 0)
                t.journalBytes[session] = bytes
                t.kept -= entries.count - kept.count
            }
            t.journal[session] = kept
        case .createGrant(let grant):
            try Self.requireSession(grant.session, in: t)
            guard !(t.grants[grant.session] ?? []).contains(where: { $0.id == grant.id }) else {
                throw StorageError(.conflict, "token \(grant.id) exists")
            }
            t.grants[grant.session, default: []].append(grant)
        case .deleteGrants(let session, let ids):
            try Self.requireSession(session, in: t)
            let revoked = Set(ids)
            t.grants[session]?.removeAll { revoked.contains($0.id) }
        }
    }

    /// A bounded journal after an append: the session's oldest changes leave past its bounds
    /// (the newest stays), then the server's oldest past the server's; its oldest keys past
    /// `keys`.
    private static func bound(after e: JournalEntry, key: String?, _ bounds: Bounds, _ t: inout Tables) {
        let size = e.size
        t.journalBytes[e.session, default: 0] += size
        t.totalBytes += size
        t.kept += 1
        t.order.append((e.session, e.seq))
        if let key {
            t.keyOrder[e.session, default: []].append(key)
            while (t.keyOrder[e.session]?.count ?? 0) > bounds.keys, let oldest = t.keyOrder[e.session]?.popFirst() {
                t.keys[e.session]?[oldest] = nil
            }
        }
        while let count = t.journal[e.session]?.count, count > 1,
            count > bounds.changes || (t.journalBytes[e.session] ?? 0) > bounds.bytes
        {
            dropOldest(of: e.session, bounds, &t)
        }
        while t.totalBytes > bounds.serverBytes, let (session, seq) = t.order.popFirst() {
            // Records of changes already gone (their session's own bound, a delete) are skipped.
            if let first = t.journal[session]?.first, first.seq == seq { dropOldest(of: session, bounds, &t) }
        }
        if t.order.count > 2 * t.kept + 1024 {
            t.order = Deque(t.order.filter { record in
                t.journal[record.session]?.first.map { record.seq >= $0.seq } ?? false
            })
        }
    }

    /// The session's oldest change leaves the ring as its feature's base snapshot (the state
    /// before the oldest change kept), so every kept change still has a state before it.
    private static func dropOldest(of session: String, _ bounds: Bounds, _ t: inout Tables) {
        guard let entry = t.journal[session]?.popFirst() else { return }
        t.journalBytes[session, default: 0] -= entry.size
        t.totalBytes -= entry.size
        t.kept -= 1
        var snapshots = t.snapshots[session]?[entry.feature] ?? []
        let before = snapshots.last { $0.version == entry.version - 1 }
        guard let state = try? entry.delta.state(after: before?.state) else { return }
        snapshots.removeAll { $0.version <= entry.version }
        snapshots.insert(
            StoreSnapshot(
                session: session, feature: entry.feature, version: entry.version,
                stateVersion: bounds.stateVersions[entry.feature] ?? before?.stateVersion ?? 1, state: state, time: entry.time),
            at: 0)
        t.snapshots[session, default: [:]][entry.feature] = snapshots
    }

    public func grants(session: String) async throws(StorageError) -> [StoredGrant] {
        tables.withLock { $0.grants[session] ?? [] }
    }

    public func session(id: String) async throws(StorageError) -> StoredSession? {
        tables.withLock { $0.sessions[id] }
    }

    public func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        tables.withLock { $0.snapshots[session]?[feature]?.last { $0.version <= version } }
    }

    public func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        tables.withLock { t in
            // A store's versions grow with the session's seq: in seq order is in version order.
            (t.journal[session] ?? []).filter { $0.feature == feature && $0.version > afterVersion && $0.version <= through }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        tables.withLock { t in
            var found: [JournalEntry] = []
            for entry in t.journal[session] ?? [] where entry.seq > afterSeq {
                guard found.count < limit else { break }
                found.append(entry)
            }
            return found
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        tables.withLock { $0.headSeq[session] ?? 0 }
    }

    public func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        tables.withLock { $0.keys[session]?[key] }
    }

    public func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        tables.withLock { t in
            Array(t.sessions.values.filter { $0.lastActiveAt < time }.sorted { $0.lastActiveAt < $1.lastActiveAt }
                .prefix(limit).map(\.id))
        }
    }

    public func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        tables.withLock { t in
            Array(t.sessions.values.filter { id.utf8.lexicographicallyPrecedes($0.id.utf8) }
                .sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }.prefix(max(0, limit)))
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
