import CoreMetrics
import DequeModule
import StatePersistence
import StateStore
import Synchronization

/// Where a session's events go: one open event stream. `send` must not block; it returns
/// `false` when the sink is gone or refused the bytes (then the hub forgets it).
public protocol EventSink: AnyObject, Sendable {
    /// Queues live bytes; `false` when the sink is gone or over its limit (it then closes).
    func send(_ bytes: [UInt8]) -> Bool
    /// Queues bytes only if they fit; `false`, changing nothing, otherwise.
    func offer(_ bytes: [UInt8]) -> Bool
    /// Ends the stream after what is queued.
    func close()
}

/// Counters every hub of a server shares (through swift-metrics).
public struct HubMetrics: Sendable {
    /// Events queued on subscribers.
    let eventsSent: Counter
    /// Subscribers dropped because their stream refused an event (too slow, or gone).
    let subscribersDropped: Counter
    /// Streams present (``PresenceEntry``) in every hub that shares these metrics.
    let present: PresentCount

    public init() {
        eventsSent = Counter(label: "stateserver_events_sent_total")
        subscribersDropped = Counter(label: "stateserver_subscribers_dropped_total")
        present = PresentCount()
    }
}

/// The streams present in all of a server's sessions: one count, shown as the gauge
/// `stateserver_presence_entries`.
final class PresentCount: Sendable {
    private let count = Atomic<Int>(0)
    private let gauge = Gauge(label: "stateserver_presence_entries")

    func add(_ delta: Int) {
        guard delta != 0 else { return }
        gauge.record(count.add(delta, ordering: .relaxed).newValue)
    }
}

/// Turns one event of a session (its sequence number, name and JSON data) into the bytes a
/// transport sends. The transport provides it (the HTTP layer frames server-sent events); the
/// hub encodes each event once and queues the same bytes on every subscriber.
public protocol EventEncoder: Sendable {
    func encode(seq: Int, event: String, data: [UInt8]) -> [UInt8]
    /// An event without a sequence number (`presence`): it does not move a client's
    /// `Last-Event-ID`, and is never replayed.
    func encode(event: String, data: [UInt8]) -> [UInt8]
}

/// The bytes every hub of a server may pin for replay together. When a publish would pass it,
/// the publishing session forgets its own oldest frames first (a client resuming past them
/// gets a fresh snapshot, as the contract says).
public final class ReplayBudget: Sendable {
    public let limit: Int
    private let used = Atomic<Int>(0)

    public init(limit: Int) {
        self.limit = max(0, limit)
    }

    /// Bytes pinned now, over all hubs.
    public var bytes: Int { used.load(ordering: .relaxed) }

    func add(_ count: Int) -> Int { used.add(count, ordering: .relaxed).newValue }
    func remove(_ count: Int) { used.subtract(count, ordering: .relaxed) }
}

/// The outcome of ``EventHub/subscribe(features:lastEventID:sink:)``.
public enum Subscription: Sendable, Equatable {
    /// Subscribed; the id unsubscribes.
    case subscribed(UInt64)
    /// What the subscriber had to catch up on did not fit in its buffer: it got what fit and
    /// its stream ends, so the client resumes from the last event it received.
    case caughtUpPartially
    /// The hub is closed (the session was deleted, or left memory).
    case closed
    /// The session already has its maximum of subscribers.
    case full
    /// The session already has its maximum of present streams (``PresenceEntry``).
    case presenceFull
}

/// A session's event log: publishes each change under the `seq` its session gave it (numbered
/// in ``Session/apply(_:_:attempt:release:finish:)`` by ``CommitChain/next(after:)``; the hub
/// refuses a number not after its last, so `seq` strictly increases across the session's
/// features), keeps the last `replayLimit` frames for `Last-Event-ID` resumption, and fans each
/// frame out to the subscribers that observe its feature.
///
/// Each change is encoded once by the transport's ``EventEncoder`` and the same bytes are queued on
/// every subscriber. The hub also keeps the latest state bytes of every feature, so a snapshot
/// needs no store lock. The session publishes after `store.commit` has returned, holding no
/// lock; the hub never calls back into a store or the session's pipeline, and queues frames on
/// its subscribers under its own lock (lock order: pipeline → hub → event stream).
public final class EventHub: Sendable {
    /// A change kept for replay. Its frame bytes are built only when someone needs them (a live
    /// subscriber at publish time, or a replay), so a session nobody watches pays no framing.
    struct Frame {
        enum Content {
            case change(EncodedChange)
            case data([UInt8])
        }

