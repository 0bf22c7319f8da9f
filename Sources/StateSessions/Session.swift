import DequeModule
import StateStore
import Synchronization

/// A response remembered for an `Idempotency-Key`.
public struct IdempotentReply: Sendable {
    public let status: Int
    public let body: [UInt8]
    public let version: Int

    public init(status: Int, body: [UInt8], version: Int) {
        self.status = status
        self.body = body
        self.version = version
    }
}

/// One client session: a store per registered feature (created on first use), an event hub,
/// and the replies remembered for idempotency keys.
///
/// Thread-safety: the store table and the idempotency table each sit behind their own lock;
/// stores and the hub are thread-safe themselves. Lock order: idempotency → store → hub.
public final class Session: Sendable {
    public let id: String
    private let token: [UInt8]
    private let registry: FeatureRegistry
    private let stores = Mutex<[String: any AnyStateStore]>([:])
    public let hub: EventHub
    private let idempotency: Mutex<IdempotencyTable>
    private let onFollowUpRejected: @Sendable (String, StoreError) -> Void

    init(
        id: String, token: String, registry: FeatureRegistry, settings: SessionSettings,
        onFollowUpRejected: @escaping @Sendable (String, StoreError) -> Void
    ) {
        self.id = id
        self.token = Array(token.utf8)
        self.registry = registry
        self.hub = EventHub(features: registry.features, replayLimit: settings.replayBuffer)
        self.idempotency = Mutex(IdempotencyTable(limit: settings.idempotencyKeys))
        self.onFollowUpRejected = onFollowUpRejected
    }

    /// Compares `candidate` with the session's token in time that depends only on the length.
    public func verify(token candidate: String) -> Bool {
        let bytes = Array(candidate.utf8)
        guard bytes.count == token.count else { return false }
        var difference: UInt8 = 0
        for index in 0..<bytes.count { difference |= bytes[index] ^ token[index] }
        return difference == 0
    }

    /// The store of a registered feature, created at its initial state on first use;
    /// `nil` for an unknown feature.
    public func store(_ feature: String) -> (any AnyStateStore)? {
        stores.withLock { stores in
            if let store = stores[feature] { return store }
            guard let definition = registry[feature] else { return nil }
            let sessionID = id
            let report = onFollowUpRejected
            let store = definition.makeStore { error in report(sessionID, error) }
            let hub = self.hub
            _ = store.addJSONObserver { change in hub.publish(change) }
            stores[feature] = store
            return store
        }
    }

    /// The current state of every feature (initial state at version 0 for unused ones).
    public func allStates() throws(StoreError) -> [(feature: String, version: Int, state: [UInt8])] {
        let existing = stores.withLock { $0 }
        var result: [(feature: String, version: Int, state: [UInt8])] = []
        for feature in registry.features {
            if let store = existing[feature.name] {
                let (state, version) = try store.currentJSON()
                result.append((feature.name, version, state))
            } else {
                result.append((feature.name, 0, feature.initialStateJSON))
            }
        }
        return result
    }

    /// Runs `body` once per idempotency key: a repeat of a key whose first run produced a
    /// reply returns that reply (`replayed: true`) without running `body`. Only replies that
    /// `body` marks as worth keeping are remembered, so a failed request can be retried.
    /// Runs of the same session's keyed requests are serialized.
    public func idempotent(
        key: String, _ body: () -> (reply: IdempotentReply, keep: Bool)
    ) -> (reply: IdempotentReply, replayed: Bool) {
        idempotency.withLock { table in
            if let reply = table.replies[key] { return (reply, true) }
            let (reply, keep) = body()
            if keep { table.insert(key, reply) }
            return (reply, false)
        }
    }

    /// Ends the session's event streams.
    func close() {
        hub.close()
    }
}

/// The remembered replies of one session, oldest evicted first past `limit`.
struct IdempotencyTable {
    let limit: Int
    var replies: [String: IdempotentReply] = [:]
    var order = Deque<String>()

    mutating func insert(_ key: String, _ reply: IdempotentReply) {
        guard limit > 0 else { return }
        replies[key] = reply
        order.append(key)
        while order.count > limit, let oldest = order.popFirst() { replies[oldest] = nil }
    }
}
