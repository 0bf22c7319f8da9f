import Logging
import MicroHTTP
import StateSessions
import StateStore
import Synchronization

extension EventStream: EventSink {}

/// Limits the HTTP routes enforce.
public struct RouteSettings: Sendable {
    /// Request bodies larger than this are refused with 413 (the transport enforces it).
    public var bodyLimit = 64 * 1024
    public var maxStreamsPerSession = 32
    public var maxStreams = 10_000
    /// Bytes queued for one event subscriber before its stream is closed.
    public var streamBufferLimit = 1024 * 1024
    public var maxIdempotencyKeyLength = 200

    public init() {}
}

/// The routes of the v1 contract (`../shared/contract/http-api-v1.md`, restated in
/// `docs/API.md`), answering on libmicrohttpd's threads without blocking: every route works on
/// in-memory stores behind short locks.
public final class StateServerResponder: HTTPResponder {
    let sessions: SessionManager
    let settings: RouteSettings
    let logger: Logger
    let openStreams = Atomic<Int>(0)
    private let featuresBody: [UInt8]

    public init(sessions: SessionManager, settings: RouteSettings, logger: Logger) {
        self.sessions = sessions
        self.settings = settings
        self.logger = logger
        var list: [UInt8] = [UInt8(ascii: "[")]
        for (index, feature) in sessions.registry.features.enumerated() {
            if index > 0 { list.append(UInt8(ascii: ",")) }
            var entry = JSONObjectWriter()
            entry.string("name", feature.name)
            entry.raw("initialState", feature.initialStateJSON)
            list += entry.finish()
        }
        list.append(UInt8(ascii: "]"))
        var body = JSONObjectWriter()
        body.raw("features", list)
        featuresBody = body.finish()
    }

    /// Event streams open now.
    public var streamCount: Int { openStreams.load(ordering: .relaxed) }

    public func respond(to request: HTTPRequest) -> HTTPResult {
        .now(route(request))
    }

    // MARK: Routing