        let seq: Int
        let feature: String
        let content: Content
        /// The JSON Patch from the feature's previous version, when one was known and smaller
        /// than the state (delta streams, `?delta=json-patch`, get it instead of the state).
        var patch: [UInt8]? = nil

        /// Bytes this frame pins in the replay buffer (roughly: its data).
        var size: Int {
            let own = switch content {
            case .change(let change): change.state.count + (change.action?.count ?? 0) + (change.effect?.count ?? 0) + 96
            case .data(let data): data.count
            }
            return own + (patch?.count ?? 0)
        }

        /// The frame for a subscriber: the delta form when it asked for deltas and there is one.
        func bytes(_ encoder: any EventEncoder, deltas: Bool) -> [UInt8] {
            if deltas {
                if let patch, case .change(let change) = content {
                    return encoder.encode(seq: seq, event: "state", data: EventHub.deltaData(change, patch: patch))
                }
            }
            return bytes(encoder)
        }

        func bytes(_ encoder: any EventEncoder) -> [UInt8] {
            switch content {
            case .change(let change): encoder.encode(seq: seq, event: "state", data: EventHub.eventData(change))
            case .data(let data): encoder.encode(seq: seq, event: "state", data: data)
            }
        }
    }

    struct Subscriber {
        let features: Set<String>?
        let sink: any EventSink
        /// Wants `state` events as patches (``EventHub/deltaData(_:patch:)``) where one is known.
        var deltas = false
        /// Joined the session's presence: gets `presence` events, and is listed.
        var presence: PresenceEntry?

        func wants(_ feature: String) -> Bool { features?.contains(feature) ?? true }
    }

    struct State {
        var seq: Int
        var replay = Deque<Frame>()
        /// Bytes the replay buffer pins (``Frame/size``).
        var replaySize = 0
        var latest: [String: (version: Int, state: [UInt8])]
        var subscribers: [UInt64: Subscriber] = [:]
        var nextSubscriberID: UInt64 = 0
        var closed = false
        /// Subscribers that joined the presence.
        var present = 0
    }

    /// The features in registration order, for snapshots.
    private let featureOrder: [String]
    private let replayLimit: Int
    private let replayBytes: Int
    private let budget: ReplayBudget?
    private let encoder: any EventEncoder
    private let metrics: HubMetrics
    private let state: Mutex<State>
    /// Whether a delta stream ever subscribed: until then publishing looks for none.
    private let deltaStreamsSeen = Atomic<Bool>(false)

    /// - Parameters:
    ///   - features: every registered feature with its initial state (version 0).
    ///   - startSeq: the last sequence number already used (0 for a new session).
    ///   - recent: the latest journaled changes (seq, feature, event data), oldest first, to
    ///     serve `Last-Event-ID` after a restart.
    public init(
        features: [AnyFeature], replayLimit: Int, replayBytes: Int = 16 << 20, startSeq: Int = 0,
        recent: [(seq: Int, feature: String, data: [UInt8])] = [], metrics: HubMetrics = HubMetrics(),
        budget: ReplayBudget? = nil, encoder: any EventEncoder
    ) {
        self.budget = budget
        self.encoder = encoder
        self.metrics = metrics
        featureOrder = features.map(\.name)
        self.replayLimit = max(0, replayLimit)
        self.replayBytes = max(0, replayBytes)
        var latest: [String: (version: Int, state: [UInt8])] = [:]
        for feature in features { latest[feature.name] = (0, feature.initialStateJSON) }
        var initial = State(seq: startSeq, latest: latest)
        for entry in recent.suffix(self.replayLimit) {
            Self.keep(
                Frame(seq: entry.seq, feature: entry.feature, content: .data(entry.data)), in: &initial,
                limit: self.replayLimit, bytes: self.replayBytes, budget: budget)
        }
        state = Mutex(initial)
    }

    /// The sequence numbers after `lastEventID` that a resume needs and the replay buffer no
    /// longer holds (nil when it holds them all, or when `lastEventID` is not a past event).
    public func missing(after lastEventID: Int) -> ClosedRange<Int>? {
        state.withLock { state in
            guard lastEventID >= 0, lastEventID < state.seq else { return nil }
            let firstHeld = state.replay.first?.seq ?? state.seq + 1
            guard lastEventID + 1 < firstHeld else { return nil }
            return (lastEventID + 1)...(firstHeld - 1)
        }
    }

