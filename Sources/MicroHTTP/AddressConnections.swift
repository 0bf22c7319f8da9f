import Synchronization

/// Open connections per client address, for `connectionsPerAddress` (IPv6 counted by /64,
/// ``IPAddress/limitKey``).
///
/// libmicrohttpd asks the accept policy first (``mayAccept(_:)``: is the address under its
/// limit?), and only then, if it kept the connection, notifies that it started
/// (``opened(_:)``, which counts it) and later that it closed (``closed(_:)``). Counting at
/// the start rather than at the policy keeps the count exact: a connection libmicrohttpd drops
/// between the two (the server's connection limit reached) is never counted, so it never needs
/// uncounting. Event threads accepting at the same instant may each let one connection past a
/// full address before either is counted: at most `http.threads` over the limit, for a moment.
///
/// Only addresses with open connections are in the table, so it holds at most as many entries
/// as the server holds connections.
final class AddressConnections: Sendable {
    let limit: Int
    let exempt: [AddressRange]
    private let counts = Mutex<[IPAddress: Int]>([:])

    init(limit: Int, exempt: [AddressRange]) {
        self.limit = limit
        self.exempt = exempt
    }

    /// Whether a new connection from `address` may be accepted.
    func mayAccept(_ address: IPAddress) -> Bool {
        if exempt.contains(address) { return true }
        let key = address.limitKey
        return counts.withLock { $0[key, default: 0] < limit }
    }

    /// Counts a connection that started; false when its address is exempt (not counted).
    func opened(_ address: IPAddress) -> Bool {
        if exempt.contains(address) { return false }
        let key = address.limitKey
        counts.withLock { $0[key, default: 0] += 1 }
        return true
    }

    /// Uncounts a connection ``opened(_:)`` counted.
    func closed(_ address: IPAddress) {
        let key = address.limitKey
        counts.withLock { counts in
            guard let count = counts[key] else { return }
            counts[key] = count > 1 ? count - 1 : nil
        }
    }

    /// Connections counted for `address` now.
    func count(_ address: IPAddress) -> Int {
        counts.withLock { $0[address.limitKey] ?? 0 }
    }
}
