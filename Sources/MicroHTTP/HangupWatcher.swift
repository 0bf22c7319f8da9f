import CMicroHTTPDShim
import Foundation
import Synchronization

/// Notices event-stream clients that hang up while their connection is suspended.
///
/// libmicrohttpd 0.9.75 does not watch suspended connections, so a client that goes away is
/// only found at the next write (a heartbeat): until then its connection and its stream slot
/// stay taken. This watcher puts the socket of every stream that stays in libmicrohttpd (TLS, a
/// body that is not events, a stream that could not leave: ``StreamSockets`` watches the sockets
/// it took itself) in its own epoll set for `EPOLLRDHUP` (the peer closed) and ends that stream
/// at once; libmicrohttpd then finishes and closes the connection as usual. It only reads
/// readiness: it never reads, writes or closes the socket.
///
/// Each registration carries an id, not the descriptor, so a late event for a socket number
/// that was closed and reused cannot end another stream.
final class HangupWatcher: Sendable {
    private let epoll: Int32
    private let streams = Mutex<(next: UInt64, byID: [UInt64: EventStream])>((0, [:]))
    private let stopped = Atomic<Bool>(false)

    init?() {
        let fd = ss_epoll_create()
        guard fd >= 0 else { return nil }
        epoll = fd
        let thread = Thread { [self] in loop() }
        thread.name = "sse-hangups"
        thread.start()
    }

    /// Watches `fd` for the stream; returns the registration id (nil when it cannot watch).
    func watch(fd: Int32, stream: EventStream) -> UInt64? {
        guard fd >= 0 else { return nil }
        let id = streams.withLock { state -> UInt64 in
            state.next += 1
            state.byID[state.next] = stream
            return state.next
        }
        guard ss_epoll_watch_hangup(epoll, fd, id) == 0 else {
            _ = streams.withLock { $0.byID.removeValue(forKey: id) }
            return nil
        }
        return id
    }

    /// Stops watching (the stream finished). The socket may already be closed, which removed it
    /// from the epoll set; forgetting the id is what matters.
    func forget(id: UInt64, fd: Int32) {
        _ = streams.withLock { $0.byID.removeValue(forKey: id) }
        _ = ss_epoll_forget(epoll, fd)
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    private func loop() {
        var ids = [UInt64](repeating: 0, count: 64)
        while !stopped.load(ordering: .relaxed) {
            let count = ids.withUnsafeMutableBufferPointer { ss_epoll_wait_ids(epoll, $0.baseAddress, 64, 500) }
            guard count > 0 else { continue }
            for index in 0..<Int(count) {
                let id = ids[index]
                let stream = streams.withLock { $0.byID.removeValue(forKey: id) }
                stream?.close()
            }
        }
    }
}
