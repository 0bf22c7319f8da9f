import Foundation
import StateStore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The session as data: its history, time travel, and recordings (docs/API.md, "History").
extension StateServerClient {
    /// One change of a session's history (`GET /v1/sessions/{id}/history`). States are not in
    /// the history: read them from a ``Recording`` or the event stream.
    public struct HistoryEntry: Decodable, Sendable, Equatable {
        /// The session's sequence number: the `id` of the change's event.
        public var seq: Int
        public var feature: String
        /// The store's version after the change.
        public var version: Int
        /// `dispatch`, `rehydrate`, `reset`, `travel`, `import` or `timer`.
        public var cause: String
        /// A dispatch's or a timer's action in its public form (secrets masked), as a tagged
        /// JSON object.
        public var action: JSONValue?
        /// For a change of cause `timer`: the timer that fired.
        public var timer: FiredTimer?
        public var effect: JSONValue?
        /// Milliseconds since 1970-01-01 UTC.
        public var time: Int64
    }

    /// A timer a reducer scheduled (`GET /v1/sessions/{id}/timers`), still pending.
    public struct PendingTimer: Decodable, Sendable, Equatable {
        /// The id the reducer gave it (unique in its store).
        public var id: String
        public var feature: String
        /// The action it will apply, in its public form, as a tagged JSON object.
        public var action: JSONValue
        /// When it is due, and when it was scheduled: milliseconds since 1970-01-01 UTC.
        public var due: Int64
        public var scheduledAt: Int64
    }

    /// A page of a session's history, oldest first.
    public struct HistoryPage: Decodable, Sendable, Equatable {
        public var session: String
        public var changes: [HistoryEntry]
        /// Pass as `after` for the next page; `nil` when this page reached the newest change.
        public var next: Int?
        /// Changes after `after` are no longer kept; ``keptFrom`` is the oldest seq kept.
        public var truncated: Bool
        public var keptFrom: Int?
    }

    /// A page of the session's changes after `after` (a seq; 0 from the oldest kept), at most
    /// `limit` (1 to 1,000; the server's default is 100), optionally of one feature.
    public func history(
        _ credentials: SessionCredentials, after: Int = 0, limit: Int? = nil, feature: String? = nil
    ) async throws -> HistoryPage {
        var query = [URLQueryItem(name: "after", value: String(after))]
        if let limit { query.append(URLQueryItem(name: "limit", value: String(limit))) }
        if let feature { query.append(URLQueryItem(name: "feature", value: feature)) }
        let reply = try await send("GET", ["v1", "sessions", credentials.id, "history"], query: query, credentials: credentials, expecting: [200])
        return try WireCoding.decodeBody(HistoryPage.self, from: reply.body, what: "history page")
    }

    /// The session's pending timers (`GET /v1/sessions/{id}/timers`), the soonest due first;
    /// a scoped token sees those of the features it reaches.
    public func timers(_ credentials: SessionCredentials) async throws -> [PendingTimer] {
        struct Body: Decodable { var timers: [PendingTimer] }
        let reply = try await send("GET", ["v1", "sessions", credentials.id, "timers"], credentials: credentials, expecting: [200])
        return try WireCoding.decodeBody(Body.self, from: reply.body, what: "timers").timers
    }

    /// The session as a recording (`GET /v1/sessions/{id}/recording`): every feature's starting
    /// state and every kept change with its state. Replay it offline with
    /// ``StateStore/Recording/replay(with:)`` or `state-server replay FILE`.
    public func recording(_ credentials: SessionCredentials) async throws -> Recording {
        let reply = try await send("GET", ["v1", "sessions", credentials.id, "recording"], credentials: credentials, expecting: [200])
        do throws(Recording.Unreadable) {
            return try Recording(json: Array(reply.body))
        } catch {
            throw StateClientError(kind: .decoding, message: "the recording does not read: \(error.description)")
        }
    }

    /// Replays `recording` into a new session (`POST /v1/recordings`) and returns its
    /// credentials. A recording this server's reducers do not follow creates nothing:
    /// ``StateClientError/Code`` `recording_diverges`.
    public func importRecording(_ recording: Recording) async throws -> SessionCredentials {
        guard let body = JSONCoding.parse(recording.json) else {
            throw StateClientError(kind: .encoding, message: "the recording could not be encoded")
        }
        let reply = try await send("POST", ["v1", "recordings"], json: body, expecting: [201])
        return try WireCoding.decodeBody(SessionCredentials.self, from: reply.body, what: "new session")
    }
}

extension RemoteStore {
    /// Sets the store to the state it had at `version` (`POST .../state/{feature}/travel`), as a
    /// new change with ``Cause/travel``: the version still grows by one, and observers see it.
    ///
    /// - Throws: ``StateClientError`` `version_unreachable` when that version's state is no
    ///   longer kept (the message names the versions that can be reached), `invalid_state` when
    ///   the feature's rules refuse it, `version_conflict` for a stale `ifVersion`.
    @discardableResult
    public func travel(to version: Int, ifVersion: Int? = nil) async throws -> Change {
        var headers: [String: String] = [:]
        if let ifVersion { headers["If-Match"] = "\"\(ifVersion)\"" }
        let reply = try await client.send(
            "POST", sessionPath + ["state", feature.name, "travel"], credentials: credentials, headers: headers,
            json: .object(["version": .int(Int64(version))]), expecting: [200])
        let decoded = try WireCoding.decodeBody(ChangeBody<F.State>.self, from: reply.body, what: "\(feature.name) state")
        remember(version: decoded.version, state: decoded.state)
        return Change(version: decoded.version, state: decoded.state, cause: .travel)
    }
}
