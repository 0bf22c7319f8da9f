import CMicroHTTPD
import CMicroHTTPDShim
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Per-request state, owned by libmicrohttpd's `*con_cls` from the first call of the access
/// handler until the request-completed callback.
///
/// libmicrohttpd calls the handler for one connection on one thread at a time; the only other
/// thread that touches a context is the task that computes a `later` response, through `phase`.
final class RequestContext: Sendable {
    enum Phase: Sendable {
        /// Made by the URI log callback; the access handler has not seen the head yet.
        case head
        case receiving
        case waiting
        case ready(HTTPResponse)
        case answered
    }

    struct Receiving {
        var body: [UInt8] = []
        var received = 0
        var tooLarge = false
    }

    struct Head: Sendable {
        var method = "-"
        var path = "/"
        /// Names lower-cased, read once with the framing check on the first call.
        var headers: [(name: String, value: String)] = []
        /// The framing check's reason when the head was refused (for the access log).
        var refusal: String?
        /// The connection's peer address.
        var peer: IPAddress?
        /// An HTTP/1.0 request (its reply cannot be chunked).
        var http10 = false
    }

    /// Address just past the request target as libmicrohttpd first saw it (its first NUL), or
    /// nil when unknown. The target really ends where the version starts, one byte later; if
    /// not, the target held a raw NUL.
    let targetEnd: UInt?
    /// Where the raw target starts in libmicrohttpd's buffer (for the request line's check).
    let targetStart: UInt?
    /// Query arguments in the raw target; past `SS_MAX_QUERY_ARGUMENTS` they were dropped and
    /// the request is refused.
    let queryArguments: Int
    /// The raw target has a control character or a blank (a bare CR): refused.
    let controlInTarget: Bool
    /// The monotonic clock at arrival, in nanoseconds (`DispatchTime`: cheaper to read and subtract than `ContinuousClock`'s instants, and this runs for every request).
    let started = DispatchTime.now().uptimeNanoseconds
    let head = Mutex(Head())
    let receiving = Mutex(Receiving())
    let phase = Mutex(Phase.head)
    let stream = Mutex<EventStream?>(nil)

    init(targetStart: UInt? = nil, targetEnd: UInt?, queryArguments: Int = 0, controlInTarget: Bool = false) {
        self.controlInTarget = controlInTarget
        self.targetStart = targetStart
        self.targetEnd = targetEnd
        self.queryArguments = queryArguments
    }

    var method: String { head.withLock { $0.method } }
}

/// libmicrohttpd's URI log callback (through the shim's, which counts the query arguments):
/// called with the raw target, before the headers are read and before the target is split and
/// its arguments decoded in place. Makes the request's context.
let uriLogged: ss_uri_log_callback = { uri, _, arguments, control in
    let end = uri.map { UInt(bitPattern: $0 + strlen($0)) }
    let context = RequestContext(
        targetStart: uri.map { UInt(bitPattern: $0) }, targetEnd: end, queryArguments: arguments, controlInTarget: control != 0)
    return Unmanaged.passRetained(context).toOpaque()
}

/// libmicrohttpd's accept policy, asked on its thread for every new connection: no once the
/// server is stopping, or when the client's address holds `connectionsPerAddress` connections
/// already (libmicrohttpd then closes the connection at once).
let acceptPolicy: MHD_AcceptPolicyCallback = { cls, address, length in
    guard let cls else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    guard server.accepting.load(ordering: .sequentiallyConsistent) else { return MHD_Result.NO }
    if let sockets = server.sockets {
        // Streams on their own sockets are connections too.
        let streams = sockets.count
        if streams > 0, streams + server.daemonConnections.load(ordering: .relaxed) >= server.configuration.connectionLimit {
            return MHD_Result.NO
        }
    }
    guard let counts = server.addressConnections else { return MHD_Result.YES }
    guard let client = IPAddress.reading({ ss_address_bytes(address, Int(length), $0) == 1 }) else { return MHD_Result.YES }
    return counts.mayAccept(client) ? MHD_Result.YES : MHD_Result.NO
}

