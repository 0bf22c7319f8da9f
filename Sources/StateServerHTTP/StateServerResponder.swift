import Logging
import MicroHTTP
import StatePersistence
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
/// `docs/API.md`).
///
/// Memory mode answers on libmicrohttpd's threads without blocking: every route works on
/// in-memory stores behind short locks. Durable mode answers session routes from a task
/// (`HTTPResult.later`): loading a session or committing a change waits for storage, and the
/// event threads never do.
public final class StateServerResponder: HTTPResponder {
    let sessions: SessionManager
    let settings: RouteSettings
    let logger: Logger
    let openStreams = Atomic<Int>(0)
    private let featuresBody: [UInt8]
    private let metrics: (@Sendable () -> [UInt8])?

    /// - Parameter metrics: the Prometheus text exposition served at `GET /metrics`
    ///   (404 when `nil`).
    public init(
        sessions: SessionManager, settings: RouteSettings, logger: Logger,
        metrics: (@Sendable () -> [UInt8])? = nil
    ) {
        self.sessions = sessions
        self.settings = settings
        self.logger = logger
        self.metrics = metrics
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

    // MARK: Routing

    public func respond(to request: HTTPRequest) -> HTTPResult {
        if request.path == "/" {
            return .now(only(["GET", "HEAD"], request, "/") {
                StaticAssets.response(StaticAssets.indexHTML, type: "text/html; charset=utf-8", route: "/")
            })
        }
        let parts = Self.segments(request.path)
        guard parts.count >= 2, parts[0].isEmpty, !parts.dropFirst().contains(where: \.isEmpty) else {
            return .now(notFound())
        }
        switch parts.count {
        case 2 where parts[1] == "healthz":
            return .now(only(["GET", "HEAD"], request, "/healthz") {
                Reply.json(200, Array(#"{"status":"ok"}"#.utf8), route: "/healthz")
            })
        case 2 where parts[1] == "metrics" && metrics != nil:
            return .now(only(["GET", "HEAD"], request, "/metrics") {
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                    body: .bytes(metrics?() ?? []), route: "/metrics")
            })
        case 2 where parts[1] == "openapi.json":
            return .now(only(["GET", "HEAD"], request, "/openapi.json") {
                Reply.json(200, StaticAssets.openAPI, route: "/openapi.json")
            })
        case 2 where parts[1] == "client.js":
            return .now(only(["GET", "HEAD"], request, "/client.js") {
                StaticAssets.response(StaticAssets.clientJS, type: "text/javascript; charset=utf-8", route: "/client.js")
            })
        case 3 where parts[1] == "v1" && parts[2] == "features":
            return .now(only(["GET", "HEAD"], request, "/v1/features") {
                Reply.json(200, featuresBody, route: "/v1/features")
            })
        case 3 where parts[1] == "v1" && parts[2] == "sessions":
            return createSession(request)
        case 4...6 where parts[1] == "v1" && parts[2] == "sessions":
            return sessionRoute(request, id: String(parts[3]), rest: parts.dropFirst(4).map(String.init))
        default:
            return .now(notFound())
        }
    }

    /// The path split at `/`, keeping empty segments (split by UTF-8 byte: this runs on every
    /// request, and Character-based splitting cost an eighth of a dispatch).
    static func segments(_ path: String) -> [Substring] {
        var parts: [Substring] = []
        let utf8 = path.utf8
        var start = utf8.startIndex
        var index = start
        while index != utf8.endIndex {
            if utf8[index] == UInt8(ascii: "/") {
                parts.append(path[start..<index])
                start = utf8.index(after: index)
            }
            index = utf8.index(after: index)
        }
        parts.append(path[start..<utf8.endIndex])
        return parts
    }

    /// The session routes, after method and credential checks.
    private enum SessionRoute: Sendable {
        case delete
        case allState
        case featureState(String)
        case dispatch
        case events

        var template: String {
            switch self {
            case .delete: "/v1/sessions/{id}"
            case .allState: "/v1/sessions/{id}/state"
            case .featureState: "/v1/sessions/{id}/state/{feature}"
            case .dispatch: "/v1/sessions/{id}/dispatch"
            case .events: "/v1/sessions/{id}/events"
            }
        }

        var methods: [String] {
            switch self {
            case .delete: ["DELETE"]
            case .allState: ["GET", "HEAD"]
            case .featureState: ["GET", "HEAD", "PUT", "DELETE"]
            case .dispatch: ["POST"]
            case .events: ["GET"]
            }
        }
    }

    private func sessionRoute(_ request: HTTPRequest, id: String, rest: [String]) -> HTTPResult {
        let route: SessionRoute
        switch rest.count {
        case 0: route = .delete
        case 1 where rest[0] == "state": route = .allState
        case 2 where rest[0] == "state": route = .featureState(rest[1])
        case 1 where rest[0] == "dispatch": route = .dispatch
        case 1 where rest[0] == "events": route = .events
        default: return .now(notFound())
        }
        let template = route.template
        guard route.methods.contains(request.method) else {
            return .now(methodNotAllowed(request, route.methods, template))
        }
        guard let token = credentials(request, allowQueryToken: { if case .events = route { true } else { false } }()) else {
            return .now(Reply.error(
                401, "unauthorized", "this request needs the header 'Authorization: Bearer <token>'",
                route: template, headers: [("WWW-Authenticate", "Bearer")]))
        }
        if let session = sessions.session(id: id, token: token), !session.isDurable {
            return .now(memoryRoute(route, request, session))
        }
        guard sessions.isDurable else { return .now(sessionNotFound(template)) }
        return .later { [self] in
            do throws(StorageError) {
                guard let session = try await sessions.load(id: id, token: token) else { return sessionNotFound(template) }
                return await durableRoute(route, request, session)
            } catch {
                return storageUnavailable(error, route: template)
            }
        }
    }

    private func credentials(_ request: HTTPRequest, allowQueryToken: Bool) -> String? {
        if let header = request.header("authorization"), let token = Self.bearerToken(header) {
            return token
        }
        if allowQueryToken, let value = request.queryValues("access_token").first, !value.isEmpty {
            return value
        }
        return nil
    }

    /// The token of `Bearer <token>` (scheme in any case, spaces around), by UTF-8 byte: this
    /// runs on every session request.
    static func bearerToken(_ header: String) -> String? {
        let utf8 = header.utf8
        var index = utf8.startIndex
        while index != utf8.endIndex, utf8[index] == 0x20 || utf8[index] == 0x09 { index = utf8.index(after: index) }
        for expected in "bearer".utf8 {
            guard index != utf8.endIndex, utf8[index] | 0x20 == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index != utf8.endIndex, utf8[index] == 0x20 || utf8[index] == 0x09 else { return nil }
        let token = header[index...].trimmingWhitespace()
        return token.isEmpty ? nil : token
    }

    // MARK: Memory mode (synchronous)

    private func memoryRoute(_ route: SessionRoute, _ request: HTTPRequest, _ session: Session) -> HTTPResponse {
        let template = route.template
        if request.bodyTooLarge { return tooLarge(template) }
        switch route {
        case .delete:
            sessions.delete(id: session.id)
            return Reply.empty(204, route: template)
        case .allState:
            return allState(session, route: template)
        case .featureState(let feature):
            if let refused = refusedStateBody(request, route: template) { return refused }
            guard let store = session.loadedStore(feature) else { return unknownFeature(feature, route: template) }
            guard let change = stateChange(request, store) else { return readState(request, store, feature: feature, route: template) }
            return changeResponse(Self.applyNow(store, change.prepare, change.ifVersion), withEffect: false, route: template)
        case .dispatch:
            return dispatch(request, session, route: template) { store, command in
                let run = {
                    self.changeResponse(
                        Self.applyNow(store, { v throws(StoreError) in try store.prepareDispatch(json: command.action, ifVersion: v) }, command.ifVersion),
                        withEffect: true, route: template)
                }
                guard let key = command.idempotencyKey else { return run() }
                var fresh: HTTPResponse?
                let (reply, replayed) = session.idempotent(key: key) {
                    let response = run()
                    fresh = response
                    return (Self.reply(of: response), response.status == 200)
                }
                if !replayed, let fresh { return fresh }
                return self.replied(reply, replayed: replayed, route: template)
            }
        case .events:
            return events(request, session, route: template)
        }
    }

    private static func applyNow(
        _ store: any AnyStateStore, _ prepare: (Int?) throws(StoreError) -> PreparedChange, _ ifVersion: IfMatch
    ) -> Result<EncodedChange, SessionFailure> {
        do throws(StoreError) {
            let version = try ifVersion.resolve(store)
            // In memory, prepare + commit under no other lock can race with another request;
            // retry when the store moved on (only without a precondition).
            while true {
                let prepared = try prepare(version)
                if store.commit(prepared, startWork: true) { return .success(prepared.encoded) }
                if version != nil {
                    throw StoreError(.versionConflict, "the store changed meanwhile", currentVersion: prepared.baseVersion)
                }
            }
        } catch {
            return .failure(.store(error))
        }
    }

    // MARK: Durable mode (asynchronous)

    private func durableRoute(_ route: SessionRoute, _ request: HTTPRequest, _ session: Session) async -> HTTPResponse {
        let template = route.template
        if request.bodyTooLarge { return tooLarge(template) }
        do throws(SessionFailure) {
            switch route {
            case .delete:
                do throws(StorageError) {
                    try await sessions.delete(id: session.id)
                } catch {
                    return storageUnavailable(error, route: template)
                }
                return Reply.empty(204, route: template)
            case .allState:
                try await session.loadAll()
                return allState(session, route: template)
            case .featureState(let feature):
                if let refused = refusedStateBody(request, route: template) { return refused }
                guard let store = try await session.store(feature) else { return unknownFeature(feature, route: template) }
                guard let change = stateChange(request, store) else {
                    return readState(request, store, feature: feature, route: template)
                }
                let result = await Self.applyDurably(session, store, change.prepare, change.ifVersion)
                return changeResponse(result, withEffect: false, route: template)
            case .dispatch:
                let command: DispatchCommand
                switch parseDispatch(request, session, route: template) {
                case .success(let parsed): command = parsed
                case .failure(let failure): return failure.response
                }
                guard let store = try await session.store(command.feature) else {
                    return unknownFeature(command.feature, route: template)
                }
                let prepare: @Sendable (Int?) throws(StoreError) -> PreparedChange = { v throws(StoreError) in
                    try store.prepareDispatch(json: command.action, ifVersion: v)
                }
                guard let key = command.idempotencyKey else {
                    let result = await Self.applyDurably(session, store, prepare, command.ifVersion)
                    return changeResponse(result, withEffect: true, route: template)
                }
                return await session.withKeyTurn {
                    do throws(SessionFailure) {
                        if let reply = try await session.rememberedReply(key: key) {
                            return replied(reply, replayed: true, route: template)
                        }
                    } catch {
                        return failure(error, route: template)
                    }
                    let result = await Self.applyDurably(session, store, prepare, command.ifVersion, key: key)
                    return changeResponse(result, withEffect: true, route: template)
                }
            case .events:
                let filter = request.queryValues("feature")
                try await session.loadAll(filter.isEmpty ? nil : filter.filter { sessions.registry[$0] != nil })
                return events(request, session, route: template)
            }
        } catch {
            return failure(error, route: template)
        }
    }

    private static func applyDurably(
        _ session: Session, _ store: any AnyStateStore,
        _ prepare: @escaping @Sendable (Int?) throws(StoreError) -> PreparedChange, _ ifMatch: IfMatch,
        key: String? = nil
    ) async -> Result<EncodedChange, SessionFailure> {
        do throws(SessionFailure) {
            let version: Int?
            do throws(StoreError) { version = try ifMatch.resolve(store) } catch { throw .store(error) }
            let reply: (@Sendable (EncodedChange) -> StoredReply)? =
                key == nil ? nil : { @Sendable change in StoredReply(status: 200, body: Reply.changeBody(change, withEffect: true), version: change.version) }
            return .success(try await session.commitDurably(store, idempotencyKey: key, reply: reply, prepare: prepare, ifVersion: version))
        } catch {
            return .failure(error)
        }
    }

    // MARK: Shared route logic

    private func createSession(_ request: HTTPRequest) -> HTTPResult {
        let route = "/v1/sessions"
        guard request.method == "POST" else { return .now(methodNotAllowed(request, ["POST"], route)) }
        if request.bodyTooLarge { return .now(tooLarge(route)) }
        guard sessions.isDurable else {
            guard let (session, token) = sessions.create() else {
                return .now(Reply.error(
                    503, "session_limit_reached", "the server holds its maximum number of sessions; try again later",
                    route: route, headers: [("Retry-After", "60")]))
            }
            return .now(created(session, token))
        }
        return .later { [self] in
            do throws(StorageError) {
                let (session, token) = try await sessions.createDurably()
                return created(session, token)
            } catch {
                return storageUnavailable(error, route: route)
            }
        }
    }

    private func created(_ session: Session, _ token: String) -> HTTPResponse {
        var body = JSONObjectWriter()
        body.string("id", session.id)
        body.string("token", token)
        return Reply.json(201, body.finish(), route: "/v1/sessions", headers: [("Location", "/v1/sessions/\(session.id)")])
    }

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

    /// GET and HEAD: the store's state with its ETag, or 304 when `If-None-Match` names it.
    private func readState(_ request: HTTPRequest, _ store: any AnyStateStore, feature: String, route: String) -> HTTPResponse {
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
    }

    /// PUT (rehydrate) or DELETE (reset) as a prepare function with its `If-Match`; `nil` for
    /// GET and HEAD. A PUT body was checked by ``refusedStateBody(_:route:)`` before.
    private func stateChange(
        _ request: HTTPRequest, _ store: any AnyStateStore
    ) -> (prepare: @Sendable (Int?) throws(StoreError) -> PreparedChange, ifVersion: IfMatch)? {
        let ifMatch = IfMatch(request.header("if-match"))
        switch request.method {
        case "DELETE":
            return ({ v throws(StoreError) in try store.prepareReset(ifVersion: v) }, ifMatch)
        case "PUT":
            guard let json = JSONCoding.parse(request.body), let state = json["state"] else { return nil }
            return ({ v throws(StoreError) in try store.prepareRehydrate(json: state, ifVersion: v) }, ifMatch)
        default:
            return nil
        }
    }

    /// For PUT: the error for a body that is not `{"state": ...}` (checked before the feature,
    /// like dispatch bodies); `nil` when it is fine or the method has no body.
    private func refusedStateBody(_ request: HTTPRequest, route: String) -> HTTPResponse? {
        guard request.method == "PUT" else { return nil }
        guard let json = JSONCoding.parse(request.body) else { return malformed(route) }
        guard case .object(let fields) = json else {
            return invalidRequest("the body must be a JSON object like {\"state\": {...}}", route)
        }
        guard fields["state"] != nil else { return invalidRequest("the body is missing the field 'state'", route) }
        return nil
    }

    struct DispatchCommand: Sendable {
        let feature: String
        let action: JSONValue
        let ifVersion: IfMatch
        let idempotencyKey: String?
    }

    private func parseDispatch(_ request: HTTPRequest, _ session: Session, route: String) -> Result<DispatchCommand, ParseFailure> {
        guard let json = JSONCoding.parse(request.body) else { return .failure(ParseFailure(malformed(route))) }
        guard case .object(let fields) = json else {
            return .failure(ParseFailure(invalidRequest(
                "the body must be a JSON object like {\"feature\": \"counter\", \"action\": {\"type\": \"increment\"}}", route)))
        }
        guard let featureValue = fields["feature"] else {
            return .failure(ParseFailure(invalidRequest("the body is missing the field 'feature'", route)))
        }
        guard case .string(let feature) = featureValue else {
            return .failure(ParseFailure(invalidRequest("the field 'feature' must be a string, not \(featureValue.typeName)", route)))
        }
        guard let action = fields["action"] else {
            return .failure(ParseFailure(invalidRequest("the body is missing the field 'action'", route)))
        }
        guard case .object = action else {
            return .failure(ParseFailure(invalidRequest("the field 'action' must be an object, not \(action.typeName)", route)))
        }
        var key: String?
        if let header = request.header("idempotency-key") {
            guard !header.isEmpty, header.count <= settings.maxIdempotencyKeyLength else {
                return .failure(ParseFailure(invalidRequest(
                    "the header 'Idempotency-Key' must have 1 to \(settings.maxIdempotencyKeyLength) characters", route)))
            }
            key = header
        }
        guard sessions.registry[feature] != nil else { return .failure(ParseFailure(unknownFeature(feature, route: route))) }
        return .success(DispatchCommand(feature: feature, action: action, ifVersion: IfMatch(request.header("if-match")), idempotencyKey: key))
    }

    struct ParseFailure: Error {
        let response: HTTPResponse
        init(_ response: HTTPResponse) { self.response = response }
    }

    private func dispatch(
        _ request: HTTPRequest, _ session: Session, route: String,
        _ apply: (any AnyStateStore, DispatchCommand) -> HTTPResponse
    ) -> HTTPResponse {
        switch parseDispatch(request, session, route: route) {
        case .failure(let failure):
            return failure.response
        case .success(let command):
            guard let store = session.loadedStore(command.feature) else { return unknownFeature(command.feature, route: route) }
            return apply(store, command)
        }
    }

    private func changeResponse(_ result: Result<EncodedChange, SessionFailure>, withEffect: Bool, route: String) -> HTTPResponse {
        switch result {
        case .success(let change):
            return Reply.json(200, Reply.changeBody(change, withEffect: withEffect), route: route, headers: [Reply.etag(change.version)])
        case .failure(let error):
            return failure(error, route: route)
        }
    }

    private func failure(_ error: SessionFailure, route: String) -> HTTPResponse {
        switch error {
        case .store(let error):
            let (status, code) = Reply.storeError(error)
            if status == 500 { return internalError(error, route: route) }
            let headers = error.kind == .versionConflict ? [Reply.etag(error.currentVersion)] : []
            return Reply.error(status, code, error.message, route: route, headers: headers)
        case .storage(let error):
            return storageUnavailable(error, route: route)
        }
    }

    private static func reply(of response: HTTPResponse) -> StoredReply {
        guard case .bytes(let body) = response.body else { return StoredReply(status: response.status, body: [], version: 0) }
        let version = response.headers.first { $0.name == "ETag" }.flatMap { Int($0.value.dropFirst().dropLast()) } ?? 0
        return StoredReply(status: response.status, body: body, version: version)
    }

    private func replied(_ reply: StoredReply, replayed: Bool, route: String) -> HTTPResponse {
        var headers = reply.status == 200 ? [Reply.etag(reply.version)] : []
        if replayed { headers.append(("Idempotent-Replayed", "true")) }
        return Reply.json(reply.status, reply.body, route: route, headers: headers)
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
        let lastEventID = request.header("last-event-id").flatMap { Int($0.trimmingWhitespace()) }
        let stream = EventStream(bufferLimit: settings.streamBufferLimit)
        let hub = session.hub
        let counter = OpenStreamCounter(responder: self)
        switch hub.subscribe(features: filter, lastEventID: lastEventID, sink: stream) {
        case .closed:
            openStreams.subtract(1, ordering: .relaxed)
            return sessionNotFound(route)
        case .caughtUpPartially:
            stream.onFinish { counter.release() }
        case .subscribed(let subscription):
            stream.onFinish {
                hub.unsubscribe(subscription)
                counter.release()
            }
        }
        return HTTPResponse(
            status: 200,
            headers: [
                ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no"),
            ],
            body: .stream(stream), route: route)
    }

    // MARK: Errors

    private func notFound() -> HTTPResponse {
        Reply.error(404, "not_found", "there is no resource at this path", route: "-")
    }

    private func methodNotAllowed(_ request: HTTPRequest, _ methods: [String], _ route: String) -> HTTPResponse {
        Reply.error(
            405, "method_not_allowed", "\(request.method) is not allowed here; use \(methods.joined(separator: ", "))",
            route: route, headers: [("Allow", methods.joined(separator: ", "))])
    }

    /// Runs `body` for the allowed methods; 405 with `Allow` otherwise.
    private func only(
        _ methods: [String], _ request: HTTPRequest, _ route: String, _ body: () -> HTTPResponse
    ) -> HTTPResponse {
        guard methods.contains(request.method) else { return methodNotAllowed(request, methods, route) }
        return body()
    }

    private func sessionNotFound(_ route: String) -> HTTPResponse {
        Reply.error(404, "session_not_found", "no session with this id and token", route: route)
    }

    private func tooLarge(_ route: String) -> HTTPResponse {
        Reply.error(
            413, "payload_too_large", "the request body is larger than the limit of \(settings.bodyLimit) bytes",
            route: route)
    }

    private func malformed(_ route: String) -> HTTPResponse {
        Reply.error(400, "malformed_json", "the request body is not valid JSON", route: route)
    }

    private func invalidRequest(_ message: String, _ route: String) -> HTTPResponse {
        Reply.error(400, "invalid_request", message, route: route)
    }

    private func unknownFeature(_ name: String, route: String) -> HTTPResponse {
        Reply.error(404, "unknown_feature", "there is no feature named '\(name)'", route: route)
    }

    private func storageUnavailable(_ error: StorageError, route: String) -> HTTPResponse {
        logger.error("storage unavailable", metadata: ["http.route": "\(route)", "error": "\(error)"])
        return Reply.error(
            503, "storage_unavailable", "the server cannot store changes right now; nothing was applied, try again",
            route: route, headers: [("Retry-After", "1")])
    }

    private func internalError(_ error: any Error, route: String) -> HTTPResponse {
        logger.error("internal error", metadata: ["http.route": "\(route)", "error": "\(error)"])
        return Reply.error(500, "internal_error", "the server failed to answer this request", route: route)
    }
}

/// An `If-Match` header resolved against a store: no precondition, any version (`*`), one
/// version, or a list that cannot be checked atomically (never matches).
enum IfMatch: Sendable {
    case none
    case version(Int)
    case never

    init(_ header: String?) {
        guard let header else {
            self = .none
            return
        }
        switch EntityTagCondition(header, weak: false) {
        case .any: self = .none
        case .versions(let versions): self = versions.count == 1 ? .version(versions.first ?? -1) : .never
        }
    }

    /// The version to require, or a version conflict for `.never`.
    func resolve(_ store: any AnyStateStore) throws(StoreError) -> Int? {
        switch self {
        case .none: return nil
        case .version(let version): return version
        case .never:
            let current = (try? store.currentJSON().version) ?? 0
            throw StoreError(.versionConflict, "If-Match does not name the store's version \(current)", currentVersion: current)
        }
    }
}

/// Gives back one open-stream slot, once.
private struct OpenStreamCounter: Sendable {
    let responder: StateServerResponder
    func release() { responder.openStreams.subtract(1, ordering: .relaxed) }
}