    /// Puts rebuilt events (oldest first, contiguous) in front of the replay buffer, if they end
    /// just before its first frame (otherwise the buffer moved meanwhile and nothing changes);
    /// the replay limits apply as to any frame, the oldest forgotten first.
    public func backfill(_ frames: [(seq: Int, feature: String, data: [UInt8])]) {
        guard let last = frames.last, replayLimit > 0 else { return }
        state.withLock { state in
            let firstHeld = state.replay.first?.seq ?? state.seq + 1
            guard !state.closed, last.seq == firstHeld - 1 else { return }
            let held = state.replay
            let heldSize = state.replaySize
            state.replay = Deque(frames.map { Frame(seq: $0.seq, feature: $0.feature, content: .data($0.data)) })
            state.replaySize = state.replay.reduce(0) { $0 + $1.size }
            let total = budget?.add(state.replaySize) ?? 0
            state.replay.append(contentsOf: held)
            state.replaySize += heldSize
            Self.trim(&state, limit: replayLimit, bytes: replayBytes, budget: budget, total: total)
        }
    }

    /// Records a store's state loaded from storage, for snapshots.
    public func seed(feature: String, version: Int, state stateJSON: [UInt8]) {
        state.withLock { $0.latest[feature] = (version, stateJSON) }
    }

    /// Frames a change under the sequence number its session gave it (the seq of its journal
    /// entry: the session's pipeline is the one owner of numbering), keeps it for replay and
    /// queues it on every subscriber observing its feature. Subscribers whose sink refuses the
    /// bytes are dropped. A number not after the last one published is refused: the change is
    /// not published and `false` is returned, for the caller to report (numbers only move
    /// forward; the session numbers its changes in one place, ``Session/apply(_:_:attempt:release:finish:)``).
    ///
    /// `delta` is how the journal stored the change's state, when it did (a patch from the
    /// previous version, or the state itself when no patch was smaller): delta streams reuse it.
    /// Without one, the patch is computed here, once for all subscribers, only when a delta
    /// stream watches the feature. Either way the patch is sent only against the version just
    /// before the change's, which the hub holds (a client's state at that version is the same).
    @discardableResult
    public func publish(_ change: EncodedChange, seq: Int, delta journaled: StateDelta? = nil) -> Bool {
        // Computed before taking the lock: one change is published at a time per session (its
        // pipeline), so the feature's latest state cannot move meanwhile.
        var patch: [UInt8]?
        if case .patch(let bytes)? = journaled {
            patch = bytes
        } else if journaled == nil, deltaStreamsSeen.load(ordering: .relaxed),
            let base = state.withLock({ state in
                state.subscribers.values.contains { $0.deltas && $0.wants(change.feature) } ? state.latest[change.feature] : nil
            }),
            base.version == change.version - 1, case .patch(let bytes) = StateDelta.between(base.state, change.state)
        {
            patch = bytes
        }
        return state.withLock { state in
            guard !state.closed else { return true }
            guard seq > state.seq else { return false }
            state.seq = seq
            // The patch goes from the version before this change: only then is it sent.
            let base = state.latest.updateValue((change.version, change.state), forKey: change.feature)
            let patch = base?.version == change.version - 1 ? patch : nil
            let watched = state.subscribers.values.contains { $0.wants(change.feature) }
            // Kept as the change itself: its bytes are the ones the store and the journal hold
            // (memory mode's ring shares them), so a kept change costs no second copy. Framed
            // once, shared by every subscriber, only when someone watches; a replay frames
            // again.
            let frame = Frame(seq: state.seq, feature: change.feature, content: .change(change), patch: patch)
            keep(frame, in: &state)
            var dropped: [UInt64] = []
            var sent = 0
            if watched {
                let full = encoder.encode(seq: state.seq, event: "state", data: Self.eventData(change))
                let delta = patch.map { encoder.encode(seq: state.seq, event: "state", data: Self.deltaData(change, patch: $0)) }
                for (id, subscriber) in state.subscribers where subscriber.wants(change.feature) {
                    let bytes = subscriber.deltas ? delta ?? full : full
                    if subscriber.sink.send(bytes) { sent += 1 } else { dropped.append(id) }
                }
            }
            if sent > 0 { metrics.eventsSent.increment(by: Int64(sent)) }
            remove(dropped, from: &state)
            return true
        }
    }