/// libmicrohttpd's connection notifications (``HTTPServer/notesConnections``): a connection
/// that starts gets a ``ConnectionRecord`` as its socket context, is counted (for its address,
/// and with streams on their own sockets) and watched for its head's deadline; at its close,
/// which libmicrohttpd notifies before it closes the socket, it leaves all of them.
let connectionNotified: MHD_NotifyConnectionCallback = { cls, connection, socketContext, code in
    guard let cls, let connection, let socketContext else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
    if code == .CONNECTION_NOTIFY_STARTED {
        if server.sockets != nil { server.daemonConnections.add(1, ordering: .relaxed) }
        var counted: IPAddress?
        if let counts = server.addressConnections, let address = connectionAddress(connection), counts.opened(address) {
            counted = address
        }
        let record = ConnectionRecord(
            id: server.connectionIDs.add(1, ordering: .relaxed).newValue, fd: ss_connection_fd(connection), counted: counted)
        socketContext.pointee = Unmanaged.passRetained(record).toOpaque()
        server.headDeadlines?.add(record)
        return
    }
    guard let raw = socketContext.pointee else { return }
    socketContext.pointee = nil
    let record = Unmanaged<ConnectionRecord>.fromOpaque(raw).takeRetainedValue()
    server.headDeadlines?.remove(record)
    // Its event stream took over its place in both counts (`HTTPServer.detach`).
    guard !record.detached.load(ordering: .acquiring) else { return }
    if server.sockets != nil { server.daemonConnections.subtract(1, ordering: .relaxed) }
    if let counted = record.counted { server.addressConnections?.closed(counted) }
}

/// The peer address of a connection, or nil when it is not IP.
func connectionAddress(_ connection: OpaquePointer) -> IPAddress? {
    IPAddress.reading { ss_connection_address(connection, $0) == 1 }
}

