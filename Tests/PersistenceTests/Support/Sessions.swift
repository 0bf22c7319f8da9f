// Session helpers of PersistenceTests, linked into StateSessionsTests (Support/Sessions.swift).
import ExampleFeatures
import Foundation
import StateClient
import StatePersistence
import StateServerHTTP
import StateSessions
import StateStore
import Synchronization
import Testing

/// The notices a `SessionManager` reported (thread-safe).
final class NoticeLog: Sendable {
    private let notices = Mutex<[SessionNotice]>([])

    /// Every notice but the routine `.storeLoaded` (see ``loads``): what a test would call a
    /// problem or an event worth reporting.
    var all: [SessionNotice] {
        notices.withLock { $0 }.filter { if case .storeLoaded = $0 { false } else { true } }
    }

    /// The `.storeLoaded` notices: (feature, bytes of state).
    var loads: [(feature: String, bytes: Int)] {
        notices.withLock { $0 }.compactMap { if case .storeLoaded(_, let feature, let bytes) = $0 { (feature, bytes) } else { nil } }
    }

    var callback: @Sendable (SessionNotice) -> Void {
        { [self] notice in notices.withLock { $0.append(notice) } }
    }

    /// The `.storeRecovered` notices.
    var recoveries: [(session: String, feature: String, how: String, reason: String)] {
        all.compactMap {
            if case .storeRecovered(let session, let feature, let how, let reason) = $0 { return (session, feature, how, reason) }
            return nil
        }
    }

    var followUpsNotStored: Int {
        all.filter { if case .followUpNotStored = $0 { true } else { false } }.count
    }

    var description: String { "\(all)" }
}

/// An event sink that keeps every frame it is given (thread-safe).
final class RecordingSink: EventSink {
    private let frames = Mutex<[[UInt8]]>([])
    private let closed = Atomic<Bool>(false)

    func send(_ bytes: [UInt8]) -> Bool {
        frames.withLock { $0.append(bytes) }
        return true
    }

    func offer(_ bytes: [UInt8]) -> Bool { send(bytes) }

    func close() { closed.store(true, ordering: .relaxed) }

    var isClosed: Bool { closed.load(ordering: .relaxed) }

    /// The frames parsed (with the client library's SSE parser), one event each.
    var events: [Frame] {
        frames.withLock { $0 }.map(Frame.init)
    }

    struct Frame: CustomStringConvertible {
        var seq: Int?
        var event: String
        var data: JSONValue?

        /// One frame as the hub sent it; a frame that is not exactly one event gives an event
        /// named after what it holds (so a check on the event fails).
        init(_ bytes: [UInt8]) {
            var parser = ServerSentEventParser()
            let events = (try? parser.feed(bytes)) ?? []
            guard events.count == 1, let only = events.first else {
                self.init(seq: nil, event: "\(events.count) events in one frame", data: nil)
                return
            }
            self.init(seq: only.id.flatMap { Int($0) }, event: only.type, data: JSONCoding.parse(Array(only.data.utf8)))
        }

        init(seq: Int?, event: String, data: JSONValue?) {
            self.seq = seq
            self.event = event
            self.data = data
        }

        var description: String { "\(seq.map(String.init) ?? "-") \(event) \(String(describing: data))" }
    }
}

/// Settings for tests: snapshots and compaction off unless a test asks.
func testSettings(
    snapshotEvery: Int = 1_000, replayBuffer: Int = 1_000, idleTimeout: Duration = .seconds(300),
    ttl: Duration = .seconds(86_400), historyKeep: Int? = nil
) -> SessionSettings {
    var settings = SessionSettings()
    settings.snapshotEvery = snapshotEvery
    settings.replayBuffer = replayBuffer
    // Compaction keeps the larger of the two: unless a test says otherwise, the replay buffer.
    settings.historyKeep = historyKeep ?? replayBuffer
    settings.idleTimeout = idleTimeout
    settings.ttl = ttl
    return settings
}

