// The in-memory twin's owners: each view of a shared InMemoryStorage is a node that joins,
// claims sessions, fences its appends on owning them, hands them over, and lapses.
import Synchronization

/// One node's membership of an in-memory cluster (a view of a shared ``InMemoryStorage``).
final class NodeMembership: Sendable {
    private struct State {
        var epoch: Int64 = 0
        var url: String?
        var listeners: [AsyncStream<MembershipChange>.Continuation] = []
    }

    private let state = Mutex(State())

    var epoch: Int64 { state.withLock { $0.epoch } }
    var hasJoined: Bool { state.withLock { $0.url != nil } }

    /// The epoch its writes are fenced on once it joined (0 while not a member: every fenced
    /// write is refused); `nil` before it joined (no owners yet, as PostgreSQL's storage alone).
    var fence: Int64? {
        state.withLock { $0.url == nil ? nil : $0.epoch }
    }

    func joined(epoch: Int64, url: String) {
        let listeners = state.withLock { s in
            s.epoch = epoch
            s.url = url
            return s.listeners
        }
        for listener in listeners { listener.yield(.joined(epoch: epoch)) }
    }

    /// Ends the membership; returns the epoch it had. `lost`: tells its listeners.
    func ended(lost: Bool) -> Int64 {
        let (epoch, listeners) = state.withLock { s in
            defer { s.epoch = 0 }
            return (s.epoch, s.listeners)
        }
        if lost { for listener in listeners { listener.yield(.lost) } }
        return epoch
    }

    func changes() -> AsyncStream<MembershipChange> {
        let (stream, continuation) = AsyncStream<MembershipChange>.makeStream()
        state.withLock { $0.listeners.append(continuation) }
        return stream
    }

    func finish() {
        for listener in state.withLock({ s in defer { s.listeners = [] }; return s.listeners }) { listener.finish() }
    }
}

extension InMemoryStorage: SessionOwnership {
    private var member: NodeMembership {
        // Only reachable through `ownership`, which is nil without a membership.
        membership ?? NodeMembership()
    }

    public var isMember: Bool {
        let epoch = member.epoch
        return epoch != 0 && database.tables.withLock { $0.members[epoch] != nil }
    }

    public func confirmLiveness() async {}

    public var epoch: Int64 { member.epoch }

    public var hasJoined: Bool { member.hasJoined }

    public func join(advertising url: String) async throws(StorageError) {
        let epoch = database.tables.withLock { t in
            t.lastEpoch += 1
            t.members[t.lastEpoch] = url
            return t.lastEpoch
        }
        member.joined(epoch: epoch, url: url)
    }

    /// Leaves the cluster: every session this node owned is free at once.
    public func leave() async {
        let epoch = member.ended(lost: false)
        database.tables.withLock { t in
            t.members[epoch] = nil
            t.owners = t.owners.filter { $0.value != epoch }
        }
    }

    /// The membership lapses, as when a node stops renewing its lease (paused, cut off): it is
    /// no member from now on (its writes are refused), its listeners hear `.lost`, and other
    /// nodes may claim the sessions it owned. ``join(advertising:)`` makes it a member again,
    /// with a new epoch.
    public func lapse() {
        let epoch = member.ended(lost: true)
        _ = database.tables.withLock { $0.members.removeValue(forKey: epoch) }
    }

    public func claim(session: String) async throws(StorageError) -> OwnershipClaim {
        let epoch = member.epoch
        return try database.tables.withLock { (t: inout Tables) throws(StorageError) -> OwnershipClaim in
            guard epoch != 0, t.members[epoch] != nil else {
                throw StorageError(.unavailable, "this node is not a member of the cluster")
            }
            guard t.sessions[session] != nil else { return .gone }
            let owner = t.owners[session]
            if owner == epoch { return .mine(tookOver: false) }
            if let owner, let url = t.members[owner] { return .elsewhere(url: url) }
            t.owners[session] = epoch
            return .mine(tookOver: owner != nil)
        }
    }

    public func url(ofNode epoch: Int64) async throws(StorageError) -> String? {
        database.tables.withLock { $0.members[epoch] }
    }

    public func handOver(session: String, to epoch: Int64) async throws(StorageError) -> Bool {
        let mine = member.epoch
        return database.tables.withLock { t in
            guard mine != 0, t.owners[session] == mine, t.members[epoch] != nil else { return false }
            t.owners[session] = epoch
            return true
        }
    }

    public func changes() -> AsyncStream<MembershipChange> { member.changes() }

    public func members() async throws(StorageError) -> [ClusterMember] {
        let mine = member.epoch
        return database.tables.withLock { t in
            t.members.sorted { $0.key < $1.key }.map {
                ClusterMember(epoch: $0.key, url: $0.value, isThisNode: $0.key == mine, holdsLock: true, leaseLeft: .seconds(10))
            }
        }
    }

    /// Refuses the batch unless the node with `epoch` owns every session it creates or appends
    /// to (`.notOwner`, nothing written): a node that is no member, or whose session another
    /// node took over, writes nothing — PostgreSQL's fence.
    static func fence(_ batch: [StorageWrite], epoch: Int64, in t: inout Tables) throws(StorageError) {
        for write in batch {
            switch write {
            case .createSession(let s):
                guard epoch != 0, t.members[epoch] != nil else {
                    throw StorageError(.notOwner, "this node is not a member of the cluster")
                }
                if t.sessions[s.id] == nil { t.owners[s.id] = epoch }
            case .append(let e, _):
                guard epoch != 0, t.members[epoch] != nil, t.owners[e.session] == epoch else {
                    throw StorageError(.notOwner, "session \(e.session) is not owned by this node")
                }
            default: break
            }
        }
    }
}
