#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// A TCP proxy on 127.0.0.1 in front of a server (on 127.0.0.1 too), for clients that must live
/// with a bad network. Bytes flow both ways unless a fault is set:
///
/// - ``latency``: every chunk waits half of it before it is forwarded, each way: a round trip
///   takes `latency` longer;
/// - ``cut()``: every open connection is closed now, and new ones are closed as soon as they
///   are accepted, until ``heal()`` (the network is gone: requests fail at once);
/// - ``dropReplies(_:matching:)``: the next n requests containing a text are forwarded, and the
///   server's answer to each is dropped and its connection closed on both sides (the server
///   applied the request; the client never hears it);
/// - ``block(matching:)``: requests containing a text are refused (their connection closed
///   before they are forwarded) until ``unblock()``; other requests flow.
///
/// Each connection has a thread of its own (blocking `poll`, at most 50 ms at a time, so a
/// fault or ``stop()`` is seen at once); the listener has one more.
package final class FaultProxy: Sendable {
    package let port: Int
    private let targetPort: Int
    private let listener: Int32

    private struct Faults {
        var latency: Duration = .zero
        var cut = false
        var blocked: [UInt8]?
        var dropsLeft = 0
        var dropPattern: [UInt8] = []
        var dropped = 0
        var forwardedRequests = 0
        var stopped = false
        /// Open connections' descriptors (client side, server side), so ``cut()`` can shut them
        /// down; a connection's thread removes its entry before it closes them.
        var open: [Int: (Int32, Int32)] = [:]
        var nextID = 0
    }

    private let faults = Mutex(Faults())

    /// Listens on a free port of 127.0.0.1 and forwards to `targetPort` there.
    package init(targetPort: Int) throws {
        self.targetPort = targetPort
        let (fd, port) = try loopbackSocket(listening: true)
        listener = fd
        self.port = port
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    /// `http://127.0.0.1:<port>`: give it to the client instead of the server's URL.
    package var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    /// Added to every round trip (half each way, per chunk).
    package var latency: Duration {
        get { faults.withLock { $0.latency } }
        set { faults.withLock { $0.latency = newValue } }
    }

    /// Replies dropped so far by ``dropReplies(_:matching:)``.
    package var droppedReplies: Int { faults.withLock { $0.dropped } }
    /// Requests containing the drop pattern forwarded so far.
    package var forwardedRequests: Int { faults.withLock { $0.forwardedRequests } }

    /// Closes every open connection and refuses new ones until ``heal()``.
    package func cut() {
        faults.withLock { faults in
            faults.cut = true
            Self.shutDownOpen(faults)
        }
    }

    /// Lets connections through again.
    package func heal() { faults.withLock { $0.cut = false } }

    /// Drops the answers to the next `count` requests whose bytes contain `pattern` (after
    /// forwarding them), closing their connections.
    package func dropReplies(_ count: Int, matching pattern: String = "POST ") {
        faults.withLock {
            $0.dropsLeft = count
            $0.dropPattern = Array(pattern.utf8)
        }
    }

    /// Refuses requests whose bytes contain `pattern` until ``unblock()``.
    package func block(matching pattern: String) { faults.withLock { $0.blocked = Array(pattern.utf8) } }
    package func unblock() { faults.withLock { $0.blocked = nil } }

    /// Stops listening and closes every connection. The accept loop sees it within 50 ms and closes the listener itself. Call it when done:
    /// the threads hold the proxy.
    package func stop() {
        faults.withLock { faults in
            faults.stopped = true
            Self.shutDownOpen(faults)
        }
    }

    /// Shuts every open connection down both ways; its thread sees the end and closes it.
    private static func shutDownOpen(_ faults: Faults) {
        for (client, server) in faults.open.values {
            _ = shutdown(client, Int32(SHUT_RDWR))
            _ = shutdown(server, Int32(SHUT_RDWR))
        }
    }

    // MARK: Threads

    private func acceptLoop() {
        while !faults.withLock({ $0.stopped }) {
            var descriptor = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { continue }
            if faults.withLock({ $0.cut || $0.stopped }) {
                _ = close(client)
                continue
            }
            guard let server = Self.connect(to: targetPort) else {
                _ = close(client)
                continue
            }
            let id = faults.withLock { faults in
                faults.nextID += 1
                faults.open[faults.nextID] = (client, server)
                return faults.nextID
            }
            Thread { [self] in pump(id: id, client: client, server: server) }.start()
        }
        _ = close(listener)
    }

    private static func connect(to port: Int) -> Int32? {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { return nil }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        guard connectLoopback(fd, port: port) == 0 else {
            _ = close(fd)
            return nil
        }
        return fd
    }

    /// Chunks waiting for their time, one queue each way.
    private struct Delayed {
        var due: ContinuousClock.Instant
        var bytes: [UInt8]
    }

    /// Moves bytes between `client` and `server` until either side ends or a fault closes them.
    private func pump(id: Int, client: Int32, server: Int32) {
        var toServer: [Delayed] = []
        var toClient: [Delayed] = []
        var swallowing = false
        defer {
            faults.withLock { _ = $0.open.removeValue(forKey: id) }
            _ = close(client)
            _ = close(server)
        }
        loop: while true {
            let now = ContinuousClock.now
            // Forward what is due.
            while let first = toServer.first, first.due <= now {
                guard Self.sendAll(first.bytes, to: server) else { break loop }
                toServer.removeFirst()
            }
            while let first = toClient.first, first.due <= now {
                guard Self.sendAll(first.bytes, to: client) else { break loop }
                toClient.removeFirst()
            }
            let nextDue = [toServer.first?.due, toClient.first?.due].compactMap { $0 }.min()
            var timeout: Int32 = 50
            if let nextDue {
                let wait = nextDue - ContinuousClock.now
                timeout = max(0, min(50, Int32(wait.components.seconds * 1000 + wait.components.attoseconds / 1_000_000_000_000_000)))
            }
            var descriptors = [
                pollfd(fd: client, events: Int16(POLLIN), revents: 0),
                pollfd(fd: server, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&descriptors, 2, timeout)
            if faults.withLock({ $0.stopped }) { break }
            guard ready > 0 else { continue }
            if descriptors[0].revents != 0 {
                guard let bytes = Self.receive(client) else { break }
                let verdict = faults.withLock { faults -> (refuse: Bool, swallow: Bool, delay: Duration) in
                    if let blocked = faults.blocked, Self.contains(bytes, blocked) { return (true, false, .zero) }
                    var swallow = false
                    if !faults.dropPattern.isEmpty, Self.contains(bytes, faults.dropPattern) {
                        faults.forwardedRequests += 1
                        if faults.dropsLeft > 0 {
                            faults.dropsLeft -= 1
                            swallow = true
                        }
                    }
                    return (false, swallow, faults.latency / 2)
                }
                if verdict.refuse { break }
                if verdict.swallow { swallowing = true }
                toServer.append(Delayed(due: ContinuousClock.now + verdict.delay, bytes: bytes))
            }
            if descriptors[1].revents != 0 {
                guard let bytes = Self.receive(server) else {
                    // The server closed: deliver what is queued for the client first.
                    for chunk in toClient where !Self.sendAll(chunk.bytes, to: client) { break }
                    break
                }
                if swallowing {
                    faults.withLock { $0.dropped += 1 }
                    break
                }
                let delay = faults.withLock { $0.latency / 2 }
                toClient.append(Delayed(due: ContinuousClock.now + delay, bytes: bytes))
            }
        }
        _ = shutdown(client, Int32(SHUT_RDWR))
        _ = shutdown(server, Int32(SHUT_RDWR))
    }

    private static func receive(_ fd: Int32) -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        return Array(chunk[..<count])
    }

    private static func sendAll(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = sendBytes(fd, bytes, from: offset)
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    private static func contains(_ bytes: [UInt8], _ pattern: [UInt8]) -> Bool {
        guard !pattern.isEmpty, bytes.count >= pattern.count else { return false }
        for start in 0...(bytes.count - pattern.count) where bytes[start..<start + pattern.count].elementsEqual(pattern) {
            return true
        }
        return false
    }
}
