import DequeModule
import Dispatch
import HeapModule
import StateStore
import Synchronization

/// The in-memory twin of ``SQLiteStorage``: the same tables in dictionaries, with the same
/// rules (an append that does not follow the session's last seq and the store's last version,
/// or a key remembered already, is a `.conflict` and fails its batch alone; a write for a
/// session that does not exist is `.sessionGone`). Nothing survives the process.
///
/// Two uses:
/// - `InMemoryStorage()` keeps everything: tests of durable behaviour run on it
///   (`failNextCommits` simulates a failing disk; `shared` and ``node()`` play several nodes
///   with one owner per session).
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

    /// A session's journal: its changes in seq order, the heads a fenced append must follow,
    /// and (bounded) the bytes of its changes, its keys in the order remembered and each
    /// feature's base — the last change of it that left the ring, whole.
    struct Ring {
        struct Base {
            let version: Int
            let state: [UInt8]
            let time: Int64
        }

        var entries = Deque<JournalEntry>()
        var headSeq = 0
        var headVersion: [String: Int] = [:]
        var bytes = 0
        var keyOrder = Deque<String>()
        var bases: [String: Base] = [:]

        /// Appends `e` if it follows the heads (else `.conflict`, nothing changed).
        mutating func append(_ e: JournalEntry) throws(StorageError) {
            // The feature's head found once (each lookup hashes its name).
            let head = headVersion.index(forKey: e.feature)
            let version = head.map { headVersion.values[$0] } ?? 0
            guard e.seq == headSeq + 1, e.version == version + 1 else {
                throw StorageError(
                    .conflict,
                    "journal entry \(e.session)/\(e.feature)@\(e.version) (seq \(e.seq)) does not follow seq \(headSeq), version \(version)")
            }
            entries.append(e)
            headSeq = e.seq
            if let head { headVersion.values[head] = e.version } else { headVersion[e.feature] = e.version }
        }

        /// Bounded: the oldest change leaves as its feature's base; returns its size.
        mutating func dropOldest() -> Int {
            guard let entry = entries.popFirst() else { return 0 }
            bytes -= entry.size
            let before = bases[entry.feature].flatMap { $0.version == entry.version - 1 ? $0.state : nil }
            if let state = try? entry.delta.state(after: before) {
                bases[entry.feature] = Base(version: entry.version, state: state, time: entry.time)
            }
            return entry.size
        }

        /// Bounded, after an append of `size` bytes: the oldest changes leave past `bounds`
        /// (the newest stays), the oldest keys past `bounds.keys` (returned, to forget).
        /// ``append(_:)``, then, when bounded, ``trim(size:key:_:)``: what the trim freed.
        mutating func append(_ e: JournalEntry, trimmingTo bounds: Bounds?, key: String?) throws(StorageError) -> Trimmed? {
            try append(e)
            guard let bounds else { return nil }
            return trim(size: e.size, key: key, bounds)
        }

        typealias Trimmed = (freed: Int, dropped: Int, forgotten: [String])

        mutating func trim(size: Int, key: String?, _ bounds: Bounds) -> Trimmed {
            bytes += size
            var forgotten: [String] = []
            if let key {
                keyOrder.append(key)
                while keyOrder.count > bounds.keys, let oldest = keyOrder.popFirst() { forgotten.append(oldest) }
            }
            var freed = 0
            var dropped = 0
            while entries.count > 1, entries.count > bounds.changes || bytes > bounds.bytes {
                freed += dropOldest()
                dropped += 1
            }
            return (freed, dropped, forgotten)
        }
    }

    struct Tables {
        var sessions: [String: StoredSession] = [:]
        var rings: [String: Ring] = [:]
        /// By session and feature, in version order.
        var snapshots: [String: [String: [StoreSnapshot]]] = [:]
        var keys: [String: [String: RememberedKey]] = [:]
        /// By session, in the order minted.
        var grants: [String: [StoredGrant]] = [:]
        var failures = 0
        /// Shared: each session's owner (a node's epoch), the live members by epoch with the URL
        /// each advertises, and the last epoch given.
        var owners: [String: Int64] = [:]
        var members: [Int64: String] = [:]
        var lastEpoch: Int64 = 0
        /// Bounded (``process(_:)``): bytes of changes kept in all, how many, and every change
        /// kept in the order appended (records of changes gone are skipped, and dropped when
        /// they outnumber the kept ones).
        var totalBytes = 0
        var kept = 0
        var order = Deque<(session: String, seq: Int)>()
        /// Pending timers by session, feature and id, how many, and every one by due time (a
        /// reference whose timer was removed or replaced is skipped, and dropped, when read).
        var timers: [String: [String: [String: PendingTimer]]] = [:]
        var timerCount = 0
        var dueIndex = Heap<TimerReference>()

        /// Applies a change's timers (its session exists: checked with the batch's other writes).
        mutating func apply(_ changes: TimerChanges, session: String, feature: String) {
            var store = timers[session]?[feature] ?? [:]
            let before = store.count
            store = changes.applied(to: store)
            for timer in changes.set {
                dueIndex.insert(TimerReference(session: session, feature: feature, id: timer.id, due: timer.due))
            }
            timerCount += store.count - before
            timers[session, default: [:]][feature] = store.isEmpty ? nil : store
            if timers[session]?.isEmpty == true { timers[session] = nil }
        }

        /// Whether `reference` names a timer still pending at that due time.
        func isPending(_ reference: TimerReference) -> Bool {
            timers[reference.session]?[reference.feature]?[reference.id]?.due == reference.due
        }

        /// Drops the references of timers no longer pending from the top of the index.
        mutating func dropStaleTimers() {
            while let top = dueIndex.min, !isPending(top) { _ = dueIndex.removeMin() }
        }
    }

    /// What several views of one in-memory storage share, as nodes share a database: the
    /// tables, the listeners of notices, the jobs running, and the writer queue that commits
    /// the durable twin's batches in order.
    final class Database: Sendable {
        let tables = Mutex(Tables())
        let listeners = Mutex<[AsyncStream<StorageNotice>.Continuation]>([])
        let running = Mutex<Set<String>>([])
        /// The durable twin's ordered commits (``commit(_:done:)``): one queue, like SQLite's
        /// writer, so every batch is answered in the order it was submitted and never on the
        /// caller's thread.
        let writer = DispatchQueue(label: "state-server.memory-storage.writer")
    }

    public let name = "memory"
    public let lifetime: StorageLifetime
    let bounds: Bounds?
    let database: Database
    /// Shared: this view's membership of the cluster (``SessionOwnership``); `nil` otherwise.
    let membership: NodeMembership?
    /// Several views of one database play several nodes sharing a storage (tests of several
    /// nodes): each is a node with its own membership and owns the sessions it claims.
    public var isShared: Bool { membership != nil }

    /// - Parameter shared: whether several session managers use it as nodes: each takes its
    ///   own view (``node()``), joins, and owns sessions as PostgreSQL's nodes do
    ///   (``SessionOwnership``); they hear each other's deletes through ``notices()``.
    public init(shared: Bool = false) {
        database = Database()
        membership = shared ? NodeMembership() : nil
        lifetime = .durable
        bounds = nil
    }

    private init(bounds: Bounds) {
        database = Database()
        membership = nil
        lifetime = .process
        self.bounds = bounds
    }

    private init(node database: Database) {
        self.database = database
        membership = NodeMembership()
        lifetime = .durable
        bounds = nil
    }

    /// Another node on the same shared storage: the same tables, a membership of its own.
    public func node() -> InMemoryStorage {
        InMemoryStorage(node: database)
    }

    /// Memory mode's journal: keeps what `bounds` allows, lives as long as the process.
    public static func process(_ bounds: Bounds) -> InMemoryStorage {
        InMemoryStorage(bounds: bounds)
    }

    public var ownership: (any SessionOwnership)? { membership == nil ? nil : self }

    public func notices() -> AsyncStream<StorageNotice> {
        let (stream, continuation) = AsyncStream<StorageNotice>.makeStream()
        guard isShared else {
            continuation.finish()
            return stream
        }
        continuation.yield(.listening)
        database.listeners.withLock { $0.append(continuation) }
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
        for listener in database.listeners.withLock({ $0 }) {
            for notice in notices { listener.yield(notice) }
        }
    }

    /// Tells every listener that notices may have been missed (as a lost database connection
    /// would).
    public func loseNotices() {
        for listener in database.listeners.withLock({ $0 }) { listener.yield(.lost) }
    }

    /// Tells every listener that notices flow again (after ``loseNotices()``).
    public func resumeNotices() {
        for listener in database.listeners.withLock({ $0 }) { listener.yield(.listening) }
    }

    /// Makes the next `count` commits fail as if the disk were full.
    public func failNextCommits(_ count: Int) {
        database.tables.withLock { $0.failures = count }
    }

    public func commit(_ batch: [StorageWrite]) async throws(StorageError) {
        guard lifetime == .durable else { return try commitNow(batch) }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, StorageError>, Never>) in
            commit(batch) { continuation.resume(returning: $0) }
        }
        try result.get()
    }

    /// Memory mode's journal commits on the caller's thread and answers before this returns
    /// (the whole change path then runs synchronously); the durable twin commits on its writer
    /// queue, in order, and answers from there, as SQLite does.
    public func commit(_ batch: [StorageWrite], done: @escaping @Sendable (Result<Void, StorageError>) -> Void) {
        guard lifetime == .durable else {
            do throws(StorageError) {
                try commitNow(batch)
                done(.success(()))
            } catch {
                done(.failure(error))
            }
            return
        }
        database.writer.async { [self] in
            do throws(StorageError) {
                try commitNow(batch)
                done(.success(()))
            } catch {
                done(.failure(error))
            }
        }
    }

    /// ``commit(_:)`` without waiting: the batch is stored (or refused) when this returns.
    /// Shared: appends and creates are fenced on this node owning the session.
    public func commitNow(_ batch: [StorageWrite]) throws(StorageError) {
        let epoch = membership?.fence
        try database.tables.withLock { (t: inout Tables) throws(StorageError) in
            if t.failures > 0 {
                t.failures -= 1
                throw StorageError(.unavailable, "simulated disk failure")
            }
            if let epoch { try Self.fence(batch, epoch: epoch, in: &t) }
            if batch.count == 1 {
                // One write checks everything before it changes anything: applied in place.
                try apply(batch[0], to: &t)
            } else {
                var copy = t
                for write in batch { try apply(write, to: &copy) }
                t = copy
            }
            // Timers last, in place, once nothing of the batch can fail (a copy would copy the
            // whole due index).
            for case .timers(let session, let feature, let changes) in batch where t.sessions[session] != nil {
                t.apply(changes, session: session, feature: feature)
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
            t.owners[id] = nil
            if let ring = t.rings.removeValue(forKey: id), bounds != nil {
                t.kept -= ring.entries.count
                t.totalBytes -= ring.bytes
            }
            t.snapshots[id] = nil
            t.keys[id] = nil
            t.grants[id] = nil
            if let removed = t.timers.removeValue(forKey: id) {
                t.timerCount -= removed.values.reduce(0) { $0 + $1.count }
            }
        case .append(let e, let key):
            // The session's entries are found once each (every lookup hashes its id): this runs
            // for every change in memory mode.
            guard let stored = t.sessions.index(forKey: e.session) else {
                throw StorageError(.sessionGone, "session \(e.session) does not exist (deleted or expired)")
            }
            if let key, t.keys[e.session]?[key] != nil { throw StorageError(.conflict, "idempotency key exists") }
            let trimmed = try t.rings[e.session, default: Ring()].append(e, trimmingTo: bounds, key: key)
            if let key { t.keys[e.session, default: [:]][key] = RememberedKey(feature: e.feature, version: e.version, time: e.time) }
            if t.sessions.values[stored].lastActiveAt < e.time { t.sessions.values[stored].lastActiveAt = e.time }
            if let bounds, let trimmed { Self.bound(after: e, trimmed, bounds, &t) }
        case .snapshot(let s):
            try Self.requireSession(s.session, in: t)
            guard s.version <= t.rings[s.session]?.headVersion[s.feature] ?? 0 else {
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
            let entries = t.rings[session]?.entries ?? []
            let window = (t.rings[session]?.headSeq ?? 0) - keepLast
            var needFrom = upToVersion + 1
            for entry in entries where entry.feature == feature && entry.seq > window { needFrom = min(needFrom, entry.version) }
            for key in keys.values where key.feature == feature { needFrom = min(needFrom, key.version) }
            let snapshots = snapshotList(t, session, feature)
            guard let base = snapshots.last(where: { $0.version <= needFrom - 1 })?.version else { return }
            t.snapshots[session]?[feature] = snapshots.filter { $0.version >= base }
            let kept = Deque(entries.filter { !($0.feature == feature && $0.version <= base) })
            if bounds != nil {
                let bytes = kept.reduce(0) { $0 + $1.size }
                t.totalBytes += bytes - (t.rings[session]?.bytes ?? 0)
                t.rings[session]?.bytes = bytes
                t.kept -= entries.count - kept.count
            }
            t.rings[session]?.entries = kept
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
        case .timers(let session, _, _):
            // Applied once the whole batch is checked (``commitNow(_:)``).
            try Self.requireSession(session, in: t)
        }
    }

    /// A bounded journal after an append: the session's oldest changes leave past its bounds
    /// (the newest stays), then the server's oldest past the server's; its oldest keys past
    /// `keys`.
    /// The server's part of the bounds after `e` was appended and its ring trimmed (`trimmed`):
    /// the keys its ring forgot, and the server's oldest changes past `bounds.serverBytes`.
    private static func bound(after e: JournalEntry, _ trimmed: Ring.Trimmed, _ bounds: Bounds, _ t: inout Tables) {
        let size = e.size
        let (freed, dropped, forgotten) = trimmed
        for key in forgotten { t.keys[e.session]?[key] = nil }
        t.totalBytes += size - freed
        t.kept += 1 - dropped
        t.order.append((e.session, e.seq))
        while t.totalBytes > bounds.serverBytes, let (session, seq) = t.order.popFirst() {
            // Records of changes already gone (their session's own bound, a delete) are skipped.
            guard t.rings[session]?.entries.first?.seq == seq else { continue }
            t.totalBytes -= t.rings[session]?.dropOldest() ?? 0
            t.kept -= 1
        }
        if t.order.count > 2 * t.kept + 1024 {
            t.order = Deque(t.order.filter { record in
                t.rings[record.session]?.entries.first.map { record.seq >= $0.seq } ?? false
            })
        }
    }

    /// The store's snapshots in version order: those written, and (bounded) the base its ring
    /// keeps in place of the older ones.
    private func snapshotList(_ t: Tables, _ session: String, _ feature: String) -> [StoreSnapshot] {
        var list = t.snapshots[session]?[feature] ?? []
        if let base = t.rings[session]?.bases[feature] {
            list.removeAll { $0.version <= base.version }
            list.insert(
                StoreSnapshot(
                    session: session, feature: feature, version: base.version,
                    stateVersion: bounds?.stateVersions[feature] ?? 1, state: base.state, time: base.time),
                at: 0)
        }
        return list
    }

    public func grants(session: String) async throws(StorageError) -> [StoredGrant] {
        database.tables.withLock { $0.grants[session] ?? [] }
    }

    public func session(id: String) async throws(StorageError) -> StoredSession? {
        database.tables.withLock { $0.sessions[id] }
    }

    public func snapshot(session: String, feature: String, atOrBefore version: Int) async throws(StorageError) -> StoreSnapshot? {
        database.tables.withLock { snapshotList($0, session, feature).last { $0.version <= version } }
    }

    public func journal(session: String, feature: String, afterVersion: Int, through: Int) async throws(StorageError) -> [JournalEntry] {
        database.tables.withLock { t in
            // A store's versions grow with the session's seq: in seq order is in version order.
            (t.rings[session]?.entries ?? []).filter { $0.feature == feature && $0.version > afterVersion && $0.version <= through }
        }
    }

    public func journal(session: String, afterSeq: Int, limit: Int) async throws(StorageError) -> [JournalEntry] {
        database.tables.withLock { t in
            var found: [JournalEntry] = []
            for entry in t.rings[session]?.entries ?? [] where entry.seq > afterSeq {
                guard found.count < limit else { break }
                found.append(entry)
            }
            return found
        }
    }

    public func lastSeq(session: String) async throws(StorageError) -> Int {
        database.tables.withLock { $0.rings[session]?.headSeq ?? 0 }
    }

    public func rememberedKey(session: String, key: String) async throws(StorageError) -> RememberedKey? {
        database.tables.withLock { $0.keys[session]?[key] }
    }

    public func sessions(inactiveBefore time: Int64, limit: Int) async throws(StorageError) -> [String] {
        database.tables.withLock { t in
            Array(t.sessions.values.filter { $0.lastActiveAt < time }.sorted { $0.lastActiveAt < $1.lastActiveAt }
                .prefix(limit).map(\.id))
        }
    }

    public func sessions(after id: String, limit: Int) async throws(StorageError) -> [StoredSession] {
        database.tables.withLock { t in
            Array(t.sessions.values.filter { id.utf8.lexicographicallyPrecedes($0.id.utf8) }
                .sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }.prefix(max(0, limit)))
        }
    }

    public func sessionCount() async throws(StorageError) -> Int {
        database.tables.withLock { $0.sessions.count }
    }

    public func timers(session: String) async throws(StorageError) -> [StoredTimer] {
        database.tables.withLock { t in
            (t.timers[session] ?? [:]).flatMap { feature, timers in
                timers.values.map { StoredTimer(session: session, feature: feature, timer: $0) }
            }
        }.sorted { $0.reference < $1.reference }
    }

    public func dueTimers(through time: Int64, limit: Int) async throws(StorageError) -> [TimerReference] {
        let epoch = membership?.fence
        return database.tables.withLock { t in
            // Popped in due order, the stale ones dropped, the pending ones put back: they stay
            // indexed until the change that fires them removes them.
            var due: [TimerReference] = []
            var skipped: [TimerReference] = []
            while due.count < limit, let top = t.dueIndex.min, top.due <= time {
                let reference = t.dueIndex.removeMin()
                guard t.isPending(reference) else { continue }
                if let epoch, let owner = t.owners[reference.session], owner != epoch, t.members[owner] != nil {
                    skipped.append(reference)
                } else {
                    due.append(reference)
                }
            }
            for reference in due + skipped { t.dueIndex.insert(reference) }
            return due
        }
    }

    public func nextTimerDue() async throws(StorageError) -> Int64? {
        database.tables.withLock { t in
            t.dropStaleTimers()
            return t.dueIndex.min?.due
        }
    }

    public func timerCount() async throws(StorageError) -> Int {
        database.tables.withLock { $0.timerCount }
    }

    /// Ends every notice stream (every node's: they share the storage), and this node's
    /// membership changes.
    public func close() async {
        for listener in database.listeners.withLock({ l in defer { l = [] }; return l }) { listener.finish() }
        membership?.finish()
    }

    /// Shared: one job of a name at a time, over every manager using this storage.
    public func exclusively<T: Sendable>(_ job: String, _ body: @escaping @Sendable () async -> T) async throws(StorageError) -> T? {
        guard isShared else { return await body() }
        guard database.running.withLock({ $0.insert(job).inserted }) else { return nil }
        defer { database.running.withLock { _ = $0.remove(job) } }
        return await body()
    }
}
