import Foundation
import StateStore

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

extension RemoteStore {
    /// What ``changes(lastEventID:reconnect:)`` delivers.
    public enum Event: Sendable {
        /// The store's whole state: first on every stream, and again after a reconnection when
        /// the server no longer holds the changes missed meanwhile (replace your state with it;
        /// effects of missed changes are lost then).
        case snapshot(Snapshot)
        /// One change applied on the server, by any client or by asynchronous work, in the order
        /// applied. Each one arrives once, with its effect.
        case change(Change)

        /// The state after this event.
        public var state: F.State {
            switch self {
            case .snapshot(let snapshot): snapshot.state
            case .change(let change): change.state
            }
        }

        /// The store's version after this event.
        public var version: Int {
            switch self {
            case .snapshot(let snapshot): snapshot.version
            case .change(let change): change.version
            }
        }

        /// The effect of a change; `nil` for snapshots.
        public var effect: F.Effect? {
            if case .change(let change) = self { return change.effect }
            return nil
        }

        /// The event's sequence number: pass the last one seen as `lastEventID` to resume.
        public var eventID: Int? {
            switch self {
            case .snapshot(let snapshot): snapshot.eventID
            case .change(let change): change.eventID
            }
        }
    }

    /// The store's changes, live: a ``Event/snapshot(_:)`` of the current state, then each
    /// ``Event/change(_:)`` as the server applies it (`GET .../events?feature=NAME`,
    /// server-sent events).
    ///
    /// ```swift
    /// for try await event in store.changes() {
    ///     state = event.state
    ///     if let effect = event.effect { show(effect) }   // each effect once
    /// }
    /// ```
    ///
    /// When the connection ends or fails (the server restarts, drops a slow reader, the network
    /// goes away, or nothing — not even a heartbeat — arrives for `reconnect.idleTimeout`), the
    /// sequence reconnects with exponential backoff and sends `Last-Event-ID`, so the server
    /// replays the changes missed meanwhile; changes already delivered are never delivered again,
    /// so every effect is delivered exactly once. When the server no longer holds the missed
    /// changes it sends a fresh snapshot instead. A server shutting down gracefully says so with
    /// a last `shutdown` event: the sequence then reconnects after the delay the server asks for
    /// (its `retry`, varied upwards by up to `reconnect.jitter`) instead of the backoff, and
    /// delivers nothing for it — it is not a change, and not an error.
    ///
    /// The sequence fails with ``StateClientError`` on errors that retrying cannot fix (the session
    /// was deleted: `session_not_found`; a state that does not decode as `F.State`), or when
    /// `reconnect.maximumAttempts` consecutive attempts failed. It finishes when the consuming
    /// task is cancelled or stops iterating: the connection is closed at once.
    ///
    /// Each call opens its own connection; iterate the sequence from one task. Events are
    /// buffered while the consumer is busy.
    ///
    /// **Deltas.** By default the stream asks for JSON Patch deltas (`?delta=json-patch`): a
    /// change of a large state travels as a patch from the version before, which this sequence
    /// applies to the state it holds and delivers as the whole typed state, as without deltas.
    /// A patch whose base version is not the one held (or that does not apply) is never
    /// guessed at: the sequence reconnects without `Last-Event-ID` and starts again from a fresh
    /// snapshot (delivered as ``Event/snapshot(_:)``).
    ///
    /// - Parameters:
    ///   - lastEventID: resume after this event (an ``Event/eventID`` saved earlier) instead of
    ///     starting with a snapshot. With deltas, resuming needs the state at that event: the
    ///     first patch finds none and resynchronises from a snapshot.
    ///   - reconnect: when and how often to reconnect.
    ///   - deltas: ask for JSON Patch deltas (the default) or whole states in every event.
    public func changes(
        lastEventID: Int? = nil, reconnect: ReconnectPolicy = .default, deltas: Bool = true
    ) -> AsyncThrowingStream<Event, any Error> {
        let (events, continuation) = AsyncThrowingStream.makeStream(of: Event.self, throwing: (any Error).self)
        let task = Task { [self] in
            await self.streamEvents(lastEventID: lastEventID, policy: reconnect, deltas: deltas, into: continuation)
        }
        continuation.onTermination = { _ in task.cancel() }
        return events
    }

    /// What a stream carries from one connection to the next.
    private struct StreamProgress {
        var decoder: ChangeDecoder<F>
        /// Consecutive attempts that failed; 0 once a connection is accepted.
        var failures = 0
        /// Consecutive resynchronisations without a change applied in between.
        var resyncs = 0
    }

