import Foundation

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Who is watching a session (docs/API.md, "Presence"): the event streams that joined its
/// presence with a label (``RemoteStore/changes(lastEventID:reconnect:deltas:presence:onPresence:)``).
extension StateServerClient {
    /// One stream present on a session.
    public struct PresenceEntry: Decodable, Sendable, Equatable, Hashable {
        /// Made by the server for this stream: a stream that reconnects joins under a new id.
        public var id: String
        /// The label the stream joined with.
        public var label: String
        /// Who holds the stream's credential: a JWT's `sub`, else the scoped token's id; `nil`
        /// for the owner token.
        public var sub: String?
        /// When it joined, in milliseconds since 1970-01-01 UTC.
        public var since: Int64

        public init(id: String, label: String, sub: String?, since: Int64) {
            self.id = id
            self.label = label
            self.sub = sub
            self.since = since
        }
    }

    /// The streams present on the session now, oldest first (`GET /v1/sessions/{id}/presence`).
    public func presence(_ credentials: SessionCredentials) async throws -> [PresenceEntry] {
        struct Body: Decodable { var present: [PresenceEntry] }
        let reply = try await send("GET", ["v1", "sessions", credentials.id, "presence"], credentials: credentials, expecting: [200])
        return try WireCoding.decodeBody(Body.self, from: reply.body, what: "presence list").present
    }
}

/// The presence list one stream follows: it starts empty on every connection (the server sends
/// everyone present as `joined` events when a stream opens), then takes each `joined` and
/// `left`. Not thread-safe: owned by the task that reads the stream.
struct PresenceList: Sendable {
    private(set) var present: [StateServerClient.PresenceEntry] = []

    private struct Body: Decodable {
        var joined: StateServerClient.PresenceEntry?
        var left: StateServerClient.PresenceEntry?
    }

    mutating func reset() { present = [] }

    /// Takes a `presence` event; returns whether the list changed.
    mutating func take(_ event: ServerSentEvent) throws -> Bool {
        let body = try WireCoding.decodeBody(Body.self, from: Data(event.data.utf8), what: "presence event")
        if let joined = body.joined {
            present.removeAll { $0.id == joined.id }
            present.append(joined)
            return true
        }
        if let left = body.left {
            present.removeAll { $0.id == left.id }
            return true
        }
        return false
    }
}
