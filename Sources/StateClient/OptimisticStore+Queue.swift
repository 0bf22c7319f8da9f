import Foundation
import StateStore

/// One action sent with ``OptimisticStore/send(_:)`` and not yet confirmed or refused.
struct PendingAction<F: Feature>: Sendable {
    /// The `Idempotency-Key` of every request that carries it: a retry never applies twice.
    var key: String
    var action: F.Action
    /// When ``OptimisticStore/send(_:)`` queued it.
    var queuedAt: Date
    /// When a request carrying it first left (it may have been applied from then on); nil while
    /// it never did. Past the server's key lifetime after this, resending could apply it twice.
    var firstSentAt: Date?
}

/// The state of an ``OptimisticStore``: the confirmed state, the actions pending on top of it,
/// and the prediction made of both.
///
/// The prediction is never patched: every change (an action queued, a server change, a
/// confirmation, a refusal) recomputes it from the confirmed state and the pending actions, in
/// order, with the feature's reducer. An action that the reducer refuses on the rebased state
/// stays pending (the server decides) but leaves no mark on the prediction.
///
/// Not thread-safe: a value held under the store's lock.
struct PendingQueue<F: Feature>: Sendable {
    let feature: F
    /// The newest server state known, at `confirmedVersion`.
    private(set) var confirmed: F.State
    private(set) var confirmedVersion: Int?
    private(set) var pending: [PendingAction<F>] = []
    /// `confirmed` with every pending action applied in order.
    private(set) var predicted: F.State
    /// The key of the action whose request is out now (``sending(key:)``), and the newest
    /// server state that arrived meanwhile, held back: it may already hold that action, which
    /// is still pending here, and a rebase on it would count the action twice.
    private var inFlight: String?
    private var held: (version: Int, state: F.State)?

    init(feature: F, confirmed: F.State, confirmedVersion: Int?, pending: [PendingAction<F>] = []) {
        self.feature = feature
        self.confirmed = confirmed
        self.confirmedVersion = confirmedVersion
        self.pending = pending
        self.predicted = confirmed
        rebase()
    }

    /// Applies `action` to the prediction and queues it; throws (queuing nothing) when the
    /// reducer refuses it or clients may not send it.
    mutating func enqueue(_ action: F.Action, key: String, at date: Date) throws(ActionRejected) -> F.State {
        guard feature.acceptsFromClient(action) else {
            throw ActionRejected("\(feature.name): this action is sent by the server's own work, not by clients")
        }
        // Work the reducer declares (`dispatch.run`) is dropped: it runs on the server only.
        predicted = try feature.reduce(action, state: predicted, dispatch: Dispatcher()).state
        pending.append(PendingAction(key: key, action: action, queuedAt: date))
        return predicted
    }

    /// A server state from the change stream: taken when newer than the confirmed one (a
    /// snapshot always, even an older one: the server's word), then the pending actions are
    /// replayed on it.
    ///
    /// While an action's request is out, a change is held back (the newest one) until its
    /// answer: taken with it, or at once when the request fails.
    mutating func confirm(version: Int, state: F.State, isSnapshot: Bool) -> Bool {
        if !isSnapshot, let confirmedVersion, version <= confirmedVersion { return false }
        if !isSnapshot, inFlight != nil {
            if held.map({ version > $0.version }) ?? true { held = (version, state) }
            return false
        }
        if isSnapshot { held = nil }
        confirmed = state
        confirmedVersion = version
        rebase()
        return true
    }

    /// The request carrying the action of `key` is leaving: changes are held back until its
    /// answer (``confirm(version:state:isSnapshot:)``).
    mutating func sending(key: String) {
        inFlight = key
    }

    /// The request out ended without an answer about its action (a network failure): a change
    /// held back meanwhile is taken now. Returns whether the prediction changed.
    mutating func sendFailed() -> Bool {
        inFlight = nil
        guard takeHeld() else { return false }
        rebase()
        return true
    }

    /// The change held back while a request was out, taken if newer than the confirmed state.
    private mutating func takeHeld() -> Bool {
        defer { held = nil }
        guard let held, confirmedVersion.map({ held.version > $0 }) ?? true else { return false }
        confirmed = held.state
        confirmedVersion = held.version
        return true
    }

    /// The server applied the action of `key` at `version`, giving `state`: the action leaves
    /// the queue, and the state is taken when newer than the confirmed one.
    mutating func acknowledge(key: String, version: Int, state: F.State) {
        pending.removeAll { $0.key == key }
        if inFlight == key { inFlight = nil }
        if confirmedVersion.map({ version > $0 }) ?? true {
            confirmed = state
            confirmedVersion = version
        }
        _ = takeHeld()
        rebase()
    }