/// libmicrohttpd's access handler: headers, then body pieces, then a final call.
let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, version, uploadData, uploadDataSize, conCls in
    guard let cls, let connection, let conCls, let uploadDataSize else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()

    let context: RequestContext
    if let raw = conCls.pointee {
        context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()
    } else {
        // The URI log callback always makes one; without it the target cannot be checked.
        context = RequestContext(targetEnd: nil)
        conCls.pointee = Unmanaged.passRetained(context).toOpaque()
    }

    if case .head = context.phase.withLock({ $0 }) {
        // The head's deadline ran out first (`HeadDeadlines`): the connection is being cut.
        if let record = ConnectionRecord.of(connection), !record.headArrived() { return MHD_Result.NO }
        // First call: the head only. Check its framing before anything is routed or read, in
        // one pass over the fields that also lists them for the request.
        let methodText = method.map { String(cString: $0) } ?? "-"
        let path = url.map { String(cString: $0) } ?? "/"
        var problem: String?
        var declared: UInt64?
        var headers: [(name: String, value: String)] = []
        if let end = context.targetEnd, let version, UInt(bitPattern: version) == end + 1 {
            withUnsafeTemporaryAllocation(of: ss_field.self, capacity: RequestFields.stackCapacity) { buffer in
                var head = ss_head()
                let target = context.targetStart.flatMap { UnsafePointer<CChar>(bitPattern: $0) }
                ss_read_head(connection, method, target, version, buffer.baseAddress, buffer.count, &head)
                problem = RequestFraming.message(head.problem)
                guard problem == nil else { return }
                if head.has_content_length != 0 { declared = head.content_length }
                let count = head.field_count
                if count <= buffer.count {
                    headers = RequestFields.headers(UnsafeBufferPointer(rebasing: buffer[..<count]))
                } else {
                    var all = [ss_field](repeating: ss_field(), count: count)
                    let listed = all.withUnsafeMutableBufferPointer {
                        ss_collect_values(connection, MHD_ValueKind.HEADER_KIND, $0.baseAddress, $0.count)
                    }
                    headers = all.withUnsafeBufferPointer { RequestFields.headers(UnsafeBufferPointer(rebasing: $0[..<min(listed, count)])) }
                }
            }
        } else {
            problem = RequestFraming.nulInTarget
        }
        if problem == nil, context.controlInTarget {
            problem = RequestFraming.controlInTarget
        }
        if problem == nil, context.queryArguments > Int(SS_MAX_QUERY_ARGUMENTS) {
            problem = RequestFraming.tooManyArguments
        }
        if problem == nil, context.queryArguments > 0, let start = context.targetStart, let end = context.targetEnd,
            end - start > UInt(SS_MAX_QUERY_TARGET_BYTES)
        {
            problem = RequestFraming.queryTargetTooLong
        }
        let peer = connectionAddress(connection)
        let http10 = version.map { strcmp($0, "HTTP/1.0") == 0 } ?? false
        context.head.withLock {
            $0.http10 = http10
            $0.method = methodText
            $0.path = path
            $0.headers = headers
            $0.refusal = problem
            $0.peer = peer
        }
        if let problem {
            context.phase.withLock { $0 = .answered }
            server.queue(badRequestResponse(problem), on: connection, context: context)
            return MHD_Result.YES
        }
        if let declared, declared > UInt64(max(0, server.configuration.drainLimit)) {
            // Too large to be worth draining: answer now; libmicrohttpd closes the connection.
            context.phase.withLock { $0 = .answered }
            server.queue(tooLargeResponse(server), on: connection, context: context)
            return MHD_Result.YES
        }
        if headers.contains(where: { $0.name == "expect" && $0.value.lowercased().contains("100-continue") }) {
            // libmicrohttpd sends `100 Continue` after this call unless a response is queued in
            // it: refuse here what can be refused from the head, so that nobody is invited to
            // send a body only to be told 413 or 401 (libmicrohttpd then closes the connection,
            // the body never sent).
            // In the order of checks: path, method, credentials, then the body's size.
            let request = HTTPRequest(
                method: methodText, path: path, headers: headers, query: RequestFields.query(connection), peer: peer)
            var refusal = server.responder.refusalBeforeBody(request)
            if refusal != nil {
                refusal?.headers.append(("Connection", "close"))
            } else if let declared, declared > UInt64(max(0, server.configuration.bodyLimit)) {
                refusal = tooLargeResponse(server)
            }
            if let refusal {
                context.phase.withLock { $0 = .answered }
                server.queue(refusal, on: connection, context: context)
                return MHD_Result.YES
            }
        }
        context.phase.withLock { $0 = .receiving }
        return MHD_Result.YES
    }

    let size = uploadDataSize.pointee
    if size > 0 {
        let limit = server.configuration.bodyLimit
        let drain = server.configuration.drainLimit
        let keepGoing = context.receiving.withLock { r -> Bool in
            r.received += size
            if !r.tooLarge, r.received <= limit, let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: size) {
                    r.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: size))
                }
            } else if !r.tooLarge {
                r.tooLarge = true
                r.body = []
            }
            return r.received <= drain
        }
        uploadDataSize.pointee = 0
        return keepGoing ? MHD_Result.YES : MHD_Result.NO
    }

    // Final call.
    let current = context.phase.withLock { $0 }
    switch current {
    case .receiving:
        let (body, tooLarge) = context.receiving.withLock { r in
            defer { r.body = [] }
            return (r.body, r.tooLarge)
        }
        let head = context.head.withLock { $0 }
        let request = HTTPRequest(
            method: head.method, path: head.path, headers: head.headers, query: RequestFields.query(connection),
            body: body, bodyTooLarge: tooLarge, peer: head.peer)
        // The request has its own copy: the context, which lives as long as the request (an
        // event stream's whole life), keeps only what the access log needs.
        context.head.withLock { $0.headers = [] }
        let result = server.responder.respond(to: request)
        if let response = result.now {
            context.phase.withLock { $0 = .answered }
            return server.queue(response, on: connection, context: context)
        }
        guard server.suspend(connection, context: context) else {
            // Stopping: the daemon may be gone before the answer is ready.
            context.phase.withLock { $0 = .answered }
            return server.queue(HTTPResponse(status: 503, headers: [("Connection", "close")], route: "-"), on: connection, context: context)
        }
        // Answered from whatever gives the response (a task for pending work; the thread that
        // fills a promised one), which resumes the connection.
        result.whenReady { result in
            switch result {
            case .success(let response): server.answer(context, with: response)
            }
        }
        return MHD_Result.YES
    case .ready(let response):
        context.phase.withLock { $0 = .answered }
        return server.queue(response, on: connection, context: context)
    case .head, .waiting, .answered:
        return MHD_Result.YES
    }
}

/// A libmicrohttpd pointer (daemon or connection) carried across threads. Safe because
/// libmicrohttpd's suspend/resume and stop calls are thread-safe, and every use is guarded by
/// the state that says the pointer is still alive (a suspended connection cannot go away).
struct CHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

