import CMicroHTTPD
import CMicroHTTPDShim
import Synchronization

/// Per-request state, owned by libmicrohttpd's `*con_cls` from the first call of the access
/// handler until the request-completed callback.
///
/// libmicrohttpd calls the handler for one connection on one thread at a time; the only other
/// thread that touches a context is the task that computes a `later` response, through `phase`.
final class RequestContext: Sendable {
    enum Phase: Sendable {
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

    let method: String
    let path: String
    let started = ContinuousClock.now
    let receiving = Mutex(Receiving())
    let phase = Mutex(Phase.receiving)
    let stream = Mutex<EventStream?>(nil)

    init(method: String, path: String) {
        self.method = method
        self.path = path
    }
}

/// Collects header or query values of a connection.
private final class ValueCollector {
    var values: [(name: String, value: String?)] = []
}

private func collectValues(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [(name: String, value: String?)] {
    let collector = ValueCollector()
    withExtendedLifetime(collector) {
        _ = MHD_get_connection_values(
            connection, kind,
            { cls, _, key, value in
                guard let cls, let key else { return MHD_Result.YES }
                let collector = Unmanaged<ValueCollector>.fromOpaque(cls).takeUnretainedValue()
                collector.values.append((String(cString: key), value.map { String(cString: $0) }))
                return MHD_Result.YES
            }, Unmanaged.passUnretained(collector).toOpaque())
    }
    return collector.values
}

/// libmicrohttpd's access handler: headers, then body pieces, then a final call.
let accessHandler: MHD_AccessHandlerCallback = { cls, connection, url, method, _, uploadData, uploadDataSize, conCls in
    guard let cls, let connection, let conCls, let uploadDataSize else { return MHD_Result.NO }
    let server = Unmanaged<HTTPServer>.fromOpaque(cls).takeUnretainedValue()

    guard let raw = conCls.pointee else {
        // First call: headers only.
        let context = RequestContext(
            method: method.map { String(cString: $0) } ?? "GET",
            path: url.map { String(cString: $0) } ?? "/")
        if let length = MHD_lookup_connection_value(connection, MHD_ValueKind.HEADER_KIND, "Content-Length"),
            let declared = Int(String(cString: length)), declared > server.configuration.drainLimit
        {
            // Too large to be worth draining: answer now; libmicrohttpd closes the connection.
            conCls.pointee = Unmanaged.passRetained(context).toOpaque()
            context.phase.withLock { $0 = .answered }
            server.queue(tooLargeResponse(server), on: connection, context: context)
            return MHD_Result.YES
        }
        conCls.pointee = Unmanaged.passRetained(context).toOpaque()
        return MHD_Result.YES
    }
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()

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
        let request = HTTPRequest(
            method: context.method, path: context.path,
            headers: collectValues(connection, MHD_ValueKind.HEADER_KIND).map { ($0.name.lowercased(), $0.value ?? "") },
            query: collectValues(connection, MHD_ValueKind.GET_ARGUMENT_KIND),
            body: body, bodyTooLarge: tooLarge)
        switch server.responder.respond(to: request) {
        case .now(let response):
            context.phase.withLock { $0 = .answered }
            return server.queue(response, on: connection, context: context)
        case .later(let work):
            context.phase.withLock { $0 = .waiting }
            server.suspendedRequestDelta(1)
            MHD_suspend_connection(connection)
            let resumable = CHandle(connection)
            Task.detached {
                let response = await work()
                context.phase.withLock { $0 = .ready(response) }
                MHD_resume_connection(resumable.pointer)
                server.suspendedRequestDelta(-1)
            }
            return MHD_Result.YES
        }
    case .ready(let response):
        context.phase.withLock { $0 = .answered }
        return server.queue(response, on: connection, context: context)
    case .waiting, .answered:
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

private func tooLargeResponse(_ server: HTTPServer) -> HTTPResponse {
    let body = #"{"error":{"code":"payload_too_large","message":"the request body is larger than the limit of \#(server.configuration.bodyLimit) bytes"}}"#
    return HTTPResponse(
        status: 413, headers: [("Content-Type", "application/json"), ("Connection", "close")],
        body: .bytes(Array(body.utf8)), route: "-")
}

/// Called by libmicrohttpd when a request ends (response sent, client gone, or daemon stop).
let requestCompleted: MHD_RequestCompletedCallback = { cls, _, conCls, _ in
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
            stream.attach(connection)
            context.stream.withLock { $0 = stream }
            if let watcher = hangups {
                let fd = ss_connection_fd(connection)
                if let id = watcher.watch(fd: fd, stream: stream) {
                    stream.onFinish { watcher.forget(id: id, fd: fd) }
                }
            }
            mhdResponse = MHD_create_response_from_callback(
                ss_size_unknown, HTTPServer.streamBlockSize, streamReader,
                Unmanaged.passRetained(stream).toOpaque(), streamFree)
        }
        guard let mhdResponse else { return MHD_Result.NO }
        for header in response.headers {
            _ = MHD_add_response_header(mhdResponse, header.name, header.value)
        }
        let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
        MHD_destroy_response(mhdResponse)
        accessLog(HTTPAccessRecord(
            method: context.method, route: response.route, status: response.status,
            duration: ContinuousClock.now - context.started))
        return result
    }
}