    func route(_ request: HTTPRequest) -> HTTPResponse {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 2, parts[0].isEmpty, !parts.dropFirst().contains(where: \.isEmpty) else {
            return notFound(request)
        }
        switch parts.count {
        case 2 where parts[1] == "healthz":
            return only(["GET", "HEAD"], request, "/healthz") {
                Reply.json(200, Array(#"{"status":"ok"}"#.utf8), route: "/healthz")
            }
        case 3 where parts[1] == "v1" && parts[2] == "features":
            return only(["GET", "HEAD"], request, "/v1/features") {
                Reply.json(200, featuresBody, route: "/v1/features")
            }
        case 3 where parts[1] == "v1" && parts[2] == "sessions":
            return only(["POST"], request, "/v1/sessions") { createSession(request) }
        case 4...6 where parts[1] == "v1" && parts[2] == "sessions":
            return sessionRoute(request, id: String(parts[3]), rest: parts.dropFirst(4).map(String.init))
        default:
            return notFound(request)
        }
    }

    private func sessionRoute(_ request: HTTPRequest, id: String, rest: [String]) -> HTTPResponse {
        switch rest.count {
        case 0:
            let route = "/v1/sessions/{id}"
            return only(["DELETE"], request, route) {
                authorized(request, id: id, route: route) { session in
                    sessions.delete(id: session.id)
                    return Reply.empty(204, route: route)
                }
            }
        case 1 where rest[0] == "state":
            let route = "/v1/sessions/{id}/state"
            return only(["GET", "HEAD"], request, route) {
                authorized(request, id: id, route: route) { allState($0, route: route) }
            }
        case 2 where rest[0] == "state":
            let route = "/v1/sessions/{id}/state/{feature}"
            return only(["GET", "HEAD", "PUT", "DELETE"], request, route) {
                authorized(request, id: id, route: route) { session in
                    featureState(request, session, feature: rest[1], route: route)
                }
            }
        case 1 where rest[0] == "dispatch":
            let route = "/v1/sessions/{id}/dispatch"
            return only(["POST"], request, route) {
                authorized(request, id: id, route: route) { dispatch(request, $0, route: route) }
            }
        case 1 where rest[0] == "events":
            let route = "/v1/sessions/{id}/events"
            return only(["GET"], request, route) {
                authorized(request, id: id, route: route, allowQueryToken: true) { events(request, $0, route: route) }
            }
        default:
            return notFound(request)
        }
    }

    private func notFound(_ request: HTTPRequest) -> HTTPResponse {
        Reply.error(404, "not_found", "there is no resource at this path", route: "-")
    }

    /// Runs `body` for the allowed methods; 405 with `Allow` otherwise.
    private func only(
        _ methods: [String], _ request: HTTPRequest, _ route: String, _ body: () -> HTTPResponse
    ) -> HTTPResponse {
        guard methods.contains(request.method) else {
            return Reply.error(
                405, "method_not_allowed", "\(request.method) is not allowed here; use \(methods.joined(separator: ", "))",
                route: route, headers: [("Allow", methods.joined(separator: ", "))])
        }
        return body()
    }

    /// 401 without credentials; 404 `session_not_found` for an unknown session or another
    /// session's token (indistinguishable on purpose).
    private func authorized(
        _ request: HTTPRequest, id: String, route: String, allowQueryToken: Bool = false,
        _ body: (Session) -> HTTPResponse
    ) -> HTTPResponse {
        var token: String?
        if let header = request.header("authorization") {
            let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
            if parts.count == 2, parts[0].lowercased() == "bearer" {
                token = parts[1].trimmingWhitespace()
            }
        }
        if token == nil, allowQueryToken, let value = request.queryValues("access_token").first, !value.isEmpty {
            token = value
        }
        guard let token, !token.isEmpty else {
            return Reply.error(
                401, "unauthorized", "this request needs the header 'Authorization: Bearer <token>'",
                route: route, headers: [("WWW-Authenticate", "Bearer")])
        }
        guard let session = sessions.session(id: id, token: token) else {
            return Reply.error(404, "session_not_found", "no session with this id and token", route: route)
        }
        if request.bodyTooLarge {
            return Reply.error(
                413, "payload_too_large", "the request body is larger than the limit of \(settings.bodyLimit) bytes",
                route: route)
        }
        return body(session)
    }

    // MARK: Sessions

    private func createSession(_ request: HTTPRequest) -> HTTPResponse {
        let route = "/v1/sessions"
        if request.bodyTooLarge {
            return Reply.error(
                413, "payload_too_large", "the request body is larger than the limit of \(settings.bodyLimit) bytes",
                route: route)
        }
        guard let (session, token) = sessions.create() else {
            return Reply.error(
                503, "session_limit_reached", "the server holds its maximum number of sessions; try again later",
                route: route, headers: [("Retry-After", "60")])
        }
        var body = JSONObjectWriter()
        body.string("id", session.id)
        body.string("token", token)
        return Reply.json(201, body.finish(), route: route, headers: [("Location", "/v1/sessions/\(session.id)")])
    }

    // MARK: State

    private func allState(_ session: Session, route: String) -> HTTPResponse {
        do {
            var features = JSONObjectWriter()
            for entry in try session.allStates() {
                var item = JSONObjectWriter(capacity: entry.state.count + 32)
                item.int("version", entry.version)
                item.raw("state", entry.state)
                features.raw(entry.feature, item.finish())
            }
            var body = JSONObjectWriter()
            body.string("session", session.id)
            body.raw("features", features.finish())
            return Reply.json(200, body.finish(), route: route)
        } catch {
            return internalError(error, route: route)
        }
    }

    private func featureState(_ request: HTTPRequest, _ session: Session, feature: String, route: String) -> HTTPResponse {
        guard let store = session.store(feature) else {
            return unknownFeature(feature, route: route)
        }
        switch request.method {
        case "GET", "HEAD":
            do {
                let (state, version) = try store.currentJSON()
                if let header = request.header("if-none-match"), EntityTagCondition(header).matches(version) {
                    return Reply.empty(304, route: route, headers: [Reply.etag(version)])
                }
                var body = JSONObjectWriter(capacity: state.count + 64)
                body.string("feature", feature)
                body.int("version", version)
                body.raw("state", state)
                return Reply.json(200, body.finish(), route: route, headers: [Reply.etag(version)])
            } catch {
                return internalError(error, route: route)
            }
        case "PUT":
            guard let json = JSONCoding.parse(request.body) else { return malformed(route) }
            guard case .object(let fields) = json else {
                return invalidRequest("the body must be a JSON object like {\"state\": {...}}", route)
            }
            guard let state = fields["state"] else {
                return invalidRequest("the body is missing the field 'state'", route)
            }
            return apply(request, store, route: route, withEffect: false) { ifVersion throws(StoreError) in
                try store.rehydrate(json: state, ifVersion: ifVersion)
            }
        default:  // DELETE
            return apply(request, store, route: route, withEffect: false) { ifVersion throws(StoreError) in
                try store.resetJSON(ifVersion: ifVersion)
            }
        }
    }

    // MARK: Dispatch

    private func dispatch(_ request: HTTPRequest, _ session: Session, route: String) -> HTTPResponse {
        guard let json = JSONCoding.parse(request.body) else { return malformed(route) }
        guard case .object(let fields) = json else {
            return invalidRequest("the body must be a JSON object like {\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}}", route)
        }
        guard let featureValue = fields["feature"] else {
            return invalidRequest("the body is missing the field 'feature'", route)
        }
        guard case .string(let feature) = featureValue else {
            return invalidRequest("the field 'feature' must be a string, not \(featureValue.typeName)", route)
        }
        guard let action = fields["action"] else {
            return invalidRequest("the body is missing the field 'action'", route)
        }
        guard case .object = action else {
            return invalidRequest("the field 'action' must be an object, not \(action.typeName)", route)
        }
        guard let store = session.store(feature) else {
            return unknownFeature(feature, route: route)
        }
        let run = {
            self.apply(request, store, route: route, withEffect: true) { ifVersion throws(StoreError) in
                try store.dispatch(json: action, ifVersion: ifVersion)
            }
        }
        guard let key = request.header("idempotency-key") else { return run() }
        guard !key.isEmpty, key.utf8.count <= settings.maxIdempotencyKeyLength else {
            return invalidRequest(
                "the header 'Idempotency-Key' must have 1 to \(settings.maxIdempotencyKeyLength) characters", route)
        }
        let (reply, replayed) = session.idempotent(key: key) {
            let response = run()
            guard case .bytes(let body) = response.body else {
                return (IdempotentReply(status: response.status, body: [], version: 0), false)
            }
            let version = response.headers.first { $0.name == "ETag" }.flatMap { Int($0.value.dropFirst().dropLast()) } ?? 0
            return (IdempotentReply(status: response.status, body: body, version: version), response.status == 200)
        }
        var headers = [Reply.etag(reply.version)]
        if replayed { headers.append(("Idempotent-Replayed", "true")) }
        return Reply.json(reply.status, reply.body, route: route, headers: reply.status == 200 ? headers : [])
    }

    /// Applies a change with the request's `If-Match` precondition and answers with the change.
    private func apply(
        _ request: HTTPRequest, _ store: any AnyStateStore, route: String, withEffect: Bool,
        _ change: (Int?) throws(StoreError) -> EncodedChange
    ) -> HTTPResponse {
        var ifVersion: Int?
        if let header = request.header("if-match") {
            switch EntityTagCondition(header) {
            case .any:
                break
            case .versions(let versions):
                // A list of several tags cannot be checked atomically; one tag can.
                guard versions.count == 1, let only = versions.first else {
                    let current = (try? store.currentJSON().version) ?? 0
                    return Reply.error(
                        412, "version_conflict", "If-Match does not name the store's version \(current)",
                        route: route, headers: [Reply.etag(current)])
                }
                ifVersion = only
            }
        }
        do {
            let applied = try change(ifVersion)
            return Reply.json(
                200, Reply.changeBody(applied, withEffect: withEffect), route: route,
                headers: [Reply.etag(applied.version)])
        } catch {
            let (status, code) = Reply.storeError(error)
            if status == 500 { return internalError(error, route: route) }
            let headers = error.kind == .versionConflict ? [Reply.etag(error.currentVersion)] : []
            return Reply.error(status, code, error.message, route: route, headers: headers)
        }
    }

    // MARK: Events

    private func events(_ request: HTTPRequest, _ session: Session, route: String) -> HTTPResponse {
        let requested = request.queryValues("feature")
        var filter: Set<String>?
        if !requested.isEmpty {
            for name in requested where sessions.registry[name] == nil {
                return unknownFeature(name, route: route)
            }
            filter = Set(requested)
        }
        guard session.hub.subscriberCount < settings.maxStreamsPerSession else {
            return Reply.error(
                429, "too_many_streams",
                "this session already has \(settings.maxStreamsPerSession) open event streams", route: route,
                headers: [("Retry-After", "5")])
        }
        guard openStreams.add(1, ordering: .relaxed).newValue <= settings.maxStreams else {
            openStreams.subtract(1, ordering: .relaxed)
            return Reply.error(
                429, "too_many_streams", "the server has its maximum of \(settings.maxStreams) open event streams",
                route: route, headers: [("Retry-After", "5")])
        }
        let lastEventID = request.header("last-event-id").flatMap { Int($0.trimmingCharacters(in: " ")) }
        let stream = EventStream(bufferLimit: settings.streamBufferLimit)
        guard let subscription = session.hub.subscribe(features: filter, lastEventID: lastEventID, sink: stream) else {
            openStreams.subtract(1, ordering: .relaxed)
            return Reply.error(404, "session_not_found", "no session with this id and token", route: route)
        }
        let hub = session.hub
        let counter = OpenStreamCounter(responder: self)
        stream.onFinish {
            hub.unsubscribe(subscription)
            counter.release()
        }
        return HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"),
            ],
            body: .stream(stream), route: route)
    }

    // MARK: Errors

    private func malformed(_ route: String) -> HTTPResponse {
        Reply.error(400, "malformed_json", "the request body is not valid JSON", route: route)
    }

    private func invalidRequest(_ message: String, _ route: String) -> HTTPResponse {
        Reply.error(400, "invalid_request", message, route: route)
    }

    private func unknownFeature(_ name: String, route: String) -> HTTPResponse {
        Reply.error(404, "unknown_feature", "there is no feature named '\(name)'", route: route)
    }

    private func internalError(_ error: any Error, route: String) -> HTTPResponse {
        logger.error("internal error", metadata: ["http.route": "\(route)", "error": "\(error)"])
        return Reply.error(500, "internal_error", "the server failed to answer this request", route: route)
    }
}

/// Gives back one open-stream slot, once.
private struct OpenStreamCounter: Sendable {
    let responder: StateServerResponder
    func release() { responder.openStreams.subtract(1, ordering: .relaxed) }
}

extension String {
    func trimmingCharacters(in set: Character) -> String {
        String(drop { $0 == set }.reversed().drop { $0 == set }.reversed())
    }
}
