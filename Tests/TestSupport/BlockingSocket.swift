#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What went wrong on a test connection.
package enum ClientError: Error, CustomStringConvertible {
    case system(String, Int32)
    case timedOut(String)
    /// The peer closed (FIN or reset) before the expected bytes arrived.
    case closedEarly(String)
    case malformedResponse(String)

    package var description: String {
        switch self {
        case .system(let call, let code): "\(call) failed: \(String(cString: strerror(code))) (\(code))"
        case .timedOut(let what): "timed out waiting for \(what)"
        case .closedEarly(let what): "connection closed while waiting for \(what)"
        case .malformedResponse(let what): "malformed response: \(what)"
        }
    }
}

/// A blocking TCP connection to `127.0.0.1` whose every wait is bounded by a deadline (poll),
/// so no test can hang on it. Received bytes collect in `buffer` until consumed.
///
/// Not thread-safe. `@unchecked Sendable` only so it can be created on a helper thread and
/// handed to its `HTTPConnection`, which from then on touches it from its own serial queue only.
package final class BlockingSocket: @unchecked Sendable {
    private(set) var fd: Int32
    /// Bytes received and not consumed yet.
    package var buffer: [UInt8] = []
    /// The peer finished sending (FIN) or reset the connection.
    private(set) var reachedEOF = false
    /// The end was a reset (ECONNRESET) rather than an orderly close.
    package private(set) var wasReset = false

    /// - Parameter source: the local IPv4 address to connect from (`127.0.0.2`: any address of
    ///   127.0.0.0/8 is this machine), so a test can be several clients; nil: the system's choice.
    package init(port: Int, receiveBufferSize: Int? = nil, source: String? = nil) throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw ClientError.system("socket", errno) }
        self.fd = fd
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if let receiveBufferSize {
            // Before connect, so the advertised window stays small.
            var size = Int32(receiveBufferSize)
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_port = 0
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else {
                let code = errno
                Self.closeDescriptor(fd)
                self.fd = -1
                throw ClientError.system("bind to \(source)", code)
            }
        }
        guard connectLoopback(fd, port: port) == 0 else {
            let code = errno
            Self.closeDescriptor(fd)
            self.fd = -1
            throw ClientError.system("connect to port \(port)", code)
        }
    }

    deinit { close() }

    package func close() {
        if fd >= 0 {
            Self.closeDescriptor(fd)
            fd = -1
        }
    }

    private static func closeDescriptor(_ fd: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(fd)
        #else
        _ = Darwin.close(fd)
        #endif
    }

    /// Half-closes: the server sees end of input, we can still read.
    package func shutdownWrite() {
        if fd >= 0 { _ = shutdown(fd, Int32(SHUT_WR)) }
    }

    /// Sends all bytes. Throws `closedEarly` when the peer closed or reset the connection.
    package func send(_ bytes: [UInt8], deadline: ContinuousClock.Instant) throws {
        guard fd >= 0 else { throw ClientError.closedEarly("sending (socket closed)") }
        var offset = 0
        while offset < bytes.count {
            try wait(for: Int16(POLLOUT), deadline: deadline, what: "the socket to accept bytes")
            let sent = sendBytes(fd, bytes, from: offset)
            if sent < 0 {
                let code = errno
                if code == EINTR || code == EAGAIN { continue }
                if code == EPIPE || code == ECONNRESET { throw ClientError.closedEarly("sending") }
                throw ClientError.system("send", code)
            }
            offset += sent
        }
    }

    /// Receives whatever arrives next into `buffer`. Returns false at end of stream.
    @discardableResult
    package func fill(deadline: ContinuousClock.Instant, what: String) throws -> Bool {
        if reachedEOF { return false }
        try wait(for: Int16(POLLIN), deadline: deadline, what: what)
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                buffer.append(contentsOf: chunk[0..<count])
                return true
            }
            if count == 0 {
                reachedEOF = true
                return false
            }
            let code = errno
            if code == EINTR { continue }
            if code == ECONNRESET {
                reachedEOF = true
                wasReset = true
                return false
            }
            throw ClientError.system("recv", code)
        }
    }

    private func wait(for events: Int16, deadline: ContinuousClock.Instant, what: String) throws {
        while true {
            let remaining = ContinuousClock.now.duration(to: deadline)
            if remaining <= .zero { throw ClientError.timedOut(what) }
            let parts = remaining.components
            let millis = Int32(min(parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000 + 1, 60_000))
            var descriptor = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&descriptor, 1, millis)
            if ready > 0 { return }
            if ready < 0 {
                let code = errno
                if code == EINTR { continue }
                throw ClientError.system("poll", code)
            }
        }
    }

    // MARK: Reading helpers for HTTP

    /// Consumes and returns a CRLF- (or LF-) terminated line without its terminator.
    package func readLine(deadline: ContinuousClock.Instant, what: String) throws -> [UInt8] {
        var searchFrom = 0
        while true {
            if let newline = buffer[searchFrom...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                return line
            }
            searchFrom = buffer.count
            guard try fill(deadline: deadline, what: what) else { throw ClientError.closedEarly(what) }
        }
    }

    /// Consumes and returns exactly `count` bytes.
    package func readExactly(_ count: Int, deadline: ContinuousClock.Instant, what: String) throws -> [UInt8] {
        while buffer.count < count {
            guard try fill(deadline: deadline, what: what) else { throw ClientError.closedEarly(what) }
        }
        let bytes = Array(buffer[..<count])
        buffer.removeSubrange(..<count)
        return bytes
    }

    /// Consumes everything until the peer closes.
    package func readToEnd(deadline: ContinuousClock.Instant, what: String) throws -> [UInt8] {
        while try fill(deadline: deadline, what: what) {}
        let bytes = buffer
        buffer.removeAll()
        return bytes
    }
}