    /// Adds a subscriber and sends what it must see first, atomically with respect to
    /// `publish`: the changes after `lastEventID` when they are all still held, otherwise a
    /// snapshot of the observed features. Returns `nil` when the hub is closed.
    /// With `deltas`, replayed and live `state` events carry a patch where one is known (a
    /// resume without a gap leaves the client at the version each patch starts from).
    ///
    /// With `presence`, the subscriber joins the session's presence (at most `presenceLimit`
    /// at once, else `.presenceFull`): after what it must see first it gets one `presence`
    /// event `joined` per stream present, oldest first, itself last; every other stream present
    /// gets its `joined`.
    public func subscribe(
        features: Set<String>?, lastEventID: Int?, sink: any EventSink, limit: Int = .max, deltas: Bool = false,
        presence: PresenceEntry? = nil, presenceLimit: Int = .max
    ) -> Subscription {
        let outcome = state.withLock { state -> Subscription in
            guard !state.closed else { return .closed }
            // Checked and taken under one lock: concurrent subscribers never pass the limit.
            guard state.subscribers.count < limit else { return .full }
            if presence != nil, state.present >= presenceLimit { return .presenceFull }
            let subscriber = Subscriber(features: features, sink: sink, deltas: deltas, presence: presence)
            if deltas { deltaStreamsSeen.store(true, ordering: .relaxed) }
            if let lastEventID, let frames = Self.replayable(after: lastEventID, in: state) {
                for frame in frames where subscriber.wants(frame.feature) {
                    guard sink.offer(frame.bytes(encoder, deltas: deltas)) else { return .caughtUpPartially }
                }
            } else {
                guard sink.offer(snapshotFrame(features: features, state: state)) else { return .caughtUpPartially }
            }
            if let presence {
                for entry in Self.present(in: state) + [presence] {
                    guard sink.offer(encoder.encode(event: "presence", data: entry.eventData(joined: true))) else {
                        return .caughtUpPartially
                    }
                }
            }
            state.nextSubscriberID += 1
            state.subscribers[state.nextSubscriberID] = subscriber
            if let presence {
                state.present += 1
                metrics.present.add(1)
                announce(presence, joined: true, in: &state)
            }
            return .subscribed(state.nextSubscriberID)
        }
        if outcome == .caughtUpPartially { sink.close() }
        return outcome
    }

    /// Keeps `frame` for replay, forgetting the oldest past `replayLimit` frames or
    /// `replayBytes` bytes, or while the server's budget is exceeded.
    private func keep(_ frame: Frame, in state: inout State) {
        Self.keep(frame, in: &state, limit: replayLimit, bytes: replayBytes, budget: budget)
    }

    private static func keep(_ frame: Frame, in state: inout State, limit replayLimit: Int, bytes replayBytes: Int, budget: ReplayBudget?) {
        guard replayLimit > 0 else { return }
        state.replay.append(frame)
        state.replaySize += frame.size
        trim(&state, limit: replayLimit, bytes: replayBytes, budget: budget, total: budget?.add(frame.size) ?? 0)
    }

    /// Forgets the oldest frames past `replayLimit` frames or `replayBytes` bytes, or while the
    /// server's budget (holding `total` bytes) is exceeded.
    private static func trim(_ state: inout State, limit replayLimit: Int, bytes replayBytes: Int, budget: ReplayBudget?, total: Int) {
        var total = total
        while state.replay.count > replayLimit || state.replaySize > replayBytes
            || (budget.map { total > $0.limit } ?? false),
            let oldest = state.replay.popFirst()
        {
            state.replaySize -= oldest.size
            budget?.remove(oldest.size)
            total -= oldest.size
        }
    }

    /// Gives the replay buffer's bytes back to the server's budget (the hub is gone).
    private func releaseReplay(_ state: inout State) {
        budget?.remove(state.replaySize)
        state.replay.removeAll()
        state.replaySize = 0
    }

    /// Bytes the replay buffer pins now.
    public var replaySize: Int { state.withLock { $0.replaySize } }

    /// Closes the hub if nobody subscribes (the session leaves memory); `false`, changing
    /// nothing, otherwise.
    func closeIfIdle() -> Bool {
        state.withLock { state in
            guard state.subscribers.isEmpty else { return false }
            state.closed = true
            releaseReplay(&state)
            return true
        }
    }

