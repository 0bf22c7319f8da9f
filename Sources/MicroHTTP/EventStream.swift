import CMicroHTTPD
import CMicroHTTPDShim
import DequeModule
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The body of a long-lived streaming response: server-sent events, or (``carriesEvents``
/// false) any body produced in pieces, such as a long JSON document.
///
/// Producers on any thread call ``send(_:)``; libmicrohttpd pulls the bytes on its own thread.
/// When nothing is queued the connection is suspended (no busy loop, no thread held) and the
/// next `send` resumes it. Each stream has a bounded queue: a subscriber that stops reading is
/// closed once `bufferLimit` bytes wait for it, so it never slows producers or other streams.
///
/// Thread-safety: all mutable state sits behind one lock. The connection is suspended and
/// resumed only under that lock, with a flag that says whether it is suspended (resuming a
/// connection that is not suspended is undefined behaviour in libmicrohttpd).
public final class EventStream: Sendable {
    struct State {
        var queue = Deque<[UInt8]>()
        /// Bytes of `queue.first` already handed to libmicrohttpd.
        var headOffset = 0
        var queuedBytes = 0
        /// The connection while it is attached (between queuing the response and its end).
        var connection: CHandle?
        var suspended = false
        /// No more sends are accepted; the stream ends once the queue drains.
        var closing = false
        /// libmicrohttpd is done with the stream (ended, or the client went away).
        var finished = false
        /// Whether bytes were sent since the last heartbeat tick.
        var active = false
        var onFinish: [@Sendable () -> Void] = []
        /// Writers waiting for room in the queue (``write(_:)``).
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// The stream's own socket, once it left libmicrohttpd (``StreamSockets``).
        var socket: SocketLink?
        /// Closed for a reader too slow (``send(_:)`` past `bufferLimit`): the socket is closed
        /// at once, as an abort (RST), not after the bytes it does not read.
        var dropped = false
        /// Heartbeat ticks seen while closing and not finished (``heartbeat(_:)``).
        var closingTicks = 0
    }

    /// A stream's socket outside libmicrohttpd. Only ``StreamSockets``' thread writes to it and
    /// closes it; producers only ask that thread to write (`scheduled`).
    struct SocketLink {
        let fd: Int32
        let id: UInt64
        let owner: StreamSockets
        /// The response's head, written first, and how much of it is written (emptied once
        /// written: an open stream keeps no copy).
        var head: [UInt8]
        var headSent = 0
        /// Chunked coding (HTTP/1.1): each queued frame goes as one chunk, and the body ends
        /// with the last chunk (`0` CRLF CRLF). Without it (HTTP/1.0) the body ends at the close.
        let chunked: Bool
        var terminatorSent = 0
        /// Registered for `EPOLLOUT` (bytes wait for room in the socket's buffer).
        var wantsWrite = false
        /// In the owner's list of streams to write.
        var scheduled = false

        init(fd: Int32, id: UInt64, owner: StreamSockets, head: [UInt8], chunked: Bool) {
            self.fd = fd
            self.id = id
            self.owner = owner
            self.head = head
            self.chunked = chunked
        }
    }

    /// What one `send` did.
    private enum Sent {
        case bytes(Int)
        /// The socket's buffer is full: wait for `EPOLLOUT`.
        case blocked
        case failed

        init(_ result: Int) {
            if result >= 0 {
                self = .bytes(result)
                return
            }
            let code = errno
            if code == EINTR {
                self = .bytes(0)
            } else {
                self = code == EAGAIN || code == EWOULDBLOCK ? .blocked : .failed
            }
        }
    }

    private static let lastChunk = Array("0\r\n\r\n".utf8)

    /// Sends `bytes` from `sent` on, as far as the socket takes them; `sent` grows by what went.
    private static func send(_ bytes: [UInt8], from sent: inout Int, on fd: Int32) -> Sent {
        var outcome = Sent.bytes(0)
        while sent < bytes.count {
            let offset = sent
            outcome = Sent(bytes.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return ss_stream_send(fd, base + offset, raw.count - offset)
            })
            guard case .bytes(let count) = outcome else { break }
            sent += count
        }
        return outcome
    }

    let state = Mutex(State())
    public let bufferLimit: Int
    /// Server-sent events get heartbeats and the shutdown farewell; other bodies get neither
    /// (a ping inside a JSON document would break it).
    public let carriesEvents: Bool
    /// A client that leaves bytes sent to it unacknowledged this long is taken as gone: its
    /// connection is given up (TCP_USER_TIMEOUT), and the stream gets a heartbeat every tick,
    /// busy or not, so a client that vanished without closing (a network that drops, a machine
    /// that dies) is found within a heartbeat interval plus this. Nil: found only when a write
    /// fails, which TCP may take minutes to say.
    public let peerTimeout: Duration?

    public init(bufferLimit: Int, carriesEvents: Bool = true, peerTimeout: Duration? = nil) {
        self.bufferLimit = bufferLimit
        self.carriesEvents = carriesEvents
        self.peerTimeout = peerTimeout
    }

    /// Queues `bytes` once the queue has room for them (at once on an empty queue), waiting as
    /// long as the reader is slower than the writer: a producer of a long body never holds more
    /// than `bufferLimit` of it. Returns `false` when the stream is closed or finished (the
    /// client went away): stop producing.
    public func write(_ bytes: [UInt8]) async -> Bool {
        while true {
            let queued: Bool? = state.withLock { state in
                guard !state.closing, !state.finished else { return false }
                guard state.queuedBytes == 0 || state.queuedBytes + bytes.count <= bufferLimit else { return nil }
                state.queue.append(bytes)
                state.queuedBytes += bytes.count
                state.active = true
                wake(&state)
                return true
            }
            if let queued { return queued }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state in
                    if state.closing || state.finished || state.queuedBytes == 0 || state.queuedBytes + bytes.count <= bufferLimit {
                        return true
                    }
                    state.waiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }

    /// Queues bytes. Returns `false` when the stream is closed, or when the queue would exceed
    /// `bufferLimit` — then the stream is closed: queued bytes are dropped and it ends.
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        state.withLock { state in
            guard !state.closing, !state.finished else { return false }
            // The limit bounds the backlog: one frame is always accepted on an empty queue.
            if state.queuedBytes > 0, state.queuedBytes + bytes.count > bufferLimit {
                drop(&state)
                return false
            }
            state.queue.append(bytes)
            state.queuedBytes += bytes.count
            state.active = true
            wake(&state)
            return true
        }
    }

    /// Queues bytes only if they fit in the buffer (always on an empty queue); returns `false`,
    /// changing nothing, when they do not or the stream is closed.
    public func offer(_ bytes: [UInt8]) -> Bool {
        state.withLock { state in
            guard !state.closing, !state.finished else { return false }
            if state.queuedBytes > 0, state.queuedBytes + bytes.count > bufferLimit { return false }
            state.queue.append(bytes)
            state.queuedBytes += bytes.count
            state.active = true
            wake(&state)
            return true
        }
    }

    /// Ends the stream after the bytes already queued.
    public func close() {
        state.withLock { state in
            guard !state.closing else { return }
            state.closing = true
            wake(&state)
        }
    }

    /// Queues `farewell` after the bytes already queued, then ends the stream: nothing sent
    /// afterwards is accepted. The farewell is queued even past `bufferLimit` (it is one small
    /// message, once); a stream already closing or finished gets nothing. Returns whether it
    /// was queued.
    @discardableResult
    public func close(after farewell: [UInt8]) -> Bool {
        state.withLock { state in
            guard !state.closing, !state.finished else { return false }
            if !farewell.isEmpty, carriesEvents {
                state.queue.append(farewell)
                state.queuedBytes += farewell.count
                state.active = true
            }
            state.closing = true
            wake(&state)
            return true
        }
    }

    /// Whether the stream still accepts bytes.
    public var isOpen: Bool {
        state.withLock { !$0.closing && !$0.finished }
    }

    /// Calls `body` once when libmicrohttpd is done with the stream (at once if it already is).
    public func onFinish(_ body: @escaping @Sendable () -> Void) {
        let already = state.withLock { state in
            if state.finished { return true }
            state.onFinish.append(body)
            return false
        }
        if already { body() }
    }

    /// Sends `bytes` if nothing was sent since the previous call (a heartbeat on idle streams).
    ///
    /// A stream still closing at its second tick (its reader did not take what was queued
    /// before the close: a revocation's or a delete's last event, say) is dropped as a slow
    /// reader is: its slot is given back and its socket closed, whether or not its client
    /// reads.
    func heartbeat(_ bytes: [UInt8]) {
        state.withLock { state in
            defer { state.active = false }
            if state.closing, !state.finished, !state.dropped {
                state.closingTicks += 1
                if state.closingTicks >= 2 { drop(&state) }
                return
            }
            // A ping does not count as activity, so an idle stream gets one every interval
            // (a stream watching for a vanished client: every interval, idle or not).
            guard carriesEvents, !state.active || peerTimeout != nil, !state.closing, !state.finished else { return }
            if state.queuedBytes > 0, state.queuedBytes + bytes.count > bufferLimit { return }
            state.queue.append(bytes)
            state.queuedBytes += bytes.count
            wake(&state)
        }
    }

    /// Ends the stream of a reader that does not keep up: what is queued is dropped and the
    /// connection closed at once, as an abort (RST), not after bytes its client would not read.
    private func drop(_ state: inout State) {
        state.queue.removeAll()
        state.headOffset = 0
        state.queuedBytes = 0
        state.closing = true
        state.dropped = true
        if let connection = state.connection {
            // In libmicrohttpd (TLS): its close of the connection, whenever it comes
            // (at once if it reads the stream again, else at its idle timeout while the
            // client reads nothing), is an abort. The connection is alive while attached.
            _ = ss_socket_reset_on_close(ss_connection_fd(connection.pointer))
        }
        wake(&state)
    }

    private func wake(_ state: inout State) {
        if state.suspended, let connection = state.connection {
            state.suspended = false
            MHD_resume_connection(connection.pointer)
        } else if let link = state.socket, !link.scheduled {
            state.socket?.scheduled = true
            link.owner.schedule(self)
        }
    }

    // MARK: Called by the server on libmicrohttpd's threads

    func attach(_ connection: OpaquePointer) {
        let handle = CHandle(connection)
        state.withLock { $0.connection = handle }
    }

    /// Fills `buffer` for libmicrohttpd; suspends the connection when there is nothing to send.
    func read(into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        let (count, waiters) = state.withLock { state -> (Int, [CheckedContinuation<Void, Never>]) in
            let count = Self.read(&state, into: buffer, max: max)
            guard !state.waiters.isEmpty, count > 0 else { return (count, []) }
            defer { state.waiters = [] }
            return (count, state.waiters)
        }
        // Resumed outside the lock: each writer looks again for room.
        for waiter in waiters { waiter.resume() }
        return count
    }

    private static func read(_ state: inout State, into buffer: UnsafeMutablePointer<CChar>, max: Int) -> Int {
        if state.finished { return ss_content_reader_end_of_stream }
        guard let first = state.queue.first else {
            // Too slow a reader: the connection is closed at once, as an abort (``send(_:)``
            // set it), not after a last chunk its client would not read.
            if state.dropped { return ss_content_reader_end_with_error }
            if state.closing { return ss_content_reader_end_of_stream }
            if let connection = state.connection, !state.suspended {
                state.suspended = true
                MHD_suspend_connection(connection.pointer)
            }
            return 0
        }
        let count = min(max, first.count - state.headOffset)
        first.withUnsafeBytes { raw in
            if let base = raw.baseAddress {
                UnsafeMutableRawPointer(buffer).copyMemory(from: base + state.headOffset, byteCount: count)
            }
        }
        state.headOffset += count
        state.queuedBytes -= count
        if state.headOffset == first.count {
            state.queue.removeFirst()
            state.headOffset = 0
        }
        return count
    }

    /// libmicrohttpd is done with the stream: the connection pointer is dead from here on.
    func finish() {
        let (callbacks, waiters) = state.withLock { state -> ([@Sendable () -> Void], [CheckedContinuation<Void, Never>]) in
            guard !state.finished else { return ([], []) }
            state.finished = true
            state.closing = true
            state.connection = nil
            state.suspended = false
            state.queue.removeAll()
            state.queuedBytes = 0
            defer {
                state.onFinish = []
                state.waiters = []
            }
            return (state.onFinish, state.waiters)
        }
        for waiter in waiters { waiter.resume() }
        for callback in callbacks { callback() }
    }

    var isFinished: Bool { state.withLock { $0.finished } }

    // MARK: On its own socket (StreamSockets' thread)

    /// Takes `link`'s socket: its head goes first, then what is queued.
    func attach(_ link: SocketLink) {
        state.withLock { state in
            state.socket = link
            wake(&state)
        }
    }

    /// Writes the head, what is queued (each frame in one `sendmsg`, as a chunk when chunked)
    /// and, once closing, the last chunk, as far as the socket's buffer takes them; waits for
    /// room (`EPOLLOUT`) for the rest. Ends the stream once all is written and it is closing, or
    /// when the socket fails.
    func flushSocket() {
        let (done, waiters) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
            guard var link = state.socket, !state.finished else { return (false, []) }
            link.scheduled = false
            if state.dropped {
                state.socket = link
                return (true, [])
            }
            var outcome = Sent.bytes(0)
            var wrote = false
            if !link.head.isEmpty {
                outcome = Self.send(link.head, from: &link.headSent, on: link.fd)
                if link.headSent == link.head.count {
                    link.head = []
                    link.headSent = 0
                }
            }
            while case .bytes = outcome, link.headSent == link.head.count, let first = state.queue.first {
                let wire = ss_chunk_wire_length(first.count, link.chunked ? 1 : 0)
                if first.isEmpty || state.headOffset >= wire {
                    // An empty chunk would end the body: an empty frame is dropped.
                    state.queue.removeFirst()
                    state.headOffset = 0
                    state.queuedBytes -= first.count
                    continue
                }
                outcome = Sent(first.withUnsafeBytes { raw in
                    ss_stream_send_chunk(link.fd, raw.baseAddress, raw.count, state.headOffset, link.chunked ? 1 : 0)
                })
                guard case .bytes(let count) = outcome else { break }
                wrote = wrote || count > 0
                state.headOffset += count
            }
            let drained = link.headSent == link.head.count && state.queue.isEmpty
            if case .bytes = outcome, drained, state.closing, link.chunked {
                outcome = Self.send(Self.lastChunk, from: &link.terminatorSent, on: link.fd)
            }
            let blocked: Bool
            if case .blocked = outcome { blocked = true } else { blocked = false }
            if blocked != link.wantsWrite, ss_epoll_watch_stream(link.owner.epoll, link.fd, link.id, blocked ? 1 : 0, 1) == 0 {
                link.wantsWrite = blocked
            }
            state.socket = link
            let failed: Bool
            if case .failed = outcome { failed = true } else { failed = false }
            let done = failed
                || (drained && state.closing && (!link.chunked || link.terminatorSent == Self.lastChunk.count))
            guard wrote, !state.waiters.isEmpty else { return (done, []) }
            defer { state.waiters = [] }
            return (done, state.waiters)
        }
        for waiter in waiters { waiter.resume() }
        if done { finishSocket() }
    }

    /// The socket is readable, writable or hung up (`ss_stream_*` bits).
    func socketReady(_ events: UInt32) {
        guard let fd = state.withLock({ $0.socket?.fd }) else { return }
        // A client sends nothing after an event stream's request: what it sends is dropped,
        // and its end (or a hang-up) ends the stream.
        var gone = events & ss_stream_hangup != 0
        if !gone, events & ss_stream_readable != 0 { gone = ss_stream_drain(fd) == 0 }
        if gone {
            finishSocket()
        } else if events & ss_stream_writable != 0 {
            flushSocket()
        }
    }

    /// Closes the socket and finishes the stream: for a stream dropped for slowness, as an
    /// abort (RST), freeing at once what the kernel still holds for a client that does not read.
    func finishSocket() {
        let (link, dropped) = state.withLock { state -> (SocketLink?, Bool) in
            defer { state.socket = nil }
            return (state.socket, state.dropped)
        }
        guard let link else { return }
        link.owner.forget(link, reset: dropped)
        finish()
    }
}
