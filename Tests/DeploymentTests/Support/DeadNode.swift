import Foundation
import TestSupport
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A node that dies mid-request: it accepts a connection, reads the request head, and closes
/// without answering (as a state-server killed while handling it would). It records the
/// request lines it got. Not a stand-in for the server: it is the failure nginx must handle.
///
/// `@unchecked Sendable`: `fd` is immutable after init; the received lines and the stop flag
/// are behind a `Mutex`.
final class DeadNode: @unchecked Sendable {
    let port: Int
    private let fd: Int32
    private let state = Mutex<(lines: [String], stopped: Bool)>(([], false))

    /// The request lines received so far ("POST /v1/... HTTP/1.1").
    var requestLines: [String] { state.withLock { $0.lines } }

    init() throws {
        (fd, port) = try loopbackSocket(listening: true)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    func stop() {
        state.withLock { $0.stopped = true }
    }

    private func acceptLoop() {
        defer { close(fd) }
        while !state.withLock({ $0.stopped }) {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { continue }
            var head: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = ContinuousClock.now + .seconds(5)
            while ContinuousClock.now < deadline, !head.contains(subsequence: [13, 10, 13, 10]) {
                var readable = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
                guard poll(&readable, 1, 100) > 0 else { continue }
                let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
                if count <= 0 { break }
                head += chunk[0..<count]
            }
            if let end = head.firstIndex(of: 13) {
                let line = String(decoding: head[..<end], as: UTF8.self)
                state.withLock { $0.lines.append(line) }
            }
            close(connection)
        }
    }
}

extension Array where Element == UInt8 {
    func contains(subsequence: [UInt8]) -> Bool {
        guard count >= subsequence.count else { return false }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<$0 + subsequence.count]) == subsequence }
    }
}