    /// The server refused the action of `key` (or it can no longer be sent safely): it leaves
    /// the queue and the prediction. Returns it, nil when it was not pending.
    mutating func remove(key: String) -> PendingAction<F>? {
        guard let index = pending.firstIndex(where: { $0.key == key }) else { return nil }
        let removed = pending.remove(at: index)
        if inFlight == key {
            inFlight = nil
            _ = takeHeld()
        }
        rebase()
        return removed
    }

    /// Notes that a request carrying the action of `key` is about to leave.
    mutating func markSent(key: String, at date: Date) -> Bool {
        guard let index = pending.firstIndex(where: { $0.key == key }), pending[index].firstSentAt == nil else {
            return false
        }
        pending[index].firstSentAt = date
        return true
    }

    /// Recomputes the prediction from the confirmed state and the pending actions.
    private mutating func rebase() {
        var state = confirmed
        let dispatch = Dispatcher<F.Action>()
        for entry in pending {
            // Refused on this state: still pending (the server has the last word), but not
            // predicted.
            if let next = try? feature.reduce(entry.action, state: state, dispatch: dispatch).state { state = next }
        }
        predicted = state
    }
}

// MARK: The file

/// The queue on disk: the confirmed state it is built on and the pending actions, written
/// atomically (a new file renamed over the old one) so a crash leaves the old queue or the new
/// one, never half of either.
///
/// ```json
/// {"format": 1, "session": "…", "feature": "counter",
///  "confirmed": {"version": 3, "state": {"count": 3}},
///  "pending": [{"key": "…", "action": {"type": "increment", "by": 1},
///               "queuedAt": 786000000.0, "firstSentAt": null}]}
/// ```
struct PendingFile: Codable, Sendable {
    struct Confirmed: Codable, Sendable {
        var version: Int
        var state: JSONValue
    }

    struct Entry: Codable, Sendable {
        var key: String
        /// Tagged, as on the wire.
        var action: JSONValue
        var queuedAt: Date
        var firstSentAt: Date?
    }

    var format = 1
    var session: String
    var feature: String
    var confirmed: Confirmed?
    var pending: [Entry]

    init<F: Feature>(session: String, queue: PendingQueue<F>) throws(StateClientError) {
        self.session = session
        self.feature = queue.feature.name
        if let version = queue.confirmedVersion {
            confirmed = Confirmed(version: version, state: try WireCoding.json(queue.confirmed))
        }
        var entries: [Entry] = []
        for entry in queue.pending {
            entries.append(Entry(
                key: entry.key, action: try WireCoding.tagged(entry.action), queuedAt: entry.queuedAt,
                firstSentAt: entry.firstSentAt))
        }
        pending = entries
    }

    /// The queue saved at `url`, or nil when there is no file. Throws when the file is not a
    /// queue of this session's `feature`.
    static func load<F: Feature>(_ url: URL, session: String, feature: F) throws(StateClientError) -> PendingQueue<F>? {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            if !FileManager.default.fileExists(atPath: url.path) { return nil }
            throw StateClientError(kind: .decoding, message: "the pending file could not be read", underlyingError: error)
        }
        let file = try WireCoding.decodeBody(PendingFile.self, from: data, what: "pending file")
        guard file.session == session, file.feature == feature.name else {
            throw StateClientError(
                kind: .decoding,
                message: "the pending file holds the queue of \(file.feature) in another session, not of \(feature.name) in this one")
        }
        var pending: [PendingAction<F>] = []
        for entry in file.pending {
            let action = try WireCoding.untagged(F.Action.self, from: entry.action, what: "pending action")
            pending.append(PendingAction(key: entry.key, action: action, queuedAt: entry.queuedAt, firstSentAt: entry.firstSentAt))
        }
        var state = feature.initialState
        if let confirmed = file.confirmed {
            state = try WireCoding.decode(F.State.self, from: confirmed.state, what: "confirmed state")
        }
        return PendingQueue(feature: feature, confirmed: state, confirmedVersion: file.confirmed?.version, pending: pending)
    }

    /// Writes the file atomically.
    func write(to url: URL) throws(StateClientError) {
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try encoder.encode(self).write(to: url, options: .atomic)
        } catch {
            throw StateClientError(kind: .encoding, message: "the pending file could not be written", underlyingError: error)
        }
    }
}
