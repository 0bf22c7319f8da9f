// PostgresStorage's liveness: each node's lock connection, and ending a dead node's membership early.
import CoreMetrics
import Logging
import NIOCore
import PostgresNIO
import StatePersistence
import Synchronization

/// Telling a dead node from a slow one (issue 39).
///
/// A node holds a session-level advisory lock keyed by its epoch, `(lockNamespace, epoch)`, on a
/// connection of its own (not the pool), taken in the statement that inserts its membership
/// row: no node ever sees the row without the lock. PostgreSQL frees the lock when that
/// connection's backend ends — at once when the node's process dies (its kernel closes the
/// socket), after TCP keepalive gives up in a partition (`tcp_keepalives_*`), never while the
/// node is only paused or slow (its connection stays open).
///
/// Every node scans the live members every ``deathScan``; a row whose lock is free on two scans
/// at least ``livenessBound`` apart has its membership ended at once (`expires_at = now()`, in
/// a statement that checks the lock again), and the claims then take its sessions over on
/// first use, as after a lease. A lock once free is never taken again (an epoch is joined once).
///
/// The node itself asks its lock connection `SELECT 1` every ``probeInterval`` and serves only
/// while an answer came to a probe sent less than ``livenessBound`` ago (``isMember``): a lock
/// seen free was freed after the last answered probe was sent, so the node stopped serving
/// before another node's second sighting. A connection that breaks, or does not answer for
/// ``lapseAfter``, lapses the membership (the node joins again under a new epoch).
extension PostgresStorage {
    /// The first key of every liveness lock ("STND"); the second is the epoch modulo 2³¹. The
    /// other advisory locks of this code take one 64-bit key, a key space of its own.
    static let lockNamespace: Int32 = 0x5354_4E44
    static let probeInterval = Duration.milliseconds(100)
    /// How long an answered probe lets a node serve, and how long a free lock must stay free
    /// before its node is declared dead.
    static let livenessBound = Duration.milliseconds(700)
    /// A lock connection that answered no probe for this long lapses the membership.
    static let lapseAfter = Duration.seconds(3)
    static let deathScan = Duration.milliseconds(200)
    /// Whether the node of row `n` holds its lock now (pg_locks shows a lock of two 32-bit keys
    /// as classid, objid and objsubid 2; advisory locks are per database).
    static let lockHeld = """
        EXISTS (SELECT 1 FROM pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND l.classid = \(lockNamespace)::oid AND l.objid = (n.epoch % 2147483648)::oid)
        """

    /// Whether a probe answered recently enough for this node to serve (see the type's notes).
    var holdsLivenessLock: Bool {
        Self.nanoseconds(ContinuousClock.now - clockOrigin) < lockHeldUntil.load(ordering: .sequentiallyConsistent)
    }

