import MicroHTTP
import StatePersistence
import StateSessions

/// Several nodes with one owner per session: sends a request to the node that owns its
/// session and hands back that node's reply (event streams relayed as they come). The server
/// implements it over an HTTP client; without one, a request for a session another node owns
/// is answered `503 owner_unavailable`.
public protocol RequestForwarder: Sendable {
    /// The owner's reply to `request`, sent to `base` (the URL the owner advertises). Marks
    /// the request with ``forwardedHeader`` and its MAC (``forwardedMACHeader``, made with the
    /// cluster secret, afresh for every call) so the owner never forwards it again. States
    /// `client`, the client address this node determined, in ``forwardedForHeader`` (under the
    /// MAC) and as the only `X-Forwarded-For`: the client's own `X-Forwarded-For` is not passed
    /// on. When the owner cannot be reached: `503 owner_unavailable` if the request cannot have
    /// reached it, `503 outcome_unknown` for a change that was sent but not answered.
    func forward(_ request: HTTPRequest, client: IPAddress?, to base: String, route: String) async -> HTTPResponse
}

/// The header a forwarded request carries (the forwarding node's epoch), believed only with a
/// valid ``forwardedMACHeader`` (``PeerAuthentication``).
public let forwardedHeader = "stateserver-forwarded"
/// The header of a `503 owner_unavailable` from a node a request was forwarded to that does
/// not own the session (any more): nothing was done, and the forwarding node may look again.
public let misdirectedHeader = "stateserver-misdirected"

extension StateServerResponder {
    /// Several nodes: a session whose requests keep coming through one other node (a
    /// balancer that routes by session id sends them there) moves to that node, once idle.
    /// `answer`, and once it is given (the session idle again), the handover when one is due.
    func handingOver(_ session: Session, _ request: RouteRequest, _ answer: Answer) -> Answer {
        guard session.ownerEpoch != 0 else { return answer }
        let from = request.forwarded?.epoch ?? 0
        guard let target = session.arrived(forwardedBy: from) else { return answer }
        let sessions = self.sessions
        guard answer.now == nil else {
            Task { await sessions.handOver(session, to: target) }
            return answer
        }
        // After this request's own answer.
        return .later { () throws(APIError) in
            defer { Task { await sessions.handOver(session, to: target) } }
            return try await answer.value()
        }
    }

    /// The session named by a request, here, or the owner's reply to the request forwarded to
    /// it (several nodes).
    enum Found {
        case session(Session)
        case forwarded(HTTPResponse)
    }

    /// Locates the session (loading or claiming it here when it is this node's to serve) and
    /// forwards the request to the owner when another node owns it. A request that was
    /// forwarded already is not forwarded again: the two nodes disagree on the owner for a
    /// moment (a takeover under way), and the client is told to retry. `access`: the route's
    /// declaration (an event stream is relayed as one). `known`: where the session layer found
    /// the session just now (its first look is not made again).
    func find(
        _ request: RouteRequest, _ access: SessionAccess, id: String, token: String, admin: Bool = false,
        known: SessionManager.Located? = nil
    ) async throws(APIError) -> Found {
        var attempt = 1
        var known = known
        while true {
            var located = known
            known = nil
            if located == nil {
                do throws(StorageError) {
                    located = try await sessions.locate(id: id, token: token, admin: admin)
                } catch {
                    throw .storage(error)
                }
            }
            switch located {
            case nil: throw .sessionNotFound
            case .here(let session)?: return .session(session)
            case .elsewhere(let url)?:
                // The transport kept no body over the limit: the owner would get an empty
                // one (a DELETE applied, a dispatch refused with 400). The limit is judged
                // here, as the owner judges it: 413, nothing sent, nothing done.
                if request.http.bodyTooLarge { throw .tooLarge(settings.bodyLimit) }
                guard request.forwarded == nil, let forwarder else {
                    // Forwarded here, but the session moved on (a handover or a takeover
                    // under way): nothing was done; the forwarding node looks again.
                    throw .ownerUnavailable("the session's owner is changing; try again", misdirected: true)
                }
                // A relayed event stream counts in this node's `streams.total` as one served
                // here would (the owner counts it per session, where it subscribes).
                let counter = access.eventStream ? try admitStream() : nil
                let response = await forwarder.forward(request.http, client: limits.client(of: request.http), to: url, route: request.template)
                if let counter {
                    if case .stream(let stream) = response.body {
                        stream.onFinish { counter.release() }
                    } else {
                        counter.release()
                    }
                }
                let misdirected = response.status == 503
                    && response.headers.contains { $0.name.lowercased() == misdirectedHeader }
                guard misdirected, attempt < Self.forwardAttempts else { return .forwarded(response) }
                // The session is moving (a handover's write not yet in PostgreSQL, a takeover):
                // look again shortly, 25 ms doubling (at most 0.75 s in all).
                try? await Task.sleep(for: .milliseconds(25 << (attempt - 1)))
                attempt += 1
            }
        }
    }

    /// Forwards of one request at most: the owner may move between two looks.
    static let forwardAttempts = 5
}

/// A `503` of the contract (`owner_unavailable`, `outcome_unknown`), as a forwarder answers
/// when the owner cannot be reached.
public func forwardingFailure(code: String, message: String, route: String) -> HTTPResponse {
    Reply.error(503, code, message, route: route, headers: [("Retry-After", "1")])
}
