import MicroHTTP
import StateSessions
import StateStore

/// `GET /v1/sessions/{id}/events`: a session's changes as server-sent events.
extension StateServerResponder {
    static let eventRoutes: [Route] = [
        // No HEAD: `405` with `Allow: GET` (a HEAD answer has no body bytes, and a stream's
        // chunked terminator behind a keep-alive proxy would be read as the next reply's start).
        .session(["GET"], "/v1/sessions/{id}/events", .eventStream, head: false, query: StreamQuery.self) {
            responder, request, query throws(APIError) in
            .now(try responder.events(request, query))
        }
    ]

    /// The features a stream asks for (`?feature=`, each known and reached by the grant, else
    /// `404 unknown_feature` / `403 forbidden`); none named: every feature the grant reaches
    /// (empty: every feature).
    static func streamedFeatures(_ request: HTTPRequest, _ grant: Grant, _ registry: FeatureRegistry) throws(APIError) -> [String] {
        let requested = request.queryValues("feature")
        for name in requested where registry[name] == nil { throw .unknownFeature(name) }
        for name in requested { try require(feature: name, of: grant) }
        if requested.isEmpty, let reached = grant.features {
            guard !reached.isEmpty else { throw .forbidden("this token reaches no feature") }
            return reached.sorted()
        }
        return requested
    }

    /// `delta=json-patch`: `state` events carry a patch from the previous version instead of
    /// the state. Any other value, or the parameter twice, is `400 invalid_request`.
    static func wantsDeltas(_ request: HTTPRequest) throws(APIError) -> Bool {
        let values = request.queryValues("delta")
        guard values.count <= 1 else { throw .invalidRequest("give 'delta' at most once") }
        guard let value = values.first else { return false }
        guard value == "json-patch" else {
            throw .invalidRequest("'delta' must be 'json-patch' (state events with an RFC 6902 patch), or left out")
        }
        return true
    }

    /// `presence=LABEL`: the stream joins the session's presence under this label (1 to 64
    /// Unicode scalars, given once; else `400 invalid_request`). Nil: it does not join.
    static func presenceLabel(_ request: HTTPRequest) throws(APIError) -> String? {
        let values = request.queryValues("presence")
        guard values.count <= 1 else { throw .invalidRequest("give 'presence' at most once") }
        guard let label = values.first else { return nil }
        let scalars = label.unicodeScalars.count
        guard scalars >= 1, scalars <= PresenceEntry.maxLabelScalars else {
            throw .invalidRequest("'presence' must be a label of 1 to \(PresenceEntry.maxLabelScalars) characters")
        }
        return label
    }

    /// Opens the stream: admission (per session, atomically in the hub; per server, here),
    /// then the replay after `Last-Event-ID` or a snapshot, then live changes.
    func events(_ request: SessionRequest, _ query: StreamQuery) throws(APIError) -> HTTPResponse {
        let session = request.session
        let grant = request.grant
        let filter: Set<String>? = query.features.isEmpty ? nil : Set(query.features)
        // Several nodes: a stream opened while this node does not hear the others would miss
        // their changes silently.
        guard sessions.isFollowing else { throw .notFollowing }
        let counter = try admitStream()
        let presence = query.presence.map { PresenceEntry.joining(label: $0, grant: grant) }
        let stream = EventStream(
            bufferLimit: settings.streamBufferLimit, peerTimeout: presence == nil ? nil : RouteSettings.presencePeerTimeout)
        let hub = session.hub
        var leave: @Sendable () -> Void = {}
        switch session.subscribe(
            features: filter, lastEventID: query.lastEventID, sink: stream, limit: settings.maxStreamsPerSession,
            deltas: query.deltas, presence: presence, presenceLimit: settings.maxPresencePerSession)
        {
        case .closed:
            counter.release()
            if session.isGone { throw .sessionNotFound }
            // Not deleted: this copy was given up since it was found (handed over to another
            // node, or this node's membership lapsed). The session is elsewhere now: nothing
            // was opened; the client (or the node that forwarded this) looks again.
            throw .ownerUnavailable("this copy of the session was given up meanwhile (it moved, or is loaded again); try again", misdirected: request.route.forwarded != nil)
        case .full:
            counter.release()
            throw .tooManyStreams("this session already has \(settings.maxStreamsPerSession) open event streams")
        case .presenceFull:
            counter.release()
            throw .presenceFull("this session already has \(settings.maxPresencePerSession) streams present")
        case .caughtUpPartially:
            stream.onFinish { counter.release() }
        case .subscribed(let subscription):
            stream.onFinish {
                hub.unsubscribe(subscription)
                counter.release()
            }
            // A revoked or expired token's stream leaves the presence as it is ended, not once
            // its client has read the last event.
            if presence != nil { leave = { hub.unsubscribe(subscription) } }
        }
        // Revoking the token, or its expiry, ends the stream.
        streamsByToken.watch(stream, session: session.id, grant: grant, ended: leave)
        // Checked again now that a revocation would find the stream: one that ran since the
        // token was checked ends it here.
        if let token = grant.tokenID, !session.isLive(token: token) {
            // Dead by now because its time ran out (a slow subscribe) or because it was revoked.
            let reason = grant.isExpired(at: WallClock.now) ? "expired" : "revoked"
            stream.close(after: ServerSentEvents.revoked(reason: reason))
            leave()
        }
        return HTTPResponse(
            status: 200,
            headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")],
            body: .stream(stream), route: request.template)
    }
}

extension StateServerResponder {
    /// Takes one of the server's `streams.total` slots for a stream served here or relayed
    /// from the session's owner (several nodes), or refuses with `429 too_many_streams`.
    func admitStream() throws(APIError) -> OpenStreamCounter {
        guard openStreams.add(1, ordering: .relaxed).newValue <= settings.maxStreams else {
            openStreams.subtract(1, ordering: .relaxed)
            throw .tooManyStreams("the server has its maximum of \(settings.maxStreams) open event streams")
        }
        return OpenStreamCounter(responder: self)
    }
}

/// The query of `GET .../events`, parsed once: the features streamed (`feature=`, checked
/// against the registry and the grant), `delta=json-patch`, and `Last-Event-ID` (a stream
/// resuming: the events after it are loaded first).
struct StreamQuery: SessionQuery {
    /// The features asked for, or those the grant reaches; empty: every feature.
    let features: [String]
    let deltas: Bool
    let lastEventID: Int?
    /// `presence=LABEL`: the stream joins the session's presence.
    let presence: String?

    init(_ request: SessionRequest, features registry: FeatureRegistry) throws(APIError) {
        features = try StateServerResponder.streamedFeatures(request.http, request.grant, registry)
        deltas = try StateServerResponder.wantsDeltas(request.http)
        presence = try StateServerResponder.presenceLabel(request.http)
        lastEventID = request.http.header("last-event-id").flatMap { Int($0.trimmingWhitespace()) }
    }

    var needs: SessionNeeds? {
        SessionNeeds(features: features.isEmpty ? nil : features, resumingAfter: lastEventID)
    }
}

/// Gives back one open-stream slot.
struct OpenStreamCounter: Sendable {
    let responder: StateServerResponder
    func release() { responder.openStreams.subtract(1, ordering: .relaxed) }
}
