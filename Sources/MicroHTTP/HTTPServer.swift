import CMicroHTTPD
import CMicroHTTPDShim
import Foundation
import Synchronization

/// An HTTP/1.1 server on GNU libmicrohttpd.
///
/// libmicrohttpd runs `threads` event threads on epoll (no thread per connection). Request
/// bodies are collected up to `bodyLimit` bytes (larger ones are drained and flagged), then the
/// responder is called once per request. Slow work is answered with ``HTTPResult/later(_:)``:
/// the connection is suspended while a Swift task computes the response. Event streams suspend
/// themselves when idle.
///
/// The server object must stay alive while the daemon runs: `stop()` before releasing it.
public final class HTTPServer: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port = 8080
        /// Event threads; 0 = one per core.
        public var threads = 0
        public var bodyLimit = 64 * 1024
        /// Bodies larger than this are not drained: the connection is closed after the 413.
        public var drainLimit = 16 * 1024 * 1024
        public var connectionLimit = 20_000
        /// Seconds of inactivity before a (non-streaming) connection is closed.
        public var connectionTimeout = 60
        public var connectionMemoryLimit = 8 * 1024
        /// Interval of heartbeat bytes on idle event streams (`nil`: none).
        public var heartbeat: Duration? = .seconds(15)
        public var heartbeatBytes: [UInt8] = Array(": ping\n\n".utf8)

        public init() {}
    }

    /// Bytes libmicrohttpd buffers per event stream (it allocates this per response). Larger
    /// events are sent in several chunks; idle streams cost this much less memory each.
    static let streamBlockSize = 2048

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    struct Shared {
        var daemon: CHandle?
        /// Connections suspended while a `later` response is computed.
        var suspendedRequests = 0
        var streams: [ObjectIdentifier: EventStream] = [:]
        var stopping = false
    }

    let configuration: Configuration
    let responder: any HTTPResponder
    let accessLog: @Sendable (HTTPAccessRecord) -> Void
    let shared = Mutex(Shared())
    /// Ends event streams whose client hung up while suspended (nil if epoll is unavailable).
    let hangups = HangupWatcher()
    private let heartbeatTask = Mutex<Task<Void, Never>?>(nil)

    public init(
        configuration: Configuration, responder: any HTTPResponder,
        accessLog: @escaping @Sendable (HTTPAccessRecord) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.responder = responder
        self.accessLog = accessLog
    }

    /// Binds and starts serving. Returns the bound port (the real one when `port` is 0).
    public func start() throws(StartError) -> Int {
        guard (0...65535).contains(configuration.port) else {
            throw StartError(description: "port \(configuration.port) is not in 0...65535")
        }
        let threads = configuration.threads > 0 ? configuration.threads : ProcessInfo.processInfo.activeProcessorCount
        var errorText = [CChar](repeating: 0, count: 256)
        let daemon: OpaquePointer? = configuration.host.withCString { host in
            var config = ss_daemon_config(
                host: host, port: UInt16(configuration.port),
                thread_pool_size: UInt32(max(1, threads)),
                connection_limit: UInt32(max(1, configuration.connectionLimit)),
                connection_timeout: UInt32(max(0, configuration.connectionTimeout)),
                connection_memory_limit: max(4096, configuration.connectionMemoryLimit))
            let me = Unmanaged.passUnretained(self).toOpaque()
            return ss_start_daemon(&config, accessHandler, me, requestCompleted, me, &errorText, errorText.count)
        }
        guard let daemon else {
            throw StartError(description: String(decoding: errorText.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        let handle = CHandle(daemon)
        shared.withLock { $0.daemon = handle }
        if let interval = configuration.heartbeat {
            let bytes = configuration.heartbeatBytes
            let task = Task.detached { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: interval)
                    guard let self else { return }
                    for stream in self.shared.withLock({ Array($0.streams.values) }) {
                        stream.heartbeat(bytes)
                    }
                }
            }
            heartbeatTask.withLock { $0 = task }
        }
        return Int(ss_daemon_port(daemon))
    }

    /// Number of open event streams.
    public var openStreams: Int { shared.withLock { $0.streams.count } }

    /// Graceful stop: stop accepting, end every event stream, wait (up to `grace`) for streams
    /// and suspended requests to finish, then stop the daemon. Safe to call more than once.
    public func stop(grace: Duration = .seconds(2)) async {
        guard let daemon = shared.withLock({ s -> CHandle? in
            guard !s.stopping else { return nil }
            s.stopping = true
            return s.daemon
        })?.pointer else { return }
        heartbeatTask.withLock { $0?.cancel() }
        hangups?.stop()
        let listenSocket = MHD_quiesce_daemon(daemon)
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline {
            let (streams, suspended) = shared.withLock { (Array($0.streams.values), $0.suspendedRequests) }
            if streams.isEmpty && suspended == 0 { break }
            for stream in streams { stream.close() }
            try? await Task.sleep(for: .milliseconds(20))
        }
        // Streams whose client does not read are not suspended (they wait to write), so the
        // daemon can be stopped with them open.
        MHD_stop_daemon(daemon)
        if listenSocket >= 0 { close(listenSocket) }
        shared.withLock { $0.daemon = nil }
    }

    // MARK: Bookkeeping used by the C callbacks

    func register(_ stream: EventStream) -> Bool {
        shared.withLock { s in
            guard !s.stopping else { return false }
            s.streams[ObjectIdentifier(stream)] = stream
            return true
        }
    }

    func unregister(_ stream: EventStream) {
        _ = shared.withLock { $0.streams.removeValue(forKey: ObjectIdentifier(stream)) }
    }

    func suspendedRequestDelta(_ delta: Int) {
        shared.withLock { $0.suspendedRequests += delta }
    }
}
