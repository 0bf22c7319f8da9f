import Foundation
import StateStore
import Synchronization

/// An action of an ``OptimisticStore`` that the server refused (or that could not be sent
/// safely any more): it left the queue and the prediction.
public struct OptimisticRejection<F: Feature>: Sendable {
    public var action: F.Action
    /// Why: usually ``StateClientError/Code/actionRejected`` (a rule the client could not
    /// see), ``StateClientError/Code/forbidden`` (a scope the token lacks) or
    /// ``StateClientError/Code/invalidAction``; ``StateClientError/Code/outcomeUnknown`` for an
    /// action first sent longer ago than the server remembers keys (it may have been applied:
    /// the confirmed state tells).
    public var error: StateClientError
    /// The `Idempotency-Key` the action was sent with.
    public var idempotencyKey: String

    public init(action: F.Action, error: StateClientError, idempotencyKey: String) {
        self.action = action
        self.error = error
        self.idempotencyKey = idempotencyKey
    }
}

/// A store whose changes show at once: ``send(_:)`` runs the feature's own reducer on the
/// predicted state and queues the action, and ``run()`` sends the queue to the server and
/// follows the server's changes, rebasing what is still pending on each of them.
///
/// ```swift
/// let todos = try client.optimisticStore(TodosFeature(), credentials: credentials,
///                                        pendingFile: documents.appending(path: "todos.pending.json"))
/// let sync = Task { try await todos.run() }
/// try todos.send(.add(title: "Milk"))     // the new state, now; no network
/// for await state in todos.updates() { render(state) }
/// ```
///
/// - **Prediction.** ``state`` is the confirmed state (the server's, at ``confirmedVersion``)
///   with every pending action applied in order. It is recomputed, never patched, whenever the
///   server's state moves (this client's change or anyone's) and whenever an action is
///   confirmed or refused. Work a reducer declares (`dispatch.run`) and its effects happen on the
///   server only; the client does not run them.
/// - **Sending.** One action at a time, in order, each with its own `Idempotency-Key`, retried
///   with backoff (`reconnect`) while the server cannot be reached: an action applies once even
///   when a reply is lost and the request is sent again.
/// - **Refusals.** An action the server refuses leaves the queue, the prediction is recomputed
///   without it, and ``rejections()`` delivers it once. `session_not_found` and `unauthorized`
///   end ``run()`` with that error instead and keep the queue.
/// - **Durability.** With a `pendingFile`, the queue (and the confirmed state it is built on) is
///   written atomically before ``send(_:)`` returns; a store made later on the same file resumes
///   it. An action first sent longer ago than `keyLifetime` (the server's `idempotency.ttl`) is
///   not sent again, since the server may have applied it and forgotten its key: it is
///   delivered by ``rejections()`` with ``StateClientError/Code/outcomeUnknown``.
///
/// **Thread safety.** `Sendable`: ``send(_:)`` and the properties may be used from any thread
/// (the main thread of an app included: nothing blocks on the network). The queue and the
/// prediction sit behind one `Mutex`; file writes happen outside it, one at a time, newest last.
/// Call ``run()`` from one task at a time.
public final class OptimisticStore<F: Feature>: Sendable {
    /// The store the actions are sent to and the changes come from.
    public let remote: RemoteStore<F>
    /// Where the queue is kept, if anywhere.
    public let pendingFile: URL?
    /// How the change stream reconnects, and how the sender backs off while the server cannot
    /// be reached (the sender never gives up: `maximumAttempts` applies to the stream).
    public let reconnect: ReconnectPolicy
    /// How long the server remembers an `Idempotency-Key` (`idempotency.ttl`, 24 hours by default).
    public let keyLifetime: Duration

    public var feature: F { remote.feature }

    private struct Core: Sendable {
        var queue: PendingQueue<F>
        /// Bumped by every change of the queue, so an older file never overwrites a newer one.
        var generation = 0
        var nextObserver = 0
        var updates: [Int: AsyncStream<F.State>.Continuation] = [:]
        var rejections: [Int: AsyncStream<OptimisticRejection<F>>.Continuation] = [:]
        /// Refusals that came while nobody listened: the next ``rejections()`` gets them.
        var undelivered: [OptimisticRejection<F>] = []
        /// Wakes the sender of ``run()`` when an action is queued.
        var wake: AsyncStream<Void>.Continuation?
    }

