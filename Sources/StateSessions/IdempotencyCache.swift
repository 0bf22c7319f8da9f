import DequeModule
import Synchronization

/// The replies a session remembers for `Idempotency-Key`s: a key seen again is answered with
/// its first reply. Bounded, the oldest forgotten first (``limit`` replies, ``byteLimit`` bytes
/// of bodies); in durable mode a key forgotten here is still answered from storage
/// (``Session/rememberedReply(key:)``). Owns its table; thread-safe.
final class IdempotencyCache: Sendable {
    private let table: Mutex<IdempotencyTable>

    init(limit: Int, byteLimit: Int) {
        table = Mutex(IdempotencyTable(limit: limit, byteLimit: byteLimit))
    }

    /// The reply remembered for `key`.
    func reply(for key: String) -> IdempotentReply? {
        table.withLock { $0.reply(for: key) }
    }

    /// Remembers `reply` for `key` (a key already remembered keeps its first reply; a reply
    /// larger than the byte limit is not kept).
    func remember(_ key: String, _ reply: IdempotentReply) {
        table.withLock { $0.insert(key, reply) }
    }

    /// Replies remembered now, and their body bytes (for tests and bounds).
    var size: (replies: Int, bytes: Int) { table.withLock { ($0.count, $0.bytes) } }
}

/// The remembered replies of one session, oldest forgotten first past `limit` replies or
/// `byteLimit` bytes of reply bodies (a forgotten key is still answered from storage in durable
/// mode).
private struct IdempotencyTable {
    let limit: Int
    let byteLimit: Int
    private var replies: [String: IdempotentReply] = [:]
    private var order = Deque<String>()
    private(set) var bytes = 0
    var count: Int { replies.count }

    init(limit: Int, byteLimit: Int) {
        self.limit = limit
        self.byteLimit = byteLimit
    }

    func reply(for key: String) -> IdempotentReply? { replies[key] }

    mutating func insert(_ key: String, _ reply: IdempotentReply) {
        guard limit > 0, replies[key] == nil, reply.body.count <= byteLimit else { return }
        replies[key] = reply
        order.append(key)
        bytes += reply.body.count
        while order.count > limit || bytes > byteLimit, let oldest = order.popFirst() {
            bytes -= replies.removeValue(forKey: oldest)?.body.count ?? 0
        }
    }
}
