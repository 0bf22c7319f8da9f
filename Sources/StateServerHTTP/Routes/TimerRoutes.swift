import MicroHTTP
import StatePersistence
import StateSessions
import StateStore

/// `GET /v1/sessions/{id}/timers`: the session's pending timers, due first.
extension StateServerResponder {
    static let timerRoutes: [Route] = [
        .session(["GET"], "/v1/sessions/{id}/timers", .adminMayRead) { _, request throws(APIError) in
            let session = request.session
            let grant = request.grant
            return .later { () throws(APIError) in
                let timers: [StoredTimer]
                do throws(SessionFailure) {
                    timers = try await session.pendingTimers()
                } catch {
                    throw .session(error)
                }
                let visible = timers.filter { grant.reaches(feature: $0.feature) }
                return Reply.json(200, timersBody(visible), route: request.template, headers: [Reply.noStore])
            }
        }
    ]

    /// `{"timers": [{"id", "feature", "action", "due", "scheduledAt"}]}`, the action in its
    /// public form, times in milliseconds since 1970.
    static func timersBody(_ timers: [StoredTimer]) -> [UInt8] {
        var list = JSONArrayWriter()
        for stored in timers { list.append(stored.timer.json(feature: stored.feature)) }
        let items = list.finish()
        var body = JSONObjectWriter(capacity: items.count + 16)
        body.raw("timers", items)
        var bytes = body.finish()
        bytes.append(0x0A)
        return bytes
    }
}