    private let core: Mutex<Core>
    /// The generation last written to ``pendingFile``; held while writing.
    private let written = Mutex(-1)

    /// Use ``StateServerClient/optimisticStore(_:credentials:pendingFile:reconnect:keyLifetime:)``.
    init(remote: RemoteStore<F>, pendingFile: URL?, reconnect: ReconnectPolicy, keyLifetime: Duration) throws(StateClientError) {
        self.remote = remote
        self.pendingFile = pendingFile
        self.reconnect = reconnect
        self.keyLifetime = keyLifetime
        var queue = PendingQueue(feature: remote.feature, confirmed: remote.feature.initialState, confirmedVersion: nil)
        if let pendingFile,
            let saved = try PendingFile.load(pendingFile, session: remote.credentials.id, feature: remote.feature)
        {
            queue = saved
        }
        core = Mutex(Core(queue: queue))
    }

    // MARK: Reading

    /// The predicted state: the confirmed state with every pending action applied in order.
    public var state: F.State { core.withLock { $0.queue.predicted } }
    /// The server's state as last heard (a change, a reply or the file).
    public var confirmedState: F.State { core.withLock { $0.queue.confirmed } }
    /// The server's version ``state`` is built on; nil before the first snapshot.
    public var confirmedVersion: Int? { core.withLock { $0.queue.confirmedVersion } }
    /// How many actions are neither confirmed nor refused yet.
    public var pendingCount: Int { core.withLock { $0.queue.pending.count } }
    /// The actions neither confirmed nor refused yet, oldest first (to show them as pending).
    public var pendingActions: [F.Action] { core.withLock { $0.queue.pending.map(\.action) } }

    // MARK: Sending

    /// Applies `action` to the predicted state at once and queues it for the server with a
    /// fresh `Idempotency-Key` (on disk before returning, with a `pendingFile`). Never waits
    /// for the network.
    ///
    /// - Returns: the new predicted state.
    /// - Throws: ``StateStore/ActionRejected`` when the feature's reducer refuses the action on
    ///   the predicted state, when clients may not send it (`acceptsFromClient`), or when the
    ///   pending file could not be written; nothing is queued then.
    @discardableResult
    public func send(_ action: F.Action) throws(ActionRejected) -> F.State {
        let key = UUID().uuidString
        let (state, file) = try core.withLock { core throws(ActionRejected) in
            let state = try core.queue.enqueue(action, key: key, at: Date())
            Self.publish(core)
            return (state, save(&core))
        }
        if let file, let error = write(file) {
            let undo = core.withLock { core in
                _ = core.queue.remove(key: key)
                Self.publish(core)
                return save(&core)
            }
            if let undo { _ = write(undo) }
            throw ActionRejected("the action could not be saved to the pending file: \(error.message)")
        }
        core.withLock { _ = $0.wake?.yield() }
        return state
    }

    // MARK: Observing

    /// The predicted state now, then every new one (after each send, server change,
    /// confirmation and refusal). Finishes when the consuming task is cancelled.
    public func updates() -> AsyncStream<F.State> {
        let (stream, continuation) = AsyncStream.makeStream(of: F.State.self)
        let id = core.withLock { core in
            let id = core.nextObserver
            core.nextObserver += 1
            core.updates[id] = continuation
            continuation.yield(core.queue.predicted)
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.core.withLock { _ = $0.updates.removeValue(forKey: id) } }
        return stream
    }

    /// Each action the server refused, once. Refusals that came while no sequence was being
    /// read are delivered to the next one made.
    public func rejections() -> AsyncStream<OptimisticRejection<F>> {
        let (stream, continuation) = AsyncStream.makeStream(of: OptimisticRejection<F>.self)
        let id = core.withLock { core in
            let id = core.nextObserver
            core.nextObserver += 1
            core.rejections[id] = continuation
            for rejection in core.undelivered { continuation.yield(rejection) }
            core.undelivered = []
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.core.withLock { _ = $0.rejections.removeValue(forKey: id) } }
        return stream
    }