    /// Forgets the subscriber (its stream ended, or is ending); if it was present it leaves,
    /// and the streams still present get its `left`. Unsubscribing twice changes nothing.
    public func unsubscribe(_ id: UInt64) {
        state.withLock { state in
            guard let gone = state.subscribers.removeValue(forKey: id), let entry = gone.presence else { return }
            state.present -= 1
            metrics.present.add(-1)
            announce(entry, joined: false, in: &state)
        }
    }

    /// The streams present now, oldest first.
    public var presence: [PresenceEntry] {
        state.withLock { Self.present(in: $0) }
    }

    /// Subscribers present, in the order they joined (subscriber ids only grow).
    private static func present(in state: State) -> [PresenceEntry] {
        state.subscribers.sorted { $0.key < $1.key }.compactMap(\.value.presence)
    }

    /// Sends `entry`'s `joined` or `left` to every other stream present; those that refuse it
    /// are dropped, and leave in turn.
    private func announce(_ entry: PresenceEntry, joined: Bool, in state: inout State) {
        guard state.present > (joined ? 1 : 0) else { return }
        let frame = encoder.encode(event: "presence", data: entry.eventData(joined: joined))
        var dropped: [UInt64] = []
        for (id, subscriber) in state.subscribers where subscriber.presence != nil && subscriber.presence?.id != entry.id {
            if !subscriber.sink.send(frame) { dropped.append(id) }
        }
        remove(dropped, from: &state)
    }

    /// Forgets subscribers whose sink refused an event (it closed itself); those present leave.
    private func remove(_ dropped: [UInt64], from state: inout State) {
        guard !dropped.isEmpty else { return }
        metrics.subscribersDropped.increment(by: Int64(dropped.count))
        var left: [PresenceEntry] = []
        for id in dropped {
            if let entry = state.subscribers.removeValue(forKey: id)?.presence {
                state.present -= 1
                metrics.present.add(-1)
                left.append(entry)
            }
        }
        for entry in left { announce(entry, joined: false, in: &state) }
    }

    /// Ends every subscriber's stream and refuses new ones (the session was deleted).
    public func close() {
        let sinks = state.withLock { state -> [any EventSink] in
            state.closed = true
            releaseReplay(&state)
            defer {
                state.subscribers = [:]
                metrics.present.add(-state.present)
                state.present = 0
            }
            return state.subscribers.values.map(\.sink)
        }
        for sink in sinks { sink.close() }
    }

    /// Ends every subscriber's stream; later subscribers are welcome (the node lost its view of
    /// other nodes' changes: clients reconnect and resume from the journal).
    public func endStreams() {
        let sinks = state.withLock { state -> [any EventSink] in
            defer {
                state.subscribers = [:]
                metrics.present.add(-state.present)
                state.present = 0
            }
            return state.subscribers.values.map(\.sink)
        }
        for sink in sinks { sink.close() }
    }

    public var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    /// The last sequence number used.
    public var seq: Int { state.withLock { $0.seq } }

    /// The frames after `lastEventID`, or `nil` when some of them are no longer held (or the id
    /// is from the future).
    private static func replayable(after lastEventID: Int, in state: State) -> [Frame]? {
        if lastEventID == state.seq { return [] }
        guard lastEventID >= 0, lastEventID < state.seq, let first = state.replay.first,
            first.seq <= lastEventID + 1
        else { return nil }
        return state.replay.filter { $0.seq > lastEventID }
    }

    private func snapshotFrame(features: Set<String>?, state: State) -> [UInt8] {
        var inner = JSONObjectWriter()
        for name in featureOrder where features?.contains(name) ?? true {
            guard let latest = state.latest[name] else { continue }
            var entry = JSONObjectWriter()
            entry.int("version", latest.version)
            entry.raw("state", latest.state)
            inner.raw(name, entry.finish())
        }
        var data = JSONObjectWriter()
        data.raw("features", inner.finish())
        return encoder.encode(seq: state.seq, event: "snapshot", data: data.finish())
    }

    /// The `data` JSON of a change's `state` event on a delta stream: `baseVersion` and `patch`
    /// (RFC 6902, from the state at `baseVersion`) in place of `state`.
    public static func deltaData(_ change: EncodedChange, patch: [UInt8]) -> [UInt8] {
        ChangeJSON.object(
            feature: change.feature, version: change.version, cause: change.cause, action: change.action,
            content: .patchFrom(baseVersion: change.version - 1, patch), effect: change.effect)
    }

    /// The `data` JSON of a change's `state` event.
    public static func eventData(_ change: EncodedChange) -> [UInt8] {
        ChangeJSON.object(change)
    }

}