/// A durable manager of the example features over `storage`.
func exampleManager(
    _ storage: any SessionStorage, settings: SessionSettings = testSettings(),
    loginCheckDelay: Duration = .milliseconds(20), notices: NoticeLog = NoticeLog()
) throws -> SessionManager {
    SessionManager(
        registry: try ExampleFeatures.registry(loginCheckDelay: loginCheckDelay), settings: settings,
        storage: storage, events: ServerSentEvents(), notify: notices.callback)
}

/// The `SessionFailure` `body` throws, or nil.
func sessionFailure(_ body: () async throws(SessionFailure) -> Void) async -> SessionFailure? {
    do {
        try await body()
        return nil
    } catch {
        return error
    }
}

extension SessionFailure {
    var storageKind: StorageError.Kind? {
        if case .storage(let error) = self { return error.kind }
        return nil
    }

    var storeKind: StoreError.Kind? {
        if case .store(let error) = self { return error.kind }
        return nil
    }
}

/// The reply a durable server would remember for an idempotency key (the change's state).
let rememberState: @Sendable (EncodedChange) -> StoredReply = { change in
    StoredReply(status: 200, body: change.state, version: change.version)
}

extension Session {
    /// The store of `feature`, loaded from storage when needed; fails the test when unknown.
    func requireStore(_ feature: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> any AnyStateStore {
        try #require(try await store(feature), "no store \(feature)", sourceLocation: sourceLocation)
    }

    /// The store of a registered feature, for closures that throw `SessionFailure` only.
    func knownStore(_ feature: String) async throws(SessionFailure) -> any AnyStateStore {
        guard let store = try await store(feature) else {
            throw .store(StoreError(.invalidState, "no feature named \(feature)", currentVersion: 0))
        }
        return store
    }

    /// Submits a change through the session's change path; the applied change, or the failure.
    @discardableResult
    func change(
        _ feature: String, _ kind: ChangeRequest.Kind, key: String? = nil, ifVersion: Int? = nil
    ) async throws(SessionFailure) -> EncodedChange {
        let request = ChangeRequest(
            feature: feature, kind: kind, precondition: ifVersion.map { .version($0) } ?? .none, idempotencyKey: key)
        switch await submit(request).value() {
        case .applied(let change, _): return change
        case .replayed(let reply):
            throw .store(StoreError(.versionConflict, "replayed: \(reply.version)", currentVersion: reply.version))
        case .failed(let failure): throw failure
        }
    }

    /// Dispatches an action (JSON text) durably.
    @discardableResult
    func dispatch(_ feature: String, _ action: String, key: String? = nil, ifVersion: Int? = nil) async throws -> EncodedChange {
        _ = try await requireStore(feature)
        return try await change(feature, .dispatch(json(action)), key: key, ifVersion: ifVersion)
    }

    /// Rehydrates a store with a state (JSON text) durably.
    @discardableResult
    func rehydrate(_ feature: String, _ state: String) async throws -> EncodedChange {
        _ = try await requireStore(feature)
        return try await change(feature, .rehydrate(json(state)))
    }

    /// Resets a store durably.
    @discardableResult
    func reset(_ feature: String) async throws -> EncodedChange {
        _ = try await requireStore(feature)
        return try await change(feature, .reset)
    }

    /// A store's version and state, loading it when needed.
    func current(_ feature: String) async throws -> Snapshot {
        let (state, version) = try await requireStore(feature).currentJSON()
        return Snapshot(version: version, state: try #require(JSONCoding.parse(state)))
    }
}

/// A store's version and state.
struct Snapshot: Equatable, CustomStringConvertible {
    var version: Int
    var state: JSONValue
    var description: String { "v\(version) \(text(try? JSONCoding.encode(state)))" }

    init(version: Int, state: JSONValue) {
        self.version = version
        self.state = state
    }

    init(_ version: Int, _ state: String) {
        self.init(version: version, state: json(state))
    }
}

