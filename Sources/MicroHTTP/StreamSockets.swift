import CMicroHTTPDShim
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Event streams served on their own sockets, outside libmicrohttpd, once the request is
/// answered with a stream (issue 28: an idle stream in libmicrohttpd keeps its connection's
/// memory pool, 8 KB touched in full, and every event costs a suspend and a resume).
///
/// How a stream leaves libmicrohttpd: the access handler takes a duplicate of the connection's
/// socket, hands it here with the response's head, and answers libmicrohttpd `MHD_NO`, which
/// closes its own descriptor without a byte written. libmicrohttpd runs with `MHD_USE_TURBO`
/// so that it does not shut the socket down (`SHUT_WR`) first, which would end the duplicate
/// too. The body is not chunked: the head says `Connection: close`, and the stream's end is the
/// socket's. Streams on TLS stay in libmicrohttpd (GnuTLS holds the session).
///
/// One thread writes: producers queue bytes on their ``EventStream`` (as before) and put it on
/// this thread's list, waking it through an eventfd once per burst; the thread writes each
/// listed stream's bytes with one `send` as far as the socket's buffer takes them, and waits
/// for room (`EPOLLOUT`) for the rest. A publish to many streams is many list appends and one
/// wake-up; the writes come from one place. The same epoll set reports clients that hang up or
/// close. Only this thread writes to and closes a socket, so a descriptor number is never used
/// after its close.
///
/// What a stream holds in the kernel is bounded too (issue 36): its socket's send buffer is set
/// to `streams.socketBuffer` when it is taken (``HTTPServer/Configuration/streamSocketBuffer``;
/// otherwise Linux grows it to megabytes for a client that does not read), and a stream dropped
/// for slowness (past its `bufferLimit`) is closed as an abort (RST): the bytes still queued for
/// it are freed at once, not kept by an orphaned socket waiting for a reader. Every other end
/// (the client's, the session's, the server's stop) stays an orderly close after the queued
/// bytes.
final class StreamSockets: Sendable {
    let epoll: Int32
    private let wakeup: Int32

    private struct Table {
        var next: UInt64 = 1
        var byID: [UInt64: EventStream] = [:]
        /// Streams with bytes to write, each once (``EventStream/SocketLink/scheduled``).
        var scheduled: [EventStream] = []
        /// Whether the eventfd was signalled since the thread last took the list.
        var signalled = false
        var stopping = false
    }

    private let table = Mutex(Table())
    /// Streams held; read by the accept policy on every new connection.
    private let held = Atomic<Int>(0)
    private let running = Atomic<Bool>(true)

    init?() {
        let epoll = ss_epoll_create()
        guard epoll >= 0 else { return nil }
        let wakeup = ss_eventfd()
        // Id 0 is the eventfd.
        guard wakeup >= 0, ss_epoll_watch_stream(epoll, wakeup, 0, 0, 0) == 0 else {
            close(epoll)
            if wakeup >= 0 { close(wakeup) }
            return nil
        }
        self.epoll = epoll
        self.wakeup = wakeup
        let thread = Thread { [self] in loop() }
        thread.name = "sse-sockets"
        thread.start()
    }

    /// Streams on their own sockets now.
    var count: Int { held.load(ordering: .relaxed) }

    /// Takes `fd` (this process's own duplicate of a connection's socket) for `stream`, to
    /// write `head` and then the stream's bytes, as chunks when `chunked`. False when it cannot
    /// (the server is stopping, or epoll refused): the caller still owns `fd`.
    func adopt(fd: Int32, stream: EventStream, head: [UInt8], chunked: Bool) -> Bool {
        let id = table.withLock { table -> UInt64? in
            guard !table.stopping else { return nil }
            defer { table.next += 1 }
            table.byID[table.next] = stream
            return table.next
        }
        guard let id else { return false }
        guard ss_epoll_watch_stream(epoll, fd, id, 0, 0) == 0 else {
            _ = table.withLock { $0.byID.removeValue(forKey: id) }
            return false
        }
        held.add(1, ordering: .relaxed)
        stream.attach(EventStream.SocketLink(fd: fd, id: id, owner: self, head: head, chunked: chunked))
        return true
    }

    /// Puts `stream` on the list to write (called under the stream's lock, once until written).
    func schedule(_ stream: EventStream) {
        let signal = table.withLock { table -> Bool in
            table.scheduled.append(stream)
            defer { table.signalled = true }
            return !table.signalled
        }
        if signal { ss_eventfd_signal(wakeup) }
    }

    /// Drops a stream's registration and closes its socket (on this thread only); with
    /// `reset`, as an abort: the kernel frees what it still holds for the client at once.
    func forget(_ link: EventStream.SocketLink, reset: Bool) {
        let known = table.withLock { $0.byID.removeValue(forKey: link.id) } != nil
        _ = ss_epoll_forget(epoll, link.fd)
        _ = ss_stream_close(link.fd, reset ? 1 : 0)
        if known { held.subtract(1, ordering: .relaxed) }
    }

    /// Ends every stream still open (its socket closed, what is queued dropped), refuses new
    /// ones, and waits up to `timeout` for the thread to finish them and end.
    func stop(timeout: Duration = .seconds(2)) async {
        table.withLock { $0.stopping = true }
        ss_eventfd_signal(wakeup)
        let deadline = ContinuousClock.now + timeout
        while running.load(ordering: .acquiring), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    private func loop() {
        var ids = [UInt64](repeating: 0, count: 256)
        var events = [UInt32](repeating: 0, count: 256)
        while true {
            let count = ids.withUnsafeMutableBufferPointer { ids in
                events.withUnsafeMutableBufferPointer { events in
                    ss_epoll_wait_events(epoll, ids.baseAddress, events.baseAddress, Int32(ids.count), 1000)
                }
            }
            for index in 0..<max(0, Int(count)) {
                if ids[index] == 0 {
                    ss_eventfd_drain(wakeup)
                } else if let stream = table.withLock({ $0.byID[ids[index]] }) {
                    stream.socketReady(events[index])
                }
            }
            let (scheduled, stopping) = table.withLock { table -> ([EventStream], Bool) in
                defer {
                    table.scheduled = []
                    table.signalled = false
                }
                return (table.scheduled, table.stopping)
            }
            for stream in scheduled { stream.flushSocket() }
            if stopping {
                for stream in table.withLock({ Array($0.byID.values) }) { stream.finishSocket() }
                running.store(false, ordering: .releasing)
                return
            }
        }
    }
}
