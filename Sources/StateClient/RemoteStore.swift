import Foundation
import StateStore
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One feature's store in one session on a StateServer, typed by the feature's `State`,
/// `Action` and `Effect` — the same Swift types the server runs.
///
/// ```swift
/// let todos = client.store(TodosFeature(), credentials: credentials)
/// let change = try await todos.dispatch(.add(title: "Milk"))
/// print(change.state.items)        // [Item(id: "1", title: "Milk", done: false)]
///
/// for try await event in todos.changes() {    // a snapshot, then every change, live
///     render(event.state)
/// }
/// ```
///
/// Requests go to `/v1/sessions/{id}/...` with the session's bearer token; the feature's
/// ``StateStore/Feature/name`` names the store. Actions and effects are sent and received in
/// their tagged wire form (`{"type": "increment", "by": 2}`) and converted to and from the
/// feature's enums.
///
/// **Thread safety.** `Sendable`: use one store from any number of tasks at once. Its only
/// mutable state, the last state seen for `ETag` caching, sits behind a `Mutex`. Dispatches
/// made concurrently are applied by the server one at a time in arrival order.
public final class RemoteStore<F: Feature>: Sendable {
    public let client: StateServerClient
    public let credentials: SessionCredentials
    public let feature: F
    /// The newest state this store has seen, for `If-None-Match`.
    private let cache = Mutex<Snapshot?>(nil)

    public init(client: StateServerClient, credentials: SessionCredentials, feature: F) {
        self.client = client
        self.credentials = credentials
        self.feature = feature
    }

    /// The store's state at a version.
    public struct Snapshot: Sendable {
        /// The store's version: 0 at the initial state, one more for every change applied.
        public var version: Int
        public var state: F.State
        /// The sequence number (`id`) of the event that carried this snapshot, when it came from
        /// ``RemoteStore/changes(lastEventID:reconnect:)``: pass it as `lastEventID` to resume
        /// from here later. `nil` for ``RemoteStore/state()``.
        public var eventID: Int?

        public init(version: Int, state: F.State, eventID: Int? = nil) {
            self.version = version
            self.state = state
            self.eventID = eventID
        }
    }