    /// Connects, reconnects and feeds `continuation` until the stream ends.
    private func streamEvents(
        lastEventID: Int?, policy: ReconnectPolicy, deltas: Bool,
        into continuation: AsyncThrowingStream<Event, any Error>.Continuation
    ) async {
        var progress = StreamProgress(decoder: ChangeDecoder(featureName: feature.name, lastEventID: lastEventID, deltas: deltas))
        while !Task.isCancelled {
            var lastError: (any Error)?
            var retryAfter: Duration?
            do {
                let ending = try await connectOnce(&progress, policy: policy, continuation: continuation)
                if case .shutdown(let hint) = ending {
                    // Not a failure: the connection worked and the server said when to come back.
                    guard policy.maximumAttempts != 0 else { break }
                    do {
                        try await Task.sleep(for: policy.jitteredDelay(after: hint))
                    } catch {
                        break
                    }
                    continue
                }
                if case .resync = ending {
                    // Starts again from a snapshot at once; a server that keeps sending patches
                    // this client cannot apply is waited on like a failing one.
                    progress.resyncs += 1
                    if progress.resyncs > 1 {
                        do {
                            try await Task.sleep(for: policy.jitteredDelay(beforeAttempt: progress.resyncs - 1))
                        } catch {
                            break
                        }
                    }
                    continue
                }
            } catch let error as StateClientError {
                guard !Task.isCancelled else { break }
                guard error.isTransient else {
                    continuation.finish(throwing: error)
                    return
                }
                lastError = error
                retryAfter = error.retryAfter
            } catch {
                guard !Task.isCancelled, !(error is CancellationError) else { break }
                continuation.finish(throwing: error)
                return
            }
            guard !Task.isCancelled else { break }
            progress.failures += 1
            if let maximum = policy.maximumAttempts, progress.failures > maximum {
                if let lastError { continuation.finish(throwing: lastError) } else { continuation.finish() }
                return
            }
            var delay = policy.jitteredDelay(beforeAttempt: progress.failures)
            if let retryAfter, retryAfter > delay { delay = retryAfter }
            do {
                try await Task.sleep(for: delay)
            } catch {
                break
            }
        }
        continuation.finish()
    }

    /// How a connection that did not fail came to its end.
    private enum Ending {
        /// The server ended the stream without a word (a slow reader dropped, a proxy).
        case ended
        /// The server is shutting down and asked for a reconnection after this delay.
        case shutdown(retry: Duration)
        /// A patch did not fit the state held: connect again for a fresh snapshot.
        case resync
    }

    /// One connection: returns when the server ends the stream or announces its shutdown,
    /// throws when it fails.
    private func connectOnce(
        _ progress: inout StreamProgress, policy: ReconnectPolicy,
        continuation: AsyncThrowingStream<Event, any Error>.Continuation
    ) async throws -> Ending {
        var headers = ["Accept": "text/event-stream", "Cache-Control": "no-cache"]
        if let lastEventID = progress.decoder.lastEventID { headers["Last-Event-ID"] = String(lastEventID) }
        var query = [URLQueryItem(name: "feature", value: feature.name)]
        if progress.decoder.deltas { query.append(URLQueryItem(name: "delta", value: "json-patch")) }
        let request = client.request("GET", sessionPath + ["events"], query: query, credentials: credentials, headers: headers)
        let connection = EventStreamConnection(request: request, idleTimeout: policy.idleTimeout)
        // Cancelling the consuming task finishes `parts` (and so cancels the request) by itself;
        // this closes the connection on every other way out too.
        defer { connection.cancel() }

        var head: EventStreamConnection.Head?
        var errorBody = Data()
        var parser = ServerSentEventParser()
        for try await part in connection.parts {
            switch part {
            case .head(let received):
                head = received
                guard received.status == 200 else { continue }
                guard received.contentType?.lowercased().hasPrefix("text/event-stream") == true else {
                    throw StateClientError(
                        kind: .invalidResponse, status: 200,
                        message: "the event stream's Content-Type is \(received.contentType ?? "missing"), not text/event-stream")
                }
                progress.failures = 0
            case .data(let data):
                guard let head, head.status == 200 else {
                    if errorBody.count < 64 * 1024 { errorBody.append(data) }
                    continue
                }
                let events: [ServerSentEvent]
                do {
                    events = try parser.feed(data)
                } catch {
                    throw StateClientError(kind: .invalidResponse, message: "the event stream has a line longer than 16 MiB")
                }
                for event in events {
                    // Nothing follows it; its hint wins over the backoff. It has no id, so the
                    // next connection resumes after the last change delivered.
                    if let hint = ChangeDecoder<F>.shutdownDelay(event, default: policy.initialDelay) {
                        return .shutdown(retry: hint)
                    }
                    let decoded: Event?
                    do {
                        decoded = try progress.decoder.decode(event)
                    } catch is ChangeDecoder<F>.Resync {
                        progress.decoder.forget()
                        return .resync
                    }
                    guard let delivered = decoded else { continue }
                    if case .change = delivered { progress.resyncs = 0 }
                    remember(version: delivered.version, state: delivered.state)
                    if case .terminated = continuation.yield(delivered) { throw CancellationError() }
                }
            }
        }
        try Task.checkCancellation()
        guard let head else {
            throw StateClientError(kind: .transport, message: "the event stream ended before the server answered")
        }
        if head.status != 200 {
            throw StateServerClient.error(
                status: head.status, body: errorBody, currentVersion: nil, retryAfter: head.retryAfter)
        }
        // The server ended the stream (a slow reader dropped): the caller reconnects.
        return .ended
    }
}

extension RemoteStore.Event: Equatable where F.State: Equatable, F.Action: Equatable, F.Effect: Equatable {}