private func badRequestResponse(_ problem: String) -> HTTPResponse {
    let body = #"{"error":{"code":"invalid_request","message":"\#(problem)"}}"#
    return HTTPResponse(
        status: 400, headers: [("Content-Type", "application/json"), ("Connection", "close")],
        body: .bytes(Array(body.utf8)), route: "-")
}

private func tooLargeResponse(_ server: HTTPServer) -> HTTPResponse {
    let body = #"{"error":{"code":"payload_too_large","message":"the request body is larger than the limit of \#(server.configuration.bodyLimit) bytes"}}"#
    return HTTPResponse(
        status: 413, headers: [("Content-Type", "application/json"), ("Connection", "close")],
        body: .bytes(Array(body.utf8)), route: "-")
}

/// Called by libmicrohttpd when a request ends (response sent, client gone, or daemon stop).
let requestCompleted: MHD_RequestCompletedCallback = { cls, connection, conCls, _ in
    // The next head is awaited (keep-alive), on the deadline's watch.
    if let connection { ConnectionRecord.of(connection)?.requestEnded() }
    guard let conCls, let raw = conCls.pointee else { return }
    conCls.pointee = nil
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeRetainedValue()
    if let cls, let stream = context.stream.withLock({ $0 }) {
        let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()
        stream.finish()
        server.unregister(stream)
    }
}

private let streamReader: MHD_ContentReaderCallback = { cls, _, buffer, max in
    guard let cls, let buffer else { return ss_content_reader_end_with_error }
    return Unmanaged<EventStream>.fromOpaque(cls).takeUnretainedValue().read(into: buffer, max: max)
}

private let streamFree: MHD_ContentReaderFreeCallback = { cls in
    guard let cls else { return }
    let stream = Unmanaged<EventStream>.fromOpaque(cls).takeRetainedValue()
    stream.finish()
}

