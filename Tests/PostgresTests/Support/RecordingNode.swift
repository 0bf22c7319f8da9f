import Foundation
import Synchronization
import TestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One request as a forwarding node sent it: its exact head and body.
struct RecordedRequest: Sendable {
    var method: String
    var target: String
    /// In the order sent, names as sent.
    var headers: [Header]
    var body: [UInt8]

    /// The first value of a header (case-insensitive name).
    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    /// Every value of a header (case-insensitive name), in order.
    func values(_ name: String) -> [String] {
        headers.filter { $0.name.lowercased() == name.lowercased() }.map(\.value)
    }

    /// The same request with `name`'s value replaced (or added), everything else byte for byte.
    func replacing(_ name: String, with value: String) -> RecordedRequest {
        var copy = self
        if let index = headers.firstIndex(where: { $0.name.lowercased() == name.lowercased() }) {
            copy.headers[index].value = value
        } else {
            copy.headers.append((name, value))
        }
        return copy
    }

    /// The request on the wire again (HTTP/1.1, its own headers, `Content-Length` among them).
    var bytes: [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\n"
        for header in headers { text += "\(header.name): \(header.value)\r\n" }
        text += "\r\n"
        return Array(text.utf8) + body
    }

    /// Sends it, as it is, on a new connection to `port` from `source`, and reads the reply.
    func send(toPort port: Int, from source: String) async throws -> HTTPResponse {
        let connection = try await HTTPConnection.open(port: port, source: source)
        defer { connection.close() }
        try await connection.send(bytes)
        return try await connection.readResponse(method: method)
    }
}

/// What another node's forwarder sends, caught on the wire: a node advertises this listener's
/// URL (`cluster.advertiseUrl`) instead of its own, so requests forwarded to it land here. Each
/// is recorded as sent (signed headers and all) and answered `200 {}`; none reaches the node.
/// Keep-alive connections are served, one thread each (the forwarder pools its connections).
///
/// `@unchecked Sendable`: `fd` is immutable after init; the requests and the stop flag are
/// behind a `Mutex`.
final class RecordingNode: @unchecked Sendable {
    let port: Int
    private let fd: Int32
    private let state = Mutex<(requests: [RecordedRequest], stopped: Bool)>(([], false))

    /// The URL to advertise.
    var url: String { "http://127.0.0.1:\(port)" }

    /// Every request received so far, in order of arrival.
    var requests: [RecordedRequest] { state.withLock { $0.requests } }

    init() throws {
        (fd, port) = try loopbackSocket(listening: true)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    func stop() {
        state.withLock { $0.stopped = true }
    }

    private var stopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        defer { close(fd) }
        while !stopped {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            let connection = accept(fd, nil, nil)
            guard connection >= 0 else { continue }
            let thread = Thread { [self] in serve(connection) }
            thread.start()
        }
    }

    /// Requests on one connection until the peer closes it or the recorder stops.
    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        /// Reads more into `buffer`; false at the end (closed, failed or stopped).
        func fill() -> Bool {
            while !stopped {
                var readable = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
                guard poll(&readable, 1, 50) > 0 else { continue }
                let count = chunk.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { return false }
                buffer += chunk[0..<count]
                return true
            }
            return false
        }
        let end: [UInt8] = [13, 10, 13, 10]
        while true {
            var headEnd: Int?
            while headEnd == nil {
                headEnd = buffer.count < 4 ? nil : (0...(buffer.count - 4)).first { Array(buffer[$0..<$0 + 4]) == end }
                if headEnd == nil, !fill() { return }
            }
            guard let headEnd else { return }
            let lines = String(decoding: buffer[..<headEnd], as: UTF8.self).components(separatedBy: "\r\n")
            buffer.removeSubrange(..<(headEnd + 4))
            let requestLine = lines[0].split(separator: " ").map(String.init)
            guard requestLine.count == 3 else { return }
            var headers: [Header] = []
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
            var request = RecordedRequest(method: requestLine[0], target: requestLine[1], headers: headers, body: [])
            let length = Int(request.header("content-length") ?? "0") ?? 0
            while buffer.count < length {
                if !fill() { return }
            }
            request.body = Array(buffer[..<length])
            buffer.removeSubrange(..<length)
            state.withLock { $0.requests.append(request) }
            let reply = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".utf8)
            #if canImport(Glibc)
            let sent = reply.withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            #else
            let sent = reply.withUnsafeBytes { Darwin.send(connection, $0.baseAddress, $0.count, 0) }
            #endif
            guard sent == reply.count else { return }
        }
    }
}