/// Turns the server-sent events of one store's stream into typed events, and drops what was
/// delivered already.
///
/// It remembers the last event id across connections (the stream's `Last-Event-ID`): a `state`
/// event at or before it is a change already delivered (the server replayed more than was
/// missed) and is dropped, so each change — and each effect — is delivered once. A `snapshot`
/// always restarts the count, even backwards (a server that lost changes).
///
/// With deltas it holds the store's state as JSON at its version: a `state` event carrying a
/// `patch` is applied to it when its `baseVersion` is that version, and is a ``Failure/resync``
/// otherwise (as is a patch that does not apply).
///
/// Not thread-safe: a value owned by the one task that reads the stream.
struct ChangeDecoder<F: Feature>: Sendable {
    typealias Event = RemoteStore<F>.Event

    /// Thrown by ``decode(_:)`` when the stream cannot go on as it is: a patch that does not
    /// fit the state held. Start again from a snapshot (``forget()``, then connect).
    struct Resync: Error {}

    let featureName: String
    /// The id of the last event seen: sent as `Last-Event-ID` on reconnection.
    var lastEventID: Int?
    /// Whether the stream asks for patches.
    let deltas: Bool
    /// The state as JSON at its version, for patches (deltas only).
    private(set) var held: (version: Int, state: JSONValue)?

    init(featureName: String, lastEventID: Int? = nil, deltas: Bool = false) {
        self.featureName = featureName
        self.lastEventID = lastEventID
        self.deltas = deltas
    }

    /// Forgets where the stream was: the next connection starts from a snapshot.
    mutating func forget() {
        lastEventID = nil
        held = nil
    }

    /// The event to deliver for `event`, or `nil` for one to skip: a change already delivered,
    /// another feature's change, an unknown event type. Throws ``StateClientError`` for an
    /// event that is not what the contract says, and ``Resync`` (see there).
    mutating func decode(_ event: ServerSentEvent) throws -> Event? {
        switch event.type {
        case "snapshot":
            let id = try Self.eventID(of: event)
            let body = try WireCoding.decodeBody(SnapshotEventBody.self, from: Data(event.data.utf8), what: "snapshot event")
            guard let entry = body.features[featureName] else {
                throw StateClientError(kind: .invalidResponse, message: "the snapshot has no '\(featureName)' feature")
            }
            let decoded = try WireCoding.decode(StateBody<F.State>.self, from: entry, what: "\(featureName) state in the snapshot")
            lastEventID = id
            if deltas, let state = entry["state"] { held = (decoded.version, state) }
            return .snapshot(.init(version: decoded.version, state: decoded.state, eventID: id))

        case "state":
            let id = try Self.eventID(of: event)
            if let last = lastEventID, id <= last { return nil }
            let body = try WireCoding.decodeBody(StateEventBody.self, from: Data(event.data.utf8), what: "state event")
            guard body.feature == featureName else {
                lastEventID = id
                return nil
            }
            let stateJSON: JSONValue
            if let patch = body.patch {
                guard var document = held?.state, let base = body.baseVersion, held?.version == base else { throw Resync() }
                do throws(JSONPatch.Failure) {
                    try JSONPatch.apply(patch, to: &document)
                } catch {
                    throw Resync()
                }
                stateJSON = document
            } else if let state = body.state {
                stateJSON = state
            } else {
                throw StateClientError(kind: .invalidResponse, message: "a state event has neither 'state' nor 'patch'")
            }
            let state = try WireCoding.decode(F.State.self, from: stateJSON, what: "\(featureName) state event")
            let effect = try WireCoding.effect(F.Effect.self, from: body.effect)
            // The action is informational (and in its public form): one this client's type does
            // not know (a newer server) does not stop the stream.
            let action = try? WireCoding.action(F.Action.self, from: body.action)
            lastEventID = id
            if deltas { held = (body.version, stateJSON) }
            return .change(.init(
                version: body.version, state: state, effect: effect, cause: .init(rawValue: body.cause),
                action: action, eventID: id, timer: body.timer))

        default:
            return nil
        }
    }

    /// For a `shutdown` event, the delay before reconnecting: its `retry` field, else the
    /// `retryAfterMs` of its data, else `default`; `nil` for any other event.
    static func shutdownDelay(_ event: ServerSentEvent, default defaultDelay: Duration) -> Duration? {
        guard event.type == "shutdown" else { return nil }
        if let retry = event.retry { return .milliseconds(retry) }
        if let body = try? WireCoding.decodeBody(ShutdownEventBody.self, from: Data(event.data.utf8), what: "shutdown event"),
            let milliseconds = body.retryAfterMs, milliseconds >= 0
        {
            return .milliseconds(milliseconds)
        }
        return defaultDelay
    }

    private static func eventID(of event: ServerSentEvent) throws(StateClientError) -> Int {
        guard let text = event.id, let id = Int(text.trimmingCharacters(in: .whitespaces)) else {
            throw StateClientError(
                kind: .invalidResponse, message: "a '\(event.type)' event has no integer id: \(event.id ?? "none")")
        }
        return id
    }
}
