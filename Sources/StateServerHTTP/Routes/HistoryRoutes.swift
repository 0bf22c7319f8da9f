import MicroHTTP
import StateSessions
import StateStore

/// `GET /v1/sessions/{id}/history`: the session's changes in order, paged with a cursor.
extension StateServerResponder {
    static let historyRoutes: [Route] = [
        .session(["GET"], "/v1/sessions/{id}/history", .adminMayRead, query: HistoryQuery.self) { _, request, query throws(APIError) in
            let session = request.session
            return .later { () throws(APIError) in
                let page: HistoryPage
                do throws(SessionFailure) {
                    page = try await session.history(after: query.after, limit: query.limit, feature: query.feature)
                } catch {
                    throw .session(error)
                }
                return Reply.json(200, historyBody(session.id, page), route: request.template, headers: [Reply.noStore])
            }
        },
        .session(["GET"], "/v1/sessions/{id}/recording", .adminMayRead) { responder, request throws(APIError) in
            if let reached = request.grant.features {
                throw .forbidden(
                    "a recording holds every feature of the session; this token reaches only \(Grant.list(reached))")
            }
            let session = request.session
            return .later { () throws(APIError) in
                // The starting states are read before the answer, so a failure is an error
                // reply; the changes stream behind them, a journal page at a time, as fast
                // as the client reads (the stream's buffer bounds what waits in memory).
                let export: RecordingExport
                do throws(SessionFailure) {
                    export = try await session.recordingExport(server: responder.settings.serverVersion)
                } catch {
                    throw .session(error)
                }
                let body = EventStream(bufferLimit: RecordingExport.chunk * 4, carriesEvents: false)
                let maxBytes = responder.settings.recordingMaxBytes
                Task {
                    await export.writeChanges(maxBytes: maxBytes) { await body.write($0) }
                    body.close()
                }
                return HTTPResponse(
                    status: 200, headers: [Reply.jsonType, Reply.noStore], body: .stream(body), route: request.template)
            }
        },
        // The admin credential imports as recorded; anything else (or nothing) as a client. An
        // import creates a session: it needs what creating one needs.
        .creating("/v1/recordings", admin: true) { responder, request, creator throws(APIError) in
            let asRecorded = creator.isAdmin
            _ = try APIError.parse(request.http.body)
            let recording: Recording
            do throws(Recording.Unreadable) {
                recording = try Recording(json: request.http.body)
            } catch {
                throw .invalidRequest("the body is not a recording: \(error)")
            }
            return .later { () throws(APIError) in
                try await creator.check?.verify()
                return try await importRecording(recording, asRecorded: asRecorded, into: responder.sessions)
            }
        },
    ]

    /// How long an import as a client waits, over all its steps, for the asynchronous work of
    /// its dispatches to return before it goes on.
    static let importWorkWait: Duration = .seconds(10)

    /// A new session with the recording applied (``Session/importRecording(_:asRecorded:workWait:)``:
    /// as a client, or as recorded with the admin credential). The recording is replayed
    /// offline first: one that today's reducers do not follow creates nothing
    /// (`422 recording_diverges`); a step the import refuses deletes the session again.
    static func importRecording(
        _ given: Recording, asRecorded: Bool, into sessions: SessionManager
    ) async throws(APIError) -> HTTPResponse {
        let divergence: Recording.Divergence?
        let recording: Recording
        do throws(Recording.Unreadable) {
            // A feature recorded at an older state version is imported in today's shape.
            recording = try given.upgraded(with: sessions.registry)
            divergence = try recording.replay(with: sessions.registry)
        } catch {
            throw .invalidRequest("the body is not a recording this server can replay: \(error)")
        }
        if let divergence { throw .recordingDiverges(divergence.description) }
        let session: Session
        let token: String
        do throws(SessionManager.CreateFailure) {
            (session, token) = try await sessions.create()
        } catch {
            switch error {
            case .limitReached: throw .sessionLimit
            case .storage(let error): throw .storage(error)
            }
        }
        let summary: ImportSummary
        do throws(SessionFailure) {
            summary = try await session.importRecording(recording, asRecorded: asRecorded, workWait: importWorkWait)
        } catch {
            // Nothing half-imported stays behind.
            try? await sessions.delete(session)
            throw .session(error)
        }
        var body = JSONObjectWriter()
        body.string("id", session.id)
        body.string("token", token)
        body.int("changes", summary.changes)
        body.int("leftToServer", summary.leftToServer)
        body.raw("asRecorded", Array((asRecorded ? "true" : "false").utf8))
        return Reply.json(201, body.finish(), route: "/v1/recordings", headers: [("Location", "/v1/sessions/\(session.id)"), Reply.noStore])
    }

    /// `{"session", "changes": [{seq, feature, version, cause, action, effect, time}], "next",
    /// "truncated", "keptFrom"}`.
    static func historyBody(_ id: String, _ page: HistoryPage) -> [UInt8] {
        var changes = JSONArrayWriter()
        for change in page.changes {
            changes.append(ChangeJSON.object(
                seq: change.seq, feature: change.feature, version: change.version, cause: change.cause,
                action: change.action, content: .none, effect: change.effect, time: change.time))
        }
        let list = changes.finish()
        var body = JSONObjectWriter(capacity: list.count + 96)
        body.string("session", id)
        body.raw("changes", list)
        body.raw("next", page.next.map { Array(String($0).utf8) })
        body.raw("truncated", Array((page.truncated ? "true" : "false").utf8))
        body.raw("keptFrom", page.keptFrom.map { Array(String($0).utf8) })
        return body.finish()
    }
}

/// The query of `GET .../history`: `after` (a seq, default 0), `limit` (1 to 1,000, default
/// 100), `feature` (at most one, registered). Anything else is ignored, as on other routes. A
/// credential limited to some features reads the history of one at a time: the one it names,
/// or the only one it reaches (`403` otherwise).
struct HistoryQuery: SessionQuery {
    static let defaultLimit = 100
    static let maxLimit = 1000

    let after: Int
    let limit: Int
    let feature: String?

    init(_ request: SessionRequest, features: FeatureRegistry) throws(APIError) {
        let http = request.http
        after = try Self.integer(http, "after", default: 0, in: 0...Int.max)
        limit = try Self.integer(http, "limit", default: Self.defaultLimit, in: 1...Self.maxLimit)
        let named = http.queryValues("feature")
        guard named.count <= 1 else { throw .invalidRequest("give at most one 'feature' for the history") }
        if let name = named.first, features[name] == nil { throw .unknownFeature(name) }
        let grant = request.grant
        guard let reached = grant.features else {
            feature = named.first
            return
        }
        if let name = named.first {
            try StateServerResponder.require(feature: name, of: grant)
            feature = name
        } else if reached.count == 1, let only = reached.first {
            feature = only
        } else {
            throw .forbidden("this token reaches only the features \(Grant.list(reached)); ask for one with '?feature='")
        }
    }

    /// Nothing beforehand: the history is read from the journal.
    var needs: SessionNeeds? { nil }

    static func integer(_ request: HTTPRequest, _ name: String, default value: Int, in range: ClosedRange<Int>) throws(APIError) -> Int {
        let values = request.queryValues(name)
        guard values.count <= 1 else { throw .invalidRequest("give '\(name)' at most once") }
        guard let text = values.first else { return value }
        guard text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let number = Int(text),
            range.contains(number)
        else {
            throw .invalidRequest("'\(name)' must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }
}