    /// Returns once nothing is pending: every action sent is confirmed (and in the confirmed
    /// state) or refused. Needs ``run()`` running.
    ///
    /// - Throws: ``StateClientError`` (`transport`) when actions are still pending after
    ///   `timeout`; `CancellationError` when the task is cancelled.
    public func settled(timeout: Duration) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in self.updates() where self.pendingCount == 0 { return true }
                return false
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return false
            }
            defer { group.cancelAll() }
            if try await group.next() == true { return }
            try Task.checkCancellation()
            throw StateClientError(
                kind: .transport, message: "\(self.pendingCount) actions still pending after \(timeout)")
        }
    }

    // MARK: Syncing

    /// Keeps the store in sync until the task is cancelled (then it returns): one change stream
    /// (deltas, `Last-Event-ID`) that rebases the prediction on every server change, and one
    /// sender that posts the pending actions in order, one at a time, each with its key,
    /// retrying with backoff while the server cannot be reached.
    ///
    /// - Throws: ``StateClientError`` when going on cannot help: the session is gone
    ///   (`session_not_found`), the token is refused (`unauthorized`), the server's states do not
    ///   decode as `F.State`. The queue is kept (and on disk): a later `run()` resumes it.
    public func run() async throws {
        let (wake, wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        core.withLock { $0.wake = wakeContinuation }
        defer {
            core.withLock { $0.wake = nil }
            wakeContinuation.finish()
        }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await self.follow() }
                group.addTask { try await self.sendPending(wake: wake) }
                defer { group.cancelAll() }
                while try await group.next() != nil {}
            }
        } catch is CancellationError where Task.isCancelled {
            return
        }
    }

    /// Takes every server state of the change stream as the confirmed one.
    private func follow() async throws {
        for try await event in remote.changes(reconnect: reconnect) {
            var isSnapshot = false
            if case .snapshot = event { isSnapshot = true }
            core.withLock { core in
                if core.queue.confirm(version: event.version, state: event.state, isSnapshot: isSnapshot) {
                    Self.publish(core)
                }
            }
        }
    }

    /// Posts the oldest pending action until the queue is empty, then waits for `wake`.
    private func sendPending(wake: AsyncStream<Void>) async throws {
        var wakes = wake.makeAsyncIterator()
        var failures = 0
        while !Task.isCancelled {
            guard let head = core.withLock({ $0.queue.pending.first }) else {
                guard await wakes.next() != nil else { return }
                continue
            }
            if let first = head.firstSentAt, Date().timeIntervalSince(first) > ReconnectPolicy.seconds(keyLifetime) {
                refuse(head, StateClientError(
                    kind: .transport, code: .outcomeUnknown,
                    message: "the action was first sent longer ago than the server remembers idempotency keys "
                        + "(\(keyLifetime)): it is not sent again, and may or may not have been applied"))
                continue
            }
            if head.firstSentAt == nil, let file = core.withLock({ core in
                core.queue.markSent(key: head.key, at: Date()) ? save(&core) : nil
            }) {
                _ = write(file)
            }
            core.withLock { $0.queue.sending(key: head.key) }
            do {
                let change = try await remote.dispatch(head.action, idempotencyKey: head.key)
                failures = 0
                let file = core.withLock { core in
                    core.queue.acknowledge(key: head.key, version: change.version, state: change.state)
                    Self.publish(core)
                    return save(&core)
                }
                // A failed write leaves the action in the file: resent with its key, it applies
                // nothing (the server replays its reply).
                if let file { _ = write(file) }
            } catch let error as StateClientError where error.isTransient {
                core.withLock { core in
                    if core.queue.sendFailed() { Self.publish(core) }
                }
                failures += 1
                var delay = reconnect.jitteredDelay(beforeAttempt: failures)
                if let retryAfter = error.retryAfter, retryAfter > delay { delay = retryAfter }
                try await Task.sleep(for: delay)
            } catch let error as StateClientError
                where error.code == .sessionNotFound || error.code == .unauthorized
            {
                core.withLock { core in
                    if core.queue.sendFailed() { Self.publish(core) }
                }
                throw error
            } catch let error as StateClientError {
                failures = 0
                refuse(head, error)
            } catch {
                // Cancelled (or another error that ends `run`): the request's answer never
                // comes; what was held back meanwhile is taken.
                core.withLock { core in
                    if core.queue.sendFailed() { Self.publish(core) }
                }
                throw error
            }
        }
        throw CancellationError()
    }

    /// Removes `entry` from the queue and delivers its refusal once.
    private func refuse(_ entry: PendingAction<F>, _ error: StateClientError) {
        let rejection = OptimisticRejection<F>(action: entry.action, error: error, idempotencyKey: entry.key)
        let file = core.withLock { core -> Saved? in
            guard core.queue.remove(key: entry.key) != nil else { return nil }
            Self.publish(core)
            if core.rejections.isEmpty {
                core.undelivered.append(rejection)
            } else {
                for continuation in core.rejections.values { continuation.yield(rejection) }
            }
            return save(&core)
        }
        if let file { _ = write(file) }
    }

    // MARK: Internals

    /// Gives every ``updates()`` sequence the new prediction. Under the lock, so they see the
    /// predictions in order; `yield` only buffers (it runs no code of the consumer).
    private static func publish(_ core: Core) {
        for continuation in core.updates.values { continuation.yield(core.queue.predicted) }
    }

    /// A file's contents and their generation.
    private typealias Saved = (generation: Int, file: PendingFile)

    /// The file's new contents, with the next generation; nil without a `pendingFile`.
    private func save(_ core: inout Core) -> Saved? {
        guard pendingFile != nil else { return nil }
        core.generation += 1
        // Encoding a state this client decoded does not fail; if it did, the write is skipped
        // and the previous file stays.
        guard let file = try? PendingFile(session: remote.credentials.id, queue: core.queue) else { return nil }
        return (core.generation, file)
    }

    /// Writes `snapshot` unless a newer one is on disk already; the error, if the write failed.
    private func write(_ snapshot: Saved) -> StateClientError? {
        guard let pendingFile else { return nil }
        return written.withLock { last -> StateClientError? in
            guard snapshot.generation > last else { return nil }
            do throws(StateClientError) {
                try snapshot.file.write(to: pendingFile)
            } catch {
                return error
            }
            last = snapshot.generation
            return nil
        }
    }
}