    /// Why a store changed.
    public struct Cause: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// An action was applied (sent by a client, or a follow-up of asynchronous work).
        public static var dispatch: Cause { Cause(rawValue: "dispatch") }
        /// The state was replaced (``RemoteStore/rehydrate(_:ifVersion:)``).
        public static var rehydrate: Cause { Cause(rawValue: "rehydrate") }
        /// The store went back to the initial state (``RemoteStore/reset(ifVersion:)``).
        public static var reset: Cause { Cause(rawValue: "reset") }
        /// The store was set to the state of an earlier version (``RemoteStore/travel(to:ifVersion:)``).
        public static var travel: Cause { Cause(rawValue: "travel") }
        /// A recording's starting state, set when it was imported (`POST /v1/recordings`).
        public static var `import`: Cause { Cause(rawValue: "import") }
        /// A timer the reducer scheduled fired: ``Change/action`` is its action, and
        /// ``Change/timer`` says which timer it was and when it was due.
        public static var timer: Cause { Cause(rawValue: "timer") }
    }

    /// One change applied to the store: the reply to ``dispatch(_:ifVersion:idempotencyKey:)``,
    /// ``rehydrate(_:ifVersion:)`` and ``reset(ifVersion:)``, and each change that
    /// ``changes(lastEventID:reconnect:)`` delivers.
    public struct Change: Sendable {
        /// The store's version after the change.
        public var version: Int
        /// The state after the change.
        public var state: F.State
        /// The one-shot effect the change produced (a toast), if any.
        ///
        /// From ``RemoteStore/changes(lastEventID:reconnect:)`` each effect arrives exactly once,
        /// also across reconnections. The reply to a dispatch carries the effect too, so a client
        /// that both dispatches and observes sees it in both places: act on effects in one of
        /// them (usually the stream, which also sees other clients' and follow-up actions').
        public var effect: F.Effect?
        public var cause: Cause
        /// The action applied, for ``Cause/dispatch`` and ``Cause/timer``; `nil` for every other
        /// cause. From the event stream it is the feature's *public* form (login shows the
        /// password masked).
        public var action: F.Action?
        /// For ``Cause/timer``: the timer that fired (its id, due time and when it was scheduled).
        public var timer: FiredTimer?
        /// The event's sequence number, for changes from ``RemoteStore/changes(lastEventID:reconnect:)``
        /// (per session, strictly increasing across its features); `nil` in replies.
        public var eventID: Int?
        /// The reply came from the server's idempotency memory: a dispatch with this
        /// `idempotencyKey` was applied before, and this request applied nothing.
        public var isReplayed: Bool

        public init(
            version: Int, state: F.State, effect: F.Effect? = nil, cause: Cause, action: F.Action? = nil,
            eventID: Int? = nil, isReplayed: Bool = false, timer: FiredTimer? = nil
        ) {
            self.version = version
            self.state = state
            self.effect = effect
            self.cause = cause
            self.action = action
            self.timer = timer
            self.eventID = eventID
            self.isReplayed = isReplayed
        }
    }

    // MARK: Commands

    /// Sends `action` to the store (`POST .../dispatch`) and returns the state after it, with the
    /// effect it produced.
    ///
    /// - Parameters:
    ///   - ifVersion: apply only if the store is at this version (`If-Match`); otherwise the
    ///     error is ``StateClientError/Code/versionConflict`` with the store's
    ///     ``StateClientError/currentVersion``, and nothing is applied.
    ///   - idempotencyKey: a key (1 to 200 bytes) that makes retries safe: a repeat of the same
    ///     key on the session applies nothing and returns the first reply again
    ///     (``Change/isReplayed``).
    /// - Throws: ``StateClientError``: `action_rejected` when the reducer refuses the action (a
    ///   rule of the feature), `invalid_action` when the server's action type differs, and the
    ///   other codes of the contract; `CancellationError` when the task is cancelled (the action
    ///   may then have been applied or not: use an `idempotencyKey` to retry safely).
    @discardableResult
    public func dispatch(_ action: F.Action, ifVersion: Int? = nil, idempotencyKey: String? = nil) async throws -> Change {
        let body = JSONValue.object(["feature": .string(feature.name), "action": try WireCoding.tagged(action)])
        var headers: [String: String] = [:]
        if let ifVersion { headers["If-Match"] = "\"\(ifVersion)\"" }
        if let idempotencyKey { headers["Idempotency-Key"] = idempotencyKey }
        let reply = try await client.send(
            "POST", sessionPath + ["dispatch"], credentials: credentials, headers: headers, json: body, expecting: [200])
        let decoded = try WireCoding.decodeBody(ChangeBody<F.State>.self, from: reply.body, what: "\(feature.name) state")
        let change = Change(
            version: decoded.version, state: decoded.state, effect: try WireCoding.effect(F.Effect.self, from: decoded.effect),
            cause: .dispatch, action: action, isReplayed: reply.header("Idempotent-Replayed")?.lowercased() == "true")
        remember(version: change.version, state: change.state)
        return change
    }

    /// The store's current state and version (`GET .../state/{feature}`).
    ///
    /// The client remembers the last state it saw and sends `If-None-Match`; when the store has
    /// not changed, the server answers `304` and the remembered state is returned.
    public func state() async throws -> Snapshot {
        let cached = cache.withLock { $0 }
        var headers: [String: String] = [:]
        if let cached { headers["If-None-Match"] = "\"\(cached.version)\"" }
        let reply = try await client.send(
            "GET", sessionPath + ["state", feature.name], credentials: credentials, headers: headers, expecting: [200, 304])
        if reply.status == 304, let cached, reply.etagVersion == nil || reply.etagVersion == cached.version {
            return cached
        }
        if reply.status == 304 {
            throw StateClientError(kind: .invalidResponse, status: 304, message: "304 Not Modified for a version this client does not hold")
        }
        let decoded = try WireCoding.decodeBody(StateBody<F.State>.self, from: reply.body, what: "\(feature.name) state")
        remember(version: decoded.version, state: decoded.state)
        return Snapshot(version: decoded.version, state: decoded.state)
    }

    /// Replaces the store's state without an action (`PUT .../state/{feature}`), for instance to
    /// restore a state saved earlier. The returned state is the one stored, which a feature may
    /// normalize. Observers see a change with ``Cause/rehydrate``.
    ///
    /// - Throws: ``StateClientError/Code/invalidState`` when the state breaks a rule of the
    ///   feature; ``StateClientError/Code/versionConflict`` for a stale `ifVersion`.
    @discardableResult
    public func rehydrate(_ state: F.State, ifVersion: Int? = nil) async throws -> Change {
        let body = JSONValue.object(["state": try WireCoding.json(state)])
        return try await change("PUT", cause: .rehydrate, ifVersion: ifVersion, body: body)
    }

    /// Returns the store to the feature's initial state (`DELETE .../state/{feature}`). The
    /// version still grows by one. Observers see a change with ``Cause/reset``.
    @discardableResult
    public func reset(ifVersion: Int? = nil) async throws -> Change {
        try await change("DELETE", cause: .reset, ifVersion: ifVersion, body: nil)
    }

    // MARK: Internals

    var sessionPath: [String] { ["v1", "sessions", credentials.id] }

    private func change(_ method: String, cause: Cause, ifVersion: Int?, body: JSONValue?) async throws -> Change {
        var headers: [String: String] = [:]
        if let ifVersion { headers["If-Match"] = "\"\(ifVersion)\"" }
        let reply = try await client.send(
            method, sessionPath + ["state", feature.name], credentials: credentials, headers: headers, json: body,
            expecting: [200])
        let decoded = try WireCoding.decodeBody(ChangeBody<F.State>.self, from: reply.body, what: "\(feature.name) state")
        remember(version: decoded.version, state: decoded.state)
        return Change(version: decoded.version, state: decoded.state, cause: cause)
    }

    /// Keeps the newest state seen for `If-None-Match`.
    func remember(version: Int, state: F.State) {
        cache.withLock { cached in
            if let current = cached, current.version >= version { return }
            cached = Snapshot(version: version, state: state)
        }
    }
}

extension RemoteStore.Snapshot: Equatable where F.State: Equatable {}
extension RemoteStore.Change: Equatable where F.State: Equatable, F.Action: Equatable, F.Effect: Equatable {}