extension HTTPServer {
    /// Queues `response` on `connection` and writes the access log record.
    @discardableResult
    func queue(_ response: HTTPResponse, on connection: OpaquePointer, context: RequestContext) -> MHD_Result {
        let mhdResponse: OpaquePointer?
        switch response.body {
        case .bytes(let bytes):
            mhdResponse = bytes.withUnsafeBytes { raw in
                MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress), MHD_ResponseMemoryMode.RESPMEM_MUST_COPY)
            }
        case .stream(let stream):
            guard register(stream) else {
                // Stopping: refuse new streams.
                stream.finish()
                return queue(HTTPResponse(status: 503, route: response.route), on: connection, context: context)
            }
            if let timeout = stream.peerTimeout {
                // Set on the connection's socket, so on the stream's own copy of it too.
                let milliseconds = timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000
                _ = ss_socket_user_timeout(ss_connection_fd(connection), UInt32(clamping: max(1, milliseconds)))
            }
            if stream.carriesEvents, let sockets, let detached = detach(stream, response, from: connection, context: context, to: sockets) {
                return detached
            }
            stream.attach(connection)
            context.stream.withLock { $0 = stream }
            if stream.carriesEvents {
                // Bounds what the kernel holds for a client that does not read (TLS, or a
                // stream that could not leave libmicrohttpd). It stays for the connection's
                // later requests, if any.
                _ = ss_socket_send_buffer(ss_connection_fd(connection), Int32(clamping: configuration.streamSocketBuffer))
            }
            if let watcher = hangups {
                let fd = ss_connection_fd(connection)
                if let id = watcher.watch(fd: fd, stream: stream) {
                    stream.onFinish { watcher.forget(id: id, fd: fd) }
                }
            }
            mhdResponse = MHD_create_response_from_callback(
                ss_size_unknown, HTTPServer.streamBlockSize, streamReader,
                Unmanaged.passRetained(stream).toOpaque(), streamFree)
            // A HEAD reply has no body, but libmicrohttpd 0.9.75 writes a chunked reply's
            // terminator (`0` CRLF CRLF) after the head of a HEAD reply, which a keep-alive
            // client would read as the start of its next reply. The connection ends after it,
            // so those bytes are never taken for anything.
            if let mhdResponse, context.method == "HEAD" {
                _ = MHD_add_response_header(mhdResponse, "Connection", "close")
            }
        }
        guard let mhdResponse else { return MHD_Result.NO }
        for header in response.headers {
            // withCString lends a native string's own bytes (passing the String itself would
            // copy it into a new array first).
            header.name.withCString { name in
                header.value.withCString { value in _ = MHD_add_response_header(mhdResponse, name, value) }
            }
        }
        let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
        MHD_destroy_response(mhdResponse)
        accessLog(HTTPAccessRecord(
            method: context.method, route: response.route, status: response.status,
            nanoseconds: Int64(clamping: DispatchTime.now().uptimeNanoseconds &- context.started), refusal: context.head.withLock { $0.refusal }))
        return result
    }

    /// Moves an event stream to its own socket (``StreamSockets``): writes the access log
    /// record and returns `MHD_NO`, for libmicrohttpd to close its descriptor of the socket
    /// without a byte written. Nil when the stream stays in libmicrohttpd (the connection
    /// limit is reached by streams already, or the socket could not be taken).
    private func detach(
        _ stream: EventStream, _ response: HTTPResponse, from connection: OpaquePointer, context: RequestContext,
        to sockets: StreamSockets
    ) -> MHD_Result? {
        guard sockets.count < configuration.connectionLimit, context.method != "HEAD" else { return nil }
        let fd = ss_connection_fd(connection)
        guard fd >= 0 else { return nil }
        let own = ss_stream_socket(fd, Int32(clamping: configuration.streamSocketBuffer))
        guard own >= 0 else { return nil }
        let chunked = !context.head.withLock { $0.http10 }
        guard sockets.adopt(fd: own, stream: stream, head: Self.streamHead(response, chunked: chunked), chunked: chunked) else {
            close(own)
            return nil
        }
        // The stream takes over the connection's place in the connection counts (for as long
        // as it lasts) at once, not when libmicrohttpd gets round to closing the connection.
        let counts = addressConnections
        let record = ConnectionRecord.of(connection)
        let counted = record?.counted
        record?.detached.store(true, ordering: .releasing)
        daemonConnections.subtract(1, ordering: .relaxed)
        stream.onFinish { [weak self] in
            self?.unregister(stream)
            if let counted { counts?.closed(counted) }
        }
        accessLog(HTTPAccessRecord(
            method: context.method, route: response.route, status: response.status,
            nanoseconds: Int64(clamping: DispatchTime.now().uptimeNanoseconds &- context.started), refusal: context.head.withLock { $0.refusal }))
        return MHD_Result.NO
    }

    /// Fields of a stream's head that the server writes itself, never taken from a response.
    private static let framingFields: Set<String> = ["connection", "content-length", "transfer-encoding", "date"]

    /// The head of a stream's response on its own socket, as libmicrohttpd would write it: the
    /// status line, `Date`, the response's fields (any that could split the head are dropped,
    /// as libmicrohttpd refuses them; framing fields are the server's), then
    /// `Transfer-Encoding: chunked`, or for an HTTP/1.0 client `Connection: close` (the body
    /// ends with the connection).
    static func streamHead(_ response: HTTPResponse, chunked: Bool) -> [UInt8] {
        var head: [UInt8] = []
        head.reserveCapacity(256)
        head.append(contentsOf: "HTTP/1.1 \(response.status) ".utf8)
        head.append(contentsOf: String(cString: ss_reason_phrase(UInt32(clamping: response.status))).utf8)
        head.append(contentsOf: "\r\nDate: ".utf8)
        var date = [CChar](repeating: 0, count: 40)
        let length = ss_http_date(&date, date.count)
        head.append(contentsOf: date.prefix(length).map { UInt8(bitPattern: $0) })
        head.append(contentsOf: "\r\n".utf8)
        for (name, value) in response.headers {
            guard !name.isEmpty, !Self.framingFields.contains(name.lowercased()),
                !name.utf8.contains(where: { $0 <= 32 || $0 == UInt8(ascii: ":") || $0 >= 127 }),
                !value.utf8.contains(where: { $0 == 0 || $0 == 10 || $0 == 13 })
            else { continue }
            head.append(contentsOf: name.utf8)
            head.append(contentsOf: ": ".utf8)
            head.append(contentsOf: value.utf8)
            head.append(contentsOf: "\r\n".utf8)
        }
        head.append(contentsOf: (chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Connection: close\r\n\r\n").utf8)
        return head
    }
}
