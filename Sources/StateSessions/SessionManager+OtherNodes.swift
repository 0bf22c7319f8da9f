// SessionManager across nodes: following other nodes' commits, membership, and handing sessions over.
import Foundation
import StatePersistence
import StateStore
import Synchronization

extension SessionManager {
    // MARK: Other nodes

    /// Several nodes with one owner per session, once this node joined the cluster: the
    /// ownership rules apply (`nil` otherwise, and for storage of one process).
    var activeOwnership: (any SessionOwnership)? {
        guard let ownership, ownership.hasJoined else { return nil }
        return ownership
    }

    /// Whether this node sees every change of a session as it happens: always with storage of
    /// its own (or none); with shared storage only while ``followOtherNodes()`` hears the
    /// storage's notices. Event streams are refused while it is `false` (they would miss other
    /// nodes' changes).
    public var isFollowing: Bool {
        guard storage.isShared else { return true }
        guard hearing.load(ordering: .sequentiallyConsistent) else { return false }
        // With one owner per session: only while this node is a member.
        guard let ownership = activeOwnership else { return true }
        return ownership.isMember
    }

    /// Shared storage: listens to the storage's notices until they end (the storage closes) or
    /// the task is cancelled. A delete ends the session's streams and drops it from memory;
    /// a lost channel ends every stream of this node, since changes may be missed until it is
    /// back. Returns at once for storage of one process.
    public func followOtherNodes() async {
        guard storage.isShared else { return }
        for await notice in storage.notices() {
            switch notice {
            case .listening:
                hearing.store(true, ordering: .sequentiallyConsistent)
                notify(.following(true))
                wakeFollowWaiters()
            case .lost:
                hearing.store(false, ordering: .sequentiallyConsistent)
                notify(.following(false))
                for session in sessions.withLock({ Array($0.byID.values) }) { session.hub.endStreams() }
            case .committed:
                // With one owner per session, only this node commits to the sessions it holds.
                break
            case .deleted(let id):
                let session = sessions.withLock { table -> Session? in
                    table.deletes &+= 1
                    return table.byID.removeValue(forKey: id)
                }
                session?.deletedElsewhere()
            }
        }
        hearing.store(false, ordering: .sequentiallyConsistent)
        wakeFollowWaiters()
    }

    /// Returns once ``isFollowing`` is true, the following has ended, or `limit` has passed.
    public func untilFollowing(atMost limit: Duration) async {
        guard !isFollowing else { return }
        let id = nextWaiter.add(1, ordering: .relaxed).newValue
        let timer = Task { [self] in
            try? await Task.sleep(for: limit)
            followWaiters.withLock { w in
                let waiter = w.waiting.removeValue(forKey: id)
                if waiter == nil { w.expired.insert(id) }
                return waiter
            }?.resume()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = followWaiters.withLock { w -> Bool in
                if isFollowing || w.expired.remove(id) != nil { return true }
                w.waiting[id] = continuation
                return false
            }
            if now { continuation.resume() }
        }
        timer.cancel()
        followWaiters.withLock { _ = $0.expired.remove(id) }
    }

    private func wakeFollowWaiters() {
        let waiters = followWaiters.withLock { w in
            defer { w.waiting = [:] }
            return Array(w.waiting.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Several nodes: moves `session` to the node with `epoch`, which keeps forwarding its
    /// requests here (``Session/arrived(forwardedBy:)``), once nothing uses it here (no change
    /// running or waiting, no event stream — a stream relayed to the other node counts — no
    /// asynchronous work); otherwise it stays, and a later request tries again. The copy leaves memory first; requests meanwhile are
    /// forwarded to the new owner. If the handover fails (that node is gone, PostgreSQL
    /// unreachable), this node still owns the session and loads it again when asked.
    public func handOver(_ session: Session, to epoch: Int64) async {
        guard let ownership = activeOwnership, session.ownerEpoch == ownership.epoch, !session.isGone else { return }
        var url = sessions.withLock { $0.nodeURLs[epoch] }
        if url == nil {
            url = try? await ownership.url(ofNode: epoch)
            if let url { sessions.withLock { $0.nodeURLs[epoch] = url } }
        }
        guard let url, session.retireIfIdle() else { return }
        sessions.withLock { table in
            if table.byID[session.id] === session { table.byID[session.id] = nil }
            table.leaving[session.id] = url
        }
        session.abandon()
        let moved = (try? await ownership.handOver(session: session.id, to: epoch)) ?? false
        sessions.withLock { _ = $0.leaving.removeValue(forKey: session.id) }
        notify(.handedOver(session: session.id, moved: moved))
    }

    /// Forgets a session this node no longer owns (see ``Session/abandon()``).
    func drop(_ session: Session) {
        sessions.withLock { table in
            if table.byID[session.id] === session { table.byID[session.id] = nil }
        }
        session.abandon()
    }

    /// Several nodes with one owner per session: follows this node's membership until the
    /// storage closes or the task is cancelled. When it lapses, every session in memory is
    /// dropped at once (another node may own any of them now); requests after that claim
    /// again or reach the owner.
    public func followMembership() async {
        guard let ownership else { return }
        for await change in ownership.changes() {
            switch change {
            case .lost:
                for session in sessions.withLock({ Array($0.byID.values) }) { drop(session) }
                notify(.membership(member: false))
            case .joined:
                notify(.membership(member: true))
            }
        }
    }
}
