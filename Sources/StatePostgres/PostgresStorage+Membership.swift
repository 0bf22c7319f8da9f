import Logging
import PostgresNIO
import StatePersistence
import Synchronization

/// This node's membership and the sessions it owns (``SessionOwnership``).
///
/// A node joins with one row in `state_nodes`: an epoch from a sequence (never reused, so a
/// node that lost its membership and joins again is a new owner), the URL its peers forward
/// to, and an expiry by PostgreSQL's clock, `lease` after each renewal. It renews every quarter
/// of the lease. By its own clock the node counts itself a member until three quarters of the
/// lease after it *sent* its last successful renewal: that is before PostgreSQL's expiry (set
/// when the renewal ran, later), so a node that cannot renew — paused, partitioned, PostgreSQL
/// gone — stops serving from its copies before any other node may take its sessions over.
///
/// A session names its owner's epoch. Claiming it takes it when it is free, already this
/// node's, or its owner's membership expired; one statement, under the session's row lock.
/// Every append is fenced on the owner (see `append`): a former owner can never commit. Idle
/// sessions cost nothing: ownership lasts as long as the membership, with no renewal per
/// session.
extension PostgresStorage: SessionOwnership {
    public var ownership: (any SessionOwnership)? { self }

    public var epoch: Int64 { currentEpoch.load(ordering: .sequentiallyConsistent) }

    public var hasJoined: Bool { membership.withLock { $0.url != nil } }

    public var isMember: Bool { epoch != 0 && withinLease && holdsLivenessLock }

    /// Whether 3/4 of the lease have not passed since the last renewal was sent (own clock).
    var withinLease: Bool {
        Self.nanoseconds(ContinuousClock.now - clockOrigin) < memberUntil.load(ordering: .sequentiallyConsistent)
    }

    public func join(advertising url: String) async throws(StorageError) {
        membership.withLock { $0.url = url }
        try await register(url)
        let renewer = Task { [self] in await renew(url) }
        let watcher = Task { [self] in await watchForDeadNodes() }
        membership.withLock { m in
            m.renewer?.cancel()
            m.watcher?.cancel()
            (m.renewer, m.watcher) = (renewer, watcher)
        }
    }

    public func leave() async {
        let (tasks, wasMember) = membership.withLock { m in
            defer { (m.renewer, m.watcher) = (nil, nil) }
            return ([m.renewer, m.watcher], m.url != nil)
        }
        for task in tasks { task?.cancel() }
        for task in tasks { await task?.value }
        let epoch = currentEpoch.exchange(0, ordering: .sequentiallyConsistent)
        memberUntil.store(0, ordering: .sequentiallyConsistent)
        guard wasMember, epoch != 0 else { return }
        // Its sessions are free at once: the next node to use one claims it.
        _ = try? await perform("leave the cluster") { db, logger in
            try await db.query("DELETE FROM state_nodes WHERE epoch = \(epoch)", logger: logger)
        }
        // Then the lock connection closes.
        let holder = membership.withLock { m in
            defer { m.lockHolder = nil }
            return m.lockHolder
        }
        await holder?.closed()
        logger.info("left the cluster", metadata: ["cluster.epoch": "\(epoch)"])
    }

    /// Tests: stops renewing the membership while the process lives on (its liveness lock
    /// stays held), as a paused node does; only its lease's end lets others take over.
    package func stopRenewing() async {
        let renewer = membership.withLock { m in
            defer { m.renewer = nil }
            return m.renewer
        }
        renewer?.cancel()
        await renewer?.value
    }

    public func claim(session: String) async throws(StorageError) -> OwnershipClaim {
        await confirmLiveness()
        let epoch = epoch
        guard epoch != 0, isMember else {
            throw StorageError(.unavailable, "\(name): this node is not a member of the cluster now (its lease lapsed); it is joining again")
        }
        let answer = try await perform("claim a session") { db, logger -> (Int64?, String?, Bool?, Bool, Bool) in
            let rows = try await db.query(
                """
                WITH cur AS (
                    SELECT s.owner, n.url, n.expires_at > now() AS alive
                    FROM state_sessions s LEFT JOIN state_nodes n ON n.epoch = s.owner
                    WHERE s.id = \(session) FOR UPDATE OF s
                ),
                took AS (
                    UPDATE state_sessions SET owner = \(epoch)
                    WHERE id = \(session)
                        AND EXISTS (SELECT 1 FROM state_nodes WHERE epoch = \(epoch) AND expires_at > now())
                        AND (SELECT owner IS NULL OR owner = \(epoch) OR alive IS NOT TRUE FROM cur)
                    RETURNING 1
                )
                SELECT (SELECT owner FROM cur), (SELECT url FROM cur), (SELECT alive FROM cur),
                    EXISTS (SELECT 1 FROM took), EXISTS (SELECT 1 FROM cur)
                """, logger: logger)
            for try await row in rows.decode((Int64?, String?, Bool?, Bool, Bool).self) { return row }
            return (nil, nil, nil, false, false)
        }
        let (owner, url, alive, took, exists) = answer
        guard exists else { return .gone }
        if took { return .mine(tookOver: owner != nil && owner != epoch) }
        if alive == true, let url, owner != epoch { return .elsewhere(url: url) }
        throw StorageError(.unavailable, "\(name): this node's membership expired in PostgreSQL; it is joining again")
    }

