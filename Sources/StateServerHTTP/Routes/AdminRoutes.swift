import MicroHTTP
import StatePersistence
import StateSessions
import StateStore
import StateJSON

/// Admin routes: the admin credential (`admin.tokenHash`) as the bearer token (``Access/admin``).
extension StateServerResponder {
    static let adminRoutes: [Route] = [
        .admin(["GET"], "/v1/admin/sessions") { responder, request throws(APIError) in
            let afters = request.http.queryValues("after")
            guard afters.count <= 1 else { throw .invalidRequest("give 'after' at most once") }
            let after = afters.first ?? ""
            guard after.utf8.count <= 64 else { throw .invalidRequest("'after' is a session id: at most 64 bytes") }
            let limit = try HistoryQuery.integer(request.http, "limit", default: 100, in: 1...1000)
            return .later { () throws(APIError) in
                let listed: [(id: String, lastActive: Int64)]
                do throws(StorageError) {
                    listed = try await responder.sessions.list(after: after, limit: limit)
                } catch {
                    throw .storage(error)
                }
                var items = JSONArrayWriter()
                for session in listed {
                    var item = JSONObjectWriter(capacity: 64)
                    item.string("id", session.id)
                    item.int("lastActive", Int(session.lastActive))
                    items.append(item.finish())
                }
                let list = items.finish()
                var body = JSONObjectWriter(capacity: list.count + 64)
                body.raw("sessions", list)
                let next = listed.count >= limit ? listed.last?.id : nil
                body.raw("next", next.map { JSONCoding.quoted($0) })
                return Reply.json(200, body.finish(), route: request.template, headers: [Reply.noStore])
            }
        },
        // The cluster's live members as PostgreSQL has them (several nodes); none otherwise.
        .admin(["GET"], "/v1/admin/cluster") { responder, request throws(APIError) in
            return .later { () throws(APIError) in
                var members: [ClusterMember] = []
                if let ownership = responder.sessions.ownership, ownership.hasJoined {
                    do throws(StorageError) {
                        members = try await ownership.members()
                    } catch {
                        throw .storage(error)
                    }
                }
                var items = JSONArrayWriter()
                for member in members {
                    var item = JSONObjectWriter(capacity: 128)
                    item.int("epoch", Int(member.epoch))
                    item.string("url", member.url)
                    item.raw("thisNode", Array((member.isThisNode ? "true" : "false").utf8))
                    item.raw("alive", member.holdsLock.map { Array(($0 ? "true" : "false").utf8) } ?? Array("null".utf8))
                    item.int("leaseLeftMs", Int(member.leaseLeft.components.seconds * 1000 + member.leaseLeft.components.attoseconds / 1_000_000_000_000_000))
                    items.append(item.finish())
                }
                let list = items.finish()
                var body = JSONObjectWriter(capacity: list.count + 16)
                body.raw("members", list)
                return Reply.json(200, body.finish(), route: request.template, headers: [Reply.noStore])
            }
        },
    ]
}