extension OptimisticRejection: Equatable where F.Action: Equatable {
    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.action == rhs.action && lhs.idempotencyKey == rhs.idempotencyKey && lhs.error.code == rhs.error.code
            && lhs.error.message == rhs.error.message
    }
}

extension StateServerClient {
    /// An ``OptimisticStore`` of `feature` in the session `credentials`: changes show at once
    /// and are sent in the background by its ``OptimisticStore/run()``.
    ///
    /// - Parameters:
    ///   - pendingFile: where to keep the queue, so it survives the app being killed; a store
    ///     made later on the same file resumes it. nil keeps the queue in memory only.
    ///   - reconnect: the change stream's reconnection, and the sender's backoff.
    ///   - keyLifetime: how long the server remembers `Idempotency-Key`s (its `idempotency.ttl`,
    ///     24 hours by default).
    /// - Throws: ``StateClientError`` when `pendingFile` exists but is not a queue of this
    ///   session's `feature`, or cannot be read.
    public func optimisticStore<F: Feature>(
        _ feature: F, credentials: SessionCredentials, pendingFile: URL? = nil, reconnect: ReconnectPolicy = .default,
        keyLifetime: Duration = .seconds(24 * 60 * 60)
    ) throws(StateClientError) -> OptimisticStore<F> {
        try OptimisticStore(
            remote: store(feature, credentials: credentials), pendingFile: pendingFile, reconnect: reconnect,
            keyLifetime: keyLifetime)
    }
}
