import MicroHTTP
import StateSessions

/// `GET /v1/sessions/{id}/presence`: the streams that joined the session's presence
/// (`GET .../events?presence=LABEL`), oldest first.
extension StateServerResponder {
    static let presenceRoutes: [Route] = [
        .session(["GET"], "/v1/sessions/{id}/presence", .adminMayRead) { _, request throws(APIError) in
            .now(Reply.json(200, PresenceEntry.listBody(request.session.presence), route: request.template, headers: [Reply.noStore]))
        }
    ]
}
