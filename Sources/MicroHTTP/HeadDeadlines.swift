import CMicroHTTPDShim
import Foundation
import Synchronization

/// One connection libmicrohttpd serves, from its start to its close: its socket context
/// (`MHD_OPTION_NOTIFY_CONNECTION`), retained at the start and released at the close.
///
/// Thread-safety: what changes is atomic. libmicrohttpd's thread of the connection moves
/// `phase` when a head arrives and when a request ends; the head-deadline sweep
/// (``HeadDeadlines``) reads it and may cut the connection, and one compare-and-exchange
/// decides between the cut and the head's arrival.
final class ConnectionRecord: Sendable {
    /// Where the connection is (`phase`'s values).
    private enum Phase {
        /// Waiting for a request's head (the first, or the next on a keep-alive connection).
        static let awaitingHead = 0
        /// From a head's arrival to the end of its request.
        static let inRequest = 1
        /// Cut for a head that took too long: nothing more of it is served.
        static let cut = 2
    }

    /// Unique for the server's life (a record's address may be reused, its id never).
    let id: UInt64
    let fd: Int32
    /// The address it counts for in `connectionsPerAddress` (nil: not counted: no limit, an
    /// exempt address, not IP).
    let counted: IPAddress?
    /// Its event stream moved to a socket of its own and took over its place in the counts.
    let detached = Atomic<Bool>(false)
    private let phase = Atomic<Int>(Phase.awaitingHead)
    /// Requests ended on the connection: a new count is a new head to wait for.
    let requestsEnded = Atomic<Int>(0)

    init(id: UInt64, fd: Int32, counted: IPAddress?) {
        self.id = id
        self.fd = fd
        self.counted = counted
    }

    /// The record of `connection` (nil when the server keeps none: no connection notices).
    static func of(_ connection: OpaquePointer) -> ConnectionRecord? {
        ss_connection_socket_context(connection).map { Unmanaged<ConnectionRecord>.fromOpaque($0).takeUnretainedValue() }
    }

    /// A request's head arrived (the access handler's first call). False when the deadline
    /// sweep cut the connection first: the request is refused, the connection closed.
    func headArrived() -> Bool {
        let (exchanged, original) = phase.compareExchange(
            expected: Phase.awaitingHead, desired: Phase.inRequest, ordering: .acquiringAndReleasing)
        return exchanged || original != Phase.cut
    }

    /// A request ended (libmicrohttpd's completed callback): the next head is awaited.
    func requestEnded() {
        requestsEnded.add(1, ordering: .releasing)
        _ = phase.compareExchange(expected: Phase.inRequest, desired: Phase.awaitingHead, ordering: .acquiringAndReleasing)
    }

    var awaitsHead: Bool { phase.load(ordering: .acquiring) == Phase.awaitingHead }

    /// Takes the connection for a cut: true once, and only while it awaits a head.
    func takeForCut() -> Bool {
        phase.compareExchange(expected: Phase.awaitingHead, desired: Phase.cut, ordering: .acquiringAndReleasing).exchanged
    }
}

/// Cuts connections whose request head takes longer than `timeout` to arrive
/// (`http.headTimeout`): a head trickled a byte at a time never lets
/// `MHD_OPTION_CONNECTION_TIMEOUT`, an idle timeout, run out, and libmicrohttpd 0.9.75 has no
/// deadline of its own for a head.
///
/// A head's time runs from its first byte to the access handler's first call. Its first byte is
/// seen from the socket's count of bytes received (`TCP_INFO`), which a thread of its own reads
/// every `interval` for the connections awaiting a head: on a new connection from zero, after a
/// keep-alive request from the count at the first look after it ended. So idle time, before the
/// first request or between two, never counts (that is the idle timeout's), and a head is cut
/// at most about two intervals, plus the gap between two of its bytes after a keep-alive
/// request, past the deadline. A cut writes `reply` (plain HTTP: a `408`) and shuts the socket
/// down (`SHUT_RDWR`); libmicrohttpd's thread then reads the end and closes the connection as
/// for a client that left. The thread never touches libmicrohttpd's state.
///
/// The descriptor is safe to use: a record leaves the table (the close notice, under the table's
/// lock) before libmicrohttpd closes its socket, and a cut happens under the same lock.
final class HeadDeadlines: Sendable {
    let timeout: Duration
    let interval: Duration
    /// Written before the cut; nil with TLS (bytes in the clear would break the session).
    private let reply: [UInt8]?
    private let records = Mutex<[UInt64: ConnectionRecord]>([:])
    private let stopped = Atomic<Bool>(false)

    init(timeout: Duration, reply: [UInt8]?) {
        self.timeout = timeout
        self.reply = reply
        interval = min(max(timeout / 8, .milliseconds(50)), .milliseconds(500))
        let thread = Thread { [self] in loop() }
        thread.name = "head-deadlines"
        thread.start()
    }

    func add(_ record: ConnectionRecord) {
        records.withLock { $0[record.id] = record }
    }

    /// Called before libmicrohttpd closes the record's socket.
    func remove(_ record: ConnectionRecord) {
        _ = records.withLock { $0.removeValue(forKey: record.id) }
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    /// What the sweep knows of a connection awaiting a head.
    private struct Watch {
        /// `requestsEnded` when the watch began: another count is another head.
        var requestsEnded: Int
        /// Bytes the socket had received before this head (nil: not read yet).
        var before: Int64?
        /// When the head was first seen growing.
        var started: ContinuousClock.Instant?
    }

    private func loop() {
        var watches: [UInt64: Watch] = [:]
        let pause = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        while !stopped.load(ordering: .relaxed) {
            Thread.sleep(forTimeInterval: pause)
            let now = ContinuousClock.now
            let current = records.withLock { Array($0.values) }
            var next: [UInt64: Watch] = [:]
            next.reserveCapacity(current.count)
            for record in current where record.awaitsHead {
                let ended = record.requestsEnded.load(ordering: .acquiring)
                var watch = watches[record.id].flatMap { $0.requestsEnded == ended ? $0 : nil }
                    // A new connection has received nothing before its first head.
                    ?? Watch(requestsEnded: ended, before: ended == 0 ? 0 : nil)
                let received = ss_socket_bytes_received(record.fd)
                guard received >= 0 else { continue }
                if let before = watch.before {
                    if watch.started == nil, received > before { watch.started = now }
                } else {
                    watch.before = received
                }
                if let started = watch.started, now - started >= timeout {
                    cut(record)
                } else {
                    next[record.id] = watch
                }
            }
            watches = next
        }
    }

    private func cut(_ record: ConnectionRecord) {
        guard record.takeForCut() else { return }
        records.withLock { records in
            guard records[record.id] != nil else { return }
            if let reply {
                reply.withUnsafeBytes { ss_cut_connection(record.fd, $0.baseAddress, $0.count) }
            } else {
                ss_cut_connection(record.fd, nil, 0)
            }
        }
    }
}