    public func confirmLiveness() async {
        let deadline = ContinuousClock.now + Self.livenessBound
        // The prober answers within a round trip of the node's resuming (its sleep is over).
        while epoch != 0, withinLease, !holdsLivenessLock, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Inserts the membership row and takes its lock in one statement, on a new connection that
    /// from then on belongs to this membership. Returns the epoch and the connection.
    func openMembership(_ url: String) async throws(StorageError) -> (Int64, PostgresConnection) {
        let lease = settings.lease
        let connection: PostgresConnection
        do {
            connection = try await Self.connect(settings, logger: logger, id: 2)
        } catch {
            throw Self.storageError(error, what: "open the lock connection", name: name, wait: settings.connectionWait)
        }
        do {
            let rows = try await connection.query(
                """
                WITH n AS (
                    INSERT INTO state_nodes (url, expires_at, locked)
                    VALUES (\(url), now() + make_interval(secs => \(Self.seconds(lease))), true) RETURNING epoch
                )
                SELECT epoch, pg_try_advisory_lock(\(Self.lockNamespace), (epoch % 2147483648)::int4) FROM n
                """, logger: logger)
            for try await (epoch, locked) in rows.decode((Int64, Bool).self) {
                // Never false (no other node takes this key); if it were, the row is free
                // and ended by the other nodes like a dead one's.
                guard locked else { break }
                return (epoch, connection)
            }
            throw StorageError(.unavailable, "\(name): the membership row or its lock was not returned")
        } catch {
            try? await connection.close()
            throw Self.storageError(error, what: "join the cluster", name: name, wait: settings.connectionWait)
        }
    }

    /// Probes the lock connection of membership `epoch` until it lapses or is stopped, then
    /// closes it.
    func holdLivenessLock(_ epoch: Int64, on connection: PostgresConnection) -> LockHolder {
        let holder = LockHolder(epoch: epoch, connection: connection, storage: self)
        holder.start()
        return holder
    }

    /// A probe of `epoch`'s lock connection, sent at `sent`, was answered: the node may serve
    /// until `sent + livenessBound`.
    fileprivate func confirmed(_ epoch: Int64, sent: NIODeadline) {
        let since = Duration.nanoseconds(NIODeadline.now().uptimeNanoseconds - sent.uptimeNanoseconds)
        membership.withLock { _ in
            // Under the lock: a new membership's register sets its own bound there.
            guard currentEpoch.load(ordering: .sequentiallyConsistent) == epoch else { return }
            lockHeldUntil.store(
                Self.nanoseconds(ContinuousClock.now - since + Self.livenessBound - clockOrigin), ordering: .sequentiallyConsistent)
        }
    }

    /// One membership's lock connection and its probes. They run on the connection's event loop,
    /// not on Swift's cooperative pool: a pool busy with other work must not make a live node
    /// look dead to itself (every callback is short and never blocks).
    final class LockHolder: Sendable {
        let epoch: Int64
        let connection: PostgresConnection
        /// Strong: the storage drops this holder when its membership ends or it closes.
        private let storage: PostgresStorage
        private let stopped = Atomic<Bool>(false)
        /// When the last answered probe was sent, and how long this process ran since without
        /// another answer (a pause is not counted: the answer may be waiting, unread).
        private let watch = Mutex<(answered: NIODeadline, waited: Duration, tick: NIODeadline)>((.now(), .zero, .now()))

        fileprivate init(epoch: Int64, connection: PostgresConnection, storage: PostgresStorage) {
            self.epoch = epoch
            self.connection = connection
            self.storage = storage
        }

        fileprivate func start() {
            connection.closeFuture.whenComplete { [self] _ in
                if !stopped.load(ordering: .sequentiallyConsistent) {
                    storage.lapse(epoch, "its lock connection to PostgreSQL closed")
                }
            }
            probe()
            connection.eventLoop.scheduleTask(in: .nanoseconds(PostgresStorage.nanoseconds(PostgresStorage.probeInterval))) { [self] in
                check()
            }
        }

        private var running: Bool {
            !stopped.load(ordering: .sequentiallyConsistent) && storage.currentEpoch.load(ordering: .sequentiallyConsistent) == epoch
        }

        private func probe() {
            guard running else { return stop() }
            let sent = NIODeadline.now()
            connection.query("SELECT 1", logger: storage.logger).whenComplete { [self] result in
                switch result {
                case .success:
                    watch.withLock { $0.answered = sent }
                    storage.confirmed(epoch, sent: sent)
                    connection.eventLoop.scheduleTask(in: .nanoseconds(PostgresStorage.nanoseconds(PostgresStorage.probeInterval))) {
                        [self] in probe()
                    }
                case .failure(let error):
                    if running { storage.lapse(epoch, "its lock connection to PostgreSQL broke: \(String(describing: error))") }
                    stop()
                }
            }
        }

        /// Lapses the membership once this process ran ``lapseAfter`` without an answer.
        private func check() {
            guard running else { return }
            let now = NIODeadline.now()
            let waited = watch.withLock { w -> Duration in
                let step = Duration.nanoseconds(now.uptimeNanoseconds - w.tick.uptimeNanoseconds)
                let seen = Duration.nanoseconds(now.uptimeNanoseconds - w.answered.uptimeNanoseconds)
                // Since the last answer, counting each tick's gap at most twice the interval.
                w.waited = seen < PostgresStorage.probeInterval * 2 ? .zero : w.waited + min(step, PostgresStorage.probeInterval * 2)
                w.tick = now
                return w.waited
            }
            if waited > PostgresStorage.lapseAfter {
                storage.lapse(epoch, "its lock connection to PostgreSQL answered nothing for \(PostgresStorage.lapseAfter)")
                return stop()
            }
            connection.eventLoop.scheduleTask(in: .nanoseconds(PostgresStorage.nanoseconds(PostgresStorage.probeInterval))) { [self] in
                check()
            }
        }

        /// Stops probing and closes the connection (PostgreSQL frees the lock).
        func stop() {
            guard !stopped.exchange(true, ordering: .sequentiallyConsistent) else { return }
            connection.close().whenComplete { _ in }
        }

        /// Returns once the connection is closed.
        func closed() async {
            stop()
            try? await connection.closeFuture.get()
        }
    }

    // MARK: Finding dead nodes

    /// Every ``deathScan``, the live members as PostgreSQL has them, and which of them hold no
    /// lock; a node seen so twice, ``livenessBound`` apart, has its membership ended.
    func watchForDeadNodes() async {
        let declared = Counter(label: "stateserver_cluster_nodes_declared_dead_total")
        let sinceRenewal = Timer(label: "stateserver_cluster_dead_node_detection_seconds")
        let memberCount = Gauge(label: "stateserver_cluster_members")
        var suspects: [Int64: ContinuousClock.Instant] = [:]
        while !Task.isCancelled {
            // The next scan, or sooner the moment a suspect has been free for long enough.
            let wake = suspects.values.min().map { $0 + Self.livenessBound } ?? .now + Self.deathScan
            try? await Task.sleep(until: min(wake, .now + Self.deathScan))
            let me = epoch
            guard me != 0, let members = try? await members() else {
                suspects = [:]
                continue
            }
            memberCount.record(members.count)
            let now = ContinuousClock.now
            let free = Set(members.filter { $0.holdsLock == false && $0.epoch != me }.map(\.epoch))
            suspects = suspects.filter { free.contains($0.key) }
            for epoch in free where suspects[epoch] == nil { suspects[epoch] = now }
            let due = suspects.filter { now - $0.value >= Self.livenessBound }.map(\.key)
            guard !due.isEmpty, let ended = try? await endMemberships(due) else { continue }
            for (epoch, url, remaining) in ended {
                suspects[epoch] = nil
                let after = settings.lease - .milliseconds(Int64((remaining * 1000).rounded()))
                declared.increment()
                sinceRenewal.recordNanoseconds(Self.nanoseconds(after))
                logger.warning(
                    "a node was declared dead early: its lock connection to PostgreSQL is gone; its sessions move on first use",
                    metadata: [
                        "cluster.epoch": "\(me)", "cluster.deadEpoch": "\(epoch)", "cluster.deadUrl": "\(url)",
                        "cluster.sinceRenewal": "\(after)", "cluster.leaseLeft": "\(settings.lease - after)",
                    ])
            }
        }
    }

    /// The live members (their lease not expired), and whether each holds its lock (`nil` for
    /// a node of an older build, which takes none).
    public func members() async throws(StorageError) -> [ClusterMember] {
        let me = epoch
        return try await perform("look for dead nodes") { db, logger -> [ClusterMember] in
            let rows = try await db.query(
                """
                SELECT n.epoch, n.url, n.locked, n.locked AND \(unescaped: Self.lockHeld),
                    extract(epoch FROM n.expires_at - now())::float8
                FROM state_nodes n WHERE n.expires_at > now() ORDER BY n.epoch
                """, logger: logger)
            var members: [ClusterMember] = []
            for try await (epoch, url, locked, held, left) in rows.decode((Int64, String, Bool, Bool, Double).self) {
                members.append(ClusterMember(
                    epoch: epoch, url: url, isThisNode: epoch == me, holdsLock: locked ? held : nil,
                    leaseLeft: .milliseconds(Int64((left * 1000).rounded()))))
            }
            return members
        }
    }

    /// Ends the memberships of `epochs` whose lock is still free; returns each one ended with
    /// its URL and the seconds its lease had left.
    private func endMemberships(_ epochs: [Int64]) async throws(StorageError) -> [(Int64, String, Double)] {
        try await perform("end a dead node's membership", writes: true) { db, logger -> [(Int64, String, Double)] in
            let rows = try await db.query(
                """
                UPDATE state_nodes n SET expires_at = now()
                FROM state_nodes o
                WHERE o.epoch = n.epoch AND n.epoch = ANY(\(epochs)) AND n.locked AND n.expires_at > now()
                    AND NOT \(unescaped: Self.lockHeld)
                RETURNING n.epoch, n.url, extract(epoch FROM o.expires_at - now())::float8
                """, logger: logger)
            var ended: [(Int64, String, Double)] = []
            for try await row in rows.decode((Int64, String, Double).self) { ended.append(row) }
            return ended
        }
    }
}