    public func url(ofNode epoch: Int64) async throws(StorageError) -> String? {
        try await perform("find a node") { db, logger -> String? in
            let rows = try await db.query(
                "SELECT url FROM state_nodes WHERE epoch = \(epoch) AND expires_at > now()", logger: logger)
            for try await url in rows.decode(String.self) { return url }
            return nil
        }
    }

    public func handOver(session: String, to epoch: Int64) async throws(StorageError) -> Bool {
        let me = self.epoch
        guard me != 0 else { return false }
        return try await perform("hand a session over") { db, logger -> Bool in
            let rows = try await db.query(
                """
                UPDATE state_sessions SET owner = \(epoch)
                WHERE id = \(session) AND owner = \(me)
                    AND EXISTS (SELECT 1 FROM state_nodes WHERE epoch = \(epoch) AND expires_at > now())
                RETURNING 1
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    public func changes() -> AsyncStream<MembershipChange> {
        let (stream, continuation) = AsyncStream<MembershipChange>.makeStream()
        let id = membership.withLock { m in
            m.nextListener += 1
            m.listeners[m.nextListener] = continuation
            return m.nextListener
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.membership.withLock { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    // MARK: Joining and renewing

    /// A new membership row, with its lock on a connection of its own
    /// (`PostgresStorage+Liveness.swift`); this node is a member from now on.
    private func register(_ url: String) async throws(StorageError) {
        let lease = settings.lease
        // Rows of nodes long gone: their sessions are free either way.
        try await perform("join the cluster") { db, logger in
            _ = try await db.query("DELETE FROM state_nodes WHERE expires_at < now() - interval '1 day'", logger: logger)
        }
        let sent = ContinuousClock.now
        let (epoch, connection) = try await openMembership(url)
        let previous = membership.withLock { m in
            memberUntil.store(Self.nanoseconds(sent + lease * 3 / 4 - clockOrigin), ordering: .sequentiallyConsistent)
            lockHeldUntil.store(Self.nanoseconds(sent + Self.livenessBound - clockOrigin), ordering: .sequentiallyConsistent)
            currentEpoch.store(epoch, ordering: .sequentiallyConsistent)
            defer { m.lockHolder = holdLivenessLock(epoch, on: connection) }
            return m.lockHolder
        }
        previous?.stop()
        logger.info("joined the cluster", metadata: ["cluster.epoch": "\(epoch)", "cluster.advertiseUrl": "\(url)"])
        tell(.joined(epoch: epoch))
    }

    /// Renews the membership every quarter of the lease until cancelled; when it lapses (by
    /// this node's clock, or found expired in PostgreSQL), tells `.lost` and joins again.
    private func renew(_ url: String) async {
        let lease = settings.lease
        // Ticks of 0.1 s: a lapse (its lock connection gone, as in a PostgreSQL restart) is
        // followed by a new membership at once, then less often while joining fails.
        var due = ContinuousClock.now + lease / 4
        var rejoin = Duration.milliseconds(100)
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(100))
            if Task.isCancelled { return }
            let epoch = epoch
            guard epoch != 0 else {
                guard ContinuousClock.now >= due else { continue }
                do throws(StorageError) {
                    try await register(url)
                    (due, rejoin) = (.now + lease / 4, .milliseconds(100))
                } catch {
                    rejoin = min(rejoin * 2, lease / 4)
                    due = .now + rejoin
                }
                continue
            }
            guard ContinuousClock.now >= due else { continue }
            due = .now + lease / 4
            let sent = ContinuousClock.now
            do throws(StorageError) {
                let renewed = try await perform("renew the membership") { db, logger -> Bool in
                    let rows = try await db.query(
                        """
                        UPDATE state_nodes SET expires_at = now() + make_interval(secs => \(Self.seconds(lease)))
                        WHERE epoch = \(epoch) AND expires_at > now() RETURNING 1
                        """, logger: logger)
                    for try await _ in rows { return true }
                    return false
                }
                if renewed {
                    memberUntil.store(Self.nanoseconds(sent + lease * 3 / 4 - clockOrigin), ordering: .sequentiallyConsistent)
                } else {
                    lapse(epoch, "its membership expired in PostgreSQL")
                }
            } catch {
                if !withinLease { lapse(epoch, "it could not renew its membership: \(error.message)") }
            }
        }
    }

    /// Membership lost: no copies may be served from now on.
    func lapse(_ epoch: Int64, _ why: String) {
        guard currentEpoch.compareExchange(expected: epoch, desired: 0, ordering: .sequentiallyConsistent).exchanged else { return }
        memberUntil.store(0, ordering: .sequentiallyConsistent)
        logger.warning(
            "this node is no longer a member of the cluster: its sessions' copies are dropped, and it joins again",
            metadata: ["cluster.epoch": "\(epoch)", "reason": "\(why)"])
        tell(.lost)
    }

    private func tell(_ change: MembershipChange) {
        for listener in membership.withLock({ Array($0.listeners.values) }) { listener.yield(change) }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(nanoseconds(duration)) / 1e9
    }

    /// What the membership holds besides the two atomics.
    struct Membership {
        /// The URL this node advertises, once it joined.
        var url: String?
        var renewer: Task<Void, Never>?
        /// Ends dead nodes' memberships (`watchForDeadNodes()`).
        var watcher: Task<Void, Never>?
        /// The current membership's lock connection and its probes (`holdLivenessLock(_:on:)`).
        var lockHolder: LockHolder?
        var listeners: [Int: AsyncStream<MembershipChange>.Continuation] = [:]
        var nextListener = 0
    }
}
