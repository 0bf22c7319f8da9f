import CMicroHTTPD
import CMicroHTTPDShim
import Foundation
import Synchronization

/// An HTTP/1.1 server on GNU libmicrohttpd.
///
/// libmicrohttpd runs `threads` event threads on epoll (no thread per connection). Request
/// bodies are collected up to `bodyLimit` bytes (larger ones are drained and flagged), then the
/// responder is called once per request. Slow work is answered later — ``HTTPResult/later(_:)``
/// on a Swift task, or `.promised` by whatever thread gives the response — and the connection
/// is suspended until it is ready. An event stream leaves libmicrohttpd for a socket of its own
/// (``StreamSockets``); one that stays (TLS) suspends its connection when idle.
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
        /// Time a request's head may take, from its first byte to its end (``HeadDeadlines``);
        /// past it the connection gets `408` (plain HTTP) and is closed. Idle time before and
        /// between requests is `connectionTimeout`'s. `nil`: no deadline.
        public var headTimeout: Duration? = .seconds(10)
        public var connectionMemoryLimit = 8 * 1024
        /// Share the port with other processes listening on it (SO_REUSEPORT); off by default,
        /// so a port in use makes ``HTTPServer/start()`` fail.
        public var reusePort = false
        /// Connections one client address may hold at once (IPv6: one /64); one more is
        /// closed as soon as it is accepted, before a byte of it is read. 0: no limit.
        public var connectionsPerAddress = 0
        /// Addresses the per-address connection limit does not apply to: proxies in front of
        /// the server, whose connections carry many clients (`http.trustedProxies`).
        public var connectionLimitExempt: [AddressRange] = []
        /// Interval of heartbeat bytes on idle event streams (`nil`: none).
        public var heartbeat: Duration? = .seconds(15)
        public var heartbeatBytes: [UInt8] = Array(": ping\n\n".utf8)
        /// Bytes queued on every open event stream at a graceful ``HTTPServer/stop(grace:)``,
        /// before the stream ends and before the server stops listening (`nil`: the streams
        /// just end). Telling a client why lets it reconnect at once rather than guess.
        public var shutdownBytes: [UInt8]?
        /// HTTPS only, served by libmicrohttpd (GnuTLS); `nil`: plain HTTP.
        public var tls: TLS?
        /// Plain HTTP: event streams leave libmicrohttpd once answered and are written on sockets
        /// of their own (``StreamSockets``). They count against `connectionLimit` with
        /// libmicrohttpd's connections, and against `connectionsPerAddress`. With TLS they
        /// always stay in libmicrohttpd.
        public var detachStreams = true
        /// The kernel's send buffer of an event stream's socket (SO_SNDBUF), in bytes; Linux
        /// keeps twice this (its bookkeeping included) and stops growing the buffer by itself.
        /// What a client that does not read pins in the kernel, besides the stream's own
        /// `bufferLimit`. 0: the kernel's autotuning (megabytes for such a client).
        public var streamSocketBuffer = 65_536

        public init() {}
    }

    /// The block size of a streaming response (MHD_create_response_from_callback). libmicrohttpd
    /// 0.9.75 callocs it with every response and keeps it for the response's life, but uses it
    /// only for a body without chunked coding (an HTTP/1.0 client: the body is read into it a
    /// block at a time); a chunked body (HTTP/1.1) is written straight into the connection's
    /// memory pool, whatever this size. So it is memory every open stream holds for nothing
    /// in the usual case: kept small (issue 28: 2048 cost about 2 KB per idle stream). Events
    /// larger than a block reach an HTTP/1.0 client in several reads.
    static let streamBlockSize = 256

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    struct Shared {
        var daemon: CHandle?
        /// Connections suspended while a `later` response is computed, by request context.
        var pending: [ObjectIdentifier: (connection: CHandle, context: RequestContext)] = [:]
        var streams: [ObjectIdentifier: EventStream] = [:]
        var stopping = false
    }

    let configuration: Configuration
    let responder: any HTTPResponder
    let accessLog: @Sendable (HTTPAccessRecord) -> Void
    let shared = Mutex(Shared())
    /// Whether new connections are taken: false from the start of ``stop(grace:)``, when the
    /// accept policy (``acceptPolicy``, on libmicrohttpd's threads) closes them as they come.
    let accepting = Atomic<Bool>(true)
    /// Ends event streams whose client hung up while suspended (nil if epoll is unavailable).
    let hangups = HangupWatcher()
    /// Connections per client address (nil: no per-address limit).
    let addressConnections: AddressConnections?
    /// Event streams on their own sockets (nil: they stay in libmicrohttpd).
    let sockets: StreamSockets?
    /// libmicrohttpd's open connections (counted only with `sockets`, for the connection limit).
    let daemonConnections = Atomic<Int>(0)
    /// Cuts connections whose request head takes too long (nil: `headTimeout` is nil).
    let headDeadlines: HeadDeadlines?
    /// The last id given to a ``ConnectionRecord``.
    let connectionIDs = Atomic<UInt64>(0)
    private let heartbeatTask = Mutex<Task<Void, Never>?>(nil)

    public init(
        configuration: Configuration, responder: any HTTPResponder,
        accessLog: @escaping @Sendable (HTTPAccessRecord) -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.responder = responder
        self.accessLog = accessLog
        addressConnections = configuration.connectionsPerAddress > 0
            ? AddressConnections(limit: configuration.connectionsPerAddress, exempt: configuration.connectionLimitExempt) : nil
        sockets = configuration.detachStreams && configuration.tls == nil ? StreamSockets() : nil
        // Over TLS a reply in the clear would break the session: the connection is just closed.
        headDeadlines = configuration.headTimeout.flatMap { timeout in
            timeout > .zero ? HeadDeadlines(timeout: timeout, reply: configuration.tls == nil ? Self.headTimeoutReply : nil) : nil
        }
    }

    deinit {
        // Its thread holds the deadlines, not the server: a server never started or stopped
        // still ends it.
        headDeadlines?.stop()
    }

    /// What a connection whose head took too long gets before its close.
    static let headTimeoutReply = Array("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)

    /// Whether libmicrohttpd tells the server of every connection's start and close (a
    /// ``ConnectionRecord`` each): for the per-address limit, the streams on their own sockets,
    /// the head deadline.
    var notesConnections: Bool { addressConnections != nil || sockets != nil || headDeadlines != nil }

    /// Binds and starts serving. Returns the bound port (the real one when `port` is 0).
    public func start() throws(StartError) -> Int {
        guard (0...65535).contains(configuration.port) else {
            throw StartError(description: "port \(configuration.port) is not in 0...65535")
        }
        let threads = configuration.threads > 0 ? configuration.threads : ProcessInfo.processInfo.activeProcessorCount
        var errorText = [CChar](repeating: 0, count: 256)
        let start = { (certificate: UnsafePointer<CChar>?, key: UnsafePointer<CChar>?, priorities: UnsafePointer<CChar>?) in
            self.configuration.host.withCString { host in
                var config = ss_daemon_config(
                    host: host, port: UInt16(self.configuration.port),
                    thread_pool_size: UInt32(max(1, threads)),
                    connection_limit: UInt32(max(1, self.configuration.connectionLimit)),
                    connection_timeout: UInt32(max(0, self.configuration.connectionTimeout)),
                    connection_memory_limit: max(4096, self.configuration.connectionMemoryLimit),
                    reuse_port: self.configuration.reusePort ? 1 : 0,
                    tls_certificate: certificate, tls_key: key, tls_priorities: priorities,
                    notify_connection: self.notesConnections ? connectionNotified : nil,
                    notify_connection_cls: Unmanaged.passUnretained(self).toOpaque(),
                    detach_streams: self.sockets == nil ? 0 : 1)
                let me = Unmanaged.passUnretained(self).toOpaque()
                return ss_start_daemon(
                    &config, acceptPolicy, me, accessHandler, me, requestCompleted, me, uriLogged, &errorText, errorText.count)
            }
        }
        // The PEM texts are read (into GnuTLS's credentials) while the daemon starts, not after.
        let daemon: OpaquePointer? = configuration.tls.map { $0.withPointers(start) } ?? start(nil, nil, nil)
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

    /// Graceful stop: refuse new streams, end every event stream (after `shutdownBytes`, when
    /// set), stop accepting, wait (up to `grace`) for streams and suspended requests to finish,
    /// then stop the daemon. Safe to call more than once.
    public func stop(grace: Duration = .seconds(2)) async {
        guard let daemon = shared.withLock({ s -> CHandle? in
            guard !s.stopping else { return nil }
            s.stopping = true
            return s.daemon
        })?.pointer else { return }
        heartbeatTask.withLock { $0?.cancel() }
        // Every stream is in the table now: `register` refuses new ones once `stopping` is set.
        // Each gets its farewell behind what is already queued, and no byte after it.
        let farewell = configuration.shutdownBytes ?? []
        for stream in shared.withLock({ Array($0.streams.values) }) {
            stream.close(after: farewell)
        }
        hangups?.stop()
        headDeadlines?.stop()
        // Stop accepting: from here every new connection is closed as soon as it is accepted,
        // before a byte of it is read (nothing it sends is applied; a client sees the connection
        // closed without a reply, at once, and retries elsewhere). Not MHD_quiesce_daemon:
        // in 0.9.75 with a thread pool on epoll it races the workers, which remove the listen
        // socket from their epoll sets too, and one of them panics ("Failed to remove listen FD
        // from epoll set") and aborts the process (issue 24 item 8). The listen socket stays
        // open until MHD_stop_daemon closes it, after its workers are gone.
        accepting.store(false, ordering: .sequentiallyConsistent)
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline {
            let (streams, suspended) = shared.withLock { (Array($0.streams.values), $0.pending.count) }
            if streams.isEmpty && suspended == 0 { break }
            for stream in streams { stream.close() }
            try? await Task.sleep(for: .milliseconds(20))
        }
        // Streams on their own sockets whose client does not read end here, unsent bytes dropped.
        await sockets?.stop()
        // libmicrohttpd 0.9.75 aborts the process (MHD_PANIC) when stopped with a suspended
        // connection, and the stop frees connections a late `later` answer would then resume.
        // So the requests still computing are answered 503 and resumed here, under the lock
        // their own answers take: each connection is resumed exactly once, never after the stop.
        takeOverPending()
        // Streams whose client does not read are not suspended (they wait to write), so the
        // daemon can be stopped with them open.
        MHD_stop_daemon(daemon)
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

    /// Suspends a connection whose answer is computed later; false when the server is stopping
    /// (answer at once instead).
    func suspend(_ connection: OpaquePointer, context: RequestContext) -> Bool {
        shared.withLock { s in
            guard !s.stopping else { return false }
            s.pending[ObjectIdentifier(context)] = (CHandle(connection), context)
            context.phase.withLock { $0 = .waiting }
            MHD_suspend_connection(connection)
            return true
        }
    }

    /// Hands a `later` answer to its connection and resumes it, unless ``stop(grace:)`` already
    /// answered it (then the answer is dropped: the connection may no longer exist).
    func answer(_ context: RequestContext, with response: HTTPResponse) {
        shared.withLock { s in
            guard let entry = s.pending.removeValue(forKey: ObjectIdentifier(context)) else { return }
            context.phase.withLock { $0 = .ready(response) }
            MHD_resume_connection(entry.connection.pointer)
        }
    }

    /// Answers every request still computing with 503 and resumes its connection.
    func takeOverPending() {
        shared.withLock { s in
            for entry in s.pending.values {
                entry.context.phase.withLock {
                    $0 = .ready(HTTPResponse(status: 503, headers: [("Connection", "close")], route: "-"))
                }
                MHD_resume_connection(entry.connection.pointer)
            }
            s.pending.removeAll()
        }
    }

    /// Connections suspended while a `later` answer is computed.
    var suspendedRequestCount: Int { shared.withLock { $0.pending.count } }
}
